"""Chapter 05 — self-attention and multi-head attention."""
import math

import torch.nn as nn

from .._guard import reference
from ._common import masked_softmax_impl

__all__ = ["SelfAttention", "MultiHeadAttention"]


@reference
class SelfAttention(nn.Module):
    """Single-head self-attention: q, k, v are three linear maps of the same x; no output projection.

    Parameters (names are part of the contract):
        W_q, W_k: nn.Linear(d_model, d_k, bias=False)   W_v: nn.Linear(d_model, d_v, bias=False)
        d_k defaults to d_model, d_v to d_k.

    forward(x, mask=None):
        x: (B, S, d_model)   mask: bool, broadcastable to (B, S, S); True = may attend
        returns out (B, S, d_v) and weights (B, S, S) = softmax(q kᵀ / sqrt(d_k))
    """

    def __init__(self, d_model, d_k=None, d_v=None):
        super().__init__()
        d_k = d_model if d_k is None else d_k
        d_v = d_k if d_v is None else d_v
        self.d_k = d_k
        self.W_q = nn.Linear(d_model, d_k, bias=False)
        self.W_k = nn.Linear(d_model, d_k, bias=False)
        self.W_v = nn.Linear(d_model, d_v, bias=False)

    def forward(self, x, mask=None):
        q, k, v = self.W_q(x), self.W_k(x), self.W_v(x)  # (B, S, d_k), (B, S, d_k), (B, S, d_v)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)  # (B, S, d_k) x (B, d_k, S) -> (B, S, S)
        weights = masked_softmax_impl(scores, mask)  # (B, S, S), rows sum to 1 (or 0 if fully masked)
        return weights @ v, weights  # (B, S, S) x (B, S, d_v) -> (B, S, d_v)


@reference
class MultiHeadAttention(nn.Module):
    """Multi-head attention, H heads of size D_h = d_model / H, computed in parallel.

    Parameters (names are part of the contract):
        W_q, W_k, W_v, W_o: nn.Linear(d_model, d_model, bias=bias)
    Raises ValueError when d_model is not divisible by num_heads.

    split_heads(x (B, S, d_model)) -> (B, H, S, D_h): feature block h (columns h·D_h .. (h+1)·D_h - 1)
        becomes head h. merge_heads is its inverse: (B, H, S, D_h) -> (B, S, d_model).

    forward(query, key, value, mask=None):
        query: (B, S_q, d_model)   key, value: (B, S_k, d_model)
        mask: bool, broadcastable to (B, H, S_q, S_k) — e.g. (S_q, S_k), (B, 1, 1, S_k),
              (B, 1, S_q, S_k); True = may attend; a fully masked query row gives zero weights.
        returns out (B, S_q, d_model) and the per-head weights (B, H, S_q, S_k) (after dropout,
        so out is exactly what they produce; dropout acts in training mode only).
    Equivalent to nn.MultiheadAttention(d_model, H, bias=bias, batch_first=True) with
    in_proj_weight = cat(W_q, W_k, W_v), out_proj = W_o, and average_attn_weights=False.
    """

    def __init__(self, d_model, num_heads, dropout=0.0, bias=True):
        super().__init__()
        if d_model % num_heads != 0:
            raise ValueError(f"d_model ({d_model}) must be divisible by num_heads ({num_heads}).")
        self.d_model, self.num_heads, self.d_head = d_model, num_heads, d_model // num_heads
        self.W_q = nn.Linear(d_model, d_model, bias=bias)
        self.W_k = nn.Linear(d_model, d_model, bias=bias)
        self.W_v = nn.Linear(d_model, d_model, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def split_heads(self, x):
        B, S, _ = x.shape
        x = x.view(B, S, self.num_heads, self.d_head)  # (B, S, H, D_h)
        return x.transpose(1, 2)  # (B, H, S, D_h)

    def merge_heads(self, x):
        B, H, S, D_h = x.shape
        x = x.transpose(1, 2).contiguous()  # (B, S, H, D_h)
        return x.view(B, S, H * D_h)  # (B, S, d_model)

    def forward(self, query, key, value, mask=None):
        q = self.split_heads(self.W_q(query))  # (B, H, S_q, D_h)
        k = self.split_heads(self.W_k(key))  # (B, H, S_k, D_h)
        v = self.split_heads(self.W_v(value))  # (B, H, S_k, D_h)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)  # (B, H, S_q, D_h) x (B, H, D_h, S_k) -> (B, H, S_q, S_k)
        weights = masked_softmax_impl(scores, mask)  # (B, H, S_q, S_k)
        weights = self.dropout(weights)
        out = weights @ v  # (B, H, S_q, S_k) x (B, H, S_k, D_h) -> (B, H, S_q, D_h)
        return self.W_o(self.merge_heads(out)), weights  # (B, S_q, d_model), (B, H, S_q, S_k)
