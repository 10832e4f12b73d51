"""The Chinese edition（中文版, issue 28): catalogues current and complete, generated notebooks as the
generator writes them, translations that keep every formula, code span, link and number, the
glossary's terms used one way. ``tools/i18n.py`` is the generator and says what to run.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import i18n  # noqa: E402

TRANSLATED = i18n.translated_chapters()


def test_the_edition_lists_its_chapters():
    print("in the Chinese edition:", TRANSLATED or "none yet")
    print("not yet:", [c for c in i18n.chapters() if c not in TRANSLATED])
    assert set(TRANSLATED) <= set(i18n.chapters())


@pytest.mark.parametrize("chapter", TRANSLATED or [pytest.param(None, marks=pytest.mark.skip("no chapter translated"))])
def test_catalogue_is_complete_current_and_faithful(chapter):
    found = i18n.problems(chapter)
    assert not found, f"{len(found)} problems (fix the catalogue: python tools/i18n.py dump/load):\n" + "\n".join(found[:40])


@pytest.mark.skipif(not TRANSLATED, reason="no chapter translated")
def test_generated_notebooks_are_what_the_generator_writes():
    env_path = str(Path(sys.executable).parent)
    if env_path not in os.environ.get("PATH", ""):
        os.environ["PATH"] = env_path + os.pathsep + os.environ.get("PATH", "")  # nbgrader runs alembic
    found = i18n.generated_problems()
    assert not found, "\n".join(found)


@pytest.mark.parametrize("chapter", TRANSLATED or [pytest.param(None, marks=pytest.mark.skip("no chapter translated"))])
def test_code_cells_and_grading_metadata_are_the_english_ones(chapter):
    """Code cells identical, nbgrader metadata (grade ids, points) identical: the editions grade the same."""
    en = i18n.load_nb(ROOT / "notebooks" / chapter / f"{chapter}.ipynb")
    zh = i18n.load_nb(i18n.ZH_NOTEBOOKS / chapter / f"{chapter}.ipynb")
    assert [c["id"] for c in en["cells"]] == [c["id"] for c in zh["cells"]]
    for a, b in zip(en["cells"], zh["cells"]):
        assert a["cell_type"] == b["cell_type"]
        ga, gb = a["metadata"].get("nbgrader", {}), b["metadata"].get("nbgrader", {})
        assert {k: v for k, v in ga.items() if k != "checksum"} == {k: v for k, v in gb.items() if k != "checksum"}, a["id"]
        if a["cell_type"] == "code":
            assert i18n.source(a) == i18n.source(b), a["id"]


# ------------------------------------------------------------------------- the rules, on a small copy
@pytest.fixture()
def sandbox(tmp_path, monkeypatch):
    """A chapter's source and catalogue in a temporary tree, with the module pointed at it."""
    chapter = "00_foundations"
    sol = tmp_path / "solutions" / chapter
    sol.mkdir(parents=True)
    shutil.copy(ROOT / "solutions" / chapter / f"{chapter}.ipynb", sol)
    cats = tmp_path / "i18n" / "zh"
    cats.mkdir(parents=True)
    shutil.copy(ROOT / "i18n" / "zh" / "glossary.toml", cats)
    monkeypatch.setattr(i18n, "SOLUTIONS", tmp_path / "solutions")
    monkeypatch.setattr(i18n, "CATALOGUES", cats)
    monkeypatch.setattr(i18n, "GLOSSARY", cats / "glossary.toml")
    i18n.update(chapter, create=True)
    return chapter, sol / f"{chapter}.ipynb"


def _translate_all(chapter, tmp_path, fix=lambda cid, en: en):
    """A stand-in translation: the English with Chinese around it (structure and glossary kept)."""
    zh_terms = " ".join(t["zh"] for t in i18n.glossary())
    blocks = []
    for cid, en in i18n.english_cells(chapter):
        blocks += [f"=== cell {cid}", fix(cid, en) + "\n\n中文译文。" * 20 + " " + zh_terms, ""]
    path = tmp_path / "w.zh.txt"
    path.write_text("\n".join(blocks), encoding="utf-8")
    i18n.load(chapter, path)


def test_untranslated_cells_are_named(sandbox):
    chapter, _ = sandbox
    found = i18n.problems(chapter)
    assert len(found) == len(i18n.english_cells(chapter))
    assert all("not translated" in f for f in found)


def test_a_changed_english_cell_is_stale_until_retranslated(sandbox, tmp_path):
    chapter, nb_path = sandbox
    _translate_all(chapter, tmp_path)
    assert i18n.problems(chapter) == []
    nb = json.loads(nb_path.read_text(encoding="utf-8"))
    cell = next(c for c in nb["cells"] if c["cell_type"] == "markdown" and c["id"] != "ch00-00")
    cell["source"] = i18n.source(cell) + "\nA new sentence.\n"
    nb_path.write_text(json.dumps(nb), encoding="utf-8")
    stale = i18n.problems(chapter)
    assert len(stale) == 1 and cell["id"] in stale[0] and "+A new sentence." in stale[0]
    said = i18n.update(chapter)
    assert said == [f"{chapter} {cell['id']}: English changed, translation marked fuzzy"]
    fuzzy = i18n.problems(chapter)
    assert len(fuzzy) == 1 and "fuzzy" in fuzzy[0] and "+A new sentence." in fuzzy[0]
    _translate_all(chapter, tmp_path, fix=lambda cid, en: en)
    assert i18n.problems(chapter) == []


def test_formulas_code_numbers_and_markers_are_carried_over():
    en = "The cost is $O(S^2)$ with `torch.softmax`, about 2.5 times; see [the paper](https://arxiv.org/abs/1706.03762).\n<details>x</details>"
    good = "代价为 $O(S^2)$，用 `torch.softmax`，约 2.5 倍；见[论文](https://arxiv.org/abs/1706.03762)。\n<details>x</details>"
    assert i18n.structure_problems(en, good) == []
    bad = "代价为 $O(S)$，用 `softmax`，约 3 倍；见[论文](https://arxiv.org)。"
    said = "\n".join(i18n.structure_problems(en, bad))
    for what in ("formulas differ", "inline codes differ", "link targets differ", "numbers missing", "<details>"):
        assert what in said
    assert "reads as English" in "\n".join(i18n.structure_problems(en, en))


def test_glossary_terms_are_translated_one_way():
    terms = i18n.glossary()
    assert len({t["en"].lower() for t in terms}) == len(terms)
    assert len({t["zh"] for t in terms}) == len(terms)  # one term, one translation
    en = "Multi-head attention uses a causal mask."
    assert i18n.glossary_problems(en, "多头注意力使用因果掩码。", terms) == []
    said = i18n.glossary_problems(en, "多头的注意力使用因果遮罩。", terms)
    assert any("多头注意力" in s for s in said) and any("因果掩码" in s for s in said)


def test_work_file_round_trip_keeps_markdown_verbatim(sandbox, tmp_path):
    chapter, _ = sandbox
    en_path, zh_path = i18n.dump(chapter, tmp_path / "work")
    blocks = i18n.parse_blocks(en_path.read_text(encoding="utf-8"))
    assert blocks == dict(i18n.english_cells(chapter))


@pytest.mark.parametrize("chapter", TRANSLATED or [pytest.param(None, marks=pytest.mark.skip("no chapter translated"))])
def test_no_model_answer_reaches_the_chinese_release(chapter):
    """The Chinese of an answer cell (marking scheme, model answer) stays in the instructor's version."""
    teacher = i18n.load_nb(i18n.ZH_SOLUTIONS / chapter / f"{chapter}.ipynb")
    learner = i18n.load_nb(i18n.ZH_NOTEBOOKS / chapter / f"{chapter}.ipynb")
    release_text = "\n".join(i18n.source(c) for c in learner["cells"])
    for c in teacher["cells"]:
        if c["cell_type"] == "markdown" and c["metadata"].get("nbgrader", {}).get("solution"):
            lines = [ln.strip() for ln in i18n.source(c).splitlines() if len(ln.strip()) > 12]
            leaked = [ln for ln in lines if ln in release_text]
            assert not leaked, f"{chapter} {c['id']}: {leaked[:3]}"
