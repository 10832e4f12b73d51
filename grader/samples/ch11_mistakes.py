"""Chapter 11 samples: the correct answers, and three submissions that each carry one realistic
mistake in every exercise (`elu_feature_map`, `linear_attention`, `causal_linear_attention`; names
from the mutant banks in utils/checks/_ch11.py) and one wrong quiz answer, so that every exercise
meets three distinct mistakes while the chapter adds only four submissions to the bank.

The third submission carries the mistakes issue 16 found unnamed: φ computed as exp(x)·(x ≤ 0) +
(x + 1)·(x > 0) (NaN beyond exp's range) and an RNN loop with an in-place state update; elu without
the + 1 and φ on the keys only stay in the mutant banks (PHI_ELU_ONLY, CAUSAL_PHI_ONLY_ON_KEYS below).

The wrong `linear_attention`s and `causal_linear_attention`s compute φ inline (not through the
submission's `elu_feature_map`, which is wrong too), so each mistake costs exactly one exercise.
The derivation is graded by hand: 0 points automatically.

Built from the current release (``notebooks/``) with the solution's answers filled in, then wrong
answer code substituted, so the samples never drift from the source.
"""
from __future__ import annotations

from ._chapter import Chapter, src

ASSIGNMENT = "11_linear_attention"
FULL = {"derivation_associativity": 0, "elu_feature_map": 2, "linear_attention": 5,
        "causal_linear_attention": 5, "quiz_1": 1, "quiz_2": 1, "quiz_3": 1}


_CHAPTER = Chapter(ASSIGNMENT, FULL)
_src = src
correct, _with_answers, _expect = _CHAPTER.correct, _CHAPTER.with_answers, _CHAPTER.expect


# ---------------------------------------------------------------- elu_feature_map mistakes
PHI_RELU = _src('''
import torch.nn.functional as F


def elu_feature_map(x):
    return F.relu(x)  # non-negative, but 0 for every x <= 0 (mutant relu)
''')

PHI_RELU_PLUS_ONE = _src('''
import torch.nn.functional as F


def elu_feature_map(x):
    return F.relu(x) + 1  # right for x > 0 only; stays at 1 below 0 (mutant relu_plus_one)
''')

PHI_ELU_ONLY = _src('''
import torch.nn.functional as F


def elu_feature_map(x):
    return F.elu(x)  # the + 1 forgotten: negative for x < 0 (mutant elu_without_plus_one)
''')

PHI_EXP_EVERYWHERE = _src('''
import torch


def elu_feature_map(x):
    return torch.exp(x) * (x <= 0) + (x + 1) * (x > 0)  # exp(100) = inf, inf * 0 = NaN (mutant exp_everywhere_then_select)
''')

# ---------------------------------------------------------------- linear_attention mistakes
LINEAR_NO_NORMALISER = _src('''
import torch.nn.functional as F


def linear_attention(q, k, v, eps=1e-6):
    phi_q, phi_k = F.elu(q) + 1, F.elu(k) + 1
    return phi_q @ (phi_k.transpose(-2, -1) @ v)  # never divided by φ(q)·Σφ(k) + eps (mutant missing_normaliser)
''')

LINEAR_QUADRATIC = _src('''
import torch.nn.functional as F


def linear_attention(q, k, v, eps=1e-6):
    phi_q, phi_k = F.elu(q) + 1, F.elu(k) + 1
    sim = phi_q @ phi_k.transpose(-2, -1)  # (..., S_q, S_k): the matrix it should avoid (mutant quadratic_scores)
    return (sim @ v) / (sim.sum(dim=-1, keepdim=True) + eps)
''')

LINEAR_SCALED = _src('''
import math

import torch.nn.functional as F


def linear_attention(q, k, v, eps=1e-6):
    q = q / math.sqrt(q.size(-1))  # carried over from softmax attention (mutant scaled_by_sqrt_d)
    phi_q, phi_k = F.elu(q) + 1, F.elu(k) + 1
    kv = phi_k.transpose(-2, -1) @ v
    z = phi_k.sum(dim=-2)
    return (phi_q @ kv) / (phi_q @ z.unsqueeze(-1) + eps)
''')

# ---------------------------------------------------------------- causal_linear_attention mistakes
_CAUSAL = '''
import torch
import torch.nn.functional as F


def causal_linear_attention(q, k, v, eps=1e-6):
    phi_q, phi_k = F.elu(q) + 1, F.elu(k) + 1
    state = (phi_k.unsqueeze(-1) * v.unsqueeze(-2)).cumsum(dim=-3)
    z = {z}
    {shift}
    num = (phi_q.unsqueeze(-2) @ state).squeeze(-2)
    den = (phi_q * z).sum(dim=-1, keepdim=True)
    return num / (den + eps)
'''
CAUSAL_EXCLUDES_CURRENT = _src(_CAUSAL.format(
    z="phi_k.cumsum(dim=-2)",
    shift="state, z = F.pad(state, (0, 0, 0, 0, 1, 0))[..., :-1, :, :], F.pad(z, (0, 0, 1, 0))[..., :-1, :]"
          "  # keys j < i only (mutant excludes_current)"))
CAUSAL_NORMALISER_NOT_CAUSAL = _src(_CAUSAL.format(
    z="phi_k.sum(dim=-2, keepdim=True)  # all keys, the future included (mutant normaliser_not_causal)",
    shift="pass"))

CAUSAL_PHI_ONLY_ON_KEYS = _src(_CAUSAL.format(z="phi_k.cumsum(dim=-2)", shift="pass").replace(
    "phi_q, phi_k = F.elu(q) + 1, F.elu(k) + 1",
    "phi_q, phi_k = q, F.elu(k) + 1  # φ applied to the keys only (mutant phi_only_on_keys)").replace("\n    pass", ""))

CAUSAL_RNN_IN_PLACE = _src('''
import torch
import torch.nn.functional as F


def causal_linear_attention(q, k, v, eps=1e-6):
    phi_q, phi_k = F.elu(q) + 1, F.elu(k) + 1
    state = torch.zeros(*q.shape[:-2], q.size(-1), v.size(-1), dtype=q.dtype)
    z = torch.zeros(*q.shape[:-2], q.size(-1), dtype=q.dtype)
    outs = []
    for i in range(q.size(-2)):
        state += phi_k[..., i, :, None] * v[..., i, None, :]  # in place: breaks autograd (mutant in_place_state_update_breaks_gradients)
        z += phi_k[..., i, :]
        num = (phi_q[..., i, None, :] @ state).squeeze(-2)
        outs.append(num / ((phi_q[..., i, :] * z).sum(-1, keepdim=True) + eps))
    return torch.stack(outs, dim=-2)
''')

SAMPLES = {
    "ch11_correct": ("chapter 11: the solution's answers", correct, FULL),
    "ch11_mistakes_relu": (
        "chapter 11: φ = relu, linear attention without its normaliser, causal prefix sums that leave out "
        "the current token, quiz 1 'a'",
        lambda: _with_answers(elu_feature_map=PHI_RELU, linear_attention=LINEAR_NO_NORMALISER,
                              causal_linear_attention=CAUSAL_EXCLUDES_CURRENT, quiz_1='answer_1 = "a"'),
        _expect(elu_feature_map=0, linear_attention=0, causal_linear_attention=0, quiz_1=0)),
    "ch11_mistakes_quadratic": (
        "chapter 11: φ = relu + 1, linear attention through the S×S matrix (memory budget), causal numerator "
        "with a normaliser over all keys, quiz 2 'a'",
        lambda: _with_answers(elu_feature_map=PHI_RELU_PLUS_ONE, linear_attention=LINEAR_QUADRATIC,
                              causal_linear_attention=CAUSAL_NORMALISER_NOT_CAUSAL, quiz_2='answer_2 = "a"'),
        _expect(elu_feature_map=0, linear_attention=0, causal_linear_attention=0, quiz_2=0)),
    "ch11_mistakes_phi": (
        "chapter 11: φ as exp(x)·(x ≤ 0) + (x + 1)·(x > 0) (NaN beyond exp's range, issue 16), q divided by "
        "sqrt(D) as in softmax attention, an RNN loop that updates its state in place (its gradients fail), "
        "quiz 3 'a' (a state that grows like a KV cache)",
        lambda: _with_answers(elu_feature_map=PHI_EXP_EVERYWHERE, linear_attention=LINEAR_SCALED,
                              causal_linear_attention=CAUSAL_RNN_IN_PLACE, quiz_3='answer_3 = "a"'),
        _expect(elu_feature_map=0, linear_attention=0, causal_linear_attention=0, quiz_3=0)),
}
