"""Chapter 04 samples: the correct answers, and three submissions that each carry one realistic
mistake in every exercise (`causal_mask`, `padding_mask`, `masked_softmax`; names from the mutant
banks in utils/checks/_ch04.py) and one wrong quiz answer, so that the chapter adds only four
submissions to the bank.

Built from the current release (``notebooks/``) with the solution's answers filled in, then wrong
answer code substituted, so the samples never drift from the source.
"""
from __future__ import annotations

from ._chapter import Chapter, src

ASSIGNMENT = "04_masking_and_causal_attention"
FULL = {"causal_mask": 3, "padding_mask": 3, "masked_softmax": 4, "quiz_1": 1, "quiz_2": 1, "quiz_3": 1}


_CHAPTER = Chapter(ASSIGNMENT, FULL)
_src = src
correct, _with_answers, _expect = _CHAPTER.correct, _CHAPTER.with_answers, _CHAPTER.expect


# ---------------------------------------------------------------- causal_mask mistakes
CAUSAL_TOP_LEFT = _src('''
import torch


def causal_mask(s_q, s_k=None):
    if s_k is None:
        s_k = s_q
    return torch.ones(s_q, s_k, dtype=torch.bool).tril()  # top-left (mutant top_left_aligned)
''')

CAUSAL_FLOAT = _src('''
import torch


def causal_mask(s_q, s_k=None):
    if s_k is None:
        s_k = s_q
    return torch.tril(torch.ones(s_q, s_k), diagonal=s_k - s_q)  # 0/1 floats (mutant float_mask)
''')

CAUSAL_STRICT = _src('''
import torch


def causal_mask(s_q, s_k=None):
    if s_k is None:
        s_k = s_q
    i = torch.arange(s_q).unsqueeze(1)  # (s_q, 1)
    j = torch.arange(s_k).unsqueeze(0)  # (1, s_k)
    return j < i + (s_k - s_q)  # the diagonal is masked (mutant diagonal_excluded)
''')

# ---------------------------------------------------------------- padding_mask mistakes
PADDING_OFF_BY_ONE = _src('''
import torch


def padding_mask(lengths, max_len):
    positions = torch.arange(max_len)
    return (positions <= lengths.unsqueeze(-1)).unsqueeze(1)  # <= instead of < (mutant off_by_one)
''')

PADDING_NO_MIDDLE_DIM = _src('''
import torch


def padding_mask(lengths, max_len):
    return torch.arange(max_len) < lengths[:, None]  # (B, max_len) (mutant missing_middle_dim)
''')

PADDING_QUERIES = _src('''
import torch


def padding_mask(lengths, max_len):
    return (torch.arange(max_len) < lengths[:, None]).unsqueeze(-1)  # (B, max_len, 1) (mutant masks_queries)
''')

# ---------------------------------------------------------------- masked_softmax mistakes
MSM_NEG_1E9 = _src('''
import torch


def masked_softmax(scores, mask):
    return torch.softmax(scores.masked_fill(~mask, -1e9), dim=-1)  # uniform fully masked rows (mutant neg_1e9_fully_masked)
''')

MSM_INPLACE = _src('''
import torch


def masked_softmax(scores, mask):
    w = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    w[w.isnan()] = 0.0  # in place on the softmax's output (mutant inplace_nan_fix)
    return w
''')

MSM_ADDITIVE = _src('''
import torch


def masked_softmax(scores, mask):
    bias = torch.zeros(mask.shape, dtype=scores.dtype).masked_fill(~mask, float("-inf"))
    return torch.softmax(scores + bias, dim=-1).nan_to_num(0.0)  # NaN gradients (mutant additive_inf_bias)
''')

SAMPLES = {
    "ch04_correct": ("chapter 04: the solution's answers", correct, FULL),
    "ch04_mistakes_top_left": (
        "chapter 04: top-left causal mask, padding off by one (<=), -1e9 fill, quiz 1 says key 0 only ('a')",
        lambda: _with_answers(causal_mask=CAUSAL_TOP_LEFT, padding_mask=PADDING_OFF_BY_ONE,
                              masked_softmax=MSM_NEG_1E9, quiz_1='answer_1 = "a"'),
        _expect(causal_mask=0, padding_mask=0, masked_softmax=0, quiz_1=0)),
    "ch04_mistakes_shapes": (
        "chapter 04: float causal mask, padding mask (B, max_len), NaN rows zeroed in place, quiz 2 says NaN ('b')",
        lambda: _with_answers(causal_mask=CAUSAL_FLOAT, padding_mask=PADDING_NO_MIDDLE_DIM,
                              masked_softmax=MSM_INPLACE, quiz_2='answer_2 = "b"'),
        _expect(causal_mask=0, padding_mask=0, masked_softmax=0, quiz_2=0)),
    "ch04_mistakes_diagonal": (
        "chapter 04: causal mask without its diagonal, padding masks queries (B, max_len, 1), additive -inf bias, "
        "quiz 3 says the two mask shapes are the same ('a')",
        lambda: _with_answers(causal_mask=CAUSAL_STRICT, padding_mask=PADDING_QUERIES,
                              masked_softmax=MSM_ADDITIVE, quiz_3='answer_3 = "a"'),
        _expect(causal_mask=0, padding_mask=0, masked_softmax=0, quiz_3=0)),
}
