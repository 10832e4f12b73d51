"""Grade a class: ``autograde(submissions, reports)`` and ``feedback(reports, out)``.

For each student and assignment (``<submissions>/<student>/<assignment>/<assignment>.ipynb``;
no symbolic link anywhere below ``<submissions>`` is followed: a linked student folder is skipped,
a linked assignment folder or notebook scores 0 with the reason, ``find_jobs``):

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

import ast
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

CELL_TIMEOUT = int(os.environ.get("GRADER_CELL_TIMEOUT", "30"))
NOTEBOOK_TIMEOUT = int(os.environ.get("GRADER_NOTEBOOK_TIMEOUT", "60"))
WORKERS = int(os.environ.get("GRADER_WORKERS", str(min(2, os.cpu_count() or 1))))
NBGRADER_TIMEOUT = int(os.environ.get("GRADER_NBGRADER_TIMEOUT", "600"))
STUDENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}")  # used with fullmatch: no trailing newline
MAX_NOTEBOOK_BYTES = int(os.environ.get("GRADER_MAX_NOTEBOOK_BYTES", str(8 * 2**20)))
MAX_CELLS = int(os.environ.get("GRADER_MAX_CELLS", "1000"))
EXECUTED_CAP = 32 * 2**20

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
    root: Path | None = None  # the submissions folder: nothing is read through a link below it
    problem: str | None = None  # why the submission cannot be graded at all (e.g. a link)


@dataclass
class Outcome:
    student: str
    assignment: str
    reasons: dict  # grade_id -> reason (why points were lost, or what was restored)
    general: list  # notes about the whole notebook
    seconds: float
    execute_seconds: float


# ------------------------------------------------------------------------------------ discovery
def _link_problem(path: Path, what: str) -> str | None:
    if path.is_symlink():
        return (f"the {what} `{path.name}` is a symbolic link: links in a submission are refused and nothing "
                "outside a student's own folder is read; it was not graded")
    return None


def find_jobs(submissions: Path, assignments: list[str] | None) -> tuple[list[Job], list[str]]:
    """Every (student, assignment) to grade. Uploads may hold symbolic links: a student folder that
    is a link is skipped (with the reason), an assignment folder or notebook that is a link is
    refused with a reason (scored 0), and no folder is listed or file read through a link."""
    known = course.assignments()
    skipped = []
    students = []
    for p in sorted(submissions.iterdir()):
        if p.name.startswith("."):
            continue
        if p.is_symlink():
            skipped.append(f"{p.name!r}: the student folder is a symbolic link (links are refused)")
        elif p.is_dir():
            students.append(p)
    explicit = assignments is not None
    if assignments is None:
        present = {d.name for s in students for d in s.iterdir() if d.is_dir() or d.is_symlink()}
        assignments = sorted(present & set(known))
    unknown = [a for a in assignments if a not in known]
    if unknown:
        raise SystemExit(f"unknown assignment(s): {', '.join(unknown)} (known: {', '.join(known)})")
    jobs = []
    for sdir in students:
        if not STUDENT_ID.fullmatch(sdir.name):
            skipped.append(f"{sdir.name!r}: not a valid student id (letters, digits, _ . @ -)")
            continue
        for a in assignments:
            folder = sdir / a
            linked = _link_problem(folder, "assignment folder")
            if linked:
                jobs.append(Job(sdir.name, a, None, root=submissions, problem=linked))
                continue
            if not explicit and not folder.is_dir():
                continue  # without --assignments, a student is graded on the assignments they handed in
            expected = folder / f"{a}.ipynb"
            job = Job(sdir.name, a, expected, root=submissions)
            if expected.is_symlink():
                job.problem = _link_problem(expected, "notebook")
            elif not expected.exists() and folder.is_dir():
                others = sorted(p for p in folder.glob("*.ipynb") if not p.is_symlink() and p.is_file())
                if len(others) == 1:  # misnamed: grade it, and say so
                    job.path = others[0]
                    job.notes.append(f"the notebook was named {others[0].name} instead of {a}.ipynb; it was graded")
            jobs.append(job)
    return jobs, skipped


# ------------------------------------------------------------------------------ one submission
def grade_one(job: Job, release: dict, solution: dict, work: Path, hidden: list | None = None) -> Outcome:
    start = time.monotonic()
    scratch = work / "scratch" / f"{job.student}-{job.assignment}"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    try:
        return _grade_one(job, release, solution, work, scratch, start)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)  # nothing of a job outlives it


def _grade_one(job: Job, release: dict, solution: dict, work: Path, scratch: Path, start: float) -> Outcome:
    if job.problem:
        sub, problem = None, job.problem
    elif job.path:
        sub, problem = load_submission(job.path, MAX_NOTEBOOK_BYTES, MAX_CELLS, root=job.root)
    else:
        sub, problem = None, "no notebook was submitted"
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
        t0 = time.monotonic()
        res = sandbox.run([sys.executable, "_execute.py", "submission.ipynb", "executed.ipynb", str(CELL_TIMEOUT)],
                          files={"submission.ipynb": nbformat.writes(for_execution(nb)).encode(),
                                 "_execute.py": Path(__file__).with_name("_execute.py")},
                          outputs={"executed.ipynb": EXECUTED_CAP},
                          limits=sandbox.Limits(wall_seconds=NOTEBOOK_TIMEOUT), expose=[course.ROOT / "utils"],
                          host_dir=scratch)
        exec_seconds = time.monotonic() - t0
        executed, why_unusable = _read_executed(res.outputs.get("executed.ipynb"), nb)
        why_not_run = "; ".join(res.notes) or "the notebook stopped before this cell ran"
        if why_unusable or res.output_problems.get("executed.ipynb"):
            last = (res.stderr.strip().splitlines() or [f"exit code {res.returncode}"])[-1][:300]
            why_not_run = f"the notebook could not be executed ({why_unusable or res.output_problems['executed.ipynb']}; {last})"
        for cell, done in zip(nb.cells, executed.cells):
            if cell.cell_type == "code" and done.get("cell_type") == "code":
                if done.get("execution_count") is not None or done.get("outputs"):
                    cell.outputs = _safe_outputs(done.get("outputs", []))
                    cell.execution_count = done.get("execution_count") if isinstance(done.get("execution_count"), int) else None
                elif is_test(cell):
                    cell.outputs = [_error("NotExecuted", why_not_run)]
        for cell in nb.cells:
            if is_test(cell) and cell.cell_type == "code" and not cell.get("outputs") and cell.get("execution_count") is None:
                cell.outputs = [_error("NotExecuted", why_not_run)]
        if res.notes:
            general += res.notes
        for cell in nb.cells:  # an answer cell that timed out or killed the kernel explains its test
            gid = grade_id(cell)
            if gid and is_answer(cell) and cell.cell_type == "code":
                for out in cell.get("outputs", []):
                    if out.get("output_type") == "error" and out.get("ename") in ("TimeoutError", "DeadKernelError"):
                        general.append(f"the answer cell `{gid}` stopped: {out.get('evalue')}")

        verdicts = verify.verify(nb, job.student, job.assignment, host_dir=scratch)
        verdicts.update({f"test_{k}": v for k, v in verify.check_quizzes(nb, solution).items()})
        verdicts = {(k if k.startswith("test_") else f"test_{k}"): v for k, v in verdicts.items()}
        for cell in nb.cells:
            gid = grade_id(cell)
            v = verdicts.get(gid)
            if v is None or not is_test(cell):
                continue
            if not v.ok and not _failed(cell):
                cell.outputs.append(_error("VerificationError", f"independent re-check failed: {v.reason}"))
            elif v.ok and _failed(cell):
                # The re-check (new secret inputs, outside the kernel, its own time budget) is the
                # grade: a test cell the kernel did not reach, or failed because another cell hung,
                # crashed or slowed the kernel down, loses nothing.
                cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=(
                    "✅ passed the independent re-check on new inputs, which is the grade (in the notebook "
                    f"this cell did not pass: {(_failure(cell) or '')[:300]})\n"))]

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

    neutralise(nb)
    _store(nb, work, job)
    return Outcome(job.student, job.assignment, reasons, general, time.monotonic() - start, exec_seconds)


def for_execution(nb):
    """What the sandbox executes: the learner's cells, answers and test cells as they are; the
    course's locked demo cells reduced to their definitions (imports, functions, classes,
    constants). Demo cells score nothing; skipping their computations makes grading faster and
    leaves a hanging learner function fewer chances to eat the notebook's time budget."""
    run = copy.deepcopy(nb)
    demo = [c for c in run.cells if c.cell_type == "code" and not is_test(c) and not is_answer(c) and nbg(c).get("locked")]
    kept = {}
    for cell in demo:
        tree = verify.parse_cell(cell.source)
        kept[id(cell)] = [node for node in (tree.body if tree is not None else [])
                          if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                          or (isinstance(node, ast.Assign) and verify._is_constant(node.value))]
    used = _names_used([verify.parse_cell(c.source) for c in run.cells if c.cell_type == "code" and id(c) not in kept]
                       + [n for nodes in kept.values() for n in nodes if not isinstance(n, (ast.Import, ast.ImportFrom))])
    for cell in demo:
        cell.source = "\n".join(ast.unparse(n) for n in kept[id(cell)] if not _only_for_plots(n, used))
    return run


# Imported by demo cells for figures and widgets only: about a second of every graded kernel's
# start. Left out when no code that runs (the learner's cells, the definitions kept) uses a name
# they bind.
PLOT_MODULES = ("matplotlib", "seaborn", "ipywidgets", "utils.plotting")


def _names_used(trees) -> set:
    names = set()
    for tree in trees:
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, ast.Name):
                names.add(node.id)
    return names


def _only_for_plots(node, used: set) -> bool:
    if not isinstance(node, (ast.Import, ast.ImportFrom)):
        return False
    mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
    if not all(any(m == p or m.startswith(p + ".") for p in PLOT_MODULES) for m in mods):
        return False
    return not {(a.asname or a.name).split(".")[0] for a in node.names} & used


def _store(nb, work: Path, job: Job) -> None:
    """The notebook nbgrader scores: replaces whatever an earlier grading left for this student."""
    dest = work / "submitted" / job.student / job.assignment
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    nbformat.write(nb, dest / f"{job.assignment}.ipynb")


def _read_executed(data: bytes | None, fallback):
    """The executed notebook the sandbox wrote, or the fallback and why it is unusable."""
    if data is None:
        return copy.deepcopy(fallback), "it wrote no notebook"
    try:
        nb = nbformat.reads(data.decode("utf-8"), as_version=4)
        if len(nb.cells) != len(fallback.cells):
            return copy.deepcopy(fallback), "the executed notebook does not match the submission"
        return nb, None
    except Exception:  # noqa: BLE001 - forged or truncated
        return copy.deepcopy(fallback), "the executed notebook is not a valid notebook"


def _safe_outputs(outputs) -> list:
    """Outputs written by learner code, as plain nbformat outputs (anything odd is dropped)."""
    safe = []
    for out in outputs if isinstance(outputs, list) else []:
        if not isinstance(out, dict):
            continue
        kind = out.get("output_type")
        if kind == "stream":
            safe.append(nbformat.v4.new_output("stream", name="stderr" if out.get("name") == "stderr" else "stdout",
                                               text=_text(out.get("text"))[:20_000]))
        elif kind == "error":
            safe.append(_error(_text(out.get("ename"))[:200], _text(out.get("evalue"))[:4000]))
        elif kind in ("display_data", "execute_result"):
            data = out.get("data") if isinstance(out.get("data"), dict) else {}
            keep = {k: v for k, v in data.items() if k in ("text/plain", "text/html", "image/png", "text/markdown")}
            keep = {k: _text(v)[:2_000_000] for k, v in keep.items()}
            if kind == "execute_result":
                safe.append(nbformat.v4.new_output("execute_result", data=keep, execution_count=None))
            else:
                safe.append(nbformat.v4.new_output("display_data", data=keep))
    return safe


def _text(value) -> str:
    if isinstance(value, list):
        return "".join(v for v in value if isinstance(v, str))
    return value if isinstance(value, str) else ""


HIDDEN_MARKERS = ("BEGIN HIDDEN TESTS", "END HIDDEN TESTS", "BEGIN SOLUTION", "END SOLUTION")


def neutralise(nb) -> None:
    """Make the stored notebook safe to show: formgrader and the feedback HTML render it.

    What is finally rendered is what is sanitised (issue 18 §4):

    * learner **markdown** (an answer cell, or a ``text/markdown`` output) is rendered as
      markdown: it keeps no raw HTML at all (every ``<`` is escaped, so no tag, SVG, style or
      autolink survives), and every link or image destination that is not ``http(s)://`` or a
      ``#fragment`` (``javascript:``, ``data:``, ``vbscript:``, entities, escapes) becomes ``#``;
    * learner **HTML** (``text/html`` outputs) is cleaned by bleach (a few tags, ``href`` with
      http/https only, no style, no event handler) within a bounded amount of work: bleach's cost
      grows faster than the number of tags, so a field with more than ``HTML_MAX_TAGS`` tags, or
      any once the notebook's ``HTML_NOTEBOOK_TAGS`` are spent, is shown escaped, as text (linear);
    * JavaScript, SVG and every other output type are dropped; attachments are dropped;
      nbgrader's markers typed into a learner's own cell are defused, so they cannot break
      `make feedback`."""
    import bleach

    budget = [HTML_NOTEBOOK_TAGS]
    for cell in nb.cells:
        learner = is_answer(cell) or not nbg(cell)
        if learner and isinstance(cell.get("source"), str):
            src = cell.source
            for marker in HIDDEN_MARKERS:
                src = src.replace(marker, marker.replace(" ", "_").lower())
            if cell.cell_type == "markdown":
                src = safe_markdown(src)
                cell.pop("attachments", None)
            cell.source = src
        for out in cell.get("outputs", []):
            data = out.get("data")
            if isinstance(data, dict):
                for key in list(data):
                    if key == "text/html":
                        data[key] = _clean_html(bleach, _text(data[key]), budget)
                    elif key == "text/markdown":
                        data[key] = safe_markdown(_text(data[key]))
                    elif key not in ("text/plain", "image/png"):
                        del data[key]


SAFE_TAGS = {"a", "b", "i", "em", "strong", "code", "pre", "p", "br", "ul", "ol", "li", "table", "thead", "tbody",
             "tr", "th", "td", "span", "div", "sub", "sup", "h1", "h2", "h3", "h4", "blockquote", "hr"}
HTML_MAX_TAGS = 1000  # per HTML field: bleach took 0.25 s for 1000 nested tags, 352 s for 20,000
HTML_NOTEBOOK_TAGS = 5000  # per notebook, all fields together

_SAFE_URL = re.compile(r"(https?://[A-Za-z0-9\-._~/?#\[\]@!$'*+,;=%:]*|#[A-Za-z0-9\-_.:]*)")
_INLINE_DEST = re.compile(r"(\]\s*\(\s*)(<[^>\n]*>|[^\s)]*)")
_REF_DEST = re.compile(r"^( {0,3}\[[^\]\n]+\]:\s*)(<[^>\n]*>|\S+)", re.M)


def _dest(match) -> str:
    dest = match.group(2)
    inner = dest[1:-1] if dest.startswith("<") and dest.endswith(">") else dest
    return match.group(1) + (dest if _SAFE_URL.fullmatch(inner) else "#")


def safe_markdown(text: str) -> str:
    """Learner markdown as it may be rendered: no raw HTML, links and images to http(s) or #."""
    text = _REF_DEST.sub(_dest, _INLINE_DEST.sub(_dest, text))
    return text.replace("<", "&lt;")


def _clean_html(bleach, text: str, budget: list | None = None) -> str:
    import html

    tags = text.count("<")
    if tags > HTML_MAX_TAGS or (budget is not None and tags > budget[0]) or len(text) > 2_000_000:
        return "<pre>" + html.escape(text[:200_000]) + ("\n... [output truncated]" if len(text) > 200_000 else "") + "</pre>"
    if budget is not None:
        budget[0] -= tags
    return bleach.clean(text, tags=SAFE_TAGS, attributes={"a": ["href", "title"], "span": ["class"], "div": ["class"]},
                        protocols={"http", "https"}, strip=False)


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
        sandbox.self_test(extra_hidden=[submissions.resolve(), reports.resolve(), work])
    except RuntimeError as err:
        raise SystemExit(str(err)) from None
    wanted = sorted({j.assignment for j in jobs})
    releases, solutions = {}, {}
    # The current source, recorded in the gradebook (does not touch notebooks/): every assignment
    # in one nbgrader process when the batch has them all, else one process each.
    generated = _generate(None if set(wanted) == set(course.assignments()) else wanted, work / "release")
    for a in wanted:
        releases[a] = course.load_json(generated[a])
        solutions[a] = course.load_json(course.source_path(a))

    start = time.monotonic()
    outcomes: list[Outcome] = []
    bar = _progress(len(jobs), progress)
    with futures.ThreadPoolExecutor(max_workers=WORKERS) as pool:
        todo = {pool.submit(grade_one, j, releases[j.assignment], solutions[j.assignment], work): j for j in jobs}
        for fut in futures.as_completed(todo):
            job = todo[fut]
            try:
                outcomes.append(fut.result())
            except Exception as err:  # a bug of ours: the student still gets a record, with the reason
                outcomes.append(_fallback(job, releases[job.assignment], work, f"grader error: {type(err).__name__}: {err}"))
            bar.update(1)
    bar.close()

    score(work, outcomes)
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


def _generate(assignments: list[str] | None, release_dir: Path, attempts: int = 4) -> dict[str, Path]:
    """Record the current release of ``assignments`` (None: all of them) in the gradebook. Several
    grading machines sharing one PostgreSQL gradebook may create the same assignment at the same
    moment: the loser of that race sees a unique-key error, and simply tries again (the rows now exist)."""
    for attempt in range(attempts):
        try:
            if assignments is None:
                return course.generate_all(release_dir)
            return {a: course.generate(a, release_dir) for a in assignments}
        except RuntimeError:
            if attempt == attempts - 1:
                raise
            time.sleep(1.0 + attempt)
    raise AssertionError("unreachable")


def score(work: Path, outcomes: list) -> None:
    """nbgrader scores this batch: in one process for every assignment (its start-up is about 3 s
    an assignment) when that touches exactly this batch's submissions, that is when none of its
    students has an earlier submission in the workspace; else, or if that run fails, assignment by
    assignment (``score_batch``)."""
    by_assignment: dict = {}
    for o in outcomes:
        by_assignment.setdefault(o.assignment, set()).add(o.student)
    students = {o.student for o in outcomes}
    on_disk = {(p.parent.name, p.name) for p in (work / "submitted").glob("*/*") if p.is_dir()}
    mine = {(s, a) for s, a in on_disk if s in students}
    if len(by_assignment) > 1 and mine == {(o.student, o.assignment) for o in outcomes}:
        others = sorted({s for s, _ in on_disk} - students)
        extra = [f"--CourseDirectory.student_id_exclude={','.join(others)}"] if others else []
        if _nbgrader_autograde(work, "*", extra):
            return
    for a, st in sorted(by_assignment.items()):
        score_batch(work, a, sorted(st))


def _nbgrader_in(work: Path, command: str, assignment: str, extra: list[str], config: str, folder: str) -> bool:
    """One nbgrader command on the workspace's submitted and autograded folders and on
    ``folder`` ("release" or "feedback"); ``assignment`` may be ``*`` (all of them). On failure,
    its output is appended to ``nbgrader-<autograde|feedback>-<assignment or all>.log``."""
    proc = course.nbgrader(command, assignment, "--force", *extra,
                           f"--CourseDirectory.submitted_directory={work / 'submitted'}",
                           f"--CourseDirectory.autograded_directory={work / 'autograded'}",
                           f"--CourseDirectory.{folder}_directory={work / folder}",
                           check=False, extra_env={"JUPYTER_CONFIG_PATH": config}, timeout=NBGRADER_TIMEOUT)
    if proc.returncode != 0:
        name = command.replace("generate_", "")
        with open(work / f"nbgrader-{name}-{'all' if assignment == '*' else assignment}.log", "a") as log:
            log.write(f"--- {' '.join(extra)[:200]}\n{proc.stdout[-20000:]}{proc.stderr[-20000:]}\n")
    return proc.returncode == 0


def _nbgrader_autograde(work: Path, assignment: str, extra: list[str]) -> bool:
    """nbgrader autograde without executing anything (the notebooks hold our outputs already)."""
    return _nbgrader_in(work, "autograde", assignment, extra, _config_dir(work, "noexec", NO_EXEC_CONFIG), "release")


def score_batch(work: Path, assignment: str, students: list[str]) -> None:
    """nbgrader scores this batch's students only (earlier batches keep their records). If the
    batch run fails, each student is scored on their own, so one bad submission costs nobody else."""
    if not students:
        return
    others = sorted(p.name for p in (work / "submitted").iterdir() if p.is_dir() and p.name not in set(students)
                    and (p / assignment).is_dir())

    def run(extra: list[str]) -> bool:
        return _nbgrader_autograde(work, assignment, extra)

    batch = [f"--CourseDirectory.student_id_exclude={','.join(others)}"] if others else []
    if len(students) == 1:
        batch = [f"--CourseDirectory.student_id={students[0]}"]
    if not run(batch) and len(students) > 1:
        for student in students:
            run([f"--CourseDirectory.student_id={student}"])


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
        w.writerows([[cell_safe(v) for v in r] for r in rows])
    with open(reports / "exercises.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["student_id", "assignment", "exercise", "score", "max_score", "reason"])
        w.writerows([[cell_safe(v) for v in r] for r in ex_rows])
    return rows, ex_rows


def cell_safe(value):
    """A CSV value a spreadsheet shows as text: one that starts like a formula gets a leading '."""
    if isinstance(value, str):
        value = value.replace("\x00", "")
        if value[:1] in ("=", "+", "-", "@", "\t", "\r", "|", "%"):
            return "'" + value
    return value


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

    def run(a: str, extra: list[str]) -> bool:
        return _nbgrader_in(work, "generate_feedback", a, extra, config, "feedback")

    # Every assignment in one nbgrader process (its start-up is about 3 s); if that run fails, one
    # run per assignment, then per student: one student's notebook must not cost the others their feedback.
    if not run("*", []):
        for a in sorted({p.name for p in (work / "autograded").glob("*/*") if p.is_dir()}):
            if not run(a, []):
                for student in sorted(p.parent.name for p in (work / "autograded").glob(f"*/{a}") if p.is_dir()):
                    run(a, [f"--CourseDirectory.student_id={student}"])
    out.mkdir(parents=True, exist_ok=True)
    n = 0
    for html in sorted((work / "feedback").glob("*/*/*.html")):
        student, assignment = html.parent.parent.name, html.parent.name
        dest = out / student / f"{assignment}.html"
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(html, dest)
        n += 1
    return n
