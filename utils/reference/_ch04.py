"""Chapter 04 — masking: causal masks, padding masks and a softmax that respects them."""
import torch

from .._guard import reference
from ._common import masked_softmax_impl

__all__ = ["causal_mask", "padding_mask", "masked_softmax"]


@reference
def causal_mask(s_q, s_k=None):
    """Bool (s_q, s_k) causal mask, aligned bottom-right; True = may attend.

    Query i may attend key j iff j <= i + (s_k - s_q): the last query sees every key, as when
    s_q new tokens are appended after s_k - s_q cached ones. ``s_k=None`` means s_k = s_q (the
    usual lower triangle). When s_q > s_k the first s_q - s_k rows are fully masked.
    Same as ``torch.nn.attention.bias.causal_lower_right(s_q, s_k)``. Negative sizes raise ValueError.
    """
    if s_k is None:
        s_k = s_q
    if s_q < 0 or s_k < 0:
        raise ValueError(f"causal_mask sizes must be >= 0, got s_q={s_q}, s_k={s_k}")
    return torch.ones(s_q, s_k, dtype=torch.bool).tril(diagonal=s_k - s_q)  # (S_q, S_k)


@reference
def padding_mask(lengths, max_len):
    """Bool key-padding mask (B, 1, max_len): True at the real tokens, positions < length.

    Shapes:
        lengths: (B,) integer tensor, each in [0, max_len]   returns (B, 1, max_len)

    The middle 1 broadcasts over the queries: (B, 1, S_k) against scores (B, S_q, S_k).
    A length of 0 gives an all-False row. Negative sizes or lengths > max_len raise ValueError.
    """
    if max_len < 0:
        raise ValueError(f"max_len must be >= 0, got {max_len}")
    if lengths.dim() != 1:
        raise ValueError(f"lengths must be 1-D (B,), got shape {tuple(lengths.shape)}")
    if lengths.numel() and (lengths.min() < 0 or lengths.max() > max_len):
        raise ValueError(f"lengths must be in [0, max_len={max_len}], got {lengths.tolist()}")
    positions = torch.arange(max_len, device=lengths.device)  # (max_len,)
    mask = positions < lengths.unsqueeze(-1)  # (1, max_len) < (B, 1) -> (B, max_len)
    return mask.unsqueeze(1)  # (B, 1, max_len)


@reference
def masked_softmax(scores, mask):
    """Softmax over the last dim of ``scores`` where ``mask`` is True.

    Shapes:
        scores: (..., S_q, S_k)   mask: bool, broadcastable to scores, or None (no masking)
        returns weights (..., S_q, S_k)

    Masked scores are set to -inf before the softmax, so they get exactly zero weight; a fully
    masked row (softmax of all -inf is NaN) gets all-zero weights.
    """
    return masked_softmax_impl(scores, mask)
