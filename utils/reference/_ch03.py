"""Chapter 03 — scaled dot-product attention."""
import math

import torch
import torch.nn.functional as F

from .._guard import reference
from ._common import masked_softmax_impl

__all__ = ["scaled_dot_product_attention", "dot_product_variance"]


@reference
def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    """softmax(q kᵀ / sqrt(d_k)) v, with an optional mask and dropout on the weights.

    Shapes:
        q: (..., S_q, D)   k: (..., S_k, D)   v: (..., S_k, D_v)
        mask: bool, broadcastable to (..., S_q, S_k); True = may attend
        returns out (..., S_q, D_v) and weights (..., S_q, S_k)

    A fully masked query row gets zero weights and a zero output. ``weights`` are the ones
    applied to ``v`` (after dropout), so ``out == weights @ v`` always holds.
    """
    d_k = q.size(-1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # (..., S_q, D) x (..., D, S_k) -> (..., S_q, S_k)
    weights = masked_softmax_impl(scores, mask)  # (..., S_q, S_k), rows sum to 1 (or 0)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p, training=True)  # zero some, rescale by 1/(1-p)
    return weights @ v, weights  # (..., S_q, S_k) x (..., S_k, D_v) -> (..., S_q, D_v)


@reference
def dot_product_variance(d_k, n_samples, scaled):
    """Empirical variance of q·k for q, k ~ N(0, I_{d_k}), divided by sqrt(d_k) when ``scaled``.

    Draws exactly q = randn(n_samples, d_k), then k = randn(n_samples, d_k), float32, from torch's
    global generator (the caller seeds it), and returns the unbiased sample variance (divides by
    n_samples - 1). Theory: d_k unscaled, 1 scaled.
    """
    q = torch.randn(n_samples, d_k)  # (N, d_k), the first draw
    k = torch.randn(n_samples, d_k)  # (N, d_k), the second draw
    dots = (q * k).sum(dim=-1)  # (N,)
    if scaled:
        dots = dots / math.sqrt(d_k)
    return dots.var().item()
