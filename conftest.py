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
