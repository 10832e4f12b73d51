"""Chapter 13 samples: the correct answers, and three submissions that each carry one realistic
mistake in both exercises (`online_softmax`, `flash_attention`; names from the mutant banks in
utils/checks/_ch13.py) and one wrong quiz answer, so that the chapter adds only four submissions to
the bank. Each exercise therefore meets three distinct mistakes here:

- online_softmax: the running sum never rescaled; the textbook loop without a guard for leading
  blocks of -inf (NaN); a running max that starts at 0 (zeros for rows far below 0, issue 16);
- flash_attention: the output accumulator never rescaled; causal masking without block skipping
  (right values, the work check fails); query blocks against all keys with a plain softmax (right
  values, the one-tile memory budget fails; issue 16). Each block softmaxed on its own and the whole
  S×S score matrix stay in the mutant banks (OS_PER_BLOCK, FLASH_FULL_SCORES are kept below).

The wrong `flash_attention`s are written inline (they never call the submission's
`online_softmax`, which is wrong too), so each mistake costs exactly one exercise. The bonus
`flash_attention_backward` is not graded and keeps the solution's code; the derivation is graded by
hand: 0 points automatically.

Built from the current release (``notebooks/``) with the solution's answers filled in, then wrong
answer code substituted, so the samples never drift from the source.
"""
from __future__ import annotations

from ._chapter import Chapter, src

ASSIGNMENT = "13_flash_attention"
FULL = {"derivation_online_softmax": 0, "online_softmax": 4, "flash_attention": 6,
        "quiz_1": 1, "quiz_2": 1, "quiz_3": 1}


_CHAPTER = Chapter(ASSIGNMENT, FULL)
_src = src
correct, _with_answers, _expect = _CHAPTER.correct, _CHAPTER.with_answers, _CHAPTER.expect


# ---------------------------------------------------------------- online_softmax mistakes
OS_NO_RESCALE = _src('''
import torch


def online_softmax(x, block_size):
    m = torch.full(x.shape[:-1], float("-inf"), dtype=x.dtype)
    l = torch.zeros(x.shape[:-1], dtype=x.dtype)
    for start in range(0, x.size(-1), block_size):
        block = x[..., start:start + block_size]
        m_new = torch.maximum(m, block.amax(dim=-1))
        shift = torch.where(m_new == float("-inf"), torch.zeros_like(m_new), m_new)
        l = l + torch.exp(block - shift[..., None]).sum(dim=-1)  # old l never multiplied by exp(m - m_new) (mutant no_rescale_of_running_sum)
        m = m_new
    shift = torch.where(m == float("-inf"), torch.zeros_like(m), m)
    out = torch.exp(x - shift[..., None]) / torch.where(l > 0, l, torch.ones_like(l))[..., None]
    return torch.where(l[..., None] > 0, out, torch.zeros_like(out))
''')

OS_NAN_LEADING = _src('''
import torch


def online_softmax(x, block_size):
    m = torch.full(x.shape[:-1], float("-inf"), dtype=x.dtype)
    l = torch.zeros(x.shape[:-1], dtype=x.dtype)
    for start in range(0, x.size(-1), block_size):
        block = x[..., start:start + block_size]
        m_new = torch.maximum(m, block.amax(dim=-1))
        # the textbook update: while m_new is still -inf, exp(-inf - (-inf)) is NaN (mutant nan_on_leading_minus_inf_block)
        l = l * torch.exp(m - m_new) + torch.exp(block - m_new[..., None]).sum(dim=-1)
        m = m_new
    return torch.exp(x - m[..., None]) / l[..., None]
''')

OS_PER_BLOCK = _src('''
import torch


def online_softmax(x, block_size):
    outs = []
    for start in range(0, x.size(-1), block_size):
        block = x[..., start:start + block_size]
        m = block.amax(dim=-1, keepdim=True)
        m = torch.where(m == float("-inf"), torch.zeros_like(m), m)
        e = torch.exp(block - m)
        s = e.sum(dim=-1, keepdim=True)
        outs.append(torch.where(s > 0, e / s, torch.zeros_like(e)))  # each block normalised on its own (mutant softmax_per_block)
    return torch.cat(outs, dim=-1)
''')

# ---------------------------------------------------------------- flash_attention mistakes
_FLASH = '''
import math

import torch


def flash_attention(q, k, v, block_size=64, causal=False):
    s_q, s_k = q.size(-2), k.size(-2)
    offset = s_k - s_q
    outs, lses = [], []
    for i in range(0, s_q, block_size):
        q_blk = q[..., i:i + block_size, :] / math.sqrt(q.size(-1))
        b_q = q_blk.size(-2)
        m = torch.full(q_blk.shape[:-1], float("-inf"), dtype=q.dtype)
        l = torch.zeros(q_blk.shape[:-1], dtype=q.dtype)
        acc = torch.zeros(*q_blk.shape[:-1], v.size(-1), dtype=q.dtype)
        for j in range(0, s_k, block_size):
            {skip}
            k_blk, v_blk = k[..., j:j + block_size, :], v[..., j:j + block_size, :]
            s = q_blk @ k_blk.transpose(-2, -1)
            if causal:
                rows = torch.arange(i, i + b_q)[:, None]
                cols = torch.arange(j, j + k_blk.size(-2))[None, :]
                s = s.masked_fill(cols > rows + offset, float("-inf"))
            m_new = torch.maximum(m, s.amax(dim=-1))
            shift = torch.where(m_new == float("-inf"), torch.zeros_like(m_new), m_new)
            alpha = torch.exp(m - shift)
            p = torch.exp(s - shift[..., None])
            l = alpha * l + p.sum(dim=-1)
            {acc_update}
            m = m_new
        seen = l > 0
        l_safe = torch.where(seen, l, torch.ones_like(l))
        outs.append(torch.where(seen[..., None], acc / l_safe[..., None], torch.zeros_like(acc)))
        lses.append(torch.where(seen, m + torch.log(l_safe), torch.full_like(m, float("-inf"))))
    return torch.cat(outs, dim=-2), torch.cat(lses, dim=-1)
'''
_SKIP = "if causal and j > i + b_q - 1 + offset:\n                break"
FLASH_NO_ACC_RESCALE = _src(_FLASH.format(
    skip=_SKIP,
    acc_update="acc = acc + p @ v_blk  # l is rescaled, acc is not (mutant no_accumulator_rescale)"))
FLASH_NO_SKIPPING = _src(_FLASH.format(
    skip="pass  # every key block is computed, also those entirely above the diagonal (mutant causal_without_block_skipping)",
    acc_update="acc = alpha[..., None] * acc + p @ v_blk"))

FLASH_FULL_SCORES = _src('''
import math

import torch


def flash_attention(q, k, v, block_size=64, causal=False):
    s_q, s_k = q.size(-2), k.size(-2)
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # all (S_q, S_k) scores at once (mutant quadratic_full_scores)
    if causal:
        hidden = torch.ones(s_q, s_k, dtype=torch.bool).tril(s_k - s_q).logical_not()
        s = s.masked_fill(hidden, float("-inf"))
    m = s.amax(dim=-1, keepdim=True)
    m = torch.where(m == float("-inf"), torch.zeros_like(m), m)
    e = torch.exp(s - m)
    l = e.sum(dim=-1, keepdim=True)
    seen = l > 0
    out = torch.where(seen, (e @ v) / torch.where(seen, l, torch.ones_like(l)), torch.zeros(()))
    lse = torch.where(seen, m + torch.log(l), torch.full_like(l, float("-inf")))
    return out, lse.squeeze(-1)
''')

FLASH_QUERY_STRIPS = _src('''
import math

import torch


def flash_attention(q, k, v, block_size=64, causal=False):
    # query blocks against all visible keys at once, a plain softmax: a (b, S_k) strip of scores
    # (mutant query_strips_plain_softmax; issue 16: it used to fit the old S²/4 budget)
    s_q, s_k = q.size(-2), k.size(-2)
    outs, lses = [], []
    for i in range(0, s_q, block_size):
        q_blk = q[..., i:i + block_size, :]
        b_q = q_blk.size(-2)
        s = q_blk @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if causal:
            hidden = torch.arange(s_k)[None, :] > torch.arange(i, i + b_q)[:, None] + s_k - s_q
            s = s.masked_fill(hidden, float("-inf"))
        m = s.amax(dim=-1, keepdim=True)
        m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
        e = torch.exp(s - m)
        l = e.sum(dim=-1, keepdim=True)
        seen = l > 0
        outs.append(torch.where(seen, e @ v / torch.where(seen, l, torch.ones_like(l)), torch.zeros_like(l)))
        lses.append(torch.where(seen, m + torch.log(torch.where(seen, l, torch.ones_like(l))),
                                torch.full_like(l, float("-inf"))).squeeze(-1))
    return torch.cat(outs, dim=-2), torch.cat(lses, dim=-1)
''')

OS_MAX_FROM_ZERO = _src('''
import torch


def online_softmax(x, block_size):
    m = torch.zeros(x.shape[:-1], dtype=x.dtype)  # starts at 0, not -inf (mutant running_max_starts_at_zero)
    l = torch.zeros(x.shape[:-1], dtype=x.dtype)
    for start in range(0, x.size(-1), block_size):
        block = x[..., start:start + block_size]
        m_new = torch.maximum(m, block.amax(dim=-1))
        l = l * torch.exp(m - m_new) + torch.exp(block - m_new[..., None]).sum(dim=-1)
        m = m_new
    out = torch.exp(x - m[..., None]) / torch.where(l > 0, l, torch.ones_like(l))[..., None]
    return torch.where(l[..., None] > 0, out, torch.zeros_like(out))
''')

SAMPLES = {
    "ch13_correct": ("chapter 13: the solution's answers", correct, FULL),
    "ch13_mistakes_rescale": (
        "chapter 13: the running sum of the online softmax never rescaled, the tiled attention's output "
        "accumulator never rescaled, quiz 1 without the rescaling (4.05)",
        lambda: _with_answers(online_softmax=OS_NO_RESCALE, flash_attention=FLASH_NO_ACC_RESCALE,
                              quiz_1="answer_1 = 4.05"),
        _expect(online_softmax=0, flash_attention=0, quiz_1=0)),
    "ch13_mistakes_nan": (
        "chapter 13: the textbook online softmax without a guard for leading -inf blocks (NaN), causal "
        "masking without block skipping, quiz 2 'all 64 tiles'",
        lambda: _with_answers(online_softmax=OS_NAN_LEADING, flash_attention=FLASH_NO_SKIPPING,
                              quiz_2="answer_2 = 64"),
        _expect(online_softmax=0, flash_attention=0, quiz_2=0)),
    "ch13_mistakes_quadratic": (
        "chapter 13 (issue 16): a running max that starts at 0 (zeros for rows far below 0), query blocks "
        "against all keys with a plain softmax (a strip of scores: over the one-tile budget), quiz 3 'a'",
        lambda: _with_answers(online_softmax=OS_MAX_FROM_ZERO, flash_attention=FLASH_QUERY_STRIPS,
                              quiz_3='answer_3 = "a"'),
        _expect(online_softmax=0, flash_attention=0, quiz_3=0)),
}
