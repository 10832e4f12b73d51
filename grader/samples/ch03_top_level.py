"""Correct answers that lean on what their exercise cell defines at its top level (issue 25 §4,
issue 24 §6): the notebook's ✅ and the grade must agree on them. Judged through the re-check alone,
with the visible check beside it (tests/test_bank_recheck.py).

* chapter 03: SDPA fills with a module-level constant ``NEG_INF = float("-inf")`` (round 3: ✅ in the
  notebook, 0/5 in the grade, NameError in the re-check) and an alias ``SQRT = math.sqrt``, and
  masks through a helper function of its own cell;
* chapter 05: ``SelfAttention`` makes its parameters with ``setattr`` in ``__init__`` (round 3: refused
  by the re-check only), names them through a tuple constant, and scores through a helper.
"""
from __future__ import annotations

from .bank import FULL, _set, _src, correct

SDPA_TOP_LEVEL = _src('''
import math

import torch

NEG_INF = float("-inf")
SQRT = math.sqrt


def _masked(scores, mask):
    return scores if mask is None else scores.masked_fill(~mask, NEG_INF)


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    scores = _masked(q @ k.transpose(-2, -1) / SQRT(q.size(-1)), mask)
    w = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    if dropout_p > 0:
        w = torch.nn.functional.dropout(w, dropout_p)
    return w @ v, w
''')

SELF_ATTENTION_SETATTR = _src('''
import math

import torch
import torch.nn as nn

NEG_INF = float("-inf")
PROJECTIONS = ("W_q", "W_k", "W_v")


def _scaled_scores(q, k):
    return q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))


class SelfAttention(nn.Module):
    def __init__(self, d_model, d_k=None, d_v=None):
        super().__init__()
        d_k = d_model if d_k is None else d_k
        d_v = d_k if d_v is None else d_v
        self.d_k = d_k
        for name, size in zip(PROJECTIONS, (d_k, d_k, d_v)):
            setattr(self, name, nn.Linear(d_model, size, bias=False))

    def forward(self, x, mask=None):
        q, k, v = (getattr(self, name)(x) for name in PROJECTIONS)
        scores = _scaled_scores(q, k)
        if mask is not None:
            scores = scores.masked_fill(~mask, NEG_INF)
        weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
        return weights @ v, weights
''')

SAMPLES = {
    "ch03_other_styles_top_level": ("SDPA with NEG_INF = float('-inf'), an alias and a helper at the top of its own "
                                    "cell (full marks)",
                                    lambda: _set(correct(), "scaled_dot_product_attention", SDPA_TOP_LEVEL), FULL),
}
