"""Verify every auto-graded exercise a second time, outside the learner's kernel.

What is trusted is this process (the grader), which never runs learner code. What crosses each
boundary (issue 25 §1):

* **into the sandbox**: the learner's top-level definitions (``definitions``: one rule for what
  the re-check loads, the same the notebook's ✅ saw), the assignment's exercise names, and for
  each exercise, when its turn comes, its cases as plain data in the ``_wire`` format (or, only
  when its cases hold callables, that exercise's own seed). The cases are drawn here from a secret
  seed (a salt made per installation, ``course.secret_salt``, never in the repository and never
  visible to a sandbox). The sandbox is read-only, isolated (``python -I``), with an allow-listed
  environment, and its ``utils`` is a copy in which ``utils.reference`` is a stub that raises: no
  reference, no salt, no other exercise's seed;
* **out of it**: for each exercise, exactly the bytes its own process writes to the one pipe this
  process opened for it just before asking for it (``verify_many``), capped in size, decoded by
  ``_wire`` (linear in size, no pickle, a dense tensor at most as large as its bytes); and a
  short note per exercise from the fork server (why a process was stopped), used only in reasons.
  Nothing else a sandboxed process can write is read back: there are no result files.

This process then judges every case itself, judged cases included (``utils.checks._core.judge_case``:
the reference's output, computed here, or the case's ``judge``). Patching ``torch.allclose``, the
checks or their references in the learner's kernel changes nothing here; nor does anything an
exercise's process does to itself, beyond its own result. Self-check answers are evaluated (never
executed) and judged by the quiz's visible check (``answers.py``).
"""
from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
import os
import shutil
import socket
import struct
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import torch

from . import course, sandbox
from ._parse import parse
from .restore import grade_id, is_answer, is_test, nbg, source

CHILD = Path(__file__).with_name("_verify_child.py")
CHILD_LIB = "/opt/grader-child"  # where the child's copy of utils is bound inside the sandbox
VERIFY_SECONDS = float(os.environ.get("GRADER_VERIFY_SECONDS", "25"))  # per exercise, at most
# All the exercises of one submission together, at most: an exercise gets the smaller of
# VERIFY_SECONDS and an equal share of what is left, so a submission whose every exercise hangs
# costs at most this, and an honest exercise beside hanging ones still gets at least
# VERIFY_TOTAL_SECONDS / (number of exercises) (a correct answer needs a second or two: torch and
# the checks are imported once, before the time starts).
VERIFY_TOTAL_SECONDS = float(os.environ.get("GRADER_VERIFY_TOTAL_SECONDS", "40"))
# The re-check process's own start (torch, the checks), before any learner code runs: the same for
# every submission, so no submission can make it longer. A backstop only.
VERIFY_STARTUP_SECONDS = float(os.environ.get("GRADER_VERIFY_STARTUP_SECONDS", "60"))
OUTPUT_CAP = 64 * 2**20
# torch's global random state is shared by the grading threads: drawing cases and computing the
# reference hold this lock, so a job's numbers never depend on what another job is doing.
RNG_LOCK = threading.RLock()


@dataclass
class Verdict:
    ok: bool
    reason: str = ""


# ------------------------------------------------------------------------------- definitions
# Course demo cells import these for figures only: never loaded in the re-check.
PLOT_IMPORTS = ("matplotlib", "seaborn", "ipywidgets", "utils.plotting", "IPython")
# Calls a constant of a cell that is not an exercise cell may make (NEG_INF = float("-inf")).
SIMPLE_CALLS = {"float", "int", "complex", "bool", "str", "tuple", "frozenset", "abs", "min", "max", "round", "pow",
                "len", "range"}


def definitions(nb: dict) -> tuple[list[str], list[str]]:
    """(chunks, notes): what the learner's notebook defines at the top level of its cells, in
    order, each statement a chunk the re-check loads on its own (a statement that cannot stand
    alone does not take the exercises with it). One rule (issue 25 §4, issue 24 §6), so that what
    the notebook's ✅ saw is what the grade sees:

    * an **exercise cell** (an answer cell): every top-level statement but a bare expression
      (``print(...)``, a check call): imports, functions, classes, and assignments of any value
      (``NEG_INF = float("-inf")``, ``SCALE = 1 / math.sqrt(64)``), compound statements. Its
      definitions and constant values load for every exercise; its other statements (they may
      compute, or hang) only in the process of the exercise the cell answers (its grade id, or a
      name the cell defines): one exercise's cell never costs another exercise its time;
    * any other code cell (cells the learner added, the course's locked cells): imports,
      functions, classes, and assignments whose value is a constant expression (literals, names,
      attributes, arithmetic, ``float``/``int``/... and ``math`` calls), so a demo or an
      experiment is never run again; the course's plotting imports are left out.

    Nothing is refused for the names it uses: what a definition can reach in the re-check is
    decided by the sandbox and the lock-down (``_verify_child.py``), not by reading its source.
    ``notes`` is kept for the callers' signature; it is empty. A chunk is its source text, or
    ``{"code": text, "only": [exercise names]}`` for one that loads only where ``chunk_applies``."""
    chunks = []
    for cell in nb["cells"]:
        if cell.get("cell_type") != "code" or is_test(cell):
            continue
        exercise_cell = is_answer(cell)
        course_cell = bool(nbg(cell).get("locked")) and not exercise_cell  # restored from the release
        tree = parse_cell(source(cell))
        if tree is None:
            continue
        owners = sorted({grade_id(cell) or ""} | {n.name for n in tree.body if isinstance(
            n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))} - {""})
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                if course_cell and _plot_import(node):
                    continue
                chunks.append(ast.unparse(node))
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                chunks.append(ast.unparse(node))
            elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None and _is_simple(node.value) \
                    and all(isinstance(t, ast.Name) for t in (node.targets if isinstance(node, ast.Assign) else [node.target])):
                chunks.append(ast.unparse(node))
            elif exercise_cell and not isinstance(node, (ast.Expr, ast.Pass)):
                chunks.append({"code": ast.unparse(node), "only": owners})
    return chunks, []


def chunk_code(chunk) -> str:
    return chunk if isinstance(chunk, str) else chunk["code"]


def chunk_applies(chunk, exercise: str, holder: str = "") -> bool:
    """Whether ``chunk`` loads in the re-check of ``exercise`` (``holder``: the class that holds a
    method exercise, e.g. MultiHeadAttention for split_heads)."""
    return isinstance(chunk, str) or exercise in chunk["only"] or bool(holder and holder in chunk["only"])


def _plot_import(node) -> bool:
    mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
    return all(any(m == p or m.startswith(p + ".") for p in PLOT_IMPORTS) for m in mods)


def _is_simple(value, depth: int = 0) -> bool:
    """A constant expression: literals, names, attributes, containers, arithmetic, comparisons,
    and calls of a few builtins and of ``math`` functions; nothing that runs learner code or
    builds a tensor."""
    if depth > 30:
        return False
    d = depth + 1
    if isinstance(value, (ast.Constant, ast.Name)):
        return True
    if isinstance(value, ast.Attribute):
        return _is_simple(value.value, d)
    if isinstance(value, (ast.Tuple, ast.List, ast.Set)):
        return all(_is_simple(v, d) for v in value.elts)
    if isinstance(value, ast.Dict):
        return all(k is None or _is_simple(k, d) for k in value.keys) and all(_is_simple(v, d) for v in value.values)
    if isinstance(value, ast.BinOp):
        return _is_simple(value.left, d) and _is_simple(value.right, d)
    if isinstance(value, ast.UnaryOp):
        return _is_simple(value.operand, d)
    if isinstance(value, ast.BoolOp):
        return all(_is_simple(v, d) for v in value.values)
    if isinstance(value, ast.Compare):
        return _is_simple(value.left, d) and all(_is_simple(v, d) for v in value.comparators)
    if isinstance(value, ast.IfExp):
        return all(_is_simple(v, d) for v in (value.test, value.body, value.orelse))
    if isinstance(value, ast.Subscript):
        return _is_simple(value.value, d) and _is_simple(value.slice, d)
    if isinstance(value, ast.Slice):
        return all(v is None or _is_simple(v, d) for v in (value.lower, value.upper, value.step))
    if isinstance(value, ast.Call) and not value.keywords:
        f = value.func
        known = (isinstance(f, ast.Name) and f.id in SIMPLE_CALLS) or \
            (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "math")
        return known and all(_is_simple(a, d) for a in value.args)
    return False


def parse_cell(src: str):
    try:
        return parse(src)
    except SyntaxError:  # IPython magics or shell lines: drop them; a real syntax error: skip the cell
        try:
            return parse(_strip_magics(src))
        except SyntaxError:
            return None
    except (ValueError, RecursionError, MemoryError):
        return None


def _strip_magics(src: str) -> str:
    return "\n".join(line for line in src.splitlines() if not line.lstrip().startswith(("%", "!")))


def _is_constant(value) -> bool:
    """A literal (what the course's demo cells keep when the notebook is executed for grading)."""
    if value is None:
        return False
    try:
        ast.literal_eval(value)
        return True
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False


def secret_seed(student: str, assignment: str, exercise: str) -> int:
    salt = course.secret_salt()
    digest = hashlib.sha256(f"{salt}:{student}:{assignment}:{exercise}".encode()).hexdigest()
    return int(digest[:8], 16) % (2**31)


def quiz_answer(nb: dict, cell_id: str, target: str | None = None):
    """The value a self-check answer cell gives its answer (evaluated, never executed:
    ``answers.evaluate_cell``), or None and why there is none."""
    from .answers import evaluate_cell

    imports = []  # `import math` in an earlier cell: the kernel knows `math` when the answer runs
    for cell in nb["cells"]:
        if grade_id(cell) == cell_id:
            return evaluate_cell(source(cell), target, prelude=imports)
        if cell.get("cell_type") == "code":
            tree = parse_cell(source(cell))
            imports += [n for n in (tree.body if tree is not None else []) if isinstance(n, (ast.Import, ast.ImportFrom))]
    return None, "the answer cell is missing"


def _answer_name(solution: dict, cell_id: str) -> str | None:
    for cell in solution["cells"]:
        if grade_id(cell) == cell_id:
            try:
                tree = parse(source(cell))
            except SyntaxError:
                return None
            names = [n.targets[0].id for n in tree.body if isinstance(n, ast.Assign) and len(n.targets) == 1
                     and isinstance(n.targets[0], ast.Name)]
            return names[-1] if names else None
    return None


def _normalise(value):
    return value.strip().lower() if isinstance(value, str) else value


def _answer_tolerance(key) -> float:
    """Half a unit of the last decimal the solution's answer is written with (1000.69: 0.005),
    as the quiz's own check rounds it; an integer answer, to two decimals (check_number's default)."""
    if isinstance(key, int):
        return 0.005
    text = repr(float(key))
    if "e" in text or "E" in text:
        return 1e-9 + 1e-6 * abs(key)
    decimals = len(text.split(".")[1]) if "." in text else 0
    return 0.5 * 10.0 ** -decimals * (1 + 1e-9)


def check_quizzes(nb: dict, solution: dict) -> dict:
    """{quiz grade_id: Verdict}: the learner's answer, evaluated (``math.log(2)`` is a number), is
    judged by the solution's visible check (``check_choice``/``check_number`` with its key and
    decimals): what the learner's ✅ accepts, the grade accepts, and what it refuses, the grade
    refuses. A test cell without such a call: compared with the solution's answer."""
    from .answers import visible_check, visible_verdict

    tests = {grade_id(c): source(c) for c in solution["cells"] if grade_id(c) and is_test(c)}
    verdicts = {}
    for cell in solution["cells"]:
        gid = grade_id(cell)
        if gid and gid.startswith("quiz_") and is_answer(cell):
            target = _answer_name(solution, gid)
            got, why = quiz_answer(nb, gid, target)
            if why:
                verdicts[gid] = Verdict(False, why)
                continue
            check = visible_check(tests.get(f"test_{gid}", ""))
            if check is not None:
                ok, msg = visible_verdict(check, got)
                verdicts[gid] = Verdict(ok, "" if ok else (msg or "the answer is not correct"))
                continue
            key, _ = quiz_answer(solution, gid, target)
            if isinstance(key, (int, float)) and isinstance(got, (int, float)) and not isinstance(got, bool):
                ok = abs(got - key) <= _answer_tolerance(key)
            else:
                ok = _normalise(got) == _normalise(key)
            verdicts[gid] = Verdict(ok, "" if ok else "the answer is not correct")
    return verdicts


def exercises_in(nb: dict) -> list[str]:
    """Exercise names graded in this notebook: test cells `test_<exercise>` with a registered check."""
    from utils.checks import EXERCISES

    names = []
    for cell in nb["cells"]:
        gid = grade_id(cell)
        if gid and is_test(cell) and gid.startswith("test_") and gid[5:] in EXERCISES:
            names.append(gid[5:])
    return names


def verify(nb: dict, student: str, assignment: str, limits: sandbox.Limits | None = None,
           host_dir: Path | None = None) -> dict:
    """{exercise: Verdict} for every registered exercise graded in ``nb``: one sandboxed re-check
    (a fork server) for the submission, one process per exercise with its own share of the time
    and its own output channel (``verify_many``)."""
    names = exercises_in(nb)
    if not names:
        return {}
    chunks, notes = definitions(nb)
    seeds = {name: secret_seed(student, assignment, name) for name in names}
    return verify_many(names, chunks, notes, seeds, limits, host_dir)


def verify_one(name: str, chunks: list, notes: list, seed: int, limits: sandbox.Limits | None = None,
               host_dir: Path | None = None) -> Verdict:
    return verify_many([name], chunks, notes, {name: seed}, limits, host_dir)[name]


GRACE_SECONDS = 10.0  # the fork server's own bookkeeping around an exercise's share, at most


class _Run:
    """The grader's side of one re-check: the control socket to the fork server, and for each
    exercise a pipe opened just before it is asked for."""

    def __init__(self, todo: list, payloads: dict, total: float):
        self.todo, self.payloads, self.total = todo, payloads, total
        self.parent, self.child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.results: dict = {}  # name -> (bytes or None, why, note)
        self.ready = False

    def __call__(self, proc, deadline: float) -> None:
        self.child.close()  # the sandbox holds the only other end
        try:
            self._talk(proc, deadline)
        finally:
            self.parent.close()

    def _talk(self, proc, deadline: float) -> None:
        import time

        start_by = min(deadline, time.monotonic() + VERIFY_STARTUP_SECONDS)
        msg = _receive(self.parent, start_by)
        if not (isinstance(msg, dict) and msg.get("ready") is True):
            return
        self.ready = True
        end = min(deadline, time.monotonic() + self.total)
        for i, name in enumerate(self.todo):
            share = min(VERIFY_SECONDS, max(end - time.monotonic(), 0.0) / (len(self.todo) - i))
            read_end, write_end = os.pipe()
            try:
                payload = self.payloads[name]
                header = json.dumps({"run": i, "exercise": name, "share": share, "payload": len(payload)}).encode()
                try:
                    self.parent.sendmsg([struct.pack("<I", len(header)) + header],
                                        [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", write_end))])
                    self.parent.sendall(payload)
                except OSError:
                    return  # the fork server is gone: the remaining exercises get no result
                finally:
                    os.close(write_end)  # from now on only the sandbox holds the write end
                data, why = _read_pipe(read_end, OUTPUT_CAP, min(deadline, time.monotonic() + share + GRACE_SECONDS))
            finally:
                os.close(read_end)
            done = _receive(self.parent, min(deadline, time.monotonic() + GRACE_SECONDS))
            note = done.get("note") if isinstance(done, dict) and isinstance(done.get("note"), str) else ""
            self.results[name] = (data, why, note[:300])
            if not isinstance(done, dict):
                return  # the fork server stopped answering
        try:
            header = json.dumps({"quit": True}).encode()
            self.parent.sendall(struct.pack("<I", len(header)) + header)
        except OSError:
            pass


def _receive(sock, deadline: float):
    """One control message (a JSON object of at most 64 KiB) from the fork server, or None."""
    import time

    buf = b""
    try:
        while True:
            need = 4 if len(buf) < 4 else 4 + struct.unpack("<I", buf[:4])[0]
            if need > 4 + 64 * 2**10:
                return None
            if len(buf) >= need and len(buf) >= 4:
                return json.loads(buf[4:need])
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            sock.settimeout(left)
            data = sock.recv(need - len(buf))
            if not data:
                return None
            buf += data
    except (OSError, ValueError):
        return None


def _read_pipe(fd: int, cap: int, deadline: float) -> tuple[bytes | None, str]:
    """Everything written to the pipe until its last writer closes it, at most ``cap`` bytes and
    until ``deadline``: (data, "") or (None, why)."""
    import select
    import time

    chunks, total = [], 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None, "it wrote no complete result in its time"
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        block = os.read(fd, 1 << 20)
        if not block:
            break
        total += len(block)
        if total > cap:
            return None, f"its result was larger than {cap // 2**20} MiB"
        chunks.append(block)
    return (b"".join(chunks), "") if total else (None, "it wrote no result")


def verify_many(names: list, chunks: list, notes: list, seeds: dict, limits: sandbox.Limits | None = None,
                host_dir: Path | None = None, total_seconds: float | None = None,
                assignment_exercises: list | None = None) -> dict:
    """Re-check ``names`` in one sandboxed fork server (``_verify_child.py``). It imports torch and
    the checks once (at most VERIFY_STARTUP_SECONDS, before any learner code runs); then each
    exercise in turn gets its own process, the smaller of VERIFY_SECONDS and an equal share of what
    is left of ``total_seconds`` (default VERIFY_TOTAL_SECONDS), and its own pipe (``_Run``).
    ``assignment_exercises``: every exercise of the assignment (whose forbidden groups are removed
    while the definitions load; default ``names``). ``limits``: the sandbox's other limits."""
    from utils.checks import EXERCISES

    verdicts, todo = {}, []
    for name in names:
        own = [n for n in notes if n.startswith(f"`{name}`")]
        if own:
            verdicts[name] = Verdict(False, own[0])
        else:
            todo.append(name)
    if not todo:
        return verdicts
    cases, payloads = {}, {}
    for name in todo:
        with RNG_LOCK, torch.random.fork_rng():
            torch.manual_seed(seeds[name])
            cases[name] = EXERCISES[name].make_cases(seeds[name])
        payloads[name] = _payload(name, cases[name], seeds[name])
    total = VERIFY_TOTAL_SECONDS if total_seconds is None else total_seconds
    limits = dataclasses.replace(limits or sandbox.Limits(), wall_seconds=VERIFY_STARTUP_SECONDS + total + 2 * GRACE_SECONDS)
    spec = json.dumps({"exercises": list(assignment_exercises or names)}).encode()
    for attempt in range(2):  # a run that vanished without a word (no time-out) gets one more try
        run = _Run(todo, payloads, total)
        res = sandbox.run([sys.executable, "-I", "_verify_child.py", str(run.child.fileno()), CHILD_LIB],
                          files={"_verify_child.py": CHILD, "definitions.json": json.dumps(chunks).encode(),
                                 "spec.json": spec},
                          limits=limits, expose=[(child_lib(), CHILD_LIB)], host_dir=host_dir, read_only=True,
                          # torch makes its cache folder on first use of torch.func: an existing one
                          env={"TORCHINDUCTOR_CACHE_DIR": sandbox.WORKDIR},
                          pass_fds=(run.child.fileno(),), interact=run)
        if run.ready or res.timed_out or res.notes or res.stderr.strip():
            break
    extra = f" ({'; '.join(notes[:3])})" if notes else ""
    for name in todo:
        data, why, note = run.results.get(name, (None, "the re-check stopped before it", ""))
        verdicts[name] = _judge(EXERCISES[name], cases[name], data, why, note, res, extra)
    return verdicts


def _judge(ex, cases: list, data: bytes | None, why: str, note: str, res, extra: str) -> Verdict:
    from utils.checks._core import expected_output, judge_case, name_paths

    from ._wire import WireError, decode

    name = ex.name
    loaded = None
    if data is not None:
        try:
            loaded = decode(data, strided=False)
        except WireError as err:
            return Verdict(False, f"the independent re-run's result was refused ({err}){extra}")
    if not isinstance(loaded, dict):
        why = note or "; ".join(res.notes) or why or "no result"
        if data is not None:
            why = "its result was not a plain result"
        if not note and not res.notes:
            last = (res.stderr.strip().splitlines() or [f"exit code {res.returncode}"])[-1][:300]
            why += f": {last}"
        return Verdict(False, f"the independent re-run of your definitions produced no result ({why}){extra}")
    if loaded.get("error"):
        return Verdict(False, f"in the independent re-run: {str(loaded['error'])[:500]}{extra}")
    outs = loaded.get("outputs")
    if not isinstance(outs, list) or not outs or len(outs) > len(cases):
        return Verdict(False, "the independent re-run returned the wrong number of results")
    # The child stops at the first case that crashes (or goes over budget): judged in order, the
    # list ends there; a list cut short anywhere else is refused below.
    for i, (case, got) in enumerate(zip(cases, outs)):
        if isinstance(got, dict) and set(got) == {"__crashed__"}:
            return Verdict(False, f"on new random inputs [{case.label}]: {name} {str(got['__crashed__'])[:400]}{extra}")
        missing = _missing_observations(case, got)
        if missing:
            return Verdict(False, f"on new random inputs [{case.label}]: the independent re-run's result lacks "
                                  f"what the guards observed ({missing}){extra}")
        try:
            got = _plain(got)
            with RNG_LOCK:
                expected = expected_output(ex, case, i)
                msg = judge_case(ex, case, expected, got)
        except Exception as err:  # noqa: BLE001 - a malformed result
            msg = f"the result could not be judged ({type(err).__name__})"
        if msg:
            return Verdict(False, f"on new random inputs [{case.label}]: {name_paths(ex, msg)}{extra}")
    if len(outs) != len(cases):
        return Verdict(False, "the independent re-run returned the wrong number of results")
    return Verdict(True)


def _missing_observations(case, got) -> str:
    """What a case's result must carry and does not: the guards' observations that the case asks
    for (``Case.observe``: the inputs after the call and their layouts, a second call's output),
    decided here from the case, never from the result (red team R4: a class body that dropped them
    from every result skipped the rules they stand for)."""
    from utils.checks._guards import AGAIN, INPUTS, LAYOUT, OUT

    observe = getattr(case, "observe", ()) or ()
    if getattr(case, "grad", None) or not observe:
        return ""
    if not (isinstance(got, dict) and OUT in got):
        return "no observation at all"
    wanted = ([INPUTS, LAYOUT] if "inputs" in observe else []) + ([AGAIN] if "again" in observe else [])
    lacking = [k.strip("_") for k in wanted if k not in got]
    if not lacking and "inputs" in observe:
        from utils.checks._guards import _tensor_paths

        layouts = got[LAYOUT]
        if not isinstance(layouts, list) or len(layouts) != len(list(_tensor_paths([case.args, case.kwargs], ""))):
            lacking.append("the layout of every input")
    return ", ".join(lacking)


def _payload(name: str, cases: list, seed: int) -> bytes:
    """The cases as a ``_wire`` message of plain data (tensors, numbers, strings; the checks' own
    module-level functions by name); the exercise's seed only when a case holds something that is
    not plain data (a callable the child must rebuild from its own copy)."""
    from ._wire import WireError, encode

    fields = []
    for case in cases:
        d = {f.name: _encode(getattr(case, f.name)) for f in dataclasses.fields(case) if f.name != "judge"}
        if d.get("budget") is not None:
            d["budget"] = dataclasses.asdict(case.budget)
        fields.append(d)
    try:
        return encode({"exercise": name, "cases": fields})
    except WireError:  # not plain data
        return encode({"exercise": name, "seed": seed})


def _encode(value, depth: int = 0):
    """Plain data as it is; a module-level function of the checks (a case's runner, a score
    function passed as an argument) as a name the child resolves in its own copy of the checks."""
    if depth > 6:
        return value
    if type(value) is tuple:  # subclasses (a check's own cache type) stay as they are
        return tuple(_encode(v, depth + 1) for v in value)
    if type(value) is list:
        return [_encode(v, depth + 1) for v in value]
    if isinstance(value, dict) and type(value) is dict:
        return {k: _encode(v, depth + 1) for k, v in value.items()}
    if callable(value) and not isinstance(value, (torch.Tensor, type)):
        module, qualname = getattr(value, "__module__", "") or "", getattr(value, "__qualname__", "") or ""
        if module.startswith("utils.checks") and "<locals>" not in qualname and qualname:
            return {"__callable__": [module, qualname]}
    return value


_CHILD_LIB_LOCK = threading.Lock()
_CHILD_LIB: Path | None = None

STUB = """\"\"\"Not available during grading: the re-check runs without the reference.

Every name is a class that raises when built or called; it keeps the reference's parameter names
(the checks name gradients after them) and can be subclassed (mutants subclass the reference).
\"\"\"
import inspect as _inspect

import torch.nn as _nn

from utils._guard import ForbiddenCall

_PARAMS = %s


def _signature(names):
    return _inspect.Signature([_inspect.Parameter(n, _inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names])


def _stub(name):
    def refuse(*args, **kwargs):
        raise ForbiddenCall("utils.reference", name)

    params, forward = _PARAMS.get(name, ([], []))

    def forward_stub(*args, **kwargs):
        raise ForbiddenCall("utils.reference", name)

    forward_stub.__signature__ = _signature(forward)
    return type(name, (_nn.Module,), {"__init__": refuse, "_reference_init": refuse, "__call__": refuse,
                                      "__wrapped__": staticmethod(refuse), "__module__": __name__,
                                      "__signature__": _signature(params), "forward": forward_stub})


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _stub(name)
"""


def _reference_params() -> dict:
    """{name: (parameter names, forward's parameter names)} of every public reference object."""
    import inspect

    import utils.reference as ref
    from utils._guard import unguarded

    out = {}
    for name in dir(ref):
        if name.startswith("_"):
            continue
        obj = getattr(ref, name)
        if not callable(obj):
            continue
        try:
            params = list(inspect.signature(unguarded(obj) if not isinstance(obj, type) else obj).parameters)
        except (TypeError, ValueError):
            params = []
        forward = []
        if isinstance(obj, type) and hasattr(obj, "forward"):
            try:
                forward = list(inspect.signature(obj.forward).parameters)
            except (TypeError, ValueError):
                pass
        out[name] = (params, forward)
    return out


def child_lib() -> Path:
    """The child's copy of ``utils`` (the checks as in the course, the reference replaced by
    stubs) and of the wire format, bound read-only at CHILD_LIB."""
    global _CHILD_LIB
    with _CHILD_LIB_LOCK:
        if _CHILD_LIB is not None and _CHILD_LIB.is_dir():
            return _CHILD_LIB
        lib = Path(tempfile.mkdtemp(prefix="grader-child-lib-"))
        os.chmod(lib, 0o755)
        src = course.ROOT / "utils"
        dst = lib / "utils"
        (dst / "checks").mkdir(parents=True)
        (dst / "reference").mkdir()
        (dst / "__init__.py").write_text('"""The grader\'s child copy of utils: checks only."""\n')
        # utils' own private modules (the guard, the clocks, chapter 14's model): the checks import them
        for f in src.glob("_*.py"):
            if f.name != "__init__.py":
                shutil.copy(f, dst / f.name)
        for f in (src / "checks").glob("*.py"):
            shutil.copy(f, dst / "checks" / f.name)
        shutil.copy(Path(__file__).with_name("_wire.py"), lib / "_grader_wire.py")  # the wire format
        stub = STUB % repr(_reference_params())
        for f in (src / "reference").glob("*.py"):
            (dst / "reference" / f.name).write_text(stub)
        for p in lib.rglob("*"):
            os.chmod(p, 0o755 if p.is_dir() else 0o644)
        _CHILD_LIB = lib
        import atexit

        atexit.register(shutil.rmtree, lib, True)
        return lib


def _plain(x):
    """Lists that stood for tuples come back as lists: compare treats both alike."""
    if isinstance(x, torch.Tensor) and type(x) is not torch.Tensor:
        raise TypeError("tensor subclass")
    return x
