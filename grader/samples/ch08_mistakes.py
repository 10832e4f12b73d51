"""Chapter 08 samples: the correct answers, and three submissions that each carry one realistic
mistake in every exercise (`softmax_backward`, `sdpa_backward`, `ScaledDotProductAttentionFunction`;
names from the mutant banks in utils/checks/_ch08.py) and one wrong quiz answer, so that the
chapter adds only four submissions to the bank.

The wrong `ScaledDotProductAttentionFunction`s compute their gradients inline (not through the
submission's `sdpa_backward`, which is wrong too), so each mistake costs exactly one exercise.
The derivation is graded by hand: 0 points automatically.

Built from the current release (``notebooks/``) with the solution's answers filled in, then wrong
answer code substituted, so the samples never drift from the source.
"""
from __future__ import annotations

from ._chapter import Chapter, src

ASSIGNMENT = "08_attention_gradients"
FULL = {"derivation_softmax_backward": 0, "softmax_backward": 3, "sdpa_backward": 5,
        "ScaledDotProductAttentionFunction": 4, "quiz_1": 1, "quiz_2": 1, "quiz_3": 1}


_CHAPTER = Chapter(ASSIGNMENT, FULL)
_src = src
correct, _with_answers, _expect = _CHAPTER.correct, _CHAPTER.with_answers, _CHAPTER.expect


# ---------------------------------------------------------------- softmax_backward mistakes
SB_NO_SUBTRACTION = _src('''
def softmax_backward(a, grad_a):
    return a * grad_a  # only the diagonal of the Jacobian (mutant no_subtraction)
''')

SB_SUM_WITHOUT_A = _src('''
def softmax_backward(a, grad_a):
    return a * (grad_a - grad_a.sum(dim=-1, keepdim=True))  # plain sum (mutant sum_without_a)
''')

SB_MISSING_OUTER_A = _src('''
def softmax_backward(a, grad_a):
    return grad_a - (grad_a * a).sum(dim=-1, keepdim=True)  # no outer a (mutant missing_outer_a)
''')

# ---------------------------------------------------------------- sdpa_backward mistakes
_SDPA = '''
import math

import torch


def sdpa_backward(q, k, v, grad_out, mask=None):
    scale = 1.0 / math.sqrt(q.size(-1))
    scores = q @ k.transpose(-2, -1) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    {fix_rows}
    dv = weights.transpose(-2, -1) @ grad_out
    d_weights = grad_out @ v.transpose(-2, -1)
    d_scores = weights * (d_weights - (d_weights * weights).sum(dim=-1, keepdim=True))
    dq = {dq}
    dk = {dk}
    return dq, dk, dv
'''
_FIX = "weights = weights.nan_to_num(0.0)"
SDPA_DQ_NO_SCALE = _src(_SDPA.format(fix_rows=_FIX, dq="d_scores @ k  # no 1/sqrt(D) (mutant dq_missing_scale)",
                                     dk="d_scores.transpose(-2, -1) @ q * scale"))
SDPA_DK_NOT_TRANSPOSED = _src(_SDPA.format(fix_rows=_FIX, dq="d_scores @ k * scale",
                                           dk="d_scores @ q * scale  # dS not transposed (mutant dk_dS_not_transposed)"))
SDPA_NAN_ROWS = _src(_SDPA.format(fix_rows="# fully masked rows stay NaN (mutant nan_fully_masked)",
                                  dq="d_scores @ k * scale", dk="d_scores.transpose(-2, -1) @ q * scale"))

# ---------------------------------------------------------------- ScaledDotProductAttentionFunction mistakes
_FN = '''
import math

import torch


def _weights(q, k, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1).nan_to_num(0.0)


class ScaledDotProductAttentionFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, mask=None):
        ctx.save_for_backward(q, k, v)
        ctx.mask = mask
        return _weights(q, k, mask) @ v

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v = ctx.saved_tensors
        weights = _weights(q, k, {bw_mask})
        dv = weights.transpose(-2, -1) @ grad_out
        d_weights = grad_out @ v.transpose(-2, -1)
        d_scores = weights * (d_weights - (d_weights * weights).sum(dim=-1, keepdim=True))
        dq = d_scores @ k / math.sqrt(q.size(-1))
        dk = d_scores.transpose(-2, -1) @ q / math.sqrt(q.size(-1))
        return {ret}
'''
FN_WRONG_ORDER = _src(_FN.format(bw_mask="ctx.mask", ret="dk, dq, dv, None  # (mutant grads_in_wrong_order)"))
FN_NO_MASK_SLOT = _src(_FN.format(bw_mask="ctx.mask", ret="dq, dk, dv  # (mutant no_gradient_slot_for_mask)"))
FN_IGNORES_MASK = _src(_FN.format(bw_mask="None", ret="dq, dk, dv, None  # mask dropped in backward (mutant backward_ignores_mask)"))

SAMPLES = {
    "ch08_correct": ("chapter 08: the solution's answers", correct, FULL),
    "ch08_mistakes_diagonal": (
        "chapter 08: softmax backward a ⊙ grad_a only, dq without 1/sqrt(D), Function grads in wrong order, quiz 1 'a' (the upstream gradient passed through)",
        lambda: _with_answers(softmax_backward=SB_NO_SUBTRACTION, sdpa_backward=SDPA_DQ_NO_SCALE,
                              ScaledDotProductAttentionFunction=FN_WRONG_ORDER, quiz_1='answer_1 = "a"'),
        _expect(softmax_backward=0, sdpa_backward=0, ScaledDotProductAttentionFunction=0, quiz_1=0)),
    "ch08_mistakes_transpose": (
        "chapter 08: row term without a, dk = dS q (no transpose), Function without a mask slot, quiz 2 'd' (dS over sqrt(d_k))",
        lambda: _with_answers(softmax_backward=SB_SUM_WITHOUT_A, sdpa_backward=SDPA_DK_NOT_TRANSPOSED,
                              ScaledDotProductAttentionFunction=FN_NO_MASK_SLOT, quiz_2='answer_2 = "d"'),
        _expect(softmax_backward=0, sdpa_backward=0, ScaledDotProductAttentionFunction=0, quiz_2=0)),
    "ch08_mistakes_masks": (
        "chapter 08: no outer a, NaN on fully masked rows, Function backward ignores the mask, quiz 3 'a'",
        lambda: _with_answers(softmax_backward=SB_MISSING_OUTER_A, sdpa_backward=SDPA_NAN_ROWS,
                              ScaledDotProductAttentionFunction=FN_IGNORES_MASK, quiz_3='answer_3 = "a"'),
        _expect(softmax_backward=0, sdpa_backward=0, ScaledDotProductAttentionFunction=0, quiz_3=0)),
}
