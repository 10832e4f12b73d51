"""Every chapter has a current review by an outside examiner (issue 26 §6): ``reviews/NN_name.md``
lists every numeric sentence with the cell that prints or asserts it, every figure with what it
shows, and the answers the examiner wrote; it records the hash of the prose and figure cells it
reviewed, so a chapter whose prose or figures change after its review fails here until the change
is reviewed (``python tools/review.py stamp NN_name``). See ``tools/review.py``."""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import review  # noqa: E402

ASSIGNMENTS = sorted(p.name for p in (ROOT / "solutions").iterdir() if (p / f"{p.name}.ipynb").exists())


# Chapters whose outside review has not been written yet (issue 26 §6 stays open until this list is
# empty). The list only shrinks: a chapter listed here that has a review file fails below, so that
# its review is then held to the chapter like every other.
PENDING = (ROOT / "reviews" / "PENDING").read_text().split() if (ROOT / "reviews" / "PENDING").exists() else []


def test_pending_names_chapters_without_a_review():
    unknown = [a for a in PENDING if a not in ASSIGNMENTS]
    assert not unknown, f"reviews/PENDING names no chapter: {unknown}"
    reviewed = [a for a in PENDING if (review.REVIEWS / f"{a}.md").exists()]
    assert not reviewed, f"these chapters have a review now: remove them from reviews/PENDING: {reviewed}"


@pytest.mark.parametrize("assignment", [a for a in ASSIGNMENTS if a not in PENDING])
def test_the_chapter_has_a_current_complete_review(assignment):
    problems = review.problems(assignment)
    assert not problems, "\n".join(problems[:40]) + (f"\n... and {len(problems) - 40} more" if len(problems) > 40 else "")


def test_a_changed_sentence_makes_the_review_stale(tmp_path, monkeypatch):
    import json
    import shutil

    name = ASSIGNMENTS[0]
    (tmp_path / "solutions" / name).mkdir(parents=True)
    shutil.copy(ROOT / "solutions" / name / f"{name}.ipynb", tmp_path / "solutions" / name / f"{name}.ipynb")
    monkeypatch.setattr(review, "ROOT", tmp_path)
    monkeypatch.setattr(review, "REVIEWS", tmp_path / "reviews")
    (tmp_path / "reviews").mkdir()
    (tmp_path / "reviews" / f"{name}.md").write_text(review.skeleton(name))
    review.stamp(name)
    assert not any("changed since" in p for p in review.problems(name))
    path = tmp_path / "solutions" / name / f"{name}.ipynb"
    nb = json.loads(path.read_text())
    md = next(c for c in nb["cells"] if c["cell_type"] == "markdown")
    md["source"] = "".join(md["source"]) + "\nA new claim: it is 2.5 times faster."
    path.write_text(json.dumps(nb))
    found = review.problems(name)
    assert any("changed since" in p for p in found) and any("2.5 times faster" in p for p in found), found
