"""Chapter 10 samples: the correct answers, and three submissions that each carry one realistic
mistake in every exercise (`sliding_window_mask`, `sliding_window_attention`,
`strided_sparse_mask`; names from the mutant banks in utils/checks/_ch10.py) and one wrong quiz
answer, so that every exercise meets three distinct realistic mistakes while the chapter adds
only four submissions to the bank.

The wrong `sliding_window_attention`s never call the submission's `sliding_window_mask` (which is
wrong too), so each mistake costs exactly one exercise. The written analysis of the
local-attention bug is graded by hand: 0 points automatically.

Built from the current release (``notebooks/``) with the solution's answers filled in, then wrong
answer code substituted, so the samples never drift from the source.
"""
from __future__ import annotations

from ._chapter import Chapter, src

ASSIGNMENT = "10_sliding_window_and_sparse_attention"
FULL = {"sliding_window_mask": 2, "sliding_window_attention": 5, "derivation_local_attention_bug": 0,
        "strided_sparse_mask": 3, "quiz_1": 1, "quiz_2": 1, "quiz_3": 1}

_CHAPTER = Chapter(ASSIGNMENT, FULL)
_src = src
correct, _with_answers, _expect = _CHAPTER.correct, _CHAPTER.with_answers, _CHAPTER.expect


# ---------------------------------------------------------------- sliding_window_mask mistakes
MASK_OFF_BY_ONE = _src('''
import torch


def sliding_window_mask(s, window, causal=False):
    dist = torch.arange(s)[:, None] - torch.arange(s)[None, :]
    if causal:
        return (dist >= 0) & (dist < window)
    return dist.abs() < window  # < instead of <=: window 0 masks everything (mutant off_by_one_window)
''')

MASK_LOOKS_AHEAD = _src('''
import torch


def sliding_window_mask(s, window, causal=False):
    dist = torch.arange(s)[None, :] - torch.arange(s)[:, None]  # j - i, not i - j
    if causal:
        return (dist >= 0) & (dist <= window)  # keeps the keys ahead (mutant causal_looks_ahead)
    return dist.abs() <= window
''')

MASK_IGNORES_CAUSAL = _src('''
import torch


def sliding_window_mask(s, window, causal=False):
    dist = torch.arange(s)[:, None] - torch.arange(s)[None, :]
    return dist.abs() <= window  # the causal flag is never read (mutant ignores_causal)
''')

# ---------------------------------------------------------------- sliding_window_attention mistakes
_SWA = '''
import math

import torch
import torch.nn.functional as F


def sliding_window_attention(q, k, v, window, causal=False):
    S, D = q.size(-2), q.size(-1)
    w = min(window, S - 1)
    left, right = w, (0 if causal else w)
    W = left + right + 1
    k_win = F.pad(k, (0, 0, left, right)).unfold(-2, W, 1)
    v_win = F.pad(v, (0, 0, left, right)).unfold(-2, W, 1)
    real = torch.cat([torch.zeros(left, dtype=torch.bool), torch.ones(S, dtype=torch.bool),
                      torch.zeros(right, dtype=torch.bool)])
    is_key = real.unfold(0, W, 1)
    scores = torch.einsum("...sd,...sdw->...sw", q / math.sqrt(D), k_win)
    {mask_line}
    weights = torch.softmax(scores, dim=-1)
    return torch.einsum("...sw,...sdw->...sd", weights, v_win)
'''
SWA_PADDING_NOT_MASKED = _src(_SWA.format(
    mask_line="# the zero padding takes part in the softmax (mutant padding_not_masked)"))

SWA_NO_SCALING = _src(_SWA.format(
    mask_line='scores = scores.masked_fill(~is_key, float("-inf"))')
    .replace("q / math.sqrt(D)", "q").replace('scores = torch.einsum("...sd,...sdw->...sw", q, k_win)',
                                              'scores = torch.einsum("...sd,...sdw->...sw", q, k_win)'
                                              '  # never divided by sqrt(D) (mutant no_scaling)'))

SWA_QUADRATIC = _src('''
import math

import torch


def sliding_window_attention(q, k, v, window, causal=False):
    S = q.size(-2)
    dist = torch.arange(S)[:, None] - torch.arange(S)[None, :]
    mask = ((dist >= 0) & (dist <= window)) if causal else (dist.abs() <= window)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (S, S): correct values, over budget
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1) @ v  # (mutant quadratic_masked_full)
''')

SWA_QUERY_LOOP = _src('''
import math

import torch


def sliding_window_attention(q, k, v, window, causal=False):
    S = q.size(-2)
    outs = []
    for i in range(S):  # one query at a time: small tensors, but every key scored (over the work budget)
        d = i - torch.arange(S)
        ok = ((d >= 0) & (d <= window)) if causal else d.abs() <= window
        s = q[..., i:i + 1, :] @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (..., 1, S)
        outs.append(torch.softmax(s.masked_fill(~ok, float("-inf")), dim=-1) @ v)
    return torch.cat(outs, dim=-2)  # (mutant quadratic_work_query_loop_over_all_keys)
''')

# ---------------------------------------------------------------- strided_sparse_mask mistakes
STRIDED_PRECEDENCE = _src('''
import torch


def strided_sparse_mask(s, stride):
    dist = torch.arange(s)[:, None] - torch.arange(s)[None, :]
    return (dist >= 0) & (dist < stride) | (dist % stride == 0)  # & before |: future keys (mutant strided_part_not_causal)
''')

STRIDED_MODULO_ON_J = _src('''
import torch


def strided_sparse_mask(s, stride):
    i = torch.arange(s)[:, None]
    j = torch.arange(s)[None, :]
    dist = i - j
    return (dist >= 0) & ((dist < stride) | (j % stride == 0))  # fixed columns (mutant modulo_on_j)
''')

STRIDED_NOT_CAUSAL = _src('''
import torch


def strided_sparse_mask(s, stride):
    dist = torch.arange(s)[:, None] - torch.arange(s)[None, :]
    local = dist.abs() < stride
    strided = dist % stride == 0
    return local | strided  # j <= i never required: keys ahead too (mutant not_causal)
''')

SAMPLES = {
    "ch10_correct": ("chapter 10: the solution's answers", correct, FULL),
    "ch10_mistakes_boundaries": (
        "chapter 10: mask window off by one (<), padding slots not masked in the band, "
        "strided mask with & binding before |, quiz 1 'a'",
        lambda: _with_answers(sliding_window_mask=MASK_OFF_BY_ONE, sliding_window_attention=SWA_PADDING_NOT_MASKED,
                              strided_sparse_mask=STRIDED_PRECEDENCE, quiz_1='answer_1 = "a"'),
        _expect(sliding_window_mask=0, sliding_window_attention=0, strided_sparse_mask=0, quiz_1=0)),
    "ch10_mistakes_direction": (
        "chapter 10: causal window looks ahead, one query at a time against every key (over the work budget), "
        "strided part counted from key 0 (j % stride), quiz 2 'a'",
        lambda: _with_answers(sliding_window_mask=MASK_LOOKS_AHEAD, sliding_window_attention=SWA_QUERY_LOOP,
                              strided_sparse_mask=STRIDED_MODULO_ON_J, quiz_2='answer_2 = "a"'),
        _expect(sliding_window_mask=0, sliding_window_attention=0, strided_sparse_mask=0, quiz_2=0)),
    "ch10_mistakes_unscaled": (
        "chapter 10: the causal flag ignored by the mask, banded scores not divided by sqrt(D), "
        "strided pattern without the causal condition, quiz 3 'd' (S² with a smaller constant)",
        lambda: _with_answers(sliding_window_mask=MASK_IGNORES_CAUSAL, sliding_window_attention=SWA_NO_SCALING,
                              strided_sparse_mask=STRIDED_NOT_CAUSAL, quiz_3='answer_3 = "d"'),
        _expect(sliding_window_mask=0, sliding_window_attention=0, strided_sparse_mask=0, quiz_3=0)),
}
