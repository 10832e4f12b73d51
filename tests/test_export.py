"""``make export``: grades into Canvas (its gradebook import format) and a wide CSV for any LMS,
from nbgrader's gradebook (issue 19 §3). The roster is built to Canvas's documented export format:
``Student, ID, SIS User ID, SIS Login ID, Section``, then a "Points Possible" row."""
import csv
import io
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

ROSTER = """Student,ID,SIS User ID,SIS Login ID,Section,Old quiz (1234)
    Points Possible,,,,,10
"Lovelace, Ada",101,S-0001,ada,Section A,9
"Turing, Alan",102,S-0002,alan,Section A,8
"Hopper, Grace",103,S-0003,grace,Section B,
"=cmd|' /C calc'!A0",104,S-0004,=evil,Section B,
"""


@pytest.fixture(scope="module")
def gradebook(tmp_path_factory):
    """A gradebook with two chapters: ada has both (hand-graded too), alan chapter 00 and a chapter
    03 whose derivation waits for hand grading, grace none; 'mallory' is graded but on no roster.
    As nbgrader records them: an auto-graded cell needs no manual grade, a derivation needs one
    until the instructor gives it a score in formgrader."""
    from nbgrader.api import Gradebook

    url = f"sqlite:///{tmp_path_factory.mktemp('gradebook') / 'gradebook.db'}"
    chapters = {"00_foundations": {"test_softmax": 4, "test_quiz_1": 1},
                "03_scaled_dot_product_attention": {"test_scaled_dot_product_attention": 5, "derivation_variance": 3}}
    marks = {("ada", "00_foundations"): {"test_softmax": 4, "test_quiz_1": 1},
             ("ada", "03_scaled_dot_product_attention"): {"test_scaled_dot_product_attention": 5, "derivation_variance": 2.5},
             ("alan", "00_foundations"): {"test_softmax": 0, "test_quiz_1": 1},
             ("alan", "03_scaled_dot_product_attention"): {"test_scaled_dot_product_attention": 5, "derivation_variance": None},
             ("mallory", "00_foundations"): {"test_softmax": 4, "test_quiz_1": 0}}
    with Gradebook(url, "attention-course") as gb:
        for a, cells in chapters.items():
            gb.add_assignment(a)
            gb.add_notebook(a, a)
            for cell, points in cells.items():
                gb.add_grade_cell(cell, a, a, max_score=points, cell_type="markdown" if cell.startswith("derivation") else "code")
        for s in ("ada", "alan", "grace", "mallory"):
            gb.add_student(s)
        for (s, a), cells in marks.items():
            gb.add_submission(a, s)
            for cell, score in cells.items():
                g = gb.find_grade(cell, a, a, s)
                if score is None:  # not graded by hand yet
                    g.needs_manual_grade = True
                elif cell.startswith("derivation"):
                    g.manual_score = score
                    g.needs_manual_grade = False
                else:
                    g.auto_score = score
                    g.needs_manual_grade = False
            gb.db.commit()
    return url


def _read(path):
    return list(csv.reader(open(path, newline="", encoding="utf-8")))


def test_canvas_import_and_wide_csv(gradebook, tmp_path):
    from grader.export import export

    roster = tmp_path / "roster.csv"
    roster.write_text(ROSTER)
    err = io.StringIO()
    summary = export(tmp_path / "out", roster, db_url=gradebook, stderr=err)
    canvas = _read(tmp_path / "out" / "canvas.csv")
    assert canvas[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section",
                         "00 Foundations", "03 Scaled dot product attention"]
    assert canvas[1] == ["Points Possible", "", "", "", "", "5", "8"]
    rows = {r[3]: r for r in canvas[2:]}
    assert rows["ada"] == ["Lovelace, Ada", "101", "S-0001", "ada", "Section A", "5", "7.5"]
    assert rows["alan"][5:] == ["1", ""]  # chapter 03 waits for hand grading: empty (Canvas keeps the grade)
    assert rows["grace"][5:] == ["", ""]
    # ... and the export says which students and chapters wait
    assert summary["pending"] == {"alan": {"03_scaled_dot_product_attention": ["derivation_variance"]}}
    assert _read(tmp_path / "out" / "pending.csv")[1:] == [["alan", "03_scaled_dot_product_attention", "derivation_variance"]]
    assert "wait for hand grading" in err.getvalue() and "alan: 03 Scaled dot product attention" in err.getvalue()
    # a roster value that starts like a formula is written as text
    assert all(not c.startswith(("=", "+", "@")) for r in canvas for c in r if c != "")
    assert rows["'=evil"][0].startswith("'=")
    # the graded student who is on no roster: named, never dropped silently
    assert summary["unmatched"] == ["mallory"] and "mallory" in err.getvalue()
    assert _read(tmp_path / "out" / "unmatched.csv")[1] == ["mallory", "1", "4"]
    wide = _read(tmp_path / "out" / "grades_wide.csv")
    assert wide[0] == ["student_id", "00 Foundations", "03 Scaled dot product attention", "total"]
    assert wide[1] == ["Points Possible", "5", "8", "13"]
    by_id = {r[0]: r for r in wide[2:]}
    assert by_id["ada"] == ["ada", "5", "7.5", "12.5"] and by_id["mallory"] == ["mallory", "4", "", "4"]
    assert by_id["alan"] == ["alan", "1", "", "1"]  # the total is the sum of the cells shown
    assert by_id["grace"] == ["grace", "", "", ""]  # on the roster, no submission: no number, no total


def test_missing_as_zero_and_matching_by_sis_user_id(gradebook, tmp_path):
    from grader.export import export

    roster = tmp_path / "roster.csv"
    # the course's ids are SIS user ids in this class
    roster.write_text(ROSTER.replace("S-0001", "ada-sis").replace(",ada,", ",a.lovelace,"))
    export(tmp_path / "out", roster, match="sis_user_id", missing="zero", db_url=gradebook, stderr=io.StringIO())
    rows = {r[0]: r for r in _read(tmp_path / "out" / "canvas.csv")[2:]}
    assert rows["Hopper, Grace"][5:] == ["0", "0"]
    assert rows["Lovelace, Ada"][5:] == ["0", "0"]  # 'ada-sis' was never graded: matched by SIS user id
    wide = {r[0]: r for r in _read(tmp_path / "out" / "grades_wide.csv")[2:]}
    assert wide["S-0003"][-1] == "0"  # grace, matched by SIS user id; MISSING=zero: zeros, and their total
    (tmp_path / "roster2.csv").write_text(ROSTER)
    export(tmp_path / "out2", tmp_path / "roster2.csv", missing="zero", db_url=gradebook, stderr=io.StringIO())
    rows = {r[3]: r for r in _read(tmp_path / "out2" / "canvas.csv")[2:]}
    assert rows["alan"][5:] == ["1", ""]  # waiting for hand grading is no missing submission: never 0


def test_a_file_that_is_not_a_canvas_export_gets_a_clear_reason(gradebook, tmp_path):
    from grader.export import export

    bad = tmp_path / "bad.csv"
    bad.write_text("name,email\nAda,ada@example.org\n")
    with pytest.raises(ValueError, match=r"not a Canvas gradebook export: no column\(s\) \['Student'"):
        export(tmp_path / "out", bad, db_url=gradebook)


def test_make_export_command(gradebook, tmp_path):
    roster = tmp_path / "roster.csv"
    roster.write_text(ROSTER)
    run = subprocess.run([sys.executable, "-m", "grader", "export", "--out", str(tmp_path / "o"), "--roster", str(roster)],
                         cwd=ROOT, env={**__import__("os").environ, "GRADEBOOK_URL": gradebook},
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "not on the roster" in run.stdout and "mallory" in run.stderr
