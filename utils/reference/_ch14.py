"""Chapter 14 — a tiny GPT: causal GQA attention with RoPE, a KV cache, greedy generation.

Self-contained on purpose: the building blocks of earlier chapters (RoPE, grouped-query
attention, the KV cache) are re-written as small private helpers in ``utils/_gpt_model.py``,
which the checks share (the grader's re-check child has the checks, not this module).
"""
import torch

from .._guard import reference
from .._gpt_model import ConcatKVCache, GPTModel

__all__ = ["TinyGPT", "generate"]


@reference
class TinyGPT(GPTModel):
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


@reference
@torch.no_grad()
def generate(model, idx, max_new_tokens, use_cache=True):
    """Greedy decoding: append the argmax token ``max_new_tokens`` times.

    Shapes:
        idx: (B, S) prompt ids   returns (B, S + max_new_tokens), the prompt included

    With ``use_cache`` the prompt is run once (prefill) into one fresh KV cache per layer, then
    each step feeds only the newest token at position ``start_pos = tokens so far - 1``
    (S + max_new_tokens must fit in ``model.max_len``). Without it, every step re-runs the whole
    sequence, cropped to its last ``model.max_len`` tokens.
    """
    caches = [ConcatKVCache() for _ in model.blocks] if use_cache else None
    for step in range(max_new_tokens):
        if not use_cache:
            logits, _ = model(idx[:, -model.max_len:])  # (B, min(T, max_len), vocab)
        elif step == 0:
            logits, caches = model(idx, caches, start_pos=0)  # prefill: (B, S, vocab)
        else:
            logits, caches = model(idx[:, -1:], caches, start_pos=idx.size(1) - 1)  # decode: (B, 1, vocab)
        next_id = logits[:, -1, :].argmax(dim=-1, keepdim=True)  # (B, 1)
        idx = torch.cat([idx, next_id], dim=1)  # (B, T + 1)
    return idx
