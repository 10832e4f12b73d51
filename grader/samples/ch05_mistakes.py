"""Chapter 05 samples: the correct answers, and three submissions that each carry one realistic
mistake in every exercise (`SelfAttention`, `split_heads`, `merge_heads`, and the forward pass of
`MultiHeadAttention`; names from the mutant banks in utils/checks/_ch05.py) and one wrong quiz
answer, so that the chapter adds only four submissions to the bank.

split_heads, merge_heads and forward live in one class (one answer cell, grade_id
MultiHeadAttention); the split/merge checks call only their method, while the MultiHeadAttention
check runs the whole module, so a wrong split_heads also costs the MultiHeadAttention points.

Known grader limitation (reported to the lead): the independent re-check looks the learner's
definition up by the exercise's name, so split_heads and merge_heads (methods, not top-level defs)
are not found and a correct class scores 0 on them until grader/_verify_child.py looks the class
up by the reference's name. ch05_correct expects the correct 2 + 2 points.

Built from the current release (``notebooks/``) with the solution's answers filled in, then wrong
answer code substituted, so the samples never drift from the source.
"""
from __future__ import annotations

from ._chapter import Chapter, src

ASSIGNMENT = "05_self_and_multi_head_attention"
FULL = {"SelfAttention": 4, "MultiHeadAttention": 5, "split_heads": 2, "merge_heads": 2,
        "quiz_1": 1, "quiz_2": 1, "quiz_3": 1, "quiz_4": 1}


_CHAPTER = Chapter(ASSIGNMENT, FULL)
_src = src
correct, _with_answers, _expect = _CHAPTER.correct, _CHAPTER.with_answers, _CHAPTER.expect


# ---------------------------------------------------------------- SelfAttention mistakes
SA_TEMPLATE = '''
import math

import torch
import torch.nn as nn


class SelfAttention(nn.Module):
    def __init__(self, d_model, d_k=None, d_v=None):
        super().__init__()
        d_k = d_model if d_k is None else d_k
        d_v = {D_V} if d_v is None else d_v
        self.d_k = d_k
        self.W_q = nn.Linear(d_model, d_k, bias=False)
        self.W_k = nn.Linear(d_model, d_k, bias=False)
        self.W_v = nn.Linear(d_model, d_v, bias=False)

    def forward(self, x, mask=None):
        q, k, v = self.W_q(x), self.W_k(x), self.W_v(x)
        scores = q @ k.transpose(-2, -1){SCALE}
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
{FIX}
        return weights @ v, weights
'''
_SA_FIX = "        weights = weights.nan_to_num(0.0)"


def _sa(d_v="d_k", scale=" / math.sqrt(self.d_k)", fix=_SA_FIX) -> str:
    return _src(SA_TEMPLATE.replace("{D_V}", d_v).replace("{SCALE}", scale).replace("{FIX}", fix))


SA_NO_SCALING = _sa(scale="  # forgot / sqrt(d_k)")
SA_D_V_DEFAULT = _sa(d_v="d_model")  # d_v defaults to d_model instead of d_k
SA_INPLACE = _sa(fix="        weights[weights.isnan()] = 0.0  # in place: breaks the backward pass")

# ---------------------------------------------------------------- MultiHeadAttention mistakes
MHA_TEMPLATE = '''
import math

import torch
import torch.nn as nn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, dropout=0.0, bias=True):
        super().__init__()
        self.d_model, self.num_heads, self.d_head = d_model, num_heads, d_model // num_heads
        self.W_q = nn.Linear(d_model, d_model, bias=bias)
        self.W_k = nn.Linear(d_model, d_model, bias=bias)
        self.W_v = nn.Linear(d_model, d_model, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def split_heads(self, x):
        B, S, _ = x.shape
{SPLIT}

    def merge_heads(self, x):
        B, H, S, D_h = x.shape
{MERGE}

    def forward(self, query, key, value, mask=None):
        q = self.split_heads(self.W_q(query))
        k = self.split_heads(self.W_k(key))
        v = self.split_heads(self.W_v(value))
        scores = q @ k.transpose(-2, -1) / math.sqrt({SCALE})
{MASK}
        weights = self.dropout(weights)
        out = weights @ v
        return self.W_o(self.merge_heads(out)), weights
'''
SPLIT_OK = "        return x.view(B, S, self.num_heads, self.d_head).transpose(1, 2)"
MERGE_OK = "        return x.transpose(1, 2).reshape(B, S, H * D_h)"
MASK_OK = '''        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        if mask is not None:
            weights = weights.masked_fill(~mask, 0.0)'''


def _mha(split=SPLIT_OK, merge=MERGE_OK, scale="self.d_head", mask=MASK_OK) -> str:
    src = MHA_TEMPLATE.replace("{SPLIT}", split).replace("{MERGE}", merge).replace("{SCALE}", scale)
    return _src(src.replace("{MASK}", mask))


# A: view without transpose in both methods; the mask ignored in forward
MHA_A = _mha(split="        return x.view(B, self.num_heads, S, self.d_head)",
             merge="        return x.reshape(B, S, H * D_h)",
             mask="        weights = torch.softmax(scores, dim=-1)  # mask ignored")
# B: split without the transpose (B, S, H, D_h); merge .view on a non-contiguous tensor; scale 1/sqrt(d_model)
MHA_B = _mha(split="        return x.view(B, S, self.num_heads, self.d_head)",
             merge="        return x.transpose(1, 2).view(B, S, H * D_h)",
             scale="self.d_model")
# C: interleaved heads in split; heads averaged in merge; mask applied after the softmax
MHA_C = _mha(split="        return x.view(B, S, self.d_head, self.num_heads).permute(0, 3, 1, 2)",
             merge="        return x.mean(dim=1)",
             mask='''        weights = torch.softmax(scores, dim=-1)
        if mask is not None:
            weights = weights * mask  # after the softmax: rows no longer sum to 1''')

ZERO = dict(SelfAttention=0, MultiHeadAttention=0, split_heads=0, merge_heads=0)

SAMPLES = {
    "ch05_correct": ("chapter 05: the solution's answers", correct, FULL),
    "ch05_mistakes_view": (
        "chapter 05: self-attention without 1/sqrt(d_k); split and merge by view/reshape without transpose, "
        "mask ignored in forward; quiz 1 counts 12 heads of 4 x 768^2 ('b')",
        lambda: _with_answers(SelfAttention=SA_NO_SCALING, MultiHeadAttention=MHA_A, quiz_1='answer_1 = "b"'),
        _expect(**ZERO, quiz_1=0)),
    "ch05_mistakes_shapes": (
        "chapter 05: d_v defaults to d_model; split without transpose (B, S, H, D_h), merge .view of a "
        "non-contiguous tensor, scores scaled by 1/sqrt(d_model); quiz 2 says shape error ('a')",
        lambda: _with_answers(SelfAttention=SA_D_V_DEFAULT, MultiHeadAttention=MHA_B, quiz_2='answer_2 = "a"'),
        _expect(**ZERO, quiz_2=0)),
    "ch05_mistakes_heads": (
        "chapter 05: NaN rows zeroed in place; interleaved heads in split, heads averaged in merge, mask "
        "applied after the softmax; quiz 3 says unchanged ('a'), quiz 4 says the two cost terms are equal ('c')",
        lambda: _with_answers(SelfAttention=SA_INPLACE, MultiHeadAttention=MHA_C, quiz_3='answer_3 = "a"',
                              quiz_4='answer_4 = "c"'),
        _expect(**ZERO, quiz_3=0, quiz_4=0)),
}
