"""The tests of the tests: every check in the course, whatever chapter registered it.

For every exercise in ``utils.checks.EXERCISES``:
- the reference passes its own check (twice, with the same verdict: no unseeded randomness);
- every correct variant (einsum, loops, float64 inside, ...) passes: a check demands only what
  the exercise states;
- the unimplemented stub fails with "not implemented";
- every mutant in the bank fails, and the message names that mutant's mistake, fast;
- exercises that later code trains through compare gradients; efficient exercises reject a
  quadratic (or all-pairs) variant through their budget;
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
VARIANTS = [(n, v.name) for n in EXERCISE_NAMES for v in EXERCISES[n].variants]

# Exercises that later sections or chapters train through: their checks compare gradients.
DIFFERENTIABLE = {
    "softmax", "logsumexp", "attention_pooling", "AdditiveAttention", "scaled_dot_product_attention",
    "masked_softmax", "SelfAttention", "MultiHeadAttention", "LayerNorm", "FeedForward", "DecoderLayer",
    "GroupedQueryAttention", "sliding_window_attention", "linear_attention", "causal_linear_attention",
    "apply_rope", "TinyGPT",
}
# Exercises that exist to save memory or time: a quadratic (or all-pairs) mutant, named
# "quadratic_*" or "all_pairs*", must be rejected by the budget.
EFFICIENT = {
    "dot_product_variance", "sliding_window_attention", "linear_attention", "causal_linear_attention",
    "flash_attention", "GroupedQueryAttention", "KVCache",
}
FAIL_SECONDS = 4.0  # CPU seconds; target 2 s, margin for slower machines
# CPU seconds each mutant's rejection took in test_mutant_is_rejected_and_named, for test_check_speed's
# table (which runs later in this module; run alone, it times the mutants itself).
FAIL_TIMES: dict = {}
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
    start = time.thread_time()  # CPU time: checks run on one thread; a busy machine does not count
    with pytest.raises(CheckFailure) as info:
        run_check(ex, m.impl, quiet=True)
    elapsed = time.thread_time() - start
    FAIL_TIMES[(name, mutant)] = elapsed
    assert m.hint in str(info.value), f"mutant {mutant} was rejected but not named:\n{info.value}"
    assert elapsed < FAIL_SECONDS, f"rejecting {mutant} took {elapsed:.1f} s"


@pytest.mark.parametrize("name,variant", VARIANTS)
def test_correct_variant_passes(name, variant):
    ex = EXERCISES[name]
    v = next(v for v in ex.variants if v.name == variant)
    run_check(ex, v.impl, quiet=True)


@pytest.mark.parametrize("name", EXERCISE_NAMES)
def test_has_correct_variants(name):
    assert EXERCISES[name].variants, f"{name} needs correct answers written differently (variants)"


@pytest.mark.parametrize("name", sorted(DIFFERENTIABLE))
def test_gradients_are_compared(name):
    ex = EXERCISES[name]
    assert any(c.grad for c in ex.make_cases(ex.default_seed)), f"{name}: no case compares gradients"


@pytest.mark.parametrize("name", sorted(EFFICIENT))
def test_efficient_exercise_rejects_a_quadratic_variant(name):
    ex = EXERCISES[name]
    assert any(m.name.startswith(("quadratic", "all_pairs")) for m in ex.mutants), \
        f"{name}: add a quadratic mutant that the budget rejects"


def test_no_extra_checks_left():
    """Extra checks ran only in the learner's kernel; a judged Case is re-verified by the grader."""
    assert not [n for n in EXERCISE_NAMES if EXERCISES[n].extra_checks]


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
    if owner is not None:  # a patched Python entry point: calling it (or using it) is enough
        entry = getattr(owner, func._tripwire_attr)
        entry(torch.zeros(2, 2)) if callable(entry) else entry.run_backward
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


def _softmax_by_aten(x, dim=-1):
    return torch.ops.aten._softmax(x, dim, False)


def _softmax_without_torch_function(x, dim=-1):
    with torch._C.DisableTorchFunction():
        return torch.softmax(x, dim)


def _sdpa_by_aten(q, k, v, mask=None, dropout_p=0.0):
    with torch._C.DisableTorchFunction():
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return out, out


def _backward_by_saved_grad(q, k, v, grad_out, mask=None):
    from torch.autograd import grad as saved_grad  # imported before any tripwire

    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out, _ = unguarded(EXERCISES["scaled_dot_product_attention"].reference)(q, k, v, mask)
    return saved_grad(out, (q, k, v), grad_out)


@pytest.mark.parametrize("name,cheat", [
    ("softmax", _softmax_by_aten), ("softmax", _softmax_without_torch_function),
    ("scaled_dot_product_attention", _sdpa_by_aten), ("sdpa_backward", _backward_by_saved_grad),
])
def test_forbidden_call_is_refused_below_torch_functions(name, cheat):
    """torch.ops.aten.* calls, torch-function handling switched off, and functions imported before
    the check started are all caught."""
    with pytest.raises(CheckFailure, match="scores zero"):
        run_check(EXERCISES[name], cheat, quiet=True)


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


def test_check_speed(capsys):
    """Per exercise: cases, mutants, variants, and the check's time passing (the reference) and
    failing (the slowest mutant, diagnosis included). Targets on an idle 2-core machine: median
    ≤ 0.1 s and max ≤ 1 s passing, ≤ 2 s failing; asserted with a margin for a busy CI."""
    rows = []
    run_check(EXERCISES["scaled_dot_product_attention"], unguarded(EXERCISES["scaled_dot_product_attention"].reference),
              quiet=True)  # warm-up: the first dispatch mode imports part of torch once
    for name in EXERCISE_NAMES:
        ex = EXERCISES[name]
        start = time.thread_time()  # CPU time of this thread (the checks run single-threaded)
        run_check(ex, unguarded(ex.reference), quiet=True)
        passing = time.thread_time() - start
        failing = 0.0
        for m in ex.mutants:
            if (name, m.name) in FAIL_TIMES:  # timed already, by the test of this mutant
                failing = max(failing, FAIL_TIMES[(name, m.name)])
                continue
            start = time.thread_time()
            try:
                run_check(ex, m.impl, quiet=True)
            except CheckFailure:
                pass
            failing = max(failing, time.thread_time() - start)
        rows.append((name, len(ex.make_cases(ex.default_seed)), len(ex.mutants), len(ex.variants), passing, failing))
    passing = [r[4] for r in rows]
    with capsys.disabled():
        print("\n| exercise | cases | mutants | variants | pass (s) | slowest fail (s) |")
        print("|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]:.3f} | {r[5]:.3f} |")
        print(f"passing: median {statistics.median(passing):.3f} s, max {max(passing):.3f} s; "
              f"failing: max {max(r[5] for r in rows):.3f} s")
    assert statistics.median(passing) < 0.3
    assert max(passing) < 3.0
    assert max(r[5] for r in rows) < FAIL_SECONDS
