"""Chapter 10 — sliding-window and sparse attention."""
import math

import torch
import torch.nn.functional as F

from .._guard import reference

__all__ = ["sliding_window_mask", "sliding_window_attention", "strided_sparse_mask"]


@reference
def sliding_window_mask(s, window, causal=False):
    """Bool (s, s) mask, True = may attend: query i sees key j iff |i − j| ≤ window.

    With ``causal=True`` only the keys behind it: 0 ≤ i − j ≤ window.
    window = 0 keeps the diagonal only; window ≥ s − 1 gives full (or full causal) attention.
    """
    i = torch.arange(s).unsqueeze(1)  # (s, 1) query positions
    j = torch.arange(s).unsqueeze(0)  # (1, s) key positions
    dist = i - j  # (s, s), how far behind the query the key is
    if causal:
        return (dist >= 0) & (dist <= window)
    return dist.abs() <= window


@reference
def sliding_window_attention(q, k, v, window, causal=False):
    """Self-attention where query i sees only keys within ``window`` of it, computed band by band.

    Shapes:
        q: (..., S, D)   k: (..., S, D)   v: (..., S, D_v)
        returns out (..., S, D_v)

    Equal to softmax(q kᵀ / sqrt(D)) v masked with ``sliding_window_mask(S, window, causal)``,
    but it never builds an S×S tensor: each query scores only its W = 2·window + 1 (causal:
    window + 1) neighbours, so memory grows as S·W, not S².
    """
    S, D = q.shape[-2], q.shape[-1]
    w = min(window, S - 1)  # a window wider than the sequence sees everything anyway
    left, right = w, (0 if causal else w)
    W = left + right + 1  # keys per query
    # pad the sequence dim so every query has W neighbours, then view them as windows (no copy)
    k_win = F.pad(k, (0, 0, left, right)).unfold(-2, W, 1)  # (..., S + W - 1, D) -> (..., S, D, W)
    v_win = F.pad(v, (0, 0, left, right)).unfold(-2, W, 1)  # (..., S, D_v, W): v_win[..., i, :, o] is value i - left + o
    # the padded slots are not keys: hide them (every row keeps at least its own position)
    real = torch.cat([torch.zeros(left, dtype=torch.bool), torch.ones(S, dtype=torch.bool),
                      torch.zeros(right, dtype=torch.bool)])  # (S + W - 1,): False on the padding
    is_key = real.unfold(0, W, 1)  # (S, W)
    # einsum contracts the windows as they are; `q.unsqueeze(-2) @ k_win` would first copy them (S·D·W)
    scores = torch.einsum("...sd,...sdw->...sw", q / math.sqrt(D), k_win)  # (..., S, W)
    weights = torch.softmax(scores.masked_fill(~is_key, float("-inf")), dim=-1)  # (..., S, W)
    return torch.einsum("...sw,...sdw->...sd", weights, v_win)  # (..., S, D_v)


@reference
def strided_sparse_mask(s, stride):
    """Bool (s, s) causal strided pattern of Sparse Transformers (Child et al., 2019).

    Query i sees key j iff j ≤ i and either j is among the last ``stride`` positions
    ((i − j) < stride, the local part) or a whole number of strides back ((i − j) % stride == 0).
    """
    if stride < 1:
        raise ValueError(f"stride must be at least 1, got {stride}")
    i = torch.arange(s).unsqueeze(1)  # (s, 1)
    j = torch.arange(s).unsqueeze(0)  # (1, s)
    dist = i - j  # (s, s)
    local = dist < stride
    strided = dist % stride == 0
    return (dist >= 0) & (local | strided)
