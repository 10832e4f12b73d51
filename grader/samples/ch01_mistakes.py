"""Chapter 01 samples: the correct answers, and three submissions that each carry one realistic
mistake per exercise (names from the mutant banks in utils/checks/_ch01.py) and one wrong quiz
answer, so that the chapter adds only four submissions to the bank.

Built from the current release (``notebooks/``) with the solution's answers filled in, then wrong
answer code substituted, so the samples never drift from the source.
"""
from __future__ import annotations

from ._chapter import Chapter, src

ASSIGNMENT = "01_motivation"
FULL = {"dot_product_score": 2, "attention_pooling": 4, "quiz_1": 1, "quiz_2": 1, "quiz_3": 1,
        "derivation_nadaraya_watson": 0}


_CHAPTER = Chapter(ASSIGNMENT, FULL)
_src = src
correct, _with_answers, _expect = _CHAPTER.correct, _CHAPTER.with_answers, _CHAPTER.expect


# ---------------------------------------------------------------- dot_product_score mistakes
SCORE_BATCHED_T = _src('''
import torch


def dot_product_score(query, keys):
    return query @ keys.T  # reverses every dim of batched keys (mutant batched_T)
''')

SCORE_TRANSPOSE_1_2 = _src('''
import torch


def dot_product_score(query, keys):
    return query @ keys.transpose(1, 2)  # right for (B, S, D) only (mutant transpose_1_2)
''')

SCORE_SCALED = _src('''
import math

import torch


def dot_product_score(query, keys):
    return query @ keys.transpose(-2, -1) / math.sqrt(query.size(-1))  # scaled (mutant scaled_by_sqrt_d)
''')

# ---------------------------------------------------------------- attention_pooling mistakes
POOL_WRONG_DIM = _src('''
import torch


def attention_pooling(query, keys, values, score_fn, mask=None):
    scores = score_fn(query, keys)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=1).nan_to_num(0.0)  # dim=1: the queries of (B, S_q, S_k) (mutant softmax_dim_1)
    return weights @ values, weights
''')

POOL_NAN_ROWS = _src('''
import torch


def attention_pooling(query, keys, values, score_fn, mask=None):
    scores = score_fn(query, keys)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)  # a fully masked row stays NaN (mutant nan_fully_masked)
    return weights @ values, weights
''')

POOL_INPLACE = _src('''
import torch


def attention_pooling(query, keys, values, score_fn, mask=None):
    scores = score_fn(query, keys)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    weights[weights.isnan()] = 0.0  # in place on the softmax's output (mutant inplace_nan_fix)
    return weights @ values, weights
''')

SAMPLES = {
    "ch01_correct": ("chapter 01: the solution's answers", correct, FULL),
    "ch01_mistakes_transpose": (
        "chapter 01: dot_product_score with keys.T on batched keys, attention_pooling's softmax over the "
        "queries, quiz 1 wrong ('a')",
        lambda: _with_answers(dot_product_score=SCORE_BATCHED_T, attention_pooling=POOL_WRONG_DIM,
                              quiz_1='answer_1 = "a"'),
        _expect(dot_product_score=0, attention_pooling=0, quiz_1=0)),
    "ch01_mistakes_masks": (
        "chapter 01: dot_product_score with transpose(1, 2), attention_pooling leaves fully masked rows NaN, "
        "quiz 2 wrong ('d')",
        lambda: _with_answers(dot_product_score=SCORE_TRANSPOSE_1_2, attention_pooling=POOL_NAN_ROWS,
                              quiz_2='answer_2 = "d"'),
        _expect(dot_product_score=0, attention_pooling=0, quiz_2=0)),
    "ch01_mistakes_gradients": (
        "chapter 01: dot_product_score divided by sqrt(D), attention_pooling zeroes NaN weights in place "
        "(the backward breaks), quiz 3 wrong ('a')",
        lambda: _with_answers(dot_product_score=SCORE_SCALED, attention_pooling=POOL_INPLACE,
                              quiz_3='answer_3 = "a"'),
        _expect(dot_product_score=0, attention_pooling=0, quiz_3=0)),
}
