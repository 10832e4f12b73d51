"""Scheduling for `make test`, which runs with pytest-xdist (`-n $(TEST_WORKERS) --dist loadscope`).

`loadscope` keeps each test module, each test class and each notebook (whose cells must run in
order in one kernel) on one worker: each chapter's notebook run (tests/test_notebook_variants.py,
tests/test_notebook_release.py) is a class of its own, so the chapters spread over the workers.
The longest scopes go first, so that the other workers fill the time with the many short ones.
"""
import pytest

_LONG_FIRST = ("test_grader.py", "test_checks.py", "test_gradebook_postgres.py", "test_site.py",
               "test_grader_round2.py", "test_recheck_references.py", "test_sandbox.py")
# Whole chapters executed in a kernel, after the long modules.
_CHAPTER_RUNS = ("test_notebook_variants.py", "test_notebook_release.py")


def _rank(item) -> int:
    name = item.path.name
    if name in _LONG_FIRST:
        return _LONG_FIRST.index(name)
    return len(_LONG_FIRST) + (0 if item.path.suffix == ".ipynb" or name in _CHAPTER_RUNS else 1)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    items.sort(key=_rank)  # stable: the order inside a file is kept


# nbval compares stored outputs by the course's rule (tests/stored_outputs.py, issue 23): a number
# printed with a decimal point or an exponent agrees to within one unit of its last printed digit,
# so a value that holds to the precision it is printed at passes on every CPU (PyTorch's kernels
# differ between AVX-512, AVX2 and none). The variant run (tests/notebook_runs.py) uses the same rule.
def pytest_configure(config):
    try:
        from nbval.plugin import IPyNbCell
    except ImportError:
        return
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent / "tests"))
    from stored_outputs import align_outputs

    if getattr(IPyNbCell.compare_outputs, "_course_rule", False):
        return
    original = IPyNbCell.compare_outputs

    def compare_outputs(self, test, ref, skip_compare=None):
        return original(self, align_outputs(ref, test), ref, skip_compare)

    compare_outputs._course_rule = True
    IPyNbCell.compare_outputs = compare_outputs
