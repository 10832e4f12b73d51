"""Every chapter runs to the end whichever correct answer a learner wrote (issue 17 §1).

Each solution notebook is executed with every graded exercise replaced by the accepted variant of
its check that differs most from the course's solution (``Variant(demo=True)``: another memory
profile, code path, float precision or parameter initialisation). Every cell must run, asserts
included: a notebook asserts about a learner's function only what its check guarantees.
See ``tests/notebook_runs.py`` (also a command line for authors). One test class per chapter, so
that pytest-xdist (``--dist loadscope``) spreads the chapters over its workers.
"""
import functools
import os
import subprocess
import sys

import pytest

from notebook_runs import VARIANT_CAPABILITY, assignments, demo_variant, variant_run
from utils.checks import EXERCISES


@functools.lru_cache(maxsize=1)
def own_capability() -> str:
    """The CPU kernels a kernel started from this process uses (nbval's: it inherits this
    environment), read in a fresh process as a notebook kernel would."""
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"],
                         capture_output=True, text=True, env=os.environ, check=True)
    return out.stdout.strip()


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_every_exercise_has_a_demo_variant(name):
    v = demo_variant(name)
    assert v is not None, f"{name}: mark the accepted variant that differs most from the solution demo=True"


def _chapter_class(assignment: str):
    def test_solution_runs_with_other_correct_answers(self):
        failures, used = variant_run(assignment)
        assert not failures, (f"{assignment} with the demo variants in place, on {used} CPU kernels:\n"
                              + "\n".join(failures))
        # Two CPU capabilities in every run (issue 23): nbval's (the machine's own) and this one.
        assert used == VARIANT_CAPABILITY.upper(), f"the variant run reported {used!r} CPU kernels"
        if own_capability() == used:
            pytest.skip(f"this machine's own CPU kernels are {used} too: the stored outputs were compared "
                        "under one capability only")
        assert own_capability() != used

    return type(f"TestChapter{assignment[:2]}", (), {"test_solution_runs_with_other_correct_answers":
                                                     test_solution_runs_with_other_correct_answers})


for _a in assignments():
    globals()[f"TestChapter{_a[:2]}"] = _chapter_class(_a)
