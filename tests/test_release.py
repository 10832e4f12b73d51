"""The learner release: exactly what nbgrader generates from solutions/, with no solution and no
hidden test in it. (Apart from tests/test_grader.py so that pytest-xdist runs it on the other
worker, beside the sample bank's grading.)"""
import subprocess
import sys

import pytest

from grader import course

ROOT = course.ROOT
pytestmark = pytest.mark.slow


def test_release_is_what_solutions_generate():
    proc = subprocess.run([sys.executable, "-m", "grader", "check-release"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_release_has_no_solutions_or_hidden_tests():
    for a in course.assignments():
        text = course.release_path(a).read_text()
        assert "BEGIN SOLUTION" not in text and "BEGIN HIDDEN TESTS" not in text
        assert "raise NotImplementedError()" in text
