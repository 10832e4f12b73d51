"""Chapter 06 — cross-attention and the transformer block."""
import torch
import torch.nn as nn

from .._guard import reference, unguarded
from ._ch05 import MultiHeadAttention

__all__ = ["LayerNorm", "FeedForward", "DecoderLayer"]


@reference
class LayerNorm(nn.Module):
    """Layer normalisation over the last dim, identical to nn.LayerNorm(d_model, eps).

    Parameters: weight (d_model,) = ones, bias (d_model,) = zeros.
    forward(x (..., d_model)) -> (..., d_model):
        weight · (x - mean) / sqrt(var + eps) + bias, mean and the *biased* variance (divide by
        d_model, not d_model - 1) over the last dim, eps *inside* the square root.
    (The `a · (x - mean) / (x.std() + eps) + b` variant uses the unbiased std and adds eps to
    the std: it is a different function, see the chapter.)
    """

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)  # (..., 1)
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)  # (..., 1), biased
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


@reference
class FeedForward(nn.Module):
    """Position-wise feed-forward network: linear2(dropout(relu(linear1(x)))).

    Parameters: linear1 = nn.Linear(d_model, d_ff), linear2 = nn.Linear(d_ff, d_model).
    forward(x (..., d_model)) -> (..., d_model); dropout acts in training mode only.
    """

    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        h = torch.relu(self.linear1(x))  # (..., d_ff)
        return self.linear2(self.dropout(h))  # (..., d_model)


# The block builds its parts without the guard (the guard refuses learner code, and a learner's
# check runs the reference block as if it were learner code in the tests of the tests).
_MultiHeadAttention = unguarded(MultiHeadAttention)
_LayerNorm = unguarded(LayerNorm)
_FeedForward = unguarded(FeedForward)


@reference
class DecoderLayer(nn.Module):
    """A pre-norm transformer decoder layer: masked self-attention, cross-attention, feed-forward.

        x = x + dropout(self_attn(norm1(x), norm1(x), norm1(x), tgt_mask))
        x = x + dropout(cross_attn(norm2(x), memory, memory, src_mask))
        x = x + dropout(ffn(norm3(x)))

    Sub-modules (their names *and* their parameter names are the contract: a check loads the
    reference's state dict into your layer by name, e.g. ``self_attn.W_q.weight``,
    ``ffn.linear1.bias``, ``norm2.weight``):
        self_attn, cross_attn: MultiHeadAttention(d_model, num_heads, dropout) with W_q, W_k, W_v, W_o
        ffn: FeedForward(d_model, d_ff, dropout) with linear1, linear2
        norm1, norm2, norm3: LayerNorm(d_model) with weight, bias
    forward(x, memory, src_mask=None, tgt_mask=None):
        x: (B, S_t, d_model) decoder stream   memory: (B, S_s, d_model) encoder output (not normalised here)
        tgt_mask: broadcastable to (B, H, S_t, S_t), e.g. causal (S_t, S_t)
        src_mask: broadcastable to (B, H, S_t, S_s), e.g. source padding (B, 1, 1, S_s)
        returns x (B, S_t, d_model) and the cross-attention weights (B, H, S_t, S_s)
    """

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__()
        self.self_attn = _MultiHeadAttention(d_model, num_heads, dropout)
        self.cross_attn = _MultiHeadAttention(d_model, num_heads, dropout)
        self.ffn = _FeedForward(d_model, d_ff, dropout)
        self.norm1 = _LayerNorm(d_model)
        self.norm2 = _LayerNorm(d_model)
        self.norm3 = _LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        h = self.norm1(x)  # (B, S_t, d)
        a, _ = self.self_attn(h, h, h, tgt_mask)  # (B, S_t, d)
        x = x + self.dropout(a)
        h = self.norm2(x)
        a, cross_weights = self.cross_attn(h, memory, memory, src_mask)  # (B, S_t, d), (B, H, S_t, S_s)
        x = x + self.dropout(a)
        x = x + self.dropout(self.ffn(self.norm3(x)))  # (B, S_t, d)
        return x, cross_weights
