"""Grade a class: ``autograde(submissions, reports)`` and ``feedback(reports, out)``.

For each student and assignment (``<submissions>/<student>/<assignment>/<assignment>.ipynb``, the
layout ``nbgrader collect`` makes in grader/work/submitted; no symbolic link anywhere below
``<submissions>`` is followed: a linked student folder is skipped, a linked assignment folder or
notebook scores 0 with the reason, ``find_jobs``):

1. **Restore** (``restore.py``): the learner's answers inside the release's locked cells, and
   nothing else of the learner's but cell sources: their cell metadata is dropped (the release's
   is restored), raw cells become escaped text, attachments go; tampering and unusable files are
   reported, never fatal. The input is read, never written: submissions stay as collected.
2. **Execute** in the sandbox (``sandbox.py`` + ``_execute.py``): limits per cell and per notebook;
   every test cell ends with real outputs or an error saying why it did not run. The learner's
   Markdown is rendered to HTML there too, under the sandbox's limits.
3. **Verify** (``verify.py``): each exercise again in a fresh sandboxed process on secret inputs,
   compared by this process with the reference; self-check answers evaluated, never executed.
4. **Normalise** what the sandbox gave back, before any tool reads it: the executed notebook is
   read as plain JSON (no schema validation of learner data), outputs are limited to a few safe
   types and sizes, and every piece of learner HTML (rendered Markdown, HTML outputs) is cleaned by
   an allow-list sanitiser (``nh3``: a few tags, ``href`` to http(s), # or relative URLs) within a
   size bound (``neutralise``).
5. **Record**: a test cell whose exercise failed verification gets an error output with the
   reason; the notebook, with the submission's ``timestamp.txt`` when it has a valid one, goes to
   grader/work/restored, and nbgrader's own autograde (execution switched off: the notebook was
   executed in the sandbox) scores it into the gradebook, the system of record, late penalties
   included (nbgrader's ``LateSubmissionPlugin``). The hand-graded cells' model answers are then
   put beside the learner's answers in formgrader's copy (``rubric.py``), never in the feedback.
6. **Report**: ``grades.csv`` and ``exercises.csv`` from the gradebook, with a reason for every lost point.
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
from .restore import escaped_block, grade_id, html_block, is_answer, is_test, load_submission, nbg, restore

CELL_TIMEOUT = int(os.environ.get("GRADER_CELL_TIMEOUT", "30"))
NOTEBOOK_TIMEOUT = int(os.environ.get("GRADER_NOTEBOOK_TIMEOUT", "60"))
WORKERS = int(os.environ.get("GRADER_WORKERS", str(min(2, os.cpu_count() or 1))))
NBGRADER_TIMEOUT = int(os.environ.get("GRADER_NBGRADER_TIMEOUT", "600"))
STUDENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}")  # used with fullmatch: no trailing newline
MAX_NOTEBOOK_BYTES = int(os.environ.get("GRADER_MAX_NOTEBOOK_BYTES", str(8 * 2**20)))
MAX_CELLS = int(os.environ.get("GRADER_MAX_CELLS", "1000"))
EXECUTED_CAP = 32 * 2**20
RENDERED_CAP = 16 * 2**20
# What nbgrader scores: the restored, normalised notebooks (never the input folder, which may be
# grader/work/submitted itself, where `nbgrader collect` puts the class's submissions).
RESTORED = "restored"
# The folders of the workspace that grading writes: an input folder may not be one of them.
WRITTEN = (RESTORED, "autograded", "feedback", "scratch", "release")

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
from grader.rubric import RemoveRubric
c = get_config()
# Feedback shows the learner's cells, outputs and scores, never the hidden tests, never the rubric.
c.GenerateFeedback.preprocessors = [RemoveRubric, GetGrades, ClearHiddenTests, CSSHTMLHeaderPreprocessor]
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
    timestamp: str | None = None  # from the submission's timestamp.txt (nbgrader collect's), when valid


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
                chosen, note = _misnamed(submissions, sdir.name, a, others)
                if chosen is not None:
                    job.path = chosen
                if note:
                    job.notes.append(note)
            if folder.is_dir():
                job.timestamp, why = submission_timestamp(submissions, sdir.name, a)
                if why:
                    job.notes.append(why)
            jobs.append(job)
    return jobs, skipped


def _grade_ids(assignment: str) -> set:
    try:
        nb = course.load_json(course.source_path(assignment))
    except (OSError, ValueError):
        return set()
    return {grade_id(c) for c in nb.get("cells", []) if grade_id(c)}


def _misnamed(root: Path, student: str, assignment: str, others: list) -> tuple[Path | None, str]:
    """The notebook to grade when none is named ``<assignment>.ipynb`` (red team R14): the only
    one there; or, of several ("Untitled.ipynb" beside "03_...-Copy1.ipynb"), the one that holds
    the assignment's graded cells (the newest, if several do). Each read without following a link,
    size-capped. ``(path or None, note)``."""
    from .sandbox import read_below

    expected = f"{assignment}.ipynb"
    if len(others) == 1:  # misnamed: grade it, and say so
        return others[0], f"the notebook was named {others[0].name} instead of {expected}; it was graded"
    if not others:
        return None, ""
    ids = _grade_ids(assignment)
    holding = []
    for p in others[:20]:
        data, _ = read_below(root, [student, assignment, p.name], MAX_NOTEBOOK_BYTES)
        if data is not None and any(f'"grade_id": "{g}"'.encode() in data or f'"grade_id":"{g}"'.encode() in data
                                    for g in ids):
            holding.append(p)
    names = ", ".join(p.name for p in others[:20])
    if not holding:
        return None, f"no notebook is named {expected}, and none of the {len(others)} there ({names}) holds its graded cells"
    chosen = max(holding, key=lambda p: (p.lstat().st_mtime, p.name))
    return chosen, (f"no notebook is named {expected}: of the {len(others)} there ({names}), {chosen.name} "
                    f"{'holds' if len(holding) == 1 else 'is the newest that holds'} the assignment's graded cells; it was graded")


def submission_timestamp(root: Path, student: str, assignment: str) -> tuple[str | None, str | None]:
    """The submission's time from ``<student>/<assignment>/timestamp.txt`` (what `nbgrader collect`
    writes), read without following a link and size-capped, checked and rewritten in one form:
    ``(timestamp, None)``, ``(None, None)`` when there is none, ``(None, why)`` when it is unusable
    (then the submission is graded without a time, and the reason says so)."""
    from nbgrader.utils import parse_utc

    from .sandbox import read_below

    data, why = read_below(root, [student, assignment, "timestamp.txt"], 256)
    if data is None:
        return None, None if why == "it was not written" else f"timestamp.txt was not used ({why})"
    try:
        text = data.decode("ascii").strip()
        if not text or len(text) > 64:
            raise ValueError
        when = parse_utc(text)
    except (ValueError, OverflowError, UnicodeDecodeError, TypeError, AttributeError):
        return None, "timestamp.txt does not hold a time: the submission was graded without one"
    return when.strftime("%Y-%m-%d %H:%M:%S.%f UTC"), None


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
    lang = submission_language(sub)
    if lang != "en":
        release = localised(release, job.assignment, lang)
    restored = restore(release, sub, problem)
    general = job.notes + restored.notes
    nb = restored.notebook
    reasons: dict[str, str] = {}
    exec_seconds = 0.0
    rendered: dict = {}

    if restored.problem:
        for cell in nb.cells:
            if is_test(cell) and cell.cell_type == "code":
                cell.outputs = [_error("NotGraded", restored.problem)]
    else:
        t0 = time.monotonic()
        res = sandbox.run([sys.executable, "_execute.py", "submission.ipynb", "executed.ipynb", str(CELL_TIMEOUT),
                           "render.json", "rendered.json"],
                          files={"submission.ipynb": nbformat.writes(for_execution(nb)).encode(),
                                 "_execute.py": Path(__file__).with_name("_execute.py"),
                                 "render.json": json.dumps(learner_markdown(nb)).encode()},
                          outputs={"executed.ipynb": EXECUTED_CAP, "rendered.json": RENDERED_CAP},
                          limits=sandbox.Limits(wall_seconds=NOTEBOOK_TIMEOUT), expose=[course.ROOT / "utils"],
                          env={"COURSE_LANG": lang}, host_dir=scratch)
        exec_seconds = time.monotonic() - t0
        rendered = _read_rendered(res.outputs.get("rendered.json"))
        executed, why_unusable = _read_executed(res.outputs.get("executed.ipynb"), len(nb.cells))
        why_not_run = "; ".join(res.notes) or "the notebook stopped before this cell ran"
        if why_unusable or res.output_problems.get("executed.ipynb"):
            last = (res.stderr.strip().splitlines() or [f"exit code {res.returncode}"])[-1][:300]
            why_not_run = f"the notebook could not be executed ({why_unusable or res.output_problems['executed.ipynb']}; {last})"
        take_outputs(nb, executed, why_not_run)
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
                cell.outputs.append(_error("VerificationError", tr(f"independent re-check failed: {v.reason}", lang)))
            elif v.ok and _failed(cell):
                # The re-check (new secret inputs, outside the kernel, its own time budget) is the
                # grade: a test cell the kernel did not reach, or failed because another cell hung,
                # crashed or slowed the kernel down, loses nothing.
                cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=tr(
                    "✅ passed the independent re-check on new inputs, which is the grade (in the notebook "
                    f"this cell did not pass: {(_failure(cell) or '')[:300]})", lang) + "\n")]

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
                    # The message in the submission's language, as the learner's kernel showed it.
                    out["traceback"] = [f"{out.get('ename')}: {tr(str(out.get('evalue') or ''), lang)}"]
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

    neutralise(nb, rendered, learner_content=not restored.problem)
    _store(nb, work, job)
    return Outcome(job.student, job.assignment, reasons, general, time.monotonic() - start, exec_seconds)


# ------------------------------------------------------------------------- the submission's language
CJK = re.compile(r"[\u3400-\u9fff]")


def submission_language(sub: dict | None) -> str:
    """``"zh"`` for a notebook of the Chinese edition (issue 28 §5), else ``"en"``: its set-up cell
    sets the language (``tools/i18n.py``'s line), or most of its markdown cells are written in
    Chinese. Only what the learner reads depends on it (the check messages in the executed
    notebook, the feedback's wording); the code run and the grade are the same in both."""
    if not sub:
        return "en"
    cells = [c for c in sub.get("cells", []) if isinstance(c, dict)]
    for cell in cells:
        if grade_id(cell) == "demo-setup" and 'environ.setdefault("COURSE_LANG", "zh")' in _text(cell.get("source")):
            return "zh"
    prose = [_text(c.get("source")) for c in cells if c.get("cell_type") == "markdown"]
    chinese = sum(1 for t in prose if len(CJK.findall(t)) >= 0.2 * max(1, len(re.findall(r"[A-Za-z\u3400-\u9fff]", t))))
    return "zh" if prose and chinese * 2 > len(prose) else "en"


def localised(release: dict, assignment: str, lang: str) -> dict:
    """The release with the markdown cells and the set-up cell of its ``lang`` edition
    (``notebooks/<lang>/``, generated from the same source by ``make release``), matched by cell id;
    every other cell, and all of nbgrader's metadata, are the release's own. The release unchanged
    when that edition is missing or unreadable."""
    path = course.ROOT / "notebooks" / lang / assignment / f"{assignment}.ipynb"
    try:
        other = {c["id"]: c for c in json.loads(path.read_text(encoding="utf-8"))["cells"] if c.get("id")}
    except (OSError, ValueError, KeyError, TypeError):
        return release
    out = copy.deepcopy(release)
    for cell in out["cells"]:
        twin = other.get(cell.get("id"))
        if twin and twin.get("cell_type") == cell.get("cell_type") and (
                cell.get("cell_type") == "markdown" or grade_id(cell) == "demo-setup"):
            cell["source"] = twin["source"]
    return out


def tr(text: str, lang: str) -> str:
    """``text`` in ``lang`` (the course's own translation of its messages, ``utils._i18n``)."""
    if lang == "en":
        return text
    from utils import _i18n

    return _i18n.tr(text, lang)


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
    """The notebook nbgrader scores, in the grader's own folder work/restored (never the input):
    replaces whatever an earlier grading left there for this student, with the submission's
    timestamp beside it (nbgrader reads it for the late penalty)."""
    dest = work / RESTORED / job.student / job.assignment
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    problems = structure_problems(nb)
    if problems:  # never expected (everything here was built by the grader): say so, store the release
        raise RuntimeError(f"the normalised notebook is not well formed: {problems[0]}")
    nbformat.write(nb, dest / f"{job.assignment}.ipynb")
    if job.timestamp:
        (dest / "timestamp.txt").write_text(job.timestamp + "\n")


def take_outputs(nb, executed: list, why_not_run: str) -> None:
    """Each code cell's outputs and execution count from the executed notebook (``_read_executed``),
    kept within the notebook's output budget (``_safe_outputs``): one for the learner's cells,
    one for the test cells."""
    learner, tests = output_budget(), output_budget()
    for cell, done in zip(nb.cells, executed):
        if cell.cell_type == "code" and done is not None:
            outputs, count = done
            if count is not None or outputs:
                cell.outputs = _safe_outputs(outputs, tests if is_test(cell) else learner)
                cell.execution_count = count
            elif is_test(cell):
                cell.outputs = [_error("NotExecuted", why_not_run)]


def _read_executed(data: bytes | None, n_cells: int) -> tuple[list, str | None]:
    """What the sandbox's executed notebook says of each cell: ``[(outputs, execution_count) or
    None]`` and why it is unusable, if it is. The file is learner-controlled (learner code can
    write it): it is read as plain JSON (linear), never validated against the notebook schema,
    and only each code cell's outputs and execution count are taken (``_safe_outputs`` then keeps
    what is safe of them)."""
    if data is None:
        return [None] * n_cells, "it wrote no notebook"
    try:
        nb = json.loads(data.decode("utf-8"))
        cells = nb.get("cells") if isinstance(nb, dict) else None
        if not isinstance(cells, list):
            raise ValueError
    except (ValueError, UnicodeDecodeError, RecursionError, MemoryError):
        return [None] * n_cells, "the executed notebook is not a valid notebook"
    if len(cells) != n_cells:
        return [None] * n_cells, "the executed notebook does not match the submission"
    out = []
    for cell in cells:
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            count = cell.get("execution_count")
            outputs = cell.get("outputs")
            out.append((outputs if isinstance(outputs, list) else [], count if type(count) is int and 0 <= count < 2**31 else None))
        else:
            out.append(None)
    return out, None


def _read_rendered(data: bytes | None) -> dict:
    """{cell index: HTML} the sandbox rendered from the learner's Markdown (learner-controlled:
    the HTML is sanitised before it is stored, ``neutralise``)."""
    try:
        got = json.loads(data.decode("utf-8")) if data else {}
    except (ValueError, UnicodeDecodeError, RecursionError, MemoryError):
        return {}
    if not isinstance(got, dict):
        return {}
    return {int(k): v for k, v in got.items() if isinstance(k, str) and k.isdigit() and isinstance(v, str)}


def learner_markdown(nb) -> list:
    """Indices of the Markdown cells whose text is the learner's: every one but the release's locked cells."""
    return [i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and (is_answer(c) or not nbg(c).get("locked"))]


# What of the learner's outputs is kept, and how much (issue 25 §2): a stream, an error's name and
# message, and of a display or a result its text, its PNG image, and its HTML after sanitising.
MAX_STREAM = 20_000
MAX_ERROR = 4_000
MAX_TEXT = 20_000
MAX_PNG = 2 * 2**20
MAX_OUTPUTS = 100  # per cell
# All of a notebook's kept outputs together, in bytes and in number (issue 25 §2; red team R6): every
# output costs its text plus OUTPUT_COST, so that 100,000 empty outputs (100 in each of 1,000 cells)
# cannot cost the grader, nbgrader and nbconvert minutes. Test cells (the course's checks, which
# print what learner code does) have a budget of their own, so learner cells cannot crowd them out.
NOTEBOOK_OUTPUT_BYTES = 8 * 2**20
NOTEBOOK_OUTPUTS = 2_000
OUTPUT_COST = 256  # bytes an output counts for besides its text: its JSON, the HTML around it
_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]*")
DROPPED = "... [further output dropped: the notebook's outputs are too large or too many]\n"


def output_budget() -> list:
    """A notebook's output budget for ``_safe_outputs``: [bytes left, outputs left, note given]."""
    return [NOTEBOOK_OUTPUT_BYTES, NOTEBOOK_OUTPUTS, False]


def _node(output: dict):
    """A plain nbformat output (built from the kept fields only: nothing to validate, and
    ``nbformat.v4.new_output`` validates each one, ~0.4 ms)."""
    return nbformat.from_dict(output)


def _safe_outputs(outputs, budget: list | None = None) -> list:
    """Outputs written by learner code, as plain nbformat outputs of the kept types and sizes
    (anything else is dropped). ``budget`` (``output_budget()``): what the notebook has left,
    shared by the cells; once it is spent, one note says so and nothing more is kept."""
    budget = budget if budget is not None else output_budget()
    safe = []
    for out in (outputs if isinstance(outputs, list) else [])[:MAX_OUTPUTS]:
        if budget[0] <= 0 or budget[1] <= 0:
            break
        if not isinstance(out, dict):
            continue
        kind = out.get("output_type")
        if kind == "stream":
            text = _text(out.get("text"))[:MAX_STREAM]
            new = {"output_type": "stream", "name": "stderr" if out.get("name") == "stderr" else "stdout", "text": text}
            size = len(text)
        elif kind == "error":
            ename, evalue = _text(out.get("ename"))[:200], _text(out.get("evalue"))[:MAX_ERROR]
            new = {"output_type": "error", "ename": ename, "evalue": evalue, "traceback": [f"{ename}: {evalue}"]}
            size = 2 * (len(ename) + len(evalue))
        elif kind in ("display_data", "execute_result"):
            data = out.get("data") if isinstance(out.get("data"), dict) else {}
            keep = {}
            if "text/plain" in data:
                keep["text/plain"] = _text(data["text/plain"])[:MAX_TEXT]
            png = _text(data.get("image/png"))
            if png and len(png) <= MAX_PNG and _BASE64.fullmatch(png):
                keep["image/png"] = png
            if "text/html" in data:  # a rendered text/markdown arrives as text/html (_execute.py)
                keep["text/html"] = _text(data["text/html"])  # sanitised by neutralise
            if not keep:
                continue
            size = sum(len(v) for v in keep.values())
            new = {"output_type": kind, "data": keep, "metadata": {}}
            if kind == "execute_result":
                new["execution_count"] = None
        else:
            continue
        budget[0] -= size + OUTPUT_COST
        budget[1] -= 1
        if budget[0] < 0:
            break
        safe.append(_node(new))
    if (budget[0] <= 0 or budget[1] <= 0) and not budget[2]:
        budget[2] = True
        safe.append(_node({"output_type": "stream", "name": "stdout", "text": DROPPED}))
    return safe


def _text(value) -> str:
    if isinstance(value, list):
        return "".join(v for v in value if isinstance(v, str))
    return value if isinstance(value, str) else ""


HIDDEN_MARKERS = ("BEGIN HIDDEN TESTS", "END HIDDEN TESTS", "BEGIN SOLUTION", "END SOLUTION")

# The allow-list for every piece of learner HTML (issue 25 §2): a few text tags, links with
# href to http, https, a #fragment or a relative URL, nothing else (no image, no style, no class,
# no event handler, no SVG or MathML, no form).
SAFE_TAGS = {"a", "b", "i", "em", "strong", "code", "pre", "p", "br", "ul", "ol", "li", "table", "thead", "tbody",
             "tr", "th", "td", "span", "div", "sub", "sup", "h1", "h2", "h3", "h4", "h5", "h6", "blockquote", "hr",
             "details", "summary", "del", "s", "kbd", "dl", "dt", "dd"}
SAFE_ATTRIBUTES = {"a": {"href", "title"}}
SAFE_SCHEMES = {"http", "https"}
HTML_MAX_CHARS = 200_000  # per field
HTML_MAX_TAGS = 2_000  # per field: the HTML5 parser's cost grows with the depth of nested blocks
HTML_NOTEBOOK_TAGS = 20_000  # per notebook, every field together
# The learner's code as formgrader and the feedback show it (highlighted by pygments, whose cost is
# linear but up to ~40 µs a character on hostile text): at most this much per cell and per
# notebook; the rest is cut from what is shown (the grade used the whole cell: it ran before).
CODE_SHOWN_PER_CELL = 20_000
CODE_SHOWN_PER_NOTEBOOK = 200_000


def defuse_markers(text: str) -> str:
    """nbgrader's region markers made inert (``BEGIN HIDDEN TESTS`` -> ``begin_hidden_tests``):
    typed into a learner's cell, they would make nbgrader's feedback hide part of it or fail."""
    while any(marker in text for marker in HIDDEN_MARKERS):
        for marker in HIDDEN_MARKERS:
            text = text.replace(marker, marker.replace(" ", "_").lower())
    return text


def sanitise_html(text: str, budget: list | None = None) -> str:
    """Learner HTML as it may be shown: ``nh3`` with the allow-list above, within bounds. A field
    larger than HTML_MAX_CHARS or with more tags than HTML_MAX_TAGS (or than the notebook has
    left, ``budget``) is shown as escaped text instead, so the work is linear in its size."""
    import html

    import nh3

    tags = text.count("<")
    if len(text) > HTML_MAX_CHARS or tags > HTML_MAX_TAGS or (budget is not None and tags > budget[0]):
        cut = text[:20_000]
        return "<pre>" + html.escape(cut) + ("\n... [truncated]" if len(text) > len(cut) else "") + "</pre>"
    if budget is not None:
        budget[0] -= tags
    return nh3.clean(text, tags=SAFE_TAGS, attributes=SAFE_ATTRIBUTES, url_schemes=SAFE_SCHEMES,
                     link_rel="noopener noreferrer nofollow", strip_comments=True,
                     clean_content_tags={"script", "style"})


def neutralise(nb, rendered: dict | None = None, learner_content: bool = True) -> None:
    """Make the stored notebook safe to show: formgrader and the feedback HTML render it.

    What is finally rendered is what is sanitised (issue 25 §2):

    * learner **Markdown** (an answer cell, a cell the learner added or edited) is shown as the HTML
      the sandbox rendered from it (``_execute.py``, nbconvert's own renderer), sanitised
      (``sanitise_html``) and stored as one HTML block that the renderer passes through; without a
      rendering (the notebook was not executed) it is shown as escaped text. Attachments are dropped;
    * learner **HTML** outputs (a rendered ``text/markdown`` comes as one) are sanitised the same way;
    * nbgrader's markers typed into a learner's own cell are defused, so they cannot break
      `make feedback`; the learner's code is shown up to CODE_SHOWN_PER_CELL characters a cell and
      CODE_SHOWN_PER_NOTEBOOK a notebook (it was executed whole before).
    Outputs were already reduced to safe types and sizes (``_safe_outputs``).
    ``learner_content=False``: the notebook is the release itself (an unusable submission)."""
    rendered = rendered or {}
    budget = [HTML_NOTEBOOK_TAGS]
    code_budget = CODE_SHOWN_PER_NOTEBOOK
    markdown = set(learner_markdown(nb)) if learner_content else set()
    for i, cell in enumerate(nb.cells):
        learner = is_answer(cell) or not nbg(cell) or i in markdown
        if learner and isinstance(cell.get("source"), str):
            src = cell.source
            if cell.cell_type == "markdown" and i in markdown:
                html_text = rendered.get(i)
                if html_text is not None:
                    src = html_block(sanitise_html(html_text, budget))
                else:
                    src = escaped_block(src)
                cell.pop("attachments", None)
            elif cell.cell_type == "code" and learner_content:
                shown = min(CODE_SHOWN_PER_CELL, max(code_budget, 0))
                if len(src) > shown:
                    src = src[:shown] + f"\n# ... [{len(src) - shown} more characters not shown: the grade used the whole cell]"
                code_budget -= min(len(src), shown)
            # Last, on the text as it is stored: the sanitiser joins text across the tags it drops
            # ("BEGIN <x>HIDDEN TESTS"), so markers are defused in what nbgrader will read, never before.
            cell.source = defuse_markers(src)
        for out in cell.get("outputs", []):
            data = out.get("data")
            if isinstance(data, dict):
                for key in list(data):
                    if key == "text/html":
                        data[key] = sanitise_html(_text(data[key]), budget)
                    elif key not in ("text/plain", "image/png"):
                        del data[key]


def structure_problems(nb) -> list:
    """What is wrong with a notebook's structure, in one linear pass (a stand-in for nbformat's
    schema validation, whose cost on learner-made metadata is not linear): every cell a code,
    Markdown or raw cell with text source and object metadata, every code cell's outputs of the
    kinds kept, with text values. Empty when it is well formed."""
    problems = []
    if not isinstance(nb.get("cells"), list) or not isinstance(nb.get("metadata"), dict):
        return ["no list of cells or no metadata"]
    for i, cell in enumerate(nb["cells"]):
        if not isinstance(cell, dict) or cell.get("cell_type") not in ("code", "markdown", "raw"):
            problems.append(f"cell {i} is not a cell")
            continue
        if not isinstance(cell.get("source"), str) or not isinstance(cell.get("metadata"), dict):
            problems.append(f"cell {i} has no text source or no metadata object")
        if cell["cell_type"] == "code":
            for out in cell.get("outputs", []):
                if not isinstance(out, dict) or out.get("output_type") not in ("stream", "error", "display_data", "execute_result"):
                    problems.append(f"cell {i} has an output of another kind")
                elif isinstance(out.get("data"), dict) and not all(isinstance(v, str) for v in out["data"].values()):
                    problems.append(f"cell {i} has an output whose data is not text")
    return problems


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
    # The workspace is the one nbgrader's config names (grader/work/{restored,autograded,...}), so
    # formgrader in `make lab` shows these submissions for manual grading. Earlier batches stay.
    work = (work or course.WORK).resolve()
    overlap = input_overlap(submissions.resolve(), reports.resolve(), work)
    if overlap:
        raise SystemExit(overlap)
    shutil.rmtree(work / "scratch", ignore_errors=True)
    (work / RESTORED).mkdir(parents=True, exist_ok=True)
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
    from .rubric import add_rubrics

    add_rubrics(work, [(o.student, o.assignment) for o in outcomes], solutions)
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


def input_overlap(submissions: Path, reports: Path, work: Path) -> str | None:
    """Why grading may not read ``submissions`` (or write ``reports``), or None. Grading never
    writes its input: the input folder may be grader/work/submitted (where `nbgrader collect` puts
    the class's submissions, which grading only reads), but not a folder grading writes (its
    restored notebooks, the autograded and feedback copies, scratch, the release it records), nor
    one inside or around them; and the reports may not go inside the input."""
    def inside(a: Path, b: Path) -> bool:
        return a == b or b in a.parents

    for name in WRITTEN:
        folder = work / name
        if inside(submissions, folder) or inside(folder, submissions):
            return (f"the submissions folder {submissions} overlaps {folder}, which grading writes: grading would "
                    "change its own input. Grade a copy, or the folder `nbgrader collect` fills (grader/work/submitted).")
    if inside(reports, submissions):
        return f"the reports folder {reports} is inside the submissions folder {submissions}: grading never writes its input"
    if inside(submissions, reports):
        return f"the submissions folder {submissions} is inside the reports folder {reports}, which grading writes"
    return None


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
    on_disk = {(p.parent.name, p.name) for p in (work / RESTORED).glob("*/*") if p.is_dir()}
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
                           f"--CourseDirectory.submitted_directory={work / RESTORED}",
                           f"--CourseDirectory.autograded_directory={work / 'autograded'}",
                           f"--CourseDirectory.{folder}_directory={work / folder}",
                           check=False, config=config, timeout=NBGRADER_TIMEOUT)
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
    others = sorted(p.name for p in (work / RESTORED).iterdir() if p.is_dir() and p.name not in set(students)
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
    """A folder with the grader's own settings for one nbgrader command: it comes first on
    JUPYTER_CONFIG_PATH (``course.config_path``), before the instructor's settings and the course's
    grader/nbgrader_config.py, which nbgrader reads as well."""
    d = work / f"config-{name}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "nbgrader_config.py").write_text(text)
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
                rows.append([o.student, o.assignment, 0, assignment.max_score, 0, ""])
                for nb in assignment.notebooks:
                    for cell in nb.grade_cells:
                        ex_rows.append([o.student, o.assignment, exercise_name(cell.name), 0, cell.max_score, reason])
                continue
            penalty = _num(sub.late_submission_penalty)
            rows.append([o.student, o.assignment, _num(sub.score - (sub.late_submission_penalty or 0)), _num(sub.max_score),
                         penalty, sub.timestamp.strftime("%Y-%m-%d %H:%M:%S UTC") if sub.timestamp else ""])
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
        # score: after nbgrader's late penalty (late_penalty), as nbgrader's own export computes it
        w.writerow(["student_id", "assignment", "score", "max_score", "late_penalty", "submitted_at"])
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
