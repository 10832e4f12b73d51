"""The tests of the tests: every check in the course, whatever chapter registered it.

For every exercise in ``utils.checks.EXERCISES``:
- the reference passes its own check (twice, with the same verdict: no unseeded randomness);
- the unimplemented stub fails with "not implemented";
- every mutant in the bank fails, and the message names that mutant's mistake;
- calling a forbidden function, or ``utils.reference`` itself, fails with a clear sentence;
- bad input (None, a tensor, the wrong kind of object, a wrong return type) gets a CheckFailure,
  never a traceback from inside ``utils``.
"""
import statistics
import time

import pytest
import torch
import torch.nn as nn

from utils._guard import unguarded
from utils.checks import EXERCISES, CheckFailure
from utils.checks._core import run_check

EXERCISE_NAMES = sorted(EXERCISES)
MUTANTS = [(n, m.name) for n in EXERCISE_NAMES for m in EXERCISES[n].mutants]
FORBIDDEN = [
    (n, gi, fi)
    for n in EXERCISE_NAMES
    for gi, group in enumerate(EXERCISES[n].forbidden)
    for fi in range(len(group.funcs))
]


def test_every_chapter_registers_exercises():
    assert len(EXERCISES) >= 2


@pytest.mark.parametrize("name", EXERCISE_NAMES)
def test_reference_passes(name, capsys):
    ex = EXERCISES[name]
    n1 = run_check(ex, unguarded(ex.reference))
    n2 = run_check(ex, unguarded(ex.reference))
    assert n1 == n2 > 0
    assert "✅" in capsys.readouterr().out


@pytest.mark.parametrize("name", EXERCISE_NAMES)
def test_has_a_mutant_bank(name):
    assert len(EXERCISES[name].mutants) >= 2, f"{name} needs a bank of known mistakes"


@pytest.mark.parametrize("name,mutant", MUTANTS)
def test_mutant_is_rejected_and_named(name, mutant):
    ex = EXERCISES[name]
    m = next(m for m in ex.mutants if m.name == mutant)
    with pytest.raises(CheckFailure) as info:
        run_check(ex, m.impl, quiet=True)
    assert m.hint in str(info.value), f"mutant {mutant} was rejected but not named:\n{info.value}"


def _stub(ex):
    if ex.kind == "class":
        class Stub(nn.Module):
            def __init__(self, *args, **kwargs):
                super().__init__()
                raise NotImplementedError()

        return Stub

    def stub(*args, **kwargs):
        raise NotImplementedError()

    return stub


@pytest.mark.parametrize("name", EXERCISE_NAMES)
def test_stub_scores_zero(name):
    with pytest.raises(CheckFailure, match="not implemented"):
        run_check(EXERCISES[name], _stub(EXERCISES[name]), quiet=True)


@pytest.mark.parametrize("name", EXERCISE_NAMES)
def test_calling_the_reference_is_refused(name):
    with pytest.raises(CheckFailure, match="utils.reference"):
        run_check(EXERCISES[name], EXERCISES[name].reference, quiet=True)


def _call_forbidden(func):
    owner = getattr(func, "_tripwire_owner", None)
    if owner is not None:  # a patched Python entry point: calling it is enough
        getattr(owner, func._tripwire_attr)(torch.zeros(2, 2))
    else:  # a torch function: dispatch it the way torch does, so the function mode sees it
        t = torch.zeros(2, 2)
        torch.overrides.handle_torch_function(func, (t,), t)


@pytest.mark.parametrize("name,group,index", FORBIDDEN)
def test_forbidden_call_is_refused(name, group, index):
    ex = EXERCISES[name]
    forbidden = ex.forbidden[group]
    func = forbidden.funcs[index]
    ref = unguarded(ex.reference)
    if ex.kind == "class":
        class Cheat(ref):
            def forward(self, *args, **kwargs):
                _call_forbidden(func)
                return super().forward(*args, **kwargs)

        cheat = Cheat
    else:
        def cheat(*args, **kwargs):
            _call_forbidden(func)
            return ref(*args, **kwargs)

    with pytest.raises(CheckFailure, match="scores zero") as info:
        run_check(ex, cheat, quiet=True)
    assert forbidden.label in str(info.value)


@pytest.mark.parametrize("name", EXERCISE_NAMES)
@pytest.mark.parametrize("bad", [None, "tensor", "int", "returns_none", "returns_string"])
def test_bad_input_gets_one_clear_sentence(name, bad):
    ex = EXERCISES[name]
    if bad is None:
        impl = None
    elif bad == "tensor":
        impl = torch.zeros(3)
    elif bad == "int":
        impl = 3
    elif ex.kind == "class":
        value = None if bad == "returns_none" else "oops"

        class Wrong(nn.Module):
            def __init__(self, *args, **kwargs):
                super().__init__()

            def forward(self, *args, **kwargs):
                return value

        impl = Wrong
    else:
        value = None if bad == "returns_none" else "oops"
        impl = lambda *a, **k: value  # noqa: E731
    with pytest.raises(CheckFailure) as info:
        run_check(ex, impl, quiet=True)
    assert str(info.value).strip(), "the message must say something"


def test_check_speed_median_under_one_second(capsys):
    times = {}
    for name in EXERCISE_NAMES:
        ex = EXERCISES[name]
        start = time.perf_counter()
        run_check(ex, unguarded(ex.reference), quiet=True)
        times[name] = time.perf_counter() - start
    median = statistics.median(times.values())
    with capsys.disabled():
        print(f"\ncheck times: median {median:.3f}s, max {max(times.values()):.3f}s "
              f"({max(times, key=times.get)}) over {len(times)} exercises")
    assert median < 1.0
    assert max(times.values()) < 10.0
