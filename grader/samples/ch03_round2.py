"""Hostile samples of grading's second round (issue 18), on chapter 03, each with its expected
score: no points gained, nothing leaked, every other student's score unchanged.

* links in an upload: an assignment folder that is a symbolic link to a peer's folder, and a
  notebook that is a link to the course's solution (a student folder that is a link is skipped
  before grading: tests/test_grader_round2.py);
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from .. import course
from .bank import A, ZERO


def _link_folder_to_peer(folder: Path) -> None:
    """<student>/03_.../ -> ../correct/03_... (the peer's work)."""
    shutil.rmtree(folder)
    os.symlink(os.path.join("..", "correct", A), folder)


def _link_notebook_to_solution(folder: Path) -> None:
    """<student>/03_.../03_....ipynb -> the course's own solution notebook."""
    os.symlink(course.source_path(A), folder / f"{A}.ipynb")


SAMPLES = {
    "hostile_link_peer": ("the assignment folder is a symbolic link to a peer's folder",
                          lambda: _link_folder_to_peer, ZERO),
    "hostile_link_solution": ("the notebook is a symbolic link to the course's solution",
                              lambda: _link_notebook_to_solution, ZERO),
}
