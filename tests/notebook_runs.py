"""Execute a chapter the way learners do, and list every cell that fails.

Two runs, each a real kernel over a whole notebook (``allow_errors``: every failing cell is seen):

* ``variants``: the solution notebook with every graded exercise replaced, right after its
  solution cell, by the accepted variant of its check marked ``demo=True`` (the correct answer
  that differs most from the course's solution), on PyTorch's ``default`` CPU kernels (no
  AVX2/AVX-512: the kernels most different from the machine's own, under which nbval runs). Every
  cell must run, asserts included: a notebook asserts about a learner's function only what its
  check guarantees; and every stored output that does not depend on the learner's code must hold
  (``tests/stored_outputs.py``).
* ``release``: the learner release, with its stubs. Only exercise cells (``NotImplementedError``)
  and their check cells (a verdict saying "not implemented"; for a self-check question, "Set your
  answer") may fail; demo cells that need an unfinished exercise wait for it (``%%needs``) and a
  ``NameError`` anywhere is a failure.

    python tests/notebook_runs.py variants 03_scaled_dot_product_attention [...]
    python tests/notebook_runs.py release 03_scaled_dot_product_attention [...]
    python tests/notebook_runs.py {variants,release} all

For authors, two more:

* ``outputs NN_name [--capability default|avx2|avx512]``: the solution as it is, on the CPU kernels
  named (default: the machine's own), its stored outputs compared as nbval compares them
  (``tests/stored_outputs.py``): shows which printed numbers do not hold on other processors.
* ``store NN_name``: execute the solution and store its outputs in place (refused if a cell
  raises), e.g. after editing a cell.

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


def execute(nb: dict, cwd: Path, env: dict | None = None) -> dict:
    """Run ``nb`` in a fresh kernel in ``cwd``; ``env``: variables set for the kernel only (e.g.
    ``ATEN_CPU_CAPABILITY``)."""
    import os

    import nbformat
    from nbclient import NotebookClient

    node = nbformat.reads(json.dumps(nb), as_version=4)  # sources as strings, as nbclient wants
    client = NotebookClient(node, kernel_name="python3", timeout=CELL_TIMEOUT, allow_errors=True,
                            resources={"metadata": {"path": str(cwd)}})
    client.execute(env={**os.environ, **(env or {})})
    return node


def _errors(cell) -> list:
    return [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]


def _describe(i: int, cell, err) -> str:
    gid = _nbg(cell).get("grade_id") or "demo"
    first = _source(cell).strip().splitlines()[:1]
    value = re.sub(r"\x1b\[[0-9;]*m", "", str(err.get("evalue", "")))
    return f"cell {i} ({gid}: {first[0][:60] if first else ''}): {err.get('ename')}: {value[:300]}"


# The variant run uses the CPU kernels most different from the machine's own (issue 23): PyTorch
# picks its vectorised kernels by the processor (AVX-512, AVX2, ...); "default" is none of them.
VARIANT_CAPABILITY = "default"
_CAPABILITY_CELL = "import torch\nprint('cpu capability:', torch.backends.cpu.get_cpu_capability())"


def _injected(cell) -> bool:
    return bool(cell.get("metadata", {}).get("notebook_runs"))


def variant_run(assignment: str, capability: str | None = VARIANT_CAPABILITY) -> tuple[list, str]:
    """Run the solution notebook with the demo variants in place, with ``ATEN_CPU_CAPABILITY`` set
    to ``capability`` (None: the machine's own). Returns every failure, and the capability the
    kernel reported.

    A failure is a cell that raised, or a cell whose stored output differs by the rule of
    ``tests/stored_outputs.py``, among the cells whose output does not depend on how the learner
    wrote an exercise (``differences(..., learner_free=True)``); nbval compares the others, with
    the course's own solutions, on the machine's own kernels.
    """
    from stored_outputs import differences

    path = ROOT / "solutions" / assignment / f"{assignment}.ipynb"
    stored = json.loads(path.read_text())
    nb, missing = with_variants(stored)
    nb["cells"].append({"cell_type": "code", "id": "notebook-runs-capability", "metadata": {"notebook_runs": True},
                        "outputs": [], "execution_count": None, "source": _CAPABILITY_CELL})
    failures = [f"exercise {m}: no variant marked demo=True in its check" for m in missing]
    done = execute(nb, path.parent, {"ATEN_CPU_CAPABILITY": capability} if capability else None)
    index = -1
    for cell in done.cells:
        if not _injected(cell):
            index += 1  # the cell's index in the solutions notebook
        for err in _errors(cell):
            failures.append(_describe(index, cell, err))
    report = "".join(o.get("text", "") for o in done.cells[-1].get("outputs", []) if o.get("output_type") == "stream")
    used = report.split("cpu capability:")[-1].strip() if "cpu capability:" in report else "unknown"
    for i, diff in differences(stored, done, skip=_injected, learner_free=True):
        failures.append(f"cell {i}: the stored output does not hold on {used} CPU kernels: {diff}")
    return failures, used


def variant_failures(assignment: str) -> list:
    """Every failing cell of the solution notebook run with the demo variants in place, on the CPU
    kernels of ``VARIANT_CAPABILITY``, and every stored output it contradicts."""
    return variant_run(assignment)[0]


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


def output_failures(assignment: str, capability: str | None = None) -> list:
    """The solution notebook run as it is (its own solutions), with ``ATEN_CPU_CAPABILITY`` set to
    ``capability`` (None: the machine's own): every cell that raised, and every compared cell
    whose stored output does not hold (the rule of ``tests/stored_outputs.py``, as nbval)."""
    from stored_outputs import differences

    path = ROOT / "solutions" / assignment / f"{assignment}.ipynb"
    stored = json.loads(path.read_text())
    done = execute(stored, path.parent, {"ATEN_CPU_CAPABILITY": capability} if capability else None)
    failures = [_describe(i, c, e) for i, c in enumerate(done.cells) for e in _errors(c)
                if "NBVAL_RAISES_EXCEPTION" not in _source(c)]
    failures += [f"cell {i}: {diff}" for i, diff in differences(stored, done)]
    return failures


def store(assignment: str) -> list:
    """Execute the solution notebook on this machine's kernels and store its outputs in place;
    returns the cells that raised (then nothing is written)."""
    import nbformat

    path = ROOT / "solutions" / assignment / f"{assignment}.ipynb"
    nb = json.loads(path.read_text())
    done = execute(nb, path.parent)
    failures = [_describe(i, c, e) for i, c in enumerate(done.cells) for e in _errors(c)
                if "NBVAL_RAISES_EXCEPTION" not in _source(c)]
    if not failures:
        for cell in done.cells:
            cell.get("metadata", {}).pop("execution", None)  # per-run timestamps: noise in every diff
        nbformat.write(done, str(path))
    return failures


def main(argv: list) -> int:
    capability = None
    if "--capability" in argv:
        i = argv.index("--capability")
        capability, argv = argv[i + 1], argv[:i] + argv[i + 2:]
    if len(argv) < 2 or argv[0] not in ("variants", "release", "outputs", "store"):
        print(__doc__)
        return 2
    names = assignments() if argv[1:] == ["all"] else argv[1:]
    run = {"variants": variant_failures, "release": release_failures, "store": store,
           "outputs": lambda name: output_failures(name, capability)}[argv[0]]
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
