"""Chapter 02 samples: the correct answers, and three submissions that each carry one realistic
mistake in `AdditiveAttention` (names from the mutant bank in utils/checks/_ch02.py) and one wrong
quiz answer, so that the chapter adds only four submissions to the bank.

Built from the current release (``notebooks/``) with the solution's answers filled in, then wrong
answer code substituted, so the samples never drift from the source.
"""
from __future__ import annotations

from ._chapter import Chapter, src

ASSIGNMENT = "02_additive_attention"
FULL = {"AdditiveAttention": 6, "quiz_1": 1, "quiz_2": 1, "quiz_3": 1, "derivation_additive_gradient": 0}


_CHAPTER = Chapter(ASSIGNMENT, FULL)
_src = src
correct, _with_answers, _expect = _CHAPTER.correct, _CHAPTER.with_answers, _CHAPTER.expect


# ---------------------------------------------------------------- AdditiveAttention mistakes
WITH_BIAS = _src('''
import torch
import torch.nn as nn


class AdditiveAttention(nn.Module):
    def __init__(self, query_dim, key_dim, attn_dim):
        super().__init__()
        self.W_q = nn.Linear(query_dim, attn_dim)  # bias=True by default (mutant linear_with_bias)
        self.W_k = nn.Linear(key_dim, attn_dim)
        self.w_v = nn.Linear(attn_dim, 1)

    def forward(self, query, keys, values, mask=None):
        hidden = torch.tanh(self.W_q(query).unsqueeze(2) + self.W_k(keys).unsqueeze(1))  # (B, S_q, S_k, A)
        scores = self.w_v(hidden).squeeze(-1)  # (B, S_q, S_k)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        if mask is not None:
            weights = weights.masked_fill(~mask, 0.0)
        return weights @ values, weights
''')

NEG_1E9 = _src('''
import torch
import torch.nn as nn


class AdditiveAttention(nn.Module):
    def __init__(self, query_dim, key_dim, attn_dim):
        super().__init__()
        self.W_q = nn.Linear(query_dim, attn_dim, bias=False)
        self.W_k = nn.Linear(key_dim, attn_dim, bias=False)
        self.w_v = nn.Linear(attn_dim, 1, bias=False)

    def forward(self, query, keys, values, mask=None):
        hidden = torch.tanh(self.W_q(query).unsqueeze(2) + self.W_k(keys).unsqueeze(1))  # (B, S_q, S_k, A)
        scores = self.w_v(hidden).squeeze(-1)  # (B, S_q, S_k)
        if mask is not None:
            scores = scores.masked_fill(~mask, -1e9)  # a fully masked row becomes uniform (mutant neg_1e9_fully_masked)
        weights = torch.softmax(scores, dim=-1)
        return weights @ values, weights
''')

INPLACE_NAN_FIX = _src('''
import torch
import torch.nn as nn


class AdditiveAttention(nn.Module):
    def __init__(self, query_dim, key_dim, attn_dim):
        super().__init__()
        self.W_q = nn.Linear(query_dim, attn_dim, bias=False)
        self.W_k = nn.Linear(key_dim, attn_dim, bias=False)
        self.w_v = nn.Linear(attn_dim, 1, bias=False)

    def forward(self, query, keys, values, mask=None):
        hidden = torch.tanh(self.W_q(query).unsqueeze(2) + self.W_k(keys).unsqueeze(1))  # (B, S_q, S_k, A)
        scores = self.w_v(hidden).squeeze(-1)  # (B, S_q, S_k)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        weights[weights.isnan()] = 0.0  # in place on the softmax's output: backward breaks (mutant inplace_nan_fix)
        return weights @ values, weights
''')

SAMPLES = {
    "ch02_correct": ("chapter 02: the solution's answers", correct, FULL),
    "ch02_mistakes_bias": (
        "chapter 02: nn.Linear layers with biases, quiz 1 says dot and general ('b')",
        lambda: _with_answers(AdditiveAttention=WITH_BIAS, quiz_1='answer_1 = "b"'),
        _expect(AdditiveAttention=0, quiz_1=0)),
    "ch02_mistakes_neg_1e9": (
        "chapter 02: masked with -1e9 (fully masked rows uniform), quiz 2 forgets the 4 bytes per number (128)",
        lambda: _with_answers(AdditiveAttention=NEG_1E9, quiz_2="answer_2 = 128"),
        _expect(AdditiveAttention=0, quiz_2=0)),
    "ch02_mistakes_inplace": (
        "chapter 02: NaN rows zeroed in place on the softmax's output (gradients break), quiz 3 says d_q != d_k ('c')",
        lambda: _with_answers(AdditiveAttention=INPLACE_NAN_FIX, quiz_3='answer_3 = "c"'),
        _expect(AdditiveAttention=0, quiz_3=0)),
}
