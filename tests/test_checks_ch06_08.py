"""Chapter 06-08 checks: behaviour that tests/test_checks.py does not reach generically.

- the ScaledDotProductAttentionFunction check runs torch.autograd.gradcheck as judged cases (run in
  the check, judged from a sentence), and refuses a backward that calls autograd;
- the first check of a fresh process does not spend the one-off import behind the first
  TorchDispatchMode (torch._dynamo, 1-3 s) inside the learner's time budget.
"""
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch


from utils._guard import unguarded
from utils.checks import EXERCISES, CheckFailure
from utils.checks._core import judge_case, run_check
from utils.reference._common import masked_softmax_impl

ROOT = Path(__file__).resolve().parents[1]


def _gradcheck_cases():
    ex = EXERCISES["ScaledDotProductAttentionFunction"]
    cases = [c for c in ex.make_cases(ex.default_seed) if c.judge is not None]
    assert len(cases) == 2 and any(c.args[3] is not None for c in cases)  # one with a mask
    return ex, cases


def test_gradcheck_cases_pass_the_reference_and_name_a_wrong_backward():
    ex, cases = _gradcheck_cases()
    ref = unguarded(ex.reference)
    wrong = next(m.impl for m in ex.mutants if m.name == "backward_dk_missing_scale")
    for case in cases:
        assert judge_case(ex, case, None, ex.call(ref, case)) is None
        verdict = judge_case(ex, case, None, ex.call(wrong, case))
        assert verdict and "finite differences" in verdict


def _attention(q, k, v, mask):
    return masked_softmax_impl(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), mask) @ v


class _BackwardByAutograd(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, mask=None):
        ctx.save_for_backward(q, k, v)
        ctx.mask = mask
        return _attention(q, k, v, mask)

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v = (t.detach().requires_grad_() for t in ctx.saved_tensors)
        with torch.enable_grad():
            out = _attention(q, k, v, ctx.mask)
            return (*torch.autograd.grad(out, (q, k, v), grad_out), None)


def test_function_whose_backward_calls_autograd_scores_zero():
    with pytest.raises(CheckFailure, match="scores zero"):
        run_check(EXERCISES["ScaledDotProductAttentionFunction"], _BackwardByAutograd, quiet=True)


@pytest.mark.parametrize("name", ["softmax_backward", "LayerNorm"])
def test_first_check_of_a_fresh_process_is_within_budget(name):
    code = ("from utils.checks import EXERCISES\nfrom utils.checks._core import run_check\n"
            "from utils._guard import unguarded\n"
            f"ex = EXERCISES[{name!r}]\nrun_check(ex, unguarded(ex.reference), quiet=True)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
