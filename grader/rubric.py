"""The hand-graded derivations' model answer and rubric, for the instructor only (issue 26 §1).

The model answer lives only in the instructor's version: the derivation's solution cell in
``solutions/`` (the release replaces it by "YOUR ANSWER HERE"). After nbgrader has scored a batch,
``add_rubrics`` puts it beside each submission's answer in formgrader's copy (the autograded
notebook, which formgrader shows for manual grading): a locked Markdown cell, not graded, right
after the derivation's answer cell, marked in its metadata. ``RemoveRubric`` takes those cells out
again wherever feedback is generated: ``make feedback`` (grader/pipeline.py's feedback
configuration) and formgrader's own "Generate feedback" (grader/nbgrader_config.py), so no student
ever sees it. (The learner cannot make a cell that carries the mark: grading drops every cell
metadata of the learner's, ``restore.py``.)
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from nbgrader.preprocessors import NbGraderPreprocessor

from .restore import grade_id, is_answer, is_test, source

MARK = "attention_course_rubric"  # the cell metadata key that marks a rubric cell
HEADING = ("**Model answer and marking scheme: for the instructor only** (from `solutions/`; "
           "never in the student's feedback)")


def is_rubric(cell: dict) -> bool:
    meta = cell.get("metadata")
    return isinstance(meta, dict) and MARK in meta


def _strip_markers(text: str) -> str:
    return "\n".join(line for line in text.splitlines()
                     if line.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION", "BEGIN SOLUTION", "END SOLUTION"))


def rubrics(solution: dict) -> dict:
    """{grade id: model answer} for every hand-graded answer cell of the instructor's version (a
    graded solution cell that is not a test: the derivations)."""
    out = {}
    for cell in solution.get("cells", []):
        gid = grade_id(cell)
        if gid and is_answer(cell) and not is_test(cell) and cell.get("metadata", {}).get("nbgrader", {}).get("grade") \
                and cell.get("cell_type") == "markdown":
            out[gid] = _strip_markers(source(cell)).strip()
    return out


def rubric_cell(gid: str, text: str) -> dict:
    return {"cell_type": "markdown", "id": f"rubric-{gid}"[:64],
            "metadata": {MARK: gid, "deletable": False, "editable": False},
            "source": f"{HEADING}\n\n{text}"}


def insert_rubrics(nb: dict, model: dict) -> int:
    """Put each model answer right after its answer cell (replacing an earlier rubric cell);
    returns how many were put in."""
    cells = [c for c in nb.get("cells", []) if not is_rubric(c)]
    out, n = [], 0
    for cell in cells:
        out.append(cell)
        gid = grade_id(cell)
        if gid in model and is_answer(cell) and model[gid]:
            out.append(rubric_cell(gid, model[gid]))
            n += 1
    nb["cells"] = out
    return n


def add_rubrics(work: Path, pairs: list, solutions: dict) -> None:
    """For each (student, assignment) graded in this batch: the autograded notebook (formgrader's
    copy) gets its rubric cells. Written atomically (a temporary file, then renamed)."""
    models = {a: rubrics(sol) for a, sol in solutions.items()}
    for student, assignment in pairs:
        model = models.get(assignment)
        path = work / "autograded" / student / assignment / f"{assignment}.ipynb"
        if not model or not path.is_file() or path.is_symlink():
            continue
        try:
            nb = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not insert_rubrics(nb, model):
            continue
        fd, tmp = tempfile.mkstemp(prefix=".rubric-", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(nb, f, indent=1, ensure_ascii=False)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)


class RemoveRubric(NbGraderPreprocessor):
    """Feedback never shows the instructor's rubric cells."""

    def preprocess(self, nb, resources):
        nb.cells = [c for c in nb.cells if not is_rubric(c)]
        return nb, resources
