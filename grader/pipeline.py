"""Grade a class: ``autograde(submissions, reports)`` and ``feedback(reports, out)``.

For each student and assignment (``<submissions>/<student>/<assignment>/<assignment>.ipynb``):

1. **Restore** (``restore.py``): the learner's answers inside the release's locked cells; tampering
   and unusable files are reported, never fatal.
2. **Execute** in the sandbox (``sandbox.py`` + ``_execute.py``): limits per cell and per notebook;
   every test cell ends with real outputs or an error saying why it did not run.
3. **Verify** (``verify.py``): each exercise again in a fresh sandboxed process on secret inputs,
   compared by this process with the reference; self-check answers compared as literals.
4. **Record**: a test cell whose exercise failed verification gets an error output with the
   reason; then nbgrader's own autograde (execution switched off: the notebook was executed in
   the sandbox) scores the cells and writes the gradebook, the system of record.
5. **Report**: ``grades.csv`` and ``exercises.csv`` from the gradebook, with a reason for every lost point.
"""
from __future__ import annotations

import concurrent.futures as futures
import copy
import csv
import json
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from . import course, sandbox, verify
from .restore import grade_id, is_answer, is_test, load_submission, nbg, restore

CELL_TIMEOUT = int(os.environ.get("GRADER_CELL_TIMEOUT", "60"))
NOTEBOOK_TIMEOUT = int(os.environ.get("GRADER_NOTEBOOK_TIMEOUT", "420"))
WORKERS = int(os.environ.get("GRADER_WORKERS", str(min(2, os.cpu_count() or 1))))
STUDENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")

NO_EXEC_CONFIG = """
from nbgrader.preprocessors import (DeduplicateIds, OverwriteKernelspec, OverwriteCells, CheckCellMetadata,
    IgnorePattern, LimitOutput, SaveAutoGrades, AssignLatePenalties)
from nbconvert.preprocessors import ClearMetadataPreprocessor
c = get_config()
# The notebook was already executed in the sandbox: keep its outputs and do not execute again.
c.Autograde.sanitize_preprocessors = [DeduplicateIds, OverwriteKernelspec, OverwriteCells, CheckCellMetadata]
c.Autograde.autograde_preprocessors = [IgnorePattern, ClearMetadataPreprocessor, LimitOutput,
                                       SaveAutoGrades, AssignLatePenalties, CheckCellMetadata]
"""

FEEDBACK_CONFIG = """
from nbgrader.preprocessors import GetGrades, ClearHiddenTests
from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
c = get_config()
# Feedback shows the learner's cells, outputs and scores, never the hidden tests.
c.GenerateFeedback.preprocessors = [GetGrades, ClearHiddenTests, CSSHTMLHeaderPreprocessor]
c.ClearHiddenTests.begin_test_delimeter = "BEGIN HIDDEN TESTS"
c.ClearHiddenTests.end_test_delimeter = "END HIDDEN TESTS"
"""


@dataclass
class Job:
    student: str
    assignment: str
    path: Path | None
    notes: list = field(default_factory=list)


@dataclass
class Outcome:
    student: str
    assignment: str
    reasons: dict  # grade_id -> reason (why points were lost, or what was restored)
    general: list  # notes about the whole notebook
    seconds: float
    execute_seconds: float


# ------------------------------------------------------------------------------------ discovery
def find_jobs(submissions: Path, assignments: list[str] | None) -> tuple[list[Job], list[str]]:
    known = course.assignments()
    skipped = []
    students = sorted(p for p in submissions.iterdir() if p.is_dir() and not p.name.startswith("."))
    if assignments is None:
        present = {d.name for s in students for d in s.iterdir() if d.is_dir()}
        assignments = sorted(present & set(known))
    unknown = [a for a in assignments if a not in known]
    if unknown:
        raise SystemExit(f"unknown assignment(s): {', '.join(unknown)} (known: {', '.join(known)})")
    jobs = []
    for sdir in students:
        if not STUDENT_ID.match(sdir.name):
            skipped.append(f"{sdir.name!r}: not a valid student id (letters, digits, _ . @ -)")
            continue
        for a in assignments:
            folder = sdir / a
            expected = folder / f"{a}.ipynb"
            job = Job(sdir.name, a, expected)
            if not expected.exists() and folder.is_dir():
                others = sorted(folder.glob("*.ipynb"))
                if len(others) == 1:  # misnamed: grade it, and say so
                    job.path = others[0]
                    job.notes.append(f"the notebook was named {others[0].name} instead of {a}.ipynb; it was graded")
            jobs.append(job)
    return jobs, skipped


# ------------------------------------------------------------------------------ one submission
def grade_one(job: Job, release: dict, solution: dict, work: Path, hidden: list) -> Outcome:
    start = time.monotonic()
    scratch = work / "scratch" / job.student / job.assignment
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    sub, problem = load_submission(job.path) if job.path else (None, "no notebook was submitted")
    restored = restore(release, sub, problem)
    general = job.notes + restored.notes
    nb = restored.notebook
    reasons: dict[str, str] = {}
    exec_seconds = 0.0

    if restored.problem:
        for cell in nb.cells:
            if is_test(cell) and cell.cell_type == "code":
                cell.outputs = [_error("NotGraded", restored.problem)]
    else:
        run_dir = scratch / "run"
        run_dir.mkdir()
        nbformat.write(nb, run_dir / "submission.ipynb")
        shutil.copy(Path(__file__).with_name("_execute.py"), run_dir / "_execute.py")
        t0 = time.monotonic()
        res = sandbox.run([sys.executable, "_execute.py", "submission.ipynb", "executed.ipynb", str(CELL_TIMEOUT)],
                          run_dir, sandbox.Limits(wall_seconds=NOTEBOOK_TIMEOUT), hide=hidden)
        exec_seconds = time.monotonic() - t0
        executed = _read_executed(run_dir / "executed.ipynb", nb)
        why_not_run = "; ".join(res.notes) or "the notebook stopped before this cell ran"
        if not (run_dir / "executed.ipynb").exists():
            last = (res.stderr.strip().splitlines() or [f"exit code {res.returncode}"])[-1][:300]
            why_not_run = f"the notebook could not be executed ({last})"
        for cell, done in zip(nb.cells, executed.cells):
            if cell.cell_type == "code":
                if done.get("execution_count") is not None or done.get("outputs"):
                    cell.outputs = done.get("outputs", [])
                    cell.execution_count = done.get("execution_count")
                elif is_test(cell):
                    cell.outputs = [_error("NotExecuted", why_not_run)]
        if res.notes:
            general += res.notes
        for cell in nb.cells:  # an answer cell that timed out or killed the kernel explains its test
            gid = grade_id(cell)
            if gid and is_answer(cell) and cell.cell_type == "code":
                for out in cell.get("outputs", []):
                    if out.get("output_type") == "error" and out.get("ename") in ("TimeoutError", "DeadKernelError"):
                        general.append(f"the answer cell `{gid}` stopped: {out.get('evalue')}")

        verdicts = verify.verify(nb, job.student, job.assignment, scratch / "verify",
                                 sandbox.Limits(wall_seconds=240), hide=hidden)
        verdicts.update({f"test_{k}": v for k, v in verify.check_quizzes(nb, solution).items()})
        verdicts = {(k if k.startswith("test_") else f"test_{k}"): v for k, v in verdicts.items()}
        for cell in nb.cells:
            gid = grade_id(cell)
            v = verdicts.get(gid)
            if v is not None and not v.ok and is_test(cell) and not _failed(cell):
                cell.outputs.append(_error("VerificationError", f"independent re-check failed: {v.reason}"))

    for cell in nb.cells:
        gid = grade_id(cell)
        if not gid or not nbg(cell).get("grade"):
            continue
        if cell.cell_type == "code":
            # nbgrader reads a test cell's result as partial credit; ours print and never return one.
            cell.outputs = [o for o in cell.get("outputs", []) if o.get("output_type") != "execute_result"]
            for out in cell.get("outputs", []):
                if out.get("output_type") == "error":
                    # Feedback must not reveal hidden tests: keep the message, drop the traceback.
                    out["traceback"] = [f"{out.get('ename')}: {out.get('evalue')}"]
            msg = _failure(cell)
            if msg:
                reasons[gid] = msg
        elif is_answer(cell):
            reasons[gid] = "written answer: graded by hand"
    for note in general:
        m = re.search(r"`([^`]+)`", note)
        if m:
            for key in (m.group(1), f"test_{m.group(1)}"):
                if key in reasons:
                    reasons[key] += f" ({note})"

    _store(nb, work, job)
    return Outcome(job.student, job.assignment, reasons, general, time.monotonic() - start, exec_seconds)


def _store(nb, work: Path, job: Job) -> None:
    """The notebook nbgrader scores: replaces whatever an earlier grading left for this student."""
    dest = work / "submitted" / job.student / job.assignment
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    nbformat.write(nb, dest / f"{job.assignment}.ipynb")


def _read_executed(path: Path, fallback):
    try:
        return nbformat.read(path, as_version=4)
    except Exception:
        return copy.deepcopy(fallback)


def _error(ename: str, evalue: str):
    return nbformat.v4.new_output("error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


def _failed(cell) -> bool:
    return any(o.get("output_type") == "error" for o in cell.get("outputs", []))


def _failure(cell) -> str | None:
    errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    if not errors:
        stderr = [o for o in cell.get("outputs", []) if o.get("output_type") == "stream" and o.get("name") == "stderr"]
        if stderr:  # nbgrader scores a test cell that wrote to stderr as failed
            first = "".join(stderr[0].get("text", "")).strip().splitlines()[:1]
            return "the test cell wrote to stderr, which nbgrader scores as a failure" + (f": {first[0][:200]}" if first else "")
        return None
    e = errors[-1] if errors[-1].get("ename") == "VerificationError" else errors[0]
    text = f"{e.get('ename')}: {e.get('evalue')}".strip()
    lines = [line for line in text.splitlines() if line.strip()]
    return " / ".join(lines[:4])[:600]


# ---------------------------------------------------------------------------------- the batch
def autograde(submissions: Path, reports: Path, assignments: list[str] | None = None,
              progress: bool = True, work: Path | None = None) -> str:
    if not submissions.is_dir():
        raise SystemExit(f"submissions folder {submissions} does not exist (expected <dir>/<student>/<assignment>/<assignment>.ipynb)")
    # The workspace is the one nbgrader's config names (grader/work/{submitted,autograded,...}), so
    # formgrader in `make lab` shows these submissions for manual grading. Earlier batches stay.
    work = (work or course.WORK).resolve()
    shutil.rmtree(work / "scratch", ignore_errors=True)
    (work / "submitted").mkdir(parents=True, exist_ok=True)
    jobs, skipped = find_jobs(submissions.resolve(), assignments)
    if not jobs:
        raise SystemExit(f"no submissions found in {submissions}")
    try:
        sandbox.self_test(work / "self-test")
    except RuntimeError as err:
        raise SystemExit(str(err)) from None
    wanted = sorted({j.assignment for j in jobs})
    releases, solutions = {}, {}
    for a in wanted:  # the current source, recorded in the gradebook (does not touch notebooks/)
        releases[a] = course.load_json(course.generate(a, work / "release"))
        solutions[a] = course.load_json(course.source_path(a))

    start = time.monotonic()
    outcomes: list[Outcome] = []
    bar = _progress(len(jobs), progress)
    with futures.ThreadPoolExecutor(max_workers=WORKERS) as pool:
        hidden = [submissions.resolve(), reports.resolve(), work]  # other students' work, the reports
        todo = {pool.submit(grade_one, j, releases[j.assignment], solutions[j.assignment], work, hidden): j
                for j in jobs}
        for fut in futures.as_completed(todo):
            job = todo[fut]
            try:
                outcomes.append(fut.result())
            except Exception as err:  # a bug of ours: the student still gets a record, with the reason
                outcomes.append(_fallback(job, releases[job.assignment], work, f"grader error: {type(err).__name__}: {err}"))
            bar.update(1)
    bar.close()

    for a in wanted:
        proc = course.nbgrader("autograde", a, "--force", f"--CourseDirectory.submitted_directory={work / 'submitted'}",
                               f"--CourseDirectory.autograded_directory={work / 'autograded'}",
                               f"--CourseDirectory.release_directory={work / 'release'}",
                               check=False, extra_env={"JUPYTER_CONFIG_PATH": _config_dir(work, "noexec", NO_EXEC_CONFIG)})
        if proc.returncode != 0:
            (work / f"nbgrader-autograde-{a}.log").write_text(proc.stdout + proc.stderr)
    rows, ex_rows = export(outcomes, reports)
    total = time.monotonic() - start
    (reports / "timing.json").write_text(json.dumps({
        "submissions": len(outcomes), "total_seconds": round(total, 2),
        "per_submission": {f"{o.student}/{o.assignment}": {"grade_seconds": round(o.seconds, 2),
                                                           "execute_seconds": round(o.execute_seconds, 2)} for o in outcomes},
    }, indent=2))
    lines = [f"graded {len(outcomes)} submissions of {len({o.student for o in outcomes})} students in {total:.1f} s",
             f"wrote {reports / 'grades.csv'} and {reports / 'exercises.csv'}"]
    lines += [f"skipped {s}" for s in skipped]
    if skipped:
        (reports / "skipped.txt").write_text("\n".join(skipped) + "\n")
    return "\n".join(lines)


def _fallback(job: Job, release: dict, work: Path, why: str) -> Outcome:
    nb = restore(release, None, why).notebook
    for cell in nb.cells:
        if is_test(cell) and cell.cell_type == "code":
            cell.outputs = [_error("NotGraded", why)]
    _store(nb, work, job)
    return Outcome(job.student, job.assignment, {grade_id(c): why for c in nb.cells if is_test(c)}, [why], 0.0, 0.0)


def _config_dir(work: Path, name: str, text: str) -> str:
    d = work / f"config-{name}"
    d.mkdir(parents=True, exist_ok=True)
    base = (course.GRADER / "nbgrader_config.py").read_text()
    (d / "nbgrader_config.py").write_text(base + "\n" + text)
    return str(d)


class _NoBar:
    def update(self, n):
        pass

    def close(self):
        pass


def _progress(total: int, enabled: bool):
    if not enabled:
        return _NoBar()
    from tqdm import tqdm

    return tqdm(total=total, desc="grading", unit="notebook", file=sys.stderr)


def exercise_name(gid: str) -> str:
    return gid[5:] if gid.startswith("test_") else gid


def export(outcomes: list[Outcome], reports: Path) -> tuple[list, list]:
    """grades.csv and exercises.csv from the gradebook, with our reasons beside the scores."""
    from nbgrader.api import Gradebook, MissingEntry

    reports.mkdir(parents=True, exist_ok=True)
    rows, ex_rows = [], []
    with Gradebook(course.db_url(), "attention-course") as gb:
        for o in sorted(outcomes, key=lambda o: (o.student, o.assignment)):
            try:
                sub = gb.find_submission(o.assignment, o.student)
            except MissingEntry:
                reason = "; ".join(o.general) or "nbgrader could not record this submission"
                assignment = gb.find_assignment(o.assignment)
                rows.append([o.student, o.assignment, 0, assignment.max_score])
                for nb in assignment.notebooks:
                    for cell in nb.grade_cells:
                        ex_rows.append([o.student, o.assignment, exercise_name(cell.name), 0, cell.max_score, reason])
                continue
            rows.append([o.student, o.assignment, _num(sub.score), _num(sub.max_score)])
            for nb in sub.notebooks:
                for g in sorted(nb.grades, key=lambda g: _order(g.name)):
                    reason = o.reasons.get(g.name, "")
                    if not reason and g.score < g.max_score:
                        reason = "needs manual grading" if g.needs_manual_grade else "points lost"
                    if not reason and o.general and g.score < g.max_score:
                        reason = "; ".join(o.general)
                    ex_rows.append([o.student, o.assignment, exercise_name(g.name), _num(g.score), _num(g.max_score), reason])
    with open(reports / "grades.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["student_id", "assignment", "score", "max_score"])
        w.writerows(rows)
    with open(reports / "exercises.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["student_id", "assignment", "exercise", "score", "max_score", "reason"])
        w.writerows(ex_rows)
    return rows, ex_rows


def _order(name: str):
    return (name.startswith("test_quiz"), name.startswith("derivation"), name)


def _num(x):
    x = float(x or 0)
    return int(x) if x == int(x) else round(x, 3)


# ---------------------------------------------------------------------------------- feedback
def feedback(reports: Path, out: Path, work: Path | None = None) -> int:
    """HTML feedback per student and assignment, without hidden tests (run after autograde)."""
    work = (work or course.WORK).resolve()
    if not (work / "autograded").is_dir():
        raise SystemExit("nothing has been autograded yet: run `make autograde` first")
    config = _config_dir(work, "feedback", FEEDBACK_CONFIG)
    n = 0
    for a in sorted({p.name for p in (work / "autograded").glob("*/*") if p.is_dir()}):
        course.nbgrader("generate_feedback", a, "--force",
                        f"--CourseDirectory.submitted_directory={work / 'submitted'}",
                        f"--CourseDirectory.autograded_directory={work / 'autograded'}",
                        f"--CourseDirectory.feedback_directory={work / 'feedback'}",
                        extra_env={"JUPYTER_CONFIG_PATH": config})
    out.mkdir(parents=True, exist_ok=True)
    for html in sorted((work / "feedback").glob("*/*/*.html")):
        student, assignment = html.parent.parent.name, html.parent.name
        dest = out / student / f"{assignment}.html"
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(html, dest)
        n += 1
    return n
