"""Verify every auto-graded exercise a second time, outside the learner's kernel.

The parent (this module, never running learner code):

1. extracts the learner's *definitions* — imports, functions, classes and constant assignments —
   from the notebook's code cells (test cells excluded), and scans them statically (``scan``): a
   definition that reaches for the grader's internals (``utils``, ``sys``, ``importlib``,
   ``torch._C``, ``torch.ops``, ``__wrapped__``, ``__globals__``, torch-function switches,
   ``eval``/``exec``, rebinding an attribute of an imported module, ...) is not loaded, and the
   reason is reported;
2. for each exercise on its own, draws the cases from a secret seed (a salt made per
   installation, ``course.secret_salt``, never in the repository and never visible to a sandbox)
   and starts a fresh sandboxed child (``_verify_child.py``) with its own time budget. The child
   gets the learner's definitions and the cases as plain tensors (or, only when an exercise's cases
   hold callables, that exercise's own seed), and sees a copy of ``utils`` in which
   ``utils.reference`` is a stub that raises: it has no reference, no salt, no other seed;
3. reads the child's ``outputs.pt`` safely (``sandbox.read_regular``; a zip with a compressed
   member is refused unread, so loading never allocates more than the file, ``_expansion_problem``)
   with ``torch.load(weights_only=True)`` (plain tensors and Python values only: a tensor subclass that
   lies about its values cannot come back) and judges every case itself, judged cases included
   (``utils.checks._core.judge_case``: the reference's output, or the case's ``judge``).
Patching ``torch.allclose``, the checks or their references in the learner's kernel changes
nothing here. Self-check answers are evaluated (never executed) and judged by the quiz's visible check (``answers.py``).
"""
from __future__ import annotations

import ast
import dataclasses
import hashlib
import io
import json
import os
import shutil
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
DENY_NAMES = {"__import__", "eval", "exec", "compile", "globals", "locals", "vars", "open", "breakpoint",
              "setattr", "delattr", "__builtins__", "memoryview", "__loader__",
              "__spec__", "__file__"}
DENY_ATTRS = {"_C", "ops", "_ops", "__wrapped__", "__globals__", "__builtins__", "__code__", "__closure__",
              "__subclasses__", "__bases__", "__base__", "__mro__", "__dict__", "__import__", "__getattribute__",
              "__setattr__", "__delattr__", "__self__", "__func__", "__defaults__", "__kwdefaults__", "__loader__",
              "__spec__", "__reduce__", "__reduce_ex__", "__torch_function__", "__torch_dispatch__",
              "f_globals", "f_locals", "f_back", "f_code", "f_builtins", "gi_frame", "cr_frame", "ag_frame",
              "tb_frame", "tb_next", "_disabled_torch_function_impl", "DisableTorchFunction",
              "DisableTorchFunctionSubclass", "_DisableTorchDispatch", "overrides", "_python_dispatch",
              "TorchFunctionMode", "TorchDispatchMode", "library", "_dynamo", "compile", "_reference_init",
              "_tripwire_owner", "_learner_depth", "modules_dict", "__class_getitem__",
              # modules re-exported by others (`from torch import sys`, `torch.os`): the way to
              # every other module, threads and processes. A first line only: the re-check child
              # also removes forbidden entry points and blocks threads before learner code runs.
              "sys", "os", "_os", "_sys", "threading", "_thread", "subprocess", "gc", "builtins", "importlib",
              "ctypes", "inspect", "_execution_engine", "_ImperativeEngine"}
ALLOWED_IMPORTS = {"torch", "math", "cmath", "numpy", "typing", "typing_extensions", "dataclasses", "functools",
                   "itertools", "collections", "operator", "abc", "enum", "numbers", "__future__", "random",
                   "statistics", "einops", "copy", "string", "warnings", "time", "fractions", "decimal",
                   "matplotlib"}
DENY_TORCH_PARTS = {"ops", "overrides", "library", "multiprocessing", "hub", "jit", "compiler", "fx", "package",
                    "distributed", "backends", "cuda", "mps", "utils", "export", "onnx", "testing"}


def _import_problem(module: str | None) -> str | None:
    if not module:
        return "a relative import"
    parts = module.split(".")
    if parts[0] not in ALLOWED_IMPORTS:
        return f"import {module}"
    if parts[0] == "torch" and any(p.startswith("_") or p in DENY_TORCH_PARTS for p in parts[1:]):
        return f"import {module}"
    return None


def scan(chunk: str, module_names: set) -> str | None:
    """Why a definition may not be loaded in the re-check (None when it may).

    A second layer behind the tripwires: it rejects what only a definition that reaches for the
    grader's internals, or that disables torch's function handling, would contain.
    """
    try:
        tree = parse(chunk)
    except SyntaxError:
        return "it does not parse"
    for node in ast.walk(tree):
        where = f" (line {getattr(node, 'lineno', '?')})"
        if isinstance(node, ast.Import):
            for alias in node.names:
                why = _import_problem(alias.name)
                if why:
                    return why + where
        elif isinstance(node, ast.ImportFrom):
            why = _import_problem(node.module if not node.level else None)
            if why:
                return why + where
            for alias in node.names:
                if alias.name in DENY_ATTRS or alias.name == "*":
                    return f"from {node.module} import {alias.name}" + where
                why = _import_problem(f"{node.module}.{alias.name}") if node.module.startswith("torch") else None
                if why and alias.name in DENY_TORCH_PARTS:
                    return why + where
        elif isinstance(node, ast.Name) and node.id in DENY_NAMES:
            return f"`{node.id}`" + where
        elif isinstance(node, ast.Attribute) and node.attr in DENY_ATTRS:
            return f"`.{node.attr}`" + where
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr"):
            name = node.args[1] if len(node.args) > 1 else None
            if not (isinstance(name, ast.Constant) and isinstance(name.value, str) and "__" not in name.value
                    and name.value not in DENY_ATTRS):
                return f"`{node.func.id}` with a computed or special attribute name" + where
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            if "utils.reference" in text or "utils.checks" in text or \
                    any(a in text for a in DENY_ATTRS if a.startswith("__") or a.startswith("f_")):
                return f"the string {text[:40]!r}" + where
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for t in targets:
                for sub in ast.walk(t):
                    if isinstance(sub, ast.Attribute):
                        root = sub
                        while isinstance(root, ast.Attribute):
                            root = root.value
                        if isinstance(root, ast.Name) and root.id in module_names:
                            return f"it rebinds `{ast.unparse(sub)}`, an attribute of an imported module" + where
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            return f"`{type(node).__name__.lower()}`" + where
    return None


def definitions(nb: dict) -> tuple[list[str], list[str]]:
    """(chunks, notes): imports, defs, classes and constant assignments from every non-test code
    cell, in order, each a chunk the child loads on its own (a demo definition that cannot stand
    alone does not take the exercises with it); and why any definition was not loaded."""
    parts = []
    for cell in nb["cells"]:
        if cell.get("cell_type") != "code" or is_test(cell):
            continue
        course_cell = bool(nbg(cell).get("locked")) and not is_answer(cell)  # restored from the release
        tree = parse_cell(source(cell))
        if tree is None:
            continue
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                parts.append((node, course_cell))
            elif isinstance(node, ast.Assign) and _is_constant(node.value) and \
                    all(isinstance(t, ast.Name) for t in node.targets):
                parts.append((node, course_cell))
    module_names = set()
    for node, _ in parts:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            module_names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    chunks, notes = [], []
    for node, course_cell in parts:
        text = ast.unparse(node)
        why = scan(text, module_names)
        if why and (course_cell or why.startswith(("import utils.plotting", "import matplotlib"))):
            continue  # the course's own demo imports (plotting, os) and plotting: not needed here
        if why:
            label = getattr(node, "name", None) or text.splitlines()[0][:60]
            notes.append(f"`{label}` was not loaded for the re-check: it uses {why}, which graded code may not use")
        else:
            chunks.append(text)
    return chunks, notes


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
    process for the submission, one forked child per exercise with its own share of the time
    (a hanging exercise costs only itself; see ``verify_many``)."""
    names = exercises_in(nb)
    if not names:
        return {}
    chunks, notes = definitions(nb)
    seeds = {name: secret_seed(student, assignment, name) for name in names}
    return verify_many(names, chunks, notes, seeds, limits, host_dir)


def verify_one(name: str, chunks: list, notes: list, seed: int, limits: sandbox.Limits | None = None,
               host_dir: Path | None = None) -> Verdict:
    return verify_many([name], chunks, notes, {name: seed}, limits, host_dir)[name]


def verify_many(names: list, chunks: list, notes: list, seeds: dict, limits: sandbox.Limits | None = None,
                host_dir: Path | None = None, total_seconds: float | None = None) -> dict:
    """Re-check ``names`` in one sandboxed process (``_verify_child.py``). It imports torch and
    the checks once (at most VERIFY_STARTUP_SECONDS, before any learner code runs), then gives each
    exercise a forked child and the smaller of VERIFY_SECONDS and an equal share of what is left of
    ``total_seconds`` (default VERIFY_TOTAL_SECONDS). ``limits``: the sandbox's other limits."""
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
    cases = {}
    for name in todo:
        with RNG_LOCK, torch.random.fork_rng():
            torch.manual_seed(seeds[name])
            cases[name] = EXERCISES[name].make_cases(seeds[name])
    total = VERIFY_TOTAL_SECONDS if total_seconds is None else total_seconds
    buf = io.BytesIO()
    torch.save({"exercises": [_payload(name, cases[name], seeds[name]) for name in todo],
                "total_seconds": float(total), "per_exercise_seconds": float(VERIFY_SECONDS)}, buf)
    limits = dataclasses.replace(limits or sandbox.Limits(), wall_seconds=VERIFY_STARTUP_SECONDS + total)
    outputs = {f"outputs_{i}.pt": OUTPUT_CAP for i in range(len(todo))}
    outputs["notes.json"] = 64 * 2**10
    for attempt in range(2):  # a run that vanished without a word (no time-out) gets one more try
        res = sandbox.run([sys.executable, "_verify_child.py"],
                          files={"_verify_child.py": CHILD, "definitions.json": json.dumps(chunks).encode(),
                                 "cases.pt": buf.getvalue()},
                          outputs=outputs, limits=limits,
                          expose=[(child_lib(), CHILD_LIB)], env={"PYTHONPATH": CHILD_LIB}, host_dir=host_dir)
        if any(v is not None for v in res.outputs.values()) or res.timed_out or res.notes or res.stderr.strip():
            break
    try:
        child_notes = json.loads(res.outputs.get("notes.json") or b"{}")
        child_notes = child_notes if isinstance(child_notes, dict) else {}
    except ValueError:
        child_notes = {}
    extra = f" ({'; '.join(notes[:3])})" if notes else ""
    for i, name in enumerate(todo):
        data = res.outputs.get(f"outputs_{i}.pt")
        note = child_notes.get(name) if isinstance(child_notes.get(name), str) else ""
        verdicts[name] = _judge(EXERCISES[name], cases[name], data, note[:200], res, f"outputs_{i}.pt", extra)
    return verdicts


def _judge(ex, cases: list, data: bytes | None, note: str, res, output: str, extra: str) -> Verdict:
    from utils.checks._core import expected_output, judge_case, name_paths

    name = ex.name
    loaded = None
    if data is not None:
        bomb = _expansion_problem(data)
        if bomb:
            return Verdict(False, f"the independent re-run's result file was refused ({bomb}){extra}")
        try:
            loaded = torch.load(io.BytesIO(data), weights_only=True)
        except Exception:  # noqa: BLE001 - a forged or truncated file: no result
            loaded = None
    if not isinstance(loaded, dict):
        why = note or "; ".join(res.notes) or res.output_problems.get(output) or "no result"
        if data is not None and loaded is None:
            why = "its result file was not a plain result"
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


def _expansion_problem(data: bytes) -> str | None:
    """Why a result file written in the sandbox may not be loaded, or None. ``torch.save`` writes
    an uncompressed zip: a file with a compressed member (8 MB of deflated zeros expanded to 8.4
    GiB in the grading process), or whose members add up to more than it holds, is refused before
    ``torch.load`` reads anything, so loading never allocates more than the file's own size."""
    import zipfile

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            infos = zf.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError, RuntimeError):
        return "it is not the zip file torch.save writes"
    if len(infos) > 10_000:
        return "it has too many members"
    if any(i.compress_type != zipfile.ZIP_STORED for i in infos):
        return "it holds compressed data, which torch.save never writes"
    if sum(i.file_size for i in infos) > len(data):
        return "its members claim more bytes than the file holds"
    return None


def _payload(name: str, cases: list, seed: int) -> dict:
    """The cases as plain data (tensors, numbers, strings); the exercise's seed only when a case
    holds something that is not plain data (a callable the child must rebuild from its own copy)."""
    fields = []
    for case in cases:
        d = {f.name: _encode(getattr(case, f.name)) for f in dataclasses.fields(case) if f.name != "judge"}
        if d.get("budget") is not None:
            d["budget"] = dataclasses.asdict(case.budget)
        fields.append(d)
    plain = {"exercise": name, "cases": fields}
    buf = io.BytesIO()
    try:
        torch.save(plain, buf)
        torch.load(io.BytesIO(buf.getvalue()), weights_only=True)
        return plain
    except Exception:  # noqa: BLE001 - not plain data
        return {"exercise": name, "seed": seed}


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
    """The child's copy of ``utils``: the checks as in the course, the reference replaced by stubs."""
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
        shutil.copy(src / "_guard.py", dst / "_guard.py")
        shutil.copy(src / "_clock.py", dst / "_clock.py")  # the checks' clocks (never raise inside an import)
        shutil.copy(src / "_gpt_model.py", dst / "_gpt_model.py")  # chapter 14's model: the checks build it
        for f in (src / "checks").glob("*.py"):
            shutil.copy(f, dst / "checks" / f.name)
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
