"""Grades for the LMS, from nbgrader's gradebook (the record): ``make export``.

Writes, into ``--out``:

- ``canvas.csv``, given the roster the instructor exports from Canvas (Grades → Export: columns
  ``Student``, ``ID``, ``SIS User ID``, ``SIS Login ID``, ``Section`` and a "Points Possible" row):
  Canvas's gradebook import format, one row per roster student, the five identity columns as
  exported, then one column per chapter (a column without a Canvas id creates that assignment on
  import) with the points, and a "Points Possible" row. A roster student is matched to the course's
  student id by ``--match``: ``sis_login`` (SIS Login ID, default), ``sis_user_id`` or ``canvas_id``.
- ``grades_wide.csv``: one row per student, one column per chapter, and the total, for any other
  LMS; its first row after the header holds the points possible.
- ``unmatched.csv``: graded students that the roster does not list (also named on stderr): never
  dropped silently.

- ``pending.csv``: every student and chapter whose grade still waits for hand grading (a
  derivation nbgrader marks ``needs_manual_grade``), with the parts that wait (also named on
  stderr). Such a chapter's cell is left **empty** in canvas.csv and grades_wide.csv until the
  instructor has graded it in formgrader: an LMS never gets a partial grade as if it were final.

A chapter's points are nbgrader's score after its late penalty (``LateSubmissionPlugin``), as
nbgrader's own export computes them. A roster student with no submission of a chapter gets an
empty cell (``--missing empty``, the default: Canvas leaves an empty cell's grade as it is) or 0
(``--missing zero``). The total of a row is the sum of the cells it shows (empty when it shows no
number). No cell starts like a spreadsheet formula.
"""
from __future__ import annotations

import csv
import sys
from pathlib import Path

from . import course
from .pipeline import cell_safe

ROSTER_COLUMNS = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
MATCH = {"sis_login": "SIS Login ID", "sis_user_id": "SIS User ID", "canvas_id": "ID"}
POINTS_POSSIBLE = "Points Possible"


def chapter_title(assignment: str) -> str:
    """"03_scaled_dot_product_attention" -> "03 Scaled dot product attention"."""
    number, _, rest = assignment.partition("_")
    return f"{number} {rest.replace('_', ' ').capitalize()}".strip()


def _num(x):
    x = float(x or 0)
    return int(x) if x == int(x) else round(x, 3)


def read_roster(path: Path) -> list[dict]:
    """The students of a Canvas gradebook export (its "Points Possible" and read-only rows skipped).
    Raises ValueError naming the missing columns when it is not one."""
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = csv.DictReader(f)
        missing = [c for c in ROSTER_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path} is not a Canvas gradebook export: no column(s) {missing} "
                             f"(it has {reader.fieldnames})")
        rows = []
        for row in reader:
            name = (row.get("Student") or "").strip()
            if not name or name == POINTS_POSSIBLE or name.startswith(POINTS_POSSIBLE):
                continue
            rows.append({c: (row.get(c) or "").strip() for c in ROSTER_COLUMNS})
        return rows


def gradebook_scores(db_url: str | None = None, pending: dict | None = None) -> tuple[list, dict]:
    """([(assignment, max points)], {student_id: {assignment: points}}) from nbgrader's gradebook,
    manual grades included, late penalties taken off. A submission with a part that still needs
    hand grading is left out of the scores and put in ``pending`` ({student_id: {assignment:
    [the parts that wait]}}) when it is given."""
    from nbgrader.api import Gradebook, MissingEntry

    scores: dict = {}
    with Gradebook(db_url or course.db_url(), "attention-course") as gb:
        assignments = sorted((a.name, _num(a.max_score)) for a in gb.assignments)
        for student in gb.students:
            for name, _ in assignments:
                try:
                    sub = gb.find_submission(name, student.id)
                except MissingEntry:
                    continue
                waiting = sorted(g.name for nb in sub.notebooks for g in nb.grades if g.needs_manual_grade)
                if waiting:
                    if pending is not None:
                        pending.setdefault(student.id, {})[name] = waiting
                    continue
                scores.setdefault(student.id, {})[name] = _num((sub.score or 0) - (sub.late_submission_penalty or 0))
    return assignments, scores


def _cell(value, missing: str):
    if value is None:
        return 0 if missing == "zero" else ""
    return value


def export(out: Path, roster: Path | None = None, match: str = "sis_login", missing: str = "empty",
           db_url: str | None = None, stderr=sys.stderr) -> dict:
    """Write canvas.csv (with a roster), grades_wide.csv and unmatched.csv; return a summary."""
    if match not in MATCH:
        raise ValueError(f"--match must be one of {sorted(MATCH)}; got {match!r}")
    if missing not in ("empty", "zero"):
        raise ValueError(f"--missing must be 'empty' or 'zero'; got {missing!r}")
    out.mkdir(parents=True, exist_ok=True)
    pending: dict = {}
    assignments, scores = gradebook_scores(db_url, pending)
    titles = [chapter_title(a) for a, _ in assignments]
    summary = {"assignments": len(assignments), "graded_students": len(set(scores) | set(pending)), "files": [],
               "pending": {s: dict(p) for s, p in pending.items()}}

    def cell(student: str, assignment: str):
        if assignment in pending.get(student, {}):
            return ""  # waits for hand grading: no grade yet, whatever MISSING says
        return _cell(scores.get(student, {}).get(assignment), missing)

    def total(cells: list):
        numbers = [c for c in cells if c != ""]
        return _num(sum(numbers)) if numbers else ""

    students = sorted(set(scores) | set(pending))
    roster_rows = read_roster(roster) if roster else []
    key = MATCH[match]
    on_roster = {r[key] for r in roster_rows if r[key]}
    if roster:
        students += sorted(on_roster - set(scores))
        with open(out / "canvas.csv", "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(list(ROSTER_COLUMNS) + titles)
            w.writerow([POINTS_POSSIBLE, "", "", "", ""] + [m for _, m in assignments])
            for r in roster_rows:
                row = [r[c] for c in ROSTER_COLUMNS] + [
                    cell(r[key], a) if r[key] else _cell(None, missing) for a, _ in assignments]
                w.writerow([cell_safe(v) for v in row])
        summary["files"].append("canvas.csv")
        summary["roster_students"] = len(roster_rows)
        summary["roster_without_submission"] = sum(1 for r in roster_rows if r[key] not in scores and r[key] not in pending)

    with open(out / "grades_wide.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["student_id"] + titles + ["total"])
        w.writerow([POINTS_POSSIBLE] + [m for _, m in assignments] + [_num(sum(m for _, m in assignments))])
        for s in students:
            cells = [cell(s, a) for a, _ in assignments]
            w.writerow([cell_safe(v) for v in [s] + cells + [total(cells)]])
    summary["files"].append("grades_wide.csv")

    with open(out / "pending.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["student_id", "assignment", "waiting_for_hand_grading"])
        for s in sorted(pending):
            for a, parts in sorted(pending[s].items()):
                w.writerow([cell_safe(s), a, cell_safe(" ".join(parts))])
    summary["files"].append("pending.csv")
    if pending:
        n = sum(len(p) for p in pending.values())
        print(f"warning: {n} chapter grade(s) of {len(pending)} student(s) wait for hand grading in formgrader and "
              f"were left empty (see {out / 'pending.csv'}):", file=stderr)
        for s in sorted(pending):
            for a, parts in sorted(pending[s].items()):
                print(f"  {s}: {chapter_title(a)} ({', '.join(parts)})", file=stderr)

    graded = set(scores) | set(pending)
    unmatched = sorted(graded - on_roster) if roster else []
    with open(out / "unmatched.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["student_id", "graded_assignments", "total"])
        for s in unmatched:
            mine = scores.get(s, {})
            w.writerow([cell_safe(s), len(mine) + len(pending.get(s, {})), _num(sum(mine.values()))])
    summary["files"].append("unmatched.csv")
    summary["unmatched"] = unmatched
    for s in unmatched:
        print(f"warning: graded student {s!r} is not on the roster (matched by {key}); "
              f"see {out / 'unmatched.csv'}", file=stderr)
    return summary
