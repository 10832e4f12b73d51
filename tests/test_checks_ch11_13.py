"""Chapter 11-13 checks: behaviour that tests/test_checks.py does not reach generically.

- the memory budgets of linear, causal linear and flash attention are large-S cases (2048 and 1024;
  flash also S_q = 128 against S_k = 4096) that allow at most S²/8 and S_q·S_k/4 elements, and a
  quadratic answer fails fast with the budget's sentence; flash attention's also counts everything
  it keeps alive at once, so tiles kept in a list fail like the strip they make up;
- flash attention's causal block skipping is a judged case: its run counts matmul/exp work, and
  the verdict is a function of those counts only (the grader judges them in another process);
- apply_rope's odd-D behaviour is a tip, never a failure (input validation is not graded);
- online_softmax's cases include leading all -inf blocks, an all -inf row and |x| ~ 1000.
"""
import time

import pytest
import torch

from utils._guard import unguarded
from utils.checks import EXERCISES, CheckFailure
from utils.checks._ch13 import NO_SKIP
from utils.checks._core import run_check


@pytest.mark.parametrize("name", ["linear_attention", "causal_linear_attention", "flash_attention"])
def test_budget_cases_are_large_and_tight(name):
    ex = EXERCISES[name]
    budgeted = [c for c in ex.make_cases(ex.default_seed) if c.budget is not None and c.budget.numel]
    sizes = sorted({(c.args[0].size(-2), c.args[1].size(-2)) for c in budgeted})
    assert len(sizes) >= 2 and max(s_k for _, s_k in sizes) >= 1024  # measured at two sizes at least, one large
    for case in budgeted:
        s_q, s_k = case.args[0].size(-2), case.args[1].size(-2)
        assert case.budget.numel <= s_q * s_k // 4 and case.budget.why
    quadratic = next(m for m in ex.mutants if m.name.startswith("quadratic"))
    assert quadratic.hint == budgeted[0].budget.why
    run_check(ex, unguarded(ex.reference), quiet=True)  # warm-up: the first dispatch mode imports part of torch
    start = time.perf_counter()
    with pytest.raises(CheckFailure) as info:
        run_check(ex, quadratic.impl, quiet=True)
    assert "over its budget" in str(info.value) and budgeted[0].budget.why in str(info.value)
    assert time.perf_counter() - start < 4.0


@pytest.mark.parametrize("mutant", ["causal_without_block_skipping", "hidden_tiles_scored_then_skipped"])
def test_block_skipping_is_held_by_a_work_budget(mutant):
    ex = EXERCISES["flash_attention"]
    work = [c for c in ex.make_cases(ex.default_seed) if c.budget is not None and c.budget.work]
    assert len({c.args[0].size(-2) for c in work}) >= 2
    with pytest.raises(CheckFailure) as info:
        run_check(ex, next(m.impl for m in ex.mutants if m.name == mutant), quiet=True)
    assert NO_SKIP in str(info.value) and "multiply-adds" in str(info.value)


def test_odd_d_is_a_tip_not_a_failure(capsys):
    ex = EXERCISES["apply_rope"]
    ref = unguarded(ex.reference)

    def passes_odd_d_through(x, positions=None, base=10000.0):
        if x.size(-1) % 2:
            return x.clone()
        return ref(x, positions, base)

    run_check(ex, passes_odd_d_through)
    out = capsys.readouterr().out
    assert "✅" in out and "Tip (not graded)" in out and "odd D" in out
    run_check(ex, ref)  # raises ValueError on odd D: no tip
    assert "Tip" not in capsys.readouterr().out


def test_online_softmax_cases_cover_minus_inf_and_large_magnitudes():
    ex = EXERCISES["online_softmax"]
    cases = ex.make_cases(ex.default_seed)
    leading = [c for c in cases if torch.isneginf(c.args[0][..., : c.args[1]]).all(-1).any()]
    empty_row = [c for c in cases if torch.isneginf(c.args[0]).all(-1).any()]
    huge = [c for c in cases if c.args[0].isfinite().any() and c.args[0][c.args[0].isfinite()].abs().max() >= 999]
    assert leading and empty_row and huge
    out = unguarded(ex.reference)(*empty_row[0].args)
    assert not out.isnan().any()
