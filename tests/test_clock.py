"""No clock may break an import, and no check imports under a clock (issue 23).

A correct chapter-13 answer once failed its visible checks in the grading kernel with "partially
initialized module 'torch._dynamo' has no attribute 'decorators'": an asynchronous exception (a
CPU-time alarm, a deadline, an interrupt) landed inside torch's lazy import of ``torch._dynamo``,
and the half-initialised module broke every later check of the process. ``utils._clock`` defers
every such exception while an import runs, and the course's dispatch modes import nothing.
"""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(code: str, timeout: int = 240):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=timeout)


# Whether an exception was raised inside a module's body (importlib drops its own frames from a
# traceback, so the body's frame, named "<module>", is what shows an import).
IN_IMPORT = """
def raised_in_import(err):
    tb = err.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_name == "<module>" and code.co_filename != "<string>":
            return True
        tb = tb.tb_next
    return False
"""


def test_an_alarm_due_inside_an_import_waits_for_it():
    # The alarm is due after 1 ms of CPU: it comes due again and again while torch._dynamo (about
    # 1 s of CPU) imports, and must fire only once the import is complete.
    out = _run(IN_IMPORT + """
import sys, torch
from utils._clock import cpu_alarm
class Due(Exception): pass
try:
    with cpu_alarm(0.001, Due):
        import torch._dynamo
        while True:  # the alarm ends this loop, outside the import
            pass
except Due as err:
    print("raised in an import:", raised_in_import(err))
import torch._dynamo.decorators
print("whole:", hasattr(torch._dynamo, "decorators"))
""")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "raised in an import: False" in out.stdout and "whole: True" in out.stdout, out.stdout


def test_a_deadline_passed_inside_an_import_waits_for_it(tmp_path):
    # A module whose body calls torch, as torch's own lazily imported modules do.
    (tmp_path / "lazy_module.py").write_text("import torch\nTABLE = torch.arange(4) * 2\nDONE = True\n")
    out = _run(IN_IMPORT + f"""
import sys, torch
sys.path.insert(0, {str(tmp_path)!r})
from utils.checks._core import Budget, BudgetExceeded, learner_code
try:
    with learner_code((), Budget(seconds=0.0)):  # the deadline has passed before the import starts
        import lazy_module  # its body's torch calls see the passed deadline
        torch.ones(1) + 1   # the first torch call outside the import raises
    print("no raise")
except BudgetExceeded as err:
    print("raised in an import:", raised_in_import(err))
import lazy_module
print("whole:", getattr(lazy_module, "DONE", False))
""")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "raised in an import: False" in out.stdout and "whole: True" in out.stdout, out.stdout


def test_an_interrupt_inside_an_import_waits_for_it():
    """The grading kernel's cell limit interrupts the kernel (SIGINT): the grader's warm-up makes
    every cell's interrupt wait for a running import (grader/_execute.py)."""
    out = _run(IN_IMPORT + """
import os, signal, threading, time, torch
from utils._clock import defer_interrupts_during_imports
defer_interrupts_during_imports()
threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGINT)).start()
try:
    import torch._dynamo  # about 1 s: the interrupt arrives in the middle
    while True:
        time.sleep(0.01)
except KeyboardInterrupt as err:
    print("raised in an import:", raised_in_import(err))
import torch._dynamo.decorators
print("whole:", hasattr(torch._dynamo, "decorators"))
""")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "raised in an import: False" in out.stdout and "whole: True" in out.stdout, out.stdout


def test_the_course_dispatch_modes_import_nothing():
    out = _run("""
        import sys, torch
        import utils.checks, utils.measure
        from utils._clock import DispatchMode
        from utils.checks import EXERCISES
        assert "torch._dynamo" not in sys.modules
        modes = [c for c in DispatchMode.__subclasses__()]
        import utils.checks._core as core
        with core._Limits({}):
            torch.ones(2) + 1
        core.largest_tensor(torch.zeros, 3)
        utils.measure.peak_tensor_bytes(torch.zeros, 3)
        print("dynamo imported:", "torch._dynamo" in sys.modules)
    """)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "dynamo imported: False" in out.stdout


def test_every_course_dispatch_mode_derives_from_the_clock_safe_base():
    import ast

    offenders = []
    for path in list((ROOT / "utils").rglob("*.py")) + list((ROOT / "grader").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and path.name != "_clock.py":
                for base in node.bases:
                    if isinstance(base, (ast.Name, ast.Attribute)) and getattr(base, "id", getattr(base, "attr", "")) == "TorchDispatchMode":
                        offenders.append(f"{path.relative_to(ROOT)}: class {node.name}")
    assert not offenders, "derive from utils._clock.DispatchMode (no torch._dynamo import under a clock):\n" + "\n".join(offenders)


FIRST_CHECKS = """
    import sys, time
    t0 = time.process_time()
    import utils.checks as c
    from utils._guard import unguarded
    import utils.reference as r
    t1 = time.process_time()
    {calls}
    t2 = time.process_time()
    bad = [m for m, mod in list(sys.modules.items()) if getattr(getattr(mod, "__spec__", None), "_initializing", False)]
    print("half-initialised:", bad)
    print(f"first checks: {{t2 - t1:.2f}} s of CPU")
"""


@pytest.mark.slow
def test_first_checks_in_fresh_processes_under_load_never_break_an_import():
    """Six fresh processes at once on a 2-core machine (load: three per core), each running the first
    checks of a chapter that budgets time and forbids operators (13, 06, 05) first thing, two rounds.
    (The design itself is proven by the next test: no check imports a module while its clock runs.)"""
    calls = textwrap.indent(textwrap.dedent("""
        c.check_online_softmax(unguarded(r.online_softmax))
        c.check_flash_attention(unguarded(r.flash_attention))
        c.check_LayerNorm(unguarded(r.LayerNorm))
        c.check_MultiHeadAttention(unguarded(r.MultiHeadAttention))
    """), "    ")
    code = FIRST_CHECKS.format(calls=calls)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for _ in range(2):
        procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT) for _ in range(6)]
        for p in procs:
            out, err = p.communicate(timeout=600)
            assert p.returncode == 0, err[-3000:]
            assert out.count("✅") == 4 and "half-initialised: []" in out, out + err[-2000:]


def test_no_check_imports_a_module_while_learner_code_runs():
    """Whatever a check needs is imported before its clock starts: every check of the course, run on
    its reference in a fresh process, imports no module while learner code (under the clock) runs."""
    out = _run("""
        import sys, importlib.abc
        import utils.checks as c
        from utils._guard import learner_is_running, unguarded
        from utils.checks import EXERCISES
        from utils.checks._core import run_check
        seen = []
        class Spy(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if learner_is_running() and name not in sys.modules:
                    seen.append(name)
                return None
        sys.meta_path.insert(0, Spy())
        import contextlib, io
        for name, ex in sorted(EXERCISES.items()):
            with contextlib.redirect_stdout(io.StringIO()):
                run_check(ex, unguarded(ex.reference), quiet=True)
        print("imported under a clock:", sorted(set(seen)))
    """, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "imported under a clock: []" in out.stdout, out.stdout[-3000:]
