"""Chapter 07 samples: the correct answers, and three submissions that each carry one realistic
mistake in every exercise (`attention_entropy`, `attention_rollout`; names from the mutant banks
in utils/checks/_ch07.py) and one wrong quiz answer, so that every exercise meets three distinct
mistakes while the chapter adds only four submissions to the bank.

The two exercises are independent (`attention_rollout` does not call `attention_entropy`), so
each mistake costs exactly its own exercise. The derivation is graded by hand: 0 points
automatically.

Built from the current release (``notebooks/``) with the solution's answers filled in, then wrong
answer code substituted, so the samples never drift from the source.
"""
from __future__ import annotations

from ._chapter import Chapter, src

ASSIGNMENT = "07_visualizing_attention"
FULL = {"derivation_entropy_rollout": 0, "attention_entropy": 3, "attention_rollout": 4,
        "quiz_1": 1, "quiz_2": 1, "quiz_3": 1}


_CHAPTER = Chapter(ASSIGNMENT, FULL)
_src = src
correct, _with_answers, _expect = _CHAPTER.correct, _CHAPTER.with_answers, _CHAPTER.expect


# ---------------------------------------------------------------- attention_entropy mistakes
ENTROPY_NAN_ON_ZERO = _src('''
import torch


def attention_entropy(weights):
    return -(weights * torch.log(weights)).sum(dim=-1)  # 0 · ln 0 = NaN (mutant nan_on_zero_weights)
''')

ENTROPY_LOG2 = _src('''
import torch


def attention_entropy(weights):
    logw = torch.where(weights > 0, weights, torch.ones_like(weights)).log2()  # bits (mutant log2)
    return -(weights * logw).sum(dim=-1)
''')

ENTROPY_NORMALISED = _src('''
import math

import torch


def attention_entropy(weights):
    logw = torch.where(weights > 0, weights, torch.ones_like(weights)).log()
    h = -(weights * logw).sum(dim=-1)
    return h / math.log(weights.size(-1))  # as a fraction of the maximum ln S_k (mutant normalised_by_log_S_k)
''')

# ---------------------------------------------------------------- attention_rollout mistakes
_ROLLOUT = '''
import torch


def attention_rollout(layer_weights):
    rollout = None
    for A in layer_weights:
        S = A.size(-1)
        A = A.mean(dim=1)
        {residual}
        A = A / A.sum(dim=-1, keepdim=True)
        rollout = A if rollout is None else {product}
    return rollout
'''
_RESIDUAL = "A = 0.5 * A + 0.5 * torch.eye(S, dtype=A.dtype)"
ROLLOUT_WRONG_ORDER = _src(_ROLLOUT.format(residual=_RESIDUAL,
                                           product="rollout @ A  # first layer on the left (mutant wrong_order)"))
ROLLOUT_NO_RESIDUAL = _src(_ROLLOUT.format(residual="# the residual path is left out (mutant no_residual)",
                                           product="A @ rollout"))

ROLLOUT_NO_RENORM = _src('''
import torch


def attention_rollout(layer_weights):
    rollout = None
    for A in layer_weights:
        S = A.size(-1)
        A = 0.5 * A.mean(dim=1) + 0.5 * torch.eye(S, dtype=A.dtype)  # rows assumed to sum to 1 already:
        rollout = A if rollout is None else A @ rollout  # never renormalised (mutant no_renormalisation)
    return rollout
''')

SAMPLES = {
    "ch07_correct": ("chapter 07: the solution's answers", correct, FULL),
    "ch07_mistakes_nan_order": (
        "chapter 07: entropy NaN on zero weights, rollout layers multiplied in the wrong order, quiz 1 'c'",
        lambda: _with_answers(attention_entropy=ENTROPY_NAN_ON_ZERO, attention_rollout=ROLLOUT_WRONG_ORDER,
                              quiz_1='answer_1 = "c"'),
        _expect(attention_entropy=0, attention_rollout=0, quiz_1=0)),
    "ch07_mistakes_bits_residual": (
        "chapter 07: entropy in bits (log2), rollout without the residual identity, quiz 3 'b' (the head does not really read the previous token)",
        lambda: _with_answers(attention_entropy=ENTROPY_LOG2, attention_rollout=ROLLOUT_NO_RESIDUAL,
                              quiz_3='answer_3 = "b"'),
        _expect(attention_entropy=0, attention_rollout=0, quiz_3=0)),
    "ch07_mistakes_normalised_renorm": (
        "chapter 07: entropy divided by ln S_k (normalised), rollout rows not renormalised after adding I, "
        "quiz 2 'a' (the residual path forgotten)",
        lambda: _with_answers(attention_entropy=ENTROPY_NORMALISED, attention_rollout=ROLLOUT_NO_RENORM,
                              quiz_2='answer_2 = "a"'),
        _expect(attention_entropy=0, attention_rollout=0, quiz_2=0)),
}
