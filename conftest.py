"""Scheduling for `make test`, which runs with pytest-xdist on 2 workers (`-n 2 --dist loadscope`).

`loadscope` keeps each test module, and each notebook (whose cells must run in order in one
kernel), on one worker. The longest modules go first, so that the other worker fills the time
with the many short ones.
"""
import pytest

_LONG_FIRST = ("test_grader.py", "test_checks.py", "test_gradebook_postgres.py", "test_recheck_references.py")


# Whole chapters executed in a kernel (each a scope of its own: one notebook, or one test class
# per chapter), after the long modules and before the many short ones.
_CHAPTER_RUNS = ("test_notebook_variants.py", "test_notebook_release.py")


def _rank(item) -> int:
    name = item.path.name
    if name in _LONG_FIRST:
        return _LONG_FIRST.index(name)
    return len(_LONG_FIRST) + (0 if item.path.suffix == ".ipynb" or name in _CHAPTER_RUNS else 1)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    items.sort(key=_rank)  # stable: the order inside a file is kept
