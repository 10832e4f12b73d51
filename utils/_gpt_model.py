"""The decoder-only model of chapter 14 and its KV cache, shared by ``utils.reference`` (whose
``TinyGPT`` is this model, guarded) and ``utils.checks`` (whose checks build, cache and record this
model). Not an exercise itself: it lives outside ``utils.reference`` so that the grader's
re-check child, which has the checks but only stubs of the reference, has it too.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class ConcatKVCache:
    """A KV cache for one layer: keys and values (B, H_kv, T, D_h), grown along dim -2.

    Not an exercise (chapter 09's ``KVCache`` is), so not guarded: the checks hand it to learner
    models, and the chapter 14 reference uses it.
    """

    def __init__(self):
        self.k = None
        self.v = None

    @property
    def seq_len(self) -> int:
        return 0 if self.k is None else self.k.size(-2)

    def update(self, k_new, v_new):
        self.k = k_new if self.k is None else torch.cat([self.k, k_new], dim=-2)
        self.v = v_new if self.v is None else torch.cat([self.v, v_new], dim=-2)
        return self.k, self.v


def _apply_rope(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Rotate the interleaved pairs (x[..., 2i], x[..., 2i+1]) by the angle pos · base^(-2i/D).

    x: (..., S, D) with D even; positions: (S,) -> (..., S, D)
    """
    d = x.size(-1)
    inv_freq = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (D/2,)
    angles = positions.to(torch.float64)[:, None] * inv_freq[None, :]  # (S, D/2), float64 for accuracy
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x_even, x_odd = x[..., 0::2], x[..., 1::2]  # (..., S, D/2) each
    rotated = torch.stack([x_even * cos - x_odd * sin, x_even * sin + x_odd * cos], dim=-1)  # (..., S, D/2, 2)
    return rotated.flatten(-2)  # (..., S, D), pairs interleaved again


class _CausalGQA(nn.Module):
    """Causal grouped-query self-attention with RoPE on q and k (no biases)."""

    def __init__(self, d_model, num_heads, num_kv_heads):
        super().__init__()
        assert d_model % num_heads == 0 and num_heads % num_kv_heads == 0
        self.num_heads, self.num_kv_heads = num_heads, num_kv_heads
        self.head_dim = d_model // num_heads
        self.W_q = nn.Linear(d_model, d_model, bias=False)
        self.W_k = nn.Linear(d_model, num_kv_heads * self.head_dim, bias=False)
        self.W_v = nn.Linear(d_model, num_kv_heads * self.head_dim, bias=False)
        self.W_o = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x, cache=None, start_pos=0):
        B, S, _ = x.shape
        H, H_kv, D_h = self.num_heads, self.num_kv_heads, self.head_dim
        q = self.W_q(x).view(B, S, H, D_h).transpose(1, 2)  # (B, H, S, D_h)
        k = self.W_k(x).view(B, S, H_kv, D_h).transpose(1, 2)  # (B, H_kv, S, D_h)
        v = self.W_v(x).view(B, S, H_kv, D_h).transpose(1, 2)  # (B, H_kv, S, D_h)
        positions = torch.arange(start_pos, start_pos + S)  # (S,)
        q, k = _apply_rope(q, positions), _apply_rope(k, positions)
        if cache is not None:
            k, v = cache.update(k, v)  # (B, H_kv, T, D_h), T = tokens cached so far, these included
        T = k.size(-2)
        k = k.repeat_interleave(H // H_kv, dim=1)  # (B, H, T, D_h): query head h uses kv head h // n_rep
        v = v.repeat_interleave(H // H_kv, dim=1)  # (B, H, T, D_h)
        scores = q @ k.transpose(-2, -1) / math.sqrt(D_h)  # (B, H, S, D_h) x (B, H, D_h, T) -> (B, H, S, T)
        causal = torch.ones(S, T, dtype=torch.bool).tril(diagonal=T - S)  # bottom-right: the new tokens are the last S
        weights = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)  # (B, H, S, T)
        out = (weights @ v).transpose(1, 2).reshape(B, S, H * D_h)  # (B, H, S, D_h) -> (B, S, d_model)
        return self.W_o(out)


class _FeedForward(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.linear1 = nn.Linear(d_model, 4 * d_model)
        self.linear2 = nn.Linear(4 * d_model, d_model)

    def forward(self, x):
        return self.linear2(F.gelu(self.linear1(x)))


class _Block(nn.Module):
    """Pre-norm decoder block: x + attn(norm1(x)), then x + ffn(norm2(x))."""

    def __init__(self, d_model, num_heads, num_kv_heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.attn = _CausalGQA(d_model, num_heads, num_kv_heads)
        self.norm2 = nn.LayerNorm(d_model)
        self.ffn = _FeedForward(d_model)

    def forward(self, x, cache=None, start_pos=0):
        x = x + self.attn(self.norm1(x), cache, start_pos)
        return x + self.ffn(self.norm2(x))


class GPTModel(nn.Module):
    """A small decoder-only transformer: token embedding, pre-norm blocks, final norm, LM head.

    Shapes:
        idx: (B, S) token ids (long)   returns logits (B, S, vocab_size) and caches

    Each block: causal grouped-query attention (``num_heads`` query heads sharing
    ``num_kv_heads`` key/value heads) with RoPE on q and k (interleaved pairs, base 10000),
    then a GELU feed-forward of width 4·d_model. No learned positions: positions enter through
    RoPE only, and ``max_len`` bounds ``start_pos + S``.

    ``caches``: None (no caching; None is returned) or a list with one KV cache per layer, each
    with ``update(k_new, v_new) -> (k_all, v_all)`` (appends along dim -2) and ``seq_len``. The S
    new tokens sit at positions ``start_pos .. start_pos + S - 1``, which must equal the number of
    tokens already cached.
    """

    def __init__(self, vocab_size, d_model, n_layers, num_heads, num_kv_heads, max_len):
        super().__init__()
        self.max_len = max_len
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.blocks = nn.ModuleList(_Block(d_model, num_heads, num_kv_heads) for _ in range(n_layers))
        self.norm_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)  # GPT-2's initialisation
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx, caches=None, start_pos=0):
        B, S = idx.shape
        if start_pos + S > self.max_len:
            raise ValueError(f"start_pos + S = {start_pos + S} exceeds max_len = {self.max_len}")
        if caches is not None and len(caches) != len(self.blocks):
            raise ValueError(f"expected one cache per layer ({len(self.blocks)}), got {len(caches)}")
        x = self.tok_emb(idx)  # (B, S, d_model)
        for i, block in enumerate(self.blocks):
            x = block(x, None if caches is None else caches[i], start_pos)  # (B, S, d_model)
        logits = self.lm_head(self.norm_f(x))  # (B, S, vocab_size)
        return logits, caches
