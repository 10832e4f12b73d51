"""Chapter 11-13 checks: behaviour that tests/test_checks.py does not reach generically.

- the memory budgets of linear, causal linear and flash attention are large-S cases (2048 and 1024)
  that allow at most S²/8 and S²/4 elements, and a quadratic answer fails fast with the budget's sentence;
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
from utils.checks._ch13 import NO_SKIP, _judge_skipping
from utils.checks._core import run_check


@pytest.mark.parametrize("name", ["linear_attention", "causal_linear_attention", "flash_attention"])
def test_budget_case_is_large_and_tight(name):
    ex = EXERCISES[name]
    budgeted = [c for c in ex.make_cases(ex.default_seed) if c.budget is not None]
    assert len(budgeted) == (2 if name == "flash_attention" else 1)  # flash: causal and non-causal
    case = budgeted[0]
    s = case.args[0].size(-2)
    assert s >= 1024 and case.budget.numel <= s * s // 4 and case.budget.why
    quadratic = next(m for m in ex.mutants if m.name.startswith("quadratic"))
    assert quadratic.hint == case.budget.why
    run_check(ex, unguarded(ex.reference), quiet=True)  # warm-up: the first dispatch mode imports part of torch
    start = time.perf_counter()
    with pytest.raises(CheckFailure) as info:
        run_check(ex, quadratic.impl, quiet=True)
    assert "over its budget" in str(info.value) and case.budget.why in str(info.value)
    assert time.perf_counter() - start < 4.0


def _skipping_case():
    ex = EXERCISES["flash_attention"]
    cases = [c for c in ex.make_cases(ex.default_seed) if c.judge is not None]
    assert len(cases) == 1 and cases[0].run is not None
    return ex, cases[0]


def test_block_skipping_is_judged_from_work_counts():
    ex, case = _skipping_case()
    counts = ex.call(unguarded(ex.reference), case)
    assert isinstance(counts, list) and len(counts) == 2 and all(isinstance(n, int) for n in counts)
    full, causal = counts
    assert 0.5 < causal / full < 0.7  # 10 of 16 tiles
    assert case.judge(counts) is None
    no_skip = next(m.impl for m in ex.mutants if m.name == "causal_without_block_skipping")
    verdict = case.judge(ex.call(no_skip, case))
    assert verdict and NO_SKIP in verdict
    assert _judge_skipping([0, 0]) is None  # no matmul or exp seen: not judged


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
