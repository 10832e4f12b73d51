"""Builders shared by the per-chapter sample modules (``chNN_mistakes.py``).

A sample is the chapter's current release with the solution's answers filled in, then some answer
cells replaced by wrong code, so the samples never drift from the source.
"""
from __future__ import annotations

import textwrap

from .. import course
from ..restore import grade_id, is_answer


def src(code: str) -> str:
    """An answer cell's source from an indented triple-quoted string."""
    return textwrap.dedent(code).strip("\n")


class Chapter:
    """``correct()``, ``with_answers(**sources)`` and ``expect(**changes)`` for one assignment."""

    def __init__(self, assignment: str, full: dict):
        self.assignment = assignment
        self.full = full

    def answers(self) -> dict:
        nb = course.load_json(course.source_path(self.assignment))
        return {grade_id(c): c["source"] for c in nb["cells"] if grade_id(c) and is_answer(c)}

    def correct(self) -> dict:
        """The release with every answer cell taken from the solution."""
        nb = course.load_json(course.release_path(self.assignment))
        answers = self.answers()
        for cell in nb["cells"]:
            if grade_id(cell) in answers:
                cell["source"] = answers[grade_id(cell)]
        return nb

    def with_answers(self, **sources) -> dict:
        """The correct submission with the named answer cells replaced."""
        nb = self.correct()
        left = dict(sources)
        for cell in nb["cells"]:
            gid = grade_id(cell)
            if gid in left:
                cell["source"] = left.pop(gid)
        if left:
            raise KeyError(f"no cell with grade_id {sorted(left)} in {self.assignment}")
        return nb

    def expect(self, **changes) -> dict:
        """Full marks, with the given grade ids changed."""
        d = dict(self.full)
        d.update(changes)
        return d
