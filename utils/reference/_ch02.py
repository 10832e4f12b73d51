"""Chapter 02 — additive (Bahdanau) attention."""
import torch
import torch.nn as nn

from .._guard import reference
from ._common import masked_softmax_impl

__all__ = ["AdditiveAttention"]


@reference
class AdditiveAttention(nn.Module):
    """Additive attention: score(q_i, k_j) = w_vᵀ tanh(W_q q_i + W_k k_j).

    Shapes:
        query: (B, S_q, query_dim)   keys: (B, S_k, key_dim)   values: (B, S_k, D_v)
        mask: bool, broadcastable to (B, S_q, S_k); True = may attend
        returns context (B, S_q, D_v) and weights (B, S_q, S_k)

    Queries and keys may have different sizes: both are projected to ``attn_dim`` first.
    """

    def __init__(self, query_dim, key_dim, attn_dim):
        super().__init__()
        self.W_q = nn.Linear(query_dim, attn_dim, bias=False)
        self.W_k = nn.Linear(key_dim, attn_dim, bias=False)
        self.w_v = nn.Linear(attn_dim, 1, bias=False)

    def forward(self, query, keys, values, mask=None):
        q = self.W_q(query)  # (B, S_q, A)
        k = self.W_k(keys)  # (B, S_k, A)
        features = torch.tanh(q.unsqueeze(-2) + k.unsqueeze(-3))  # (B, S_q, 1, A) + (B, 1, S_k, A) -> (B, S_q, S_k, A)
        scores = self.w_v(features).squeeze(-1)  # (B, S_q, S_k, 1) -> (B, S_q, S_k)
        weights = masked_softmax_impl(scores, mask)  # (B, S_q, S_k), rows sum to 1 (or 0)
        return weights @ values, weights  # (B, S_q, S_k) x (B, S_k, D_v) -> (B, S_q, D_v)
