"""Verify every auto-graded exercise a second time, outside the learner's kernel.

The parent (this module, never running learner code):
1. extracts the learner's *definitions* — imports, functions, classes and constant assignments —
   from the notebook's code cells (test cells excluded);
2. picks a secret seed per (student, assignment, exercise) and starts a fresh sandboxed child
   (``_verify_child.py``) that executes only those definitions, runs each exercise on the cases
   drawn from that seed, and saves the raw outputs with ``torch.save``;
3. loads them with ``torch.load(weights_only=True)`` (plain tensors and Python values only: a tensor
   subclass that lies about its values cannot come back), computes the reference in its own
   process and compares with ``utils.checks._core.compare``.
Patching ``torch.allclose``, the checks or their references in the learner's kernel changes
nothing here. Self-check answers are compared as literals read from the answer cell's source.
"""
from __future__ import annotations

import ast
import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from . import sandbox
from .restore import grade_id, is_answer, is_test, source

CHILD = Path(__file__).with_name("_verify_child.py")
SALT = os.environ.get("GRADER_SALT", "attention-course-verification")


@dataclass
class Verdict:
    ok: bool
    reason: str = ""


def definitions(nb: dict) -> str:
    """Imports, defs, classes and constant assignments from every non-test code cell, in order.

    Returned as a JSON list of source chunks: the child loads each one on its own, so a demo
    definition that cannot stand alone does not take the exercises with it.
    """
    parts = []
    for cell in nb["cells"]:
        if cell.get("cell_type") != "code" or is_test(cell):
            continue
        src = source(cell)
        try:
            tree = ast.parse(src)
        except SyntaxError:  # IPython magics or shell lines: drop them; a real syntax error: skip the cell
            try:
                tree = ast.parse(_strip_magics(src))
            except SyntaxError:
                continue
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                parts.append(ast.unparse(node))
            elif isinstance(node, ast.Assign) and _is_constant(node.value) and \
                    all(isinstance(t, ast.Name) for t in node.targets):
                parts.append(ast.unparse(node))
    return json.dumps(parts)


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
    digest = hashlib.sha256(f"{SALT}:{student}:{assignment}:{exercise}".encode()).hexdigest()
    return int(digest[:8], 16) % (2**31)


def quiz_answer(nb: dict, cell_id: str):
    """The literal assigned in a self-check answer cell, or an explanation of why there is none."""
    for cell in nb["cells"]:
        if grade_id(cell) == cell_id:
            try:
                tree = ast.parse(source(cell))
            except SyntaxError:
                return None, "the answer cell does not parse"
            for node in tree.body:
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                    try:
                        return ast.literal_eval(node.value), None
                    except (ValueError, SyntaxError, TypeError):
                        return None, "the answer is not a literal value (write it as answer_k = \"b\")"
            return None, "no answer was given"
    return None, "the answer cell is missing"


def _normalise(value):
    return value.strip().lower() if isinstance(value, str) else value


def check_quizzes(nb: dict, solution: dict) -> dict:
    """{quiz grade_id: Verdict} comparing the learner's literal with the solution's."""
    verdicts = {}
    for cell in solution["cells"]:
        gid = grade_id(cell)
        if gid and gid.startswith("quiz_") and is_answer(cell):
            key, _ = quiz_answer(solution, gid)
            got, why = quiz_answer(nb, gid)
            if why:
                verdicts[gid] = Verdict(False, why)
            elif isinstance(key, (int, float)) and isinstance(got, (int, float)) and not isinstance(got, bool):
                ok = abs(got - key) <= 1e-6 + 1e-3 * abs(key)
                verdicts[gid] = Verdict(ok, "" if ok else "the answer is not correct")
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


def verify(nb: dict, student: str, assignment: str, scratch: Path,
           limits: sandbox.Limits | None = None, hide: list | None = None) -> dict:
    """{exercise: Verdict} for every registered exercise graded in ``nb``."""
    from utils.checks import EXERCISES
    from utils.checks._core import case_seed, compare, name_paths, tolerance

    names = exercises_in(nb)
    if not names:
        return {}
    scratch.mkdir(parents=True, exist_ok=True)
    (scratch / "learner_definitions.json").write_text(definitions(nb), encoding="utf-8")
    seeds = {name: secret_seed(student, assignment, name) for name in names}
    (scratch / "request.json").write_text(json.dumps({"seeds": seeds}))
    shutil.copy(CHILD, scratch / "_verify_child.py")
    result = sandbox.run([str(Path(os.sys.executable)), "_verify_child.py"], scratch,
                         limits or sandbox.Limits(wall_seconds=240), hide=hide)
    outputs_path = scratch / "outputs.pt"
    loaded = None
    if outputs_path.exists():
        try:
            loaded = torch.load(outputs_path, weights_only=True)
        except Exception:  # a forged or truncated file: no result
            loaded = None
    verdicts = {}
    for name in names:
        ex = EXERCISES[name]
        if not isinstance(loaded, dict) or name not in loaded:
            why = "; ".join(result.notes) or (result.stderr.strip().splitlines() or ["no result"])[-1][:300]
            verdicts[name] = Verdict(False, f"the independent re-run of your definitions produced no result ({why})")
            continue
        entry = loaded[name]
        if not isinstance(entry, dict):
            verdicts[name] = Verdict(False, "the independent re-run returned a malformed result")
            continue
        if entry.get("error"):
            verdicts[name] = Verdict(False, f"in the independent re-run: {entry['error']}")
            continue
        outs = entry.get("outputs")
        cases = ex.make_cases(seeds[name])
        if not isinstance(outs, list) or len(outs) != len(cases):
            verdicts[name] = Verdict(False, "the independent re-run returned the wrong number of results")
            continue
        verdict = Verdict(True)
        with torch.random.fork_rng():
            for i, (case, got) in enumerate(zip(cases, outs)):
                torch.manual_seed(case_seed(i))
                expected = ex.call(_unguarded(ex.reference), case)
                msg = compare(expected, _plain(got), *tolerance(ex, case))
                if msg:
                    verdict = Verdict(False, f"on new random inputs [{case.label}]: {name_paths(ex, msg)}")
                    break
        verdicts[name] = verdict
    return verdicts


def _unguarded(obj):
    from utils._guard import unguarded

    return unguarded(obj)


def _plain(x):
    """Lists that stood for tuples come back as lists: compare treats both alike."""
    if isinstance(x, torch.Tensor) and type(x) is not torch.Tensor:
        raise TypeError("tensor subclass")
    return x
