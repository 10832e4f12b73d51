"""Every chapter runs to the end whichever correct answer a learner wrote (issue 17 §1).

Each solution notebook is executed with every graded exercise replaced by the accepted variant of
its check that differs most from the course's solution (``Variant(demo=True)``: another memory
profile, code path, float precision or parameter initialisation). Every cell must run, asserts
included: a notebook asserts about a learner's function only what its check guarantees.
See ``tests/notebook_runs.py`` (also a command line for authors). One test class per chapter, so
that pytest-xdist (``--dist loadscope``) spreads the chapters over its workers.
"""
import pytest

from notebook_runs import assignments, demo_variant, variant_failures
from utils.checks import EXERCISES


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_every_exercise_has_a_demo_variant(name):
    v = demo_variant(name)
    assert v is not None, f"{name}: mark the accepted variant that differs most from the solution demo=True"


def _chapter_class(assignment: str):
    def test_solution_runs_with_other_correct_answers(self):
        failures = variant_failures(assignment)
        assert not failures, f"{assignment} with the demo variants in place:\n" + "\n".join(failures)

    return type(f"TestChapter{assignment[:2]}", (), {"test_solution_runs_with_other_correct_answers":
                                                     test_solution_runs_with_other_correct_answers})


for _a in assignments():
    globals()[f"TestChapter{_a[:2]}"] = _chapter_class(_a)
