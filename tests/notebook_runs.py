"""Execute a chapter the way learners do, and list every cell that fails.

Two runs, each a real kernel over a whole notebook (``allow_errors``: every failing cell is seen):

* ``variants``: the solution notebook with every graded exercise replaced, right after its
  solution cell, by the accepted variant of its check marked ``demo=True`` (the correct answer
  that differs most from the course's solution). Every cell must run, asserts included: a notebook
  asserts about a learner's function only what its check guarantees.
* ``release``: the learner release, with its stubs. Only exercise cells (``NotImplementedError``)
  and their check cells (a verdict saying "not implemented"; for a self-check question, "Set your
  answer") may fail; demo cells that need an unfinished exercise wait for it (``%%needs``) and a
  ``NameError`` anywhere is a failure.

    python tests/notebook_runs.py variants 03_scaled_dot_product_attention [...]
    python tests/notebook_runs.py release 03_scaled_dot_product_attention [...]
    python tests/notebook_runs.py {variants,release} all

``tests/test_notebook_runs.py`` runs both for every chapter in ``make test``.
"""
from __future__ import annotations

import copy
import json
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CELL_TIMEOUT = 300


def _nbg(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {}) or {}


def _source(cell) -> str:
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else s


def assignments() -> list:
    return sorted(p.name for p in (ROOT / "solutions").iterdir() if (p / f"{p.name}.ipynb").exists())


def demo_variant(name: str):
    """The ``demo=True`` variant of exercise ``name`` (None if it has none)."""
    from utils.checks import EXERCISES

    return next((v for v in EXERCISES[name].variants if getattr(v, "demo", False)), None)


def _injection(name: str, variant_name: str) -> str:
    return f'''# [notebook_runs] {name} replaced by the accepted variant {variant_name!r} of its check
import types as _types
from utils.checks import EXERCISES as _EXERCISES
_impl = next(v for v in _EXERCISES[{name!r}].variants if v.name == {variant_name!r}).impl
if isinstance(_impl, type):
    {name} = type({name!r}, (_impl,), {{"__module__": "__main__", "__qualname__": {name!r}}})
else:
    {name} = _types.FunctionType(_impl.__code__, _impl.__globals__, {name!r}, _impl.__defaults__, _impl.__closure__)
    {name}.__kwdefaults__ = _impl.__kwdefaults__
    {name}.__qualname__ = {name!r}
del _impl
'''


def with_variants(nb: dict) -> tuple[dict, list]:
    """The notebook with a cell after each exercise's solution cell that puts its demo variant in
    place; and the exercises that have no demo variant."""
    from utils.checks import EXERCISES

    run = copy.deepcopy(nb)
    cells, missing = [], []
    for cell in run["cells"]:
        cells.append(cell)
        gid = _nbg(cell).get("grade_id")
        if cell["cell_type"] == "code" and _nbg(cell).get("solution") and gid in EXERCISES:
            v = demo_variant(gid)
            if v is None:
                missing.append(gid)
                continue
            cells.append({"cell_type": "code", "id": f"notebook-runs-{len(cells)}",
                          "metadata": {"notebook_runs": True}, "outputs": [],
                          "execution_count": None, "source": _injection(gid, v.name)})
    run["cells"] = cells
    return run, missing


def execute(nb: dict, cwd: Path) -> dict:
    import nbformat
    from nbclient import NotebookClient

    node = nbformat.reads(json.dumps(nb), as_version=4)  # sources as strings, as nbclient wants
    client = NotebookClient(node, kernel_name="python3", timeout=CELL_TIMEOUT, allow_errors=True,
                            resources={"metadata": {"path": str(cwd)}})
    client.execute()
    return node


def _errors(cell) -> list:
    return [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]


def _describe(i: int, cell, err) -> str:
    gid = _nbg(cell).get("grade_id") or "demo"
    first = _source(cell).strip().splitlines()[:1]
    value = re.sub(r"\x1b\[[0-9;]*m", "", str(err.get("evalue", "")))
    return f"cell {i} ({gid}: {first[0][:60] if first else ''}): {err.get('ename')}: {value[:300]}"


def variant_failures(assignment: str) -> list:
    """Every failing cell of the solution notebook run with the demo variants in place."""
    path = ROOT / "solutions" / assignment / f"{assignment}.ipynb"
    nb, missing = with_variants(json.loads(path.read_text()))
    failures = [f"exercise {m}: no variant marked demo=True in its check" for m in missing]
    done = execute(nb, path.parent)
    index = -1
    for cell in done.cells:
        if not cell.get("metadata", {}).get("notebook_runs"):
            index += 1  # the cell's index in the solutions notebook
        for err in _errors(cell):
            failures.append(_describe(index, cell, err))
    return failures


_ALLOWED_TEST = ("not implemented", "NotImplementedError", "Set your answer")


def release_failures(assignment: str) -> list:
    """Every cell of the release, run with its stubs, that fails other than an exercise saying
    "not implemented"."""
    path = ROOT / "notebooks" / assignment / f"{assignment}.ipynb"
    done = execute(json.loads(path.read_text()), path.parent)
    failures = []
    for i, cell in enumerate(done.cells):
        meta = _nbg(cell)
        for err in _errors(cell):
            ename, value = err.get("ename", ""), str(err.get("evalue", ""))
            if ename == "NameError":
                failures.append(_describe(i, cell, err))
            elif meta.get("solution") and ename == "NotImplementedError":
                continue  # the exercise (or answer) cell itself
            elif meta.get("grade") and any(a in value or a == ename for a in _ALLOWED_TEST):
                continue  # its check: "not implemented yet" / "Set your answer"
            else:
                failures.append(_describe(i, cell, err))
    return failures


def main(argv: list) -> int:
    if len(argv) < 2 or argv[0] not in ("variants", "release"):
        print(__doc__)
        return 2
    names = assignments() if argv[1:] == ["all"] else argv[1:]
    run = variant_failures if argv[0] == "variants" else release_failures
    bad = 0
    for name in names:
        start = time.perf_counter()
        failures = run(name)
        took = time.perf_counter() - start
        print(f"{'✅' if not failures else '❌'} {argv[0]} {name}: {len(failures)} failing cell(s), {took:.0f} s")
        for f in failures:
            print("   ", f)
        bad += bool(failures)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
