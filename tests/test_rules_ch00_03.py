"""Rules of issues 16-18 for chapters 00-03: what each verdict and message must be.

- dot_product_variance is reproducible (issue 18 §2): a noise-only estimate scores nothing and is
  told that its value is not the variance of the prescribed samples; correct answers written
  another way (NumPy, float64 after the draws) pass; the prompt states the draw order.
- mistakes nobody listed before (issue 16 §5) are named: tanh on each projection in additive
  attention, softmax(dim=1) in attention_pooling.
- numbers in the prose are the ones the notebook prints (issue 17 §2): exp underflow (00), the
  step from which the alignment is back on the anti-diagonal (01).
- the self-check of 00 question 2 accepts an expression, as its prompt says (issue 16 §3).
"""
import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn as nn

from utils.checks import EXERCISES, CheckFailure, check_number
from utils.checks import check_AdditiveAttention, check_attention_pooling, check_dot_product_variance

ROOT = Path(__file__).resolve().parents[1]


def _cells(name):
    nb = json.loads((ROOT / "solutions" / name / f"{name}.ipynb").read_text())
    out = []
    for c in nb["cells"]:
        src = "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
        text = "".join("".join(o.get("text", "")) if isinstance(o.get("text", ""), list) else o.get("text", "")
                       for o in c.get("outputs", []))
        out.append((src, text))
    return out


# ---------------------------------------------------------------- dot_product_variance (03)
def _noise_only(d_k, n_samples, scaled):
    g = torch.Generator().manual_seed(7)  # never samples q or k: the closed form times chi-square noise
    x = torch.randn(n_samples - 1, generator=g, dtype=torch.float64)
    return (1.0 if scaled else float(d_k)) * float((x * x).sum()) / (n_samples - 1)


def test_noise_only_estimate_fails_and_is_told_why():
    with pytest.raises(CheckFailure) as info:
        check_dot_product_variance(_noise_only)
    msg = str(info.value)
    assert "is not the variance of the samples the prompt prescribes" in msg
    assert "cases failed" in msg


def _numpy_style(d_k, n_samples, scaled):
    import numpy as np

    q = torch.randn(n_samples, d_k).numpy()  # the prescribed draws, then NumPy in float64
    k = torch.randn(n_samples, d_k).numpy()
    d = (q.astype(np.float64) * k).sum(axis=1) / (math.sqrt(d_k) if scaled else 1.0)
    return float(np.var(d, ddof=1))


def test_correct_answer_in_numpy_passes(capsys):
    check_dot_product_variance(_numpy_style)
    assert "✅" in capsys.readouterr().out


def test_variance_prompt_states_the_draw_order():
    contract = EXERCISES["dot_product_variance"].contract.docstring()
    for phrase in ("first q = torch.randn(n_samples, d_k), then k = torch.randn(n_samples, d_k) (float32)",
                   "the check seeds it before each call", "dividing by n_samples - 1"):
        assert phrase in " ".join(contract.split()), phrase


def test_closed_form_is_named():
    with pytest.raises(CheckFailure) as info:
        check_dot_product_variance(lambda d_k, n_samples, scaled: 1.0 if scaled else float(d_k))
    assert "does not depend on the random samples" in str(info.value)


# ---------------------------------------------------------------- AdditiveAttention (02)
class _TanhEach(nn.Module):
    def __init__(self, query_dim, key_dim, attn_dim):
        super().__init__()
        self.W_q = nn.Linear(query_dim, attn_dim, bias=False)
        self.W_k = nn.Linear(key_dim, attn_dim, bias=False)
        self.w_v = nn.Linear(attn_dim, 1, bias=False)

    def forward(self, query, keys, values, mask=None):
        h = torch.tanh(self.W_q(query)).unsqueeze(2) + torch.tanh(self.W_k(keys)).unsqueeze(1)
        s = self.w_v(h).squeeze(-1)
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        w = torch.softmax(s, dim=-1)
        if mask is not None:
            w = w.masked_fill(~mask, 0.0)
        return w @ values, w


def test_tanh_on_each_projection_is_named():
    with pytest.raises(CheckFailure) as info:
        check_AdditiveAttention(_TanhEach)
    assert "tanh was applied to each projection separately" in str(info.value)


# ---------------------------------------------------------------- attention_pooling (01)
def _pool_dim_1(query, keys, values, score_fn, mask=None):
    scores = score_fn(query, keys)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = torch.softmax(scores, dim=1)
    w = torch.where(torch.isnan(w), torch.zeros_like(w), w)
    return w @ values, w


def test_softmax_dim_1_is_named():
    with pytest.raises(CheckFailure) as info:
        check_attention_pooling(_pool_dim_1)
    assert "the softmax was taken over dim=1" in str(info.value)


# ---------------------------------------------------------------- prose against outputs
def test_00_underflow_threshold_is_printed_and_quoted():
    cells = _cells("00_foundations")
    printed = next(text for src, text in cells if "exp_is_zero_below" in src)
    assert "-103.97" in printed
    prose = next(src for src, _ in cells if "underflow" in src and "88.72" in src and not src.startswith("import"))
    assert "-103.97" in prose and "103.3" not in prose.replace("103.28", "")


def test_01_alignment_recovers_at_the_printed_step():
    cells = _cells("01_motivation")
    printed = next(text for src, text in cells if "back on the anti-diagonal for good" in src)
    step = int(printed.split("for good from step ")[1].split()[0])
    prose = next(src for src, _ in cells if "the model is back on it" in src)
    assert f"from step {step} on" in prose


def test_00_question_2_accepts_an_expression(capsys):
    src = next(s for s, _ in _cells("00_foundations") if 'qid="00.q2"' in s)
    key = src.split('key="')[1].split('"')[0]
    check_number(math.log(2), qid="00.q2", key=key, decimals=3)
    assert "✅" in capsys.readouterr().out
    prompt = next(s for s, _ in _cells("00_foundations") if s.startswith("**Question 2.**"))
    assert "expression that evaluates to one" in prompt


# ---------------------------------------------------------------- issue 24: dropout's independence
def test_dropout_draws_each_weight_independently_on_every_call():
    """The probes call the answer twice: the two calls' keep masks, the two batch entries' masks, and
    the dropped share per query row and per key column are judged against independent draws. Each
    way of sharing a mask fails with its sentence; correct dropouts (F.dropout, rand_like, bernoulli)
    pass at every seed tried (bounds: 6 standard errors + 1% for agreement, a dispersion ratio of 2.5
    where whole rows give 64)."""
    import torch.nn.functional as F

    from utils.checks._ch03 import (DROPOUT_SAME_EVERY_CALL, DROPOUT_SHARED_OVER_BATCH, DROPOUT_WHOLE_COLUMNS,
                                    DROPOUT_WHOLE_ROWS, _independent)
    from utils.checks._core import Case, run_check

    ex = EXERCISES["scaled_dot_product_attention"]
    for name, hint in (("dropout_same_mask_every_call", DROPOUT_SAME_EVERY_CALL),
                       ("dropout_mask_shared_over_batch", DROPOUT_SHARED_OVER_BATCH),
                       ("dropout_whole_query_rows", DROPOUT_WHOLE_ROWS),
                       ("dropout_whole_key_columns", DROPOUT_WHOLE_COLUMNS)):
        with pytest.raises(CheckFailure) as info:
            run_check(ex, next(m.impl for m in ex.mutants if m.name == name), quiet=True)
        assert hint in str(info.value) and "dropout_p = 0.1" in str(info.value)
    w = torch.softmax(torch.randn(2, 64, 64, generator=torch.Generator().manual_seed(0)), -1)
    draws = (lambda p: F.dropout(w, p), lambda p: w * (torch.rand_like(w) >= p) / (1 - p),
             lambda p: w * torch.bernoulli(torch.full_like(w, 1 - p)) / (1 - p))
    for seed in range(200):
        torch.manual_seed(seed)
        for draw in draws:
            for p in (0.1, 0.8):
                a, b = draw(p), draw(p)
                assert _independent(Case("", (), {"dropout_p": p}), (a.sum(-1, keepdim=True), a, b.sum(-1, keepdim=True), b)) is None
