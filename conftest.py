"""Scheduling for `make test`, which runs with pytest-xdist (`-n $(TEST_WORKERS) --dist loadgroup`).

Every test is put in an xdist group, and a group runs on one worker:
- a notebook under nbval is one group (its cells run in order in one kernel);
- each chapter's notebook run (tests/test_notebook_variants.py, tests/test_notebook_release.py) is
  one group, so the chapters spread over the workers;
- tests/test_checks.py's tests (every mutant, variant and forbidden call of every exercise) are
  each a group of their own: the longest module, spread over all the workers;
- every other module is one group (its module-scoped fixtures, such as the graded sample bank,
  are made once).
The longest groups go first, so that the other workers fill the time with the many short ones.
"""
import pytest

_LONG_FIRST = ("test_grader.py", "test_gradebook_postgres.py", "test_site.py", "test_grader_round2.py",
               "test_recheck_references.py", "test_sandbox.py")
# Whole chapters executed in a kernel (each a group of its own: one notebook, or one test class
# per chapter), after the long modules.
_CHAPTER_RUNS = ("test_notebook_variants.py", "test_notebook_release.py")
_SPREAD = ("test_checks.py",)


def _rank(item) -> int:
    name = item.path.name
    if name in _LONG_FIRST:
        return _LONG_FIRST.index(name)
    if item.path.suffix == ".ipynb" or name in _CHAPTER_RUNS:
        return len(_LONG_FIRST)
    if name in _SPREAD:
        return len(_LONG_FIRST) + 1
    return len(_LONG_FIRST) + 2


def _group(item) -> str | None:
    name = item.path.name
    if name in _SPREAD:
        return None  # each test its own scope
    if name in _CHAPTER_RUNS and item.cls is not None:
        return f"{name}::{item.cls.__name__}"
    return str(item.path)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        group = _group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(name=group))
    items.sort(key=_rank)  # stable: the order inside a file is kept
