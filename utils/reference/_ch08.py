"""Chapter 08 — the backward pass of attention, by hand."""
import math

import torch

from .._guard import ForbiddenCall, learner_is_running, reference
from ._common import masked_softmax_impl

__all__ = ["softmax_backward", "sdpa_backward", "ScaledDotProductAttentionFunction"]


@reference
def softmax_backward(a, grad_a):
    """dL/ds for a = softmax(s, dim=-1), given a and dL/da.

    Shapes:
        a: (..., N), rows of a softmax (a row of zeros, from a fully masked row, is allowed)
        grad_a: (..., N) = dL/da          returns dL/ds (..., N)

    The softmax Jacobian is diag(a) − a aᵀ, so dL/ds = a ⊙ (grad_a − Σ_j grad_a_j a_j).
    """
    dot = (grad_a * a).sum(dim=-1, keepdim=True)  # (..., 1): Σ_j grad_a_j a_j, one per row
    return a * (grad_a - dot)  # (..., N)


@reference
def sdpa_backward(q, k, v, grad_out, mask=None):
    """Gradients of out = softmax(q kᵀ / sqrt(D), masked) v with respect to q, k and v.

    Shapes:
        q: (..., S_q, D)   k: (..., S_k, D)   v: (..., S_k, D_v)   grad_out: (..., S_q, D_v) = dL/dout
        mask: bool, broadcastable to (..., S_q, S_k); True = may attend
        returns dq (..., S_q, D), dk (..., S_k, D), dv (..., S_k, D_v)

    A fully masked query row has zero weights, a zero output and zero gradients.
    """
    scale = 1.0 / math.sqrt(q.size(-1))
    scores = q @ k.transpose(-2, -1) * scale  # (..., S_q, D) x (..., D, S_k) -> (..., S_q, S_k)
    weights = masked_softmax_impl(scores, mask)  # A: (..., S_q, S_k), masked entries exactly 0
    dv = weights.transpose(-2, -1) @ grad_out  # Aᵀ dO: (..., S_k, S_q) x (..., S_q, D_v) -> (..., S_k, D_v)
    d_weights = grad_out @ v.transpose(-2, -1)  # dA = dO vᵀ: (..., S_q, D_v) x (..., D_v, S_k) -> (..., S_q, S_k)
    d_scores = weights * (d_weights - (d_weights * weights).sum(dim=-1, keepdim=True))  # dS, (..., S_q, S_k)
    dq = d_scores @ k * scale  # dS k / sqrt(D): (..., S_q, S_k) x (..., S_k, D) -> (..., S_q, D)
    dk = d_scores.transpose(-2, -1) @ q * scale  # dSᵀ q / sqrt(D): (..., S_k, S_q) x (..., S_q, D) -> (..., S_k, D)
    return dq, dk, dv


@reference
class ScaledDotProductAttentionFunction(torch.autograd.Function):
    """Attention as a torch.autograd.Function whose backward is the hand-derived one.

    ``ScaledDotProductAttentionFunction.apply(q, k, v, mask=None) -> out``, shapes as in
    ``sdpa_backward``: out (..., S_q, D_v) = softmax(q kᵀ / sqrt(D), masked) v.

    forward saves q, k, v (not the (S_q, S_k) weights: backward recomputes them, as
    FlashAttention does); backward returns (dq, dk, dv, None) — one gradient per input of
    forward, None for the bool mask.
    """

    @staticmethod
    def forward(ctx, q, k, v, mask=None):
        ctx.save_for_backward(q, k, v)
        ctx.mask = mask
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (..., S_q, S_k)
        return masked_softmax_impl(scores, mask) @ v  # (..., S_q, S_k) x (..., S_k, D_v) -> (..., S_q, D_v)

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v = ctx.saved_tensors
        dq, dk, dv = sdpa_backward.__wrapped__(q, k, v, grad_out, ctx.mask)  # unguarded: see apply
        return dq, dk, dv, None

    @classmethod
    def apply(cls, q, k, v, mask=None):
        # An autograd.Function is never instantiated, so the reference guard (on __init__) would
        # never fire: refuse here when learner code calls the guarded class. ``unguarded(...)``
        # copies (and mutants built on them) carry the original __init__ and are let through.
        if learner_is_running() and cls.__init__ is not cls._reference_init:
            raise ForbiddenCall("utils.reference", "ScaledDotProductAttentionFunction")
        return super().apply(q, k, v, mask)
