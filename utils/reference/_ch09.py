"""Chapter 09 — grouped-query attention and the KV cache."""
import math

import torch
import torch.nn as nn

from .._guard import reference
from ._common import masked_softmax_impl

__all__ = ["repeat_kv", "KVCache", "GroupedQueryAttention", "kv_cache_bytes"]


@reference
def repeat_kv(x, n_rep):
    """Repeat each key/value head ``n_rep`` times, consecutively (as in Llama).

    Shapes:
        x: (B, H_kv, S, D)   returns (B, H_kv · n_rep, S, D)

    Head h of the result is kv head h // n_rep: [k0, k0, k1, k1] for H_kv = 2, n_rep = 2 — the
    same as ``x.repeat_interleave(n_rep, dim=1)``, not ``x.repeat(1, n_rep, 1, 1)`` (which tiles
    [k0, k1, k0, k1]). ``n_rep = 1`` returns ``x`` itself.
    """
    if n_rep == 1:
        return x
    B, H_kv, S, D = x.shape
    x = x[:, :, None, :, :].expand(B, H_kv, n_rep, S, D)  # (B, H_kv, n_rep, S, D), a view
    return x.reshape(B, H_kv * n_rep, S, D)  # (B, H_kv · n_rep, S, D)


@reference
class KVCache:
    """The keys and values of every position seen so far, for one attention layer.

    ``KVCache()`` starts empty (``seq_len == 0``).
    ``update(k_new, v_new)``: k_new (B, H_kv, S_new, D), v_new (B, H_kv, S_new, D_v) are appended
    along the sequence dim (-2); returns everything cached so far, k_all (B, H_kv, S_total, D)
    and v_all (B, H_kv, S_total, D_v). ``seq_len`` is S_total, the number of cached positions.
    """

    def __init__(self):
        self.k = None  # (B, H_kv, S_total, D) once the first update arrives
        self.v = None  # (B, H_kv, S_total, D_v)

    @property
    def seq_len(self):
        return 0 if self.k is None else self.k.size(-2)

    def update(self, k_new, v_new):
        if self.k is None:
            self.k, self.v = k_new, v_new
        else:
            self.k = torch.cat([self.k, k_new], dim=-2)  # (B, H_kv, S_total + S_new, D)
            self.v = torch.cat([self.v, v_new], dim=-2)  # (B, H_kv, S_total + S_new, D_v)
        return self.k, self.v


@reference
class GroupedQueryAttention(nn.Module):
    """Causal self-attention with H query heads sharing H_kv key/value heads (GQA).

    num_kv_heads = num_heads is multi-head attention, num_kv_heads = 1 multi-query attention.
    Query head h uses kv head h // (H / H_kv): consecutive query heads form a group.

    Parameters (names are part of the contract), with D_h = d_model / H:
        W_q: nn.Linear(d_model, d_model, bias=False)
        W_k, W_v: nn.Linear(d_model, H_kv · D_h, bias=False)
        W_o: nn.Linear(d_model, d_model, bias=False)
    Raises ValueError unless d_model % num_heads == 0 and num_heads % num_kv_heads == 0.

    forward(x, cache=None):
        x: (B, S, d_model), the S newest positions   returns (out (B, S, d_model), cache)
        Without a cache: causal attention over x; returns (out, None).
        With a KVCache: the new keys/values are appended to it, and the S queries attend to
        every cached position with bottom-right-aligned causality (query i, the (P + i)-th
        position after P cached ones, sees keys 0 .. P + i); returns (out, the same cache).
        Prefill then decode token by token gives the same outputs as one forward over the whole x.
    """

    def __init__(self, d_model, num_heads, num_kv_heads):
        super().__init__()
        if d_model % num_heads != 0:
            raise ValueError(f"d_model ({d_model}) must be divisible by num_heads ({num_heads}).")
        if num_heads % num_kv_heads != 0:
            raise ValueError(f"num_heads ({num_heads}) must be divisible by num_kv_heads ({num_kv_heads}).")
        self.num_heads, self.num_kv_heads = num_heads, num_kv_heads
        self.head_dim = d_model // num_heads
        self.W_q = nn.Linear(d_model, d_model, bias=False)
        self.W_k = nn.Linear(d_model, num_kv_heads * self.head_dim, bias=False)
        self.W_v = nn.Linear(d_model, num_kv_heads * self.head_dim, bias=False)
        self.W_o = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x, cache=None):
        B, S, d_model = x.shape
        H, H_kv, D_h = self.num_heads, self.num_kv_heads, self.head_dim
        q = self.W_q(x).view(B, S, H, D_h).transpose(1, 2)  # (B, H, S, D_h)
        k = self.W_k(x).view(B, S, H_kv, D_h).transpose(1, 2)  # (B, H_kv, S, D_h)
        v = self.W_v(x).view(B, S, H_kv, D_h).transpose(1, 2)  # (B, H_kv, S, D_h)
        if cache is not None:
            k, v = cache.update(k, v)  # (B, H_kv, S_k, D_h), S_k = cached + S
        S_k = k.size(-2)
        k = repeat_kv.__wrapped__(k, H // H_kv)  # (B, H, S_k, D_h); unguarded: learner code may run this
        v = repeat_kv.__wrapped__(v, H // H_kv)  # (B, H, S_k, D_h)
        mask = torch.ones(S, S_k, dtype=torch.bool, device=x.device).tril(diagonal=S_k - S)  # bottom-right
        scores = q @ k.transpose(-2, -1) / math.sqrt(D_h)  # (B, H, S, D_h) x (B, H, D_h, S_k) -> (B, H, S, S_k)
        out = masked_softmax_impl(scores, mask) @ v  # (B, H, S, S_k) x (B, H, S_k, D_h) -> (B, H, S, D_h)
        out = out.transpose(1, 2).contiguous().view(B, S, d_model)  # (B, S, H · D_h)
        return self.W_o(out), cache


@reference
def kv_cache_bytes(num_layers, num_kv_heads, head_dim, seq_len, batch_size, bytes_per_elem=2):
    """Bytes a KV cache holds: K and V, for every layer, kv head, position and sequence in the batch.

    2 × num_layers × num_kv_heads × head_dim × seq_len × batch_size × bytes_per_elem, an int.
    bytes_per_elem: 2 for float16/bfloat16 (the default), 4 for float32, 1 for int8/fp8.
    E.g. Llama-2-7B (32 layers, 32 kv heads, head_dim 128) at 4096 tokens: 2 GiB per sequence.
    """
    return 2 * num_layers * num_kv_heads * head_dim * seq_len * batch_size * bytes_per_elem
