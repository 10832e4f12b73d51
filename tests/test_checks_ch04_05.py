"""Chapter 04-05 checks: behaviour that tests/test_checks.py does not reach generically.

- masked_softmax is never called without a mask (its signature has no default);
- an answer that does not validate its inputs (MultiHeadAttention(10, 3) builds, a length above
  max_len gives a mask) passes, with a printed tip;
- the chapter 05 cases build without the reference (the grader re-builds them in a process where
  utils.reference raises);
- the training-mode dropout case of MultiHeadAttention passes correct answers written differently
  and names the dropout mistakes.
"""
import math

import pytest
import torch
import torch.nn as nn

from utils._guard import unguarded
from utils.checks import EXERCISES, CheckFailure
from utils.checks import _ch05
from utils.checks._core import judge_case, run_check


def test_masked_softmax_always_gets_a_mask():
    ex = EXERCISES["masked_softmax"]
    for case in ex.make_cases(ex.default_seed) + ex.make_cases(4003):
        assert len(case.args) == 2 and isinstance(case.args[1], torch.Tensor), case.label
        assert case.args[1].dtype == torch.bool


def test_masked_softmax_without_a_default_passes():
    def masked_softmax(scores, mask):  # the curriculum's signature: no default for mask
        w = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
        return torch.where(mask.any(-1, keepdim=True), w, torch.zeros_like(w))

    run_check(EXERCISES["masked_softmax"], masked_softmax, quiet=True)


class _NoValidation(nn.Module):
    """A correct MultiHeadAttention that does not check d_model % num_heads."""

    def __init__(self, d_model, num_heads, dropout=0.0, bias=True):
        super().__init__()
        self.h = num_heads
        self.W_q, self.W_k = nn.Linear(d_model, d_model, bias=bias), nn.Linear(d_model, d_model, bias=bias)
        self.W_v, self.W_o = nn.Linear(d_model, d_model, bias=bias), nn.Linear(d_model, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def split_heads(self, x):
        B, S, D = x.shape
        return x.view(B, S, self.h, D // self.h).transpose(1, 2)

    def merge_heads(self, x):
        B, H, S, D_h = x.shape
        return x.transpose(1, 2).reshape(B, S, H * D_h)

    def forward(self, query, key, value, mask=None):
        q, k, v = self.split_heads(self.W_q(query)), self.split_heads(self.W_k(key)), self.split_heads(self.W_v(value))
        s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        w = self.dropout(torch.softmax(s, dim=-1).nan_to_num(0.0))
        return self.W_o(self.merge_heads(w @ v)), w


def test_validation_is_a_tip_not_a_failure(capsys):
    run_check(EXERCISES["MultiHeadAttention"], _NoValidation)
    out = capsys.readouterr().out
    assert "✅" in out and "Tip (not graded)" in out and "num_heads" in out
    run_check(EXERCISES["padding_mask"], lambda lengths, max_len: (torch.arange(max_len) < lengths[:, None])[:, None])
    assert "Tip (not graded)" in capsys.readouterr().out


class _Refuse:
    def __getattr__(self, name):
        raise AssertionError(f"make_cases used utils.reference.{name}")


@pytest.mark.parametrize("name", ["SelfAttention", "MultiHeadAttention", "split_heads", "merge_heads"])
def test_chapter_05_cases_build_without_the_reference(name, monkeypatch):
    monkeypatch.setattr(_ch05, "ref", _Refuse())
    cases = EXERCISES[name].make_cases(5002)
    assert cases


def _dropout_case():
    ex = EXERCISES["MultiHeadAttention"]
    return ex, next(c for c in ex.make_cases(ex.default_seed) if c.judge is not None and "training" in c.label)


@pytest.mark.parametrize("impl", [unguarded(_ch05.ref.MultiHeadAttention), _NoValidation,
                                  *(v.impl for v in _ch05.MHA_EXERCISE_VARIANTS)])
def test_training_dropout_case_passes_correct_answers(impl):
    ex, case = _dropout_case()
    for seed in range(3):
        torch.manual_seed(seed)
        assert judge_case(ex, case, None, ex.call(impl, case)) is None


@pytest.mark.parametrize("mutant", ["dropout_ignored", "dropout_not_rescaled", "dropout_on_output",
                                    "weights_returned_before_dropout"])
def test_training_dropout_case_names_the_mistake(mutant):
    ex, case = _dropout_case()
    m = next(m for m in ex.mutants if m.name == mutant)
    torch.manual_seed(0)
    verdict = judge_case(ex, case, None, ex.call(m.impl, case))
    assert verdict and m.hint in verdict


def test_mha_bias_false_ignored_is_named_by_the_layout_case():
    ex = EXERCISES["MultiHeadAttention"]
    m = next(m for m in ex.mutants if m.name == "bias_flag_ignored")
    with pytest.raises(CheckFailure, match="names and shapes") as info:
        run_check(ex, m.impl, quiet=True)
    assert m.hint in str(info.value)
