"""Chinese twins of chapter 00's samples (issue 28 §5): a Chinese submission grades exactly as its
English twin. Each twin is the English sample with every markdown cell replaced by the Chinese
learner release's (``notebooks/zh/``, generated from ``i18n/zh/``), matched by cell id; the code
cells — answers, checks, hidden tests — are the English sample's, as in the two releases."""
from __future__ import annotations

import json
from pathlib import Path

from .. import course
from . import ch00_mistakes as en

ASSIGNMENT = en.ASSIGNMENT


def chinese(nb: dict, assignment: str = ASSIGNMENT) -> dict:
    """The submission with the Chinese release's markdown, cell by cell (by id)."""
    release = course.ROOT / "notebooks" / "zh" / assignment / f"{assignment}.ipynb"
    zh = json.loads(release.read_text(encoding="utf-8"))
    md = {c["id"]: c["source"] for c in zh["cells"] if c["cell_type"] == "markdown"}
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown" and cell.get("id") in md and not (
                cell.get("metadata", {}).get("nbgrader", {}).get("solution")):
            cell["source"] = md[cell["id"]]
    return nb


def _twin(student: str):
    what, build, expected = en.SAMPLES[student]
    return (f"the Chinese twin of {student} ({what})", lambda: chinese(build()), expected)


SAMPLES = {
    "ch00_zh_correct": _twin("ch00_correct"),
    "ch00_zh_overflow": _twin("ch00_mistakes_overflow"),
}
