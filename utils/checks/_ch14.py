"""Checks for chapter 14 — the tiny GPT and greedy generation with a KV cache.

TinyGPT is built by the learner from their own pieces (grouped-query attention, RoPE, pre-norm
blocks, a KV cache): the check fixes only what its contract names — the parameter names it loads
the weights into, ``max_len``, the forward's signature and the cache protocol — and accepts any
other structure (buffers, helper modules without parameters, how RoPE or the heads are computed).

Gradients: the check runs the learner's model in float64 with ``torch.func.functional_call`` on
leaf tensors standing for the parameters (the case's kwargs), inside the learner guard; the core
(``forward_and_grads``) then computes dL/d<parameter> outside the guard.
"""
import contextlib
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import reference as ref
from .._gpt_model import ConcatKVCache, GPTModel
from ._contract import Contract
from ._core import (Case, CheckFailure, Exercise, Mutant, Variant, compare, describe, generator, learner_code,
                    load_state_strict, rng)
from ._registry import register

__all__ = ["check_TinyGPT", "check_generate"]

NEG_INF = float("-inf")
F64 = torch.float64


# ---------------------------------------------------------------- shared helpers
def _random_state(model: nn.Module, g: torch.Generator, qk_gain: float = 2.0) -> dict:
    """Random parameters with the reference's names, large enough that every part of the model
    matters (attention peaked, LayerNorm gains away from 1)."""
    state = {}
    for name, p in model.state_dict().items():
        if name.endswith(("norm1.weight", "norm2.weight")) or name == "norm_f.weight":
            value = 1.0 + 0.2 * torch.randn(p.shape, generator=g)
        elif name.endswith("bias"):
            value = 0.2 * torch.randn(p.shape, generator=g)
        elif name == "tok_emb.weight":
            value = torch.randn(p.shape, generator=g)
        else:  # Linear weights (out, in): unit-variance outputs, q and k a little larger
            gain = qk_gain if name.endswith(("W_q.weight", "W_k.weight")) else 1.0
            value = gain * torch.randn(p.shape, generator=g) / math.sqrt(p.shape[1])
        state[name] = value
    return state


_GPTBase = GPTModel  # the reference's model, unguarded, and present in the grader's re-check child


def _reference_model(config: tuple, g: torch.Generator, qk_gain: float = 2.0) -> dict:
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(0)
        model = _GPTBase(*config)
    return _random_state(model, g, qk_gain)


def _build(cls, case: Case, state: dict) -> nn.Module:
    """Build ``cls(*ctor)`` and copy the case's parameters in by name (buffers are the learner's own)."""
    with torch.random.fork_rng(devices=[]):  # CPU only: seeding CUDA lazily costs ~5 ms a call
        torch.default_generator.manual_seed(case.init.get("seed", 0))
        module = cls(*case.init["ctor"])
    if not isinstance(module, nn.Module):
        raise CheckFailure(f"{cls.__name__}(...) should build an nn.Module, got {type(module).__name__}.")
    _contract_diagnosis(module, cls.__name__)
    load_state_strict(module, {k: v.detach().float() for k, v in state.items()}, cls.__name__, parameters_only=True)
    return module.eval()


TIED_HEAD = ("lm_head.weight is tied to tok_emb.weight (one tensor for both); the prompt says lm_head is "
             "nn.Linear(d_model, vocab_size, bias=False) with its own weight, not tied.")


def _contract_diagnosis(module: nn.Module, name: str) -> None:
    """Two things the contract states that would otherwise show only as wrong numbers: an untied
    LM head, and LayerNorms with eps 1e-5 (a learner's own LayerNorm may keep eps any way it likes;
    only a numeric attribute named eps is read)."""
    w_emb = getattr(getattr(module, "tok_emb", None), "weight", None)
    w_head = getattr(getattr(module, "lm_head", None), "weight", None)
    if isinstance(w_emb, torch.Tensor) and isinstance(w_head, torch.Tensor) and w_emb.data_ptr() == w_head.data_ptr():
        raise CheckFailure(f"{name}: {TIED_HEAD}")
    for path, sub in module.named_modules():
        if path.rsplit(".", 1)[-1] in ("norm1", "norm2", "norm_f"):
            eps = getattr(sub, "eps", None)
            if isinstance(eps, (int, float)) and not isinstance(eps, bool) and not math.isclose(eps, 1e-5, rel_tol=1e-3):
                raise CheckFailure(f"{name}: {path} has eps = {eps:g}; the prompt says LayerNorm(d_model) with "
                                   f"eps 1e-5 (nn.LayerNorm's default).")


def _to_float64(module: nn.Module) -> None:
    """Floating-point parameters and buffers to float64; complex buffers (a RoPE table) are kept
    as they are (``module.double()`` would drop their imaginary part)."""
    module._apply(lambda t: t.to(F64) if t.is_floating_point() else t)


def _unpack(result, call: str):
    if not (isinstance(result, tuple) and len(result) == 2):
        raise CheckFailure(f"{call} should return a tuple (logits, caches), but it returned {describe(result)}.")
    return result


def _cache_shapes(caches) -> torch.Tensor:
    """(n_layers, 2, 4): the shapes of each layer's cached k and v, -1 where nothing was cached."""
    rows = []
    for c in caches:
        row = []
        for t in (c.k, c.v):
            row.append(list(t.shape) if isinstance(t, torch.Tensor) and t.dim() == 4 else [-1] * 4)
        rows.append(row)
    return torch.tensor(rows, dtype=torch.long)


# ---------------------------------------------------------------- TinyGPT
def _run_tinygpt(cls, case: Case):
    """(uncached logits, logits of the same sequence fed through KV caches in chunks, cache shapes).

    A gradient case carries the parameters as float64 tensors in ``case.kwargs`` (leaves that
    require grad when the core runs it): the model is converted to float64 and called through
    ``torch.func.functional_call`` on them, so the core can differentiate the outputs.
    """
    params = case.kwargs
    model = _build(cls, case, case.init.get("state") or params)
    if case.init.get("train"):
        model.train()  # the contract has no dropout: training mode computes the same logits
    idx = case.args[0]
    n_layers, max_len = case.init["ctor"][2], case.init["ctor"][5]
    if getattr(model, "max_len", None) != max_len:
        raise CheckFailure(f"TinyGPT(..., max_len={max_len}) should keep max_len as the attribute self.max_len "
                           f"(generate crops to it); got {getattr(model, 'max_len', 'no such attribute')!r}.")
    if params:
        _to_float64(model)

        def forward(*args, **kwargs):
            return torch.func.functional_call(model, params, args, kwargs)
    else:
        forward = model
    with contextlib.nullcontext() if params else torch.no_grad():
        logits, caches = _unpack(forward(idx), "model(idx)")
        if caches is not None:
            raise CheckFailure("model(idx) without caches should return (logits, None): nothing is cached.")
        caches = [ConcatKVCache() for _ in range(n_layers)]
        pieces, pos = [], 0
        for n in [case.init["prefill"], *case.init["chunks"]]:
            if pos == 0:  # the prefill relies on start_pos's default, 0
                call = f"model(idx[:, 0:{n}], caches=caches)"
                piece, _ = _unpack(forward(idx[:, :n], caches=caches), call)
            else:
                call = f"model(idx[:, {pos}:{pos + n}], caches=caches, start_pos={pos})"
                piece, _ = _unpack(forward(idx[:, pos:pos + n], caches=caches, start_pos=pos), call)
            pieces.append(piece)
            pos += n
    cached = torch.cat(pieces, dim=1) if all(isinstance(p, torch.Tensor) for p in pieces) else pieces
    return logits, cached, _cache_shapes(caches)


def _config_label(config) -> str:
    vocab, d_model, n_layers, h, h_kv, max_len = config
    return (f"TinyGPT(vocab_size={vocab}, d_model={d_model}, n_layers={n_layers}, num_heads={h}, "
            f"num_kv_heads={h_kv}, max_len={max_len})")


def _tinygpt_cases(seed: int) -> list:
    r, g = rng(seed), generator(seed)
    cases = []

    def add(label, config, batch, s, prefill, chunks, grad=False, qk_gain=2.0, train=False):
        vocab, d_model, n_layers, h, h_kv, max_len = config
        idx = torch.randint(0, vocab, (batch, s), generator=g)
        assert prefill + sum(chunks) == s <= max_len
        state = _reference_model(config, g, qk_gain)
        init = {"ctor": config, "seed": 0, "prefill": prefill, "chunks": chunks}
        if train:
            init["train"] = True
        steps = f"prefill {prefill}" + (f", then chunks {chunks}" if chunks else "")
        kwargs = {}
        if grad:  # the parameters travel as float64 tensors: the core differentiates with respect to them
            kwargs = {k: v.to(F64) for k, v in state.items()}
            label += " (float64; dL/d<every parameter> compared)"
        else:
            init["state"] = state
        cases.append(Case(f"{label}: {_config_label(config)}, idx {tuple(idx.shape)}; cached run: {steps}",
                          (idx,), kwargs, init=init, grad=grad))

    # Small models, few forward calls (the cost is per call, not per element): a mutant that
    # differs is told apart on the first case, cheaply.
    add("grouped-query attention (4 heads, 2 kv heads), a decode chunk of 2 tokens",
        (17, 16, 1, 4, 2, 12), 2, 5, 3, [2])
    add("multi-query attention (1 kv head), two layers, one token per decode step",
        (13, 16, 2, 2, 1, 12), 2, 5, 3, [1, 1])
    add("multi-head (num_kv_heads = num_heads), S = max_len", (11, 16, 1, 2, 2, 8), 2, 8, 5, [3])
    add("eight query heads, four kv heads", (23, 32, 1, 8, 4, 16), 1, 6, 2, [1, 3])
    add("gradients of a random loss of both logits", (13, 16, 2, 4, 2, 12), 2, 6, 4, [2], grad=True)
    for i in range(2):  # random configurations
        h_kv = r.choice([1, 2])
        h = h_kv * r.choice([1, 2, 3])
        d_model = h * r.choice([2, 4, 6])
        max_len = r.randint(8, 16)
        s = r.randint(2, max_len)
        prefill = r.randint(1, s - 1)
        chunks = [s - prefill] if i == 0 else [1, s - prefill - 1] if s - prefill > 1 else [1]
        add(f"random case {i + 1}", (r.randint(5, 30), d_model, r.randint(1, 2), h, h_kv, max_len),
            r.randint(1, 2), s, prefill, chunks)
    add("gradients, multi-query attention, one token per decode step", (11, 12, 1, 3, 1, 8), 1, 5, 3, [1, 1],
        grad=True)
    add("large scores (q and k weights 8x larger; peaked attention)", (13, 16, 1, 2, 1, 12), 2, 8, 3, [5],
        qk_gain=8.0)
    add("prefill only", (19, 32, 1, 4, 1, 24), 2, 10, 10, [])
    add("S = 1", (9, 8, 1, 2, 1, 8), 3, 1, 1, [])
    # No dropout (the contract): in training mode the logits are the eval-mode ones.
    add("training mode (model.train(); the model has no dropout, so the logits equal eval mode's)",
        (13, 16, 2, 4, 2, 12), 2, 6, 4, [2], train=True)
    # Positions up to 255: RoPE's slow rotations tell base 10000 from 10001 (logits off by ~4e-3,
    # 40x the tolerance), while float32 angles stay ~5e-6 from the reference (20x below it).
    add("a long sequence (S = 256; RoPE's slow rotations show its base, 10000)", (13, 16, 1, 2, 1, 256), 1, 256,
        250, [6], qk_gain=4.0)
    return cases


# ---- mutants: the reference model with one mistake in its forward
def _rope_variant(x, positions, half_split=False):
    d = x.size(-1)
    inv_freq = 10000.0 ** (-torch.arange(0, d, 2, dtype=F64) / d)
    angles = positions.to(F64)[:, None] * inv_freq[None, :]
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    if half_split:  # pairs (i, i + D/2) instead of (2i, 2i + 1)
        x1, x2 = x[..., : d // 2], x[..., d // 2:]
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)


def _attention_variant(attn, x, cache, start_pos, *, rope="interleaved", causal="bottom_right",
                       kv="repeat_interleave", rope_from_zero=False, scale="sqrt_head_dim", split="transpose",
                       merge="transpose", softmax_dim=-1, rope_q_only=False, cache_repeated=False):
    B, S, d_model = x.shape
    H, H_kv, D_h = attn.num_heads, attn.num_kv_heads, attn.head_dim
    if split == "view":  # (B, S, H·D_h) viewed as (B, H, S, D_h) without the transpose
        q = attn.W_q(x).view(B, H, S, D_h)
        k = attn.W_k(x).view(B, H_kv, S, D_h)
        v = attn.W_v(x).view(B, H_kv, S, D_h)
    else:
        q = attn.W_q(x).view(B, S, H, D_h).transpose(1, 2)
        k = attn.W_k(x).view(B, S, H_kv, D_h).transpose(1, 2)
        v = attn.W_v(x).view(B, S, H_kv, D_h).transpose(1, 2)
    positions = torch.arange(S) if rope_from_zero else torch.arange(start_pos, start_pos + S)
    if rope is not None:
        q = _rope_variant(q, positions, half_split=rope == "half_split")
        if not rope_q_only:
            k = _rope_variant(k, positions, half_split=rope == "half_split")

    def expand(t):
        if kv == "repeat":  # tiles the kv heads: head h gets kv head h % H_kv
            return t.repeat(1, H // H_kv, 1, 1)
        return t.repeat_interleave(H // H_kv, dim=1)

    if cache_repeated:  # repeat first, then cache: the cache holds H heads instead of H_kv
        k, v = expand(k), expand(v)
        if cache is not None:
            k, v = cache.update(k, v)
    else:
        if cache is not None:
            k, v = cache.update(k, v)
        k, v = expand(k), expand(v)
    T = k.size(-2)
    factor = {"sqrt_head_dim": 1 / math.sqrt(D_h), "none": 1.0, "head_dim": 1 / D_h,
              "sqrt_d_model": 1 / math.sqrt(d_model)}[scale]
    scores = q @ k.transpose(-2, -1) * factor
    if causal is not None:
        diagonal = {"bottom_right": T - S, "top_left": 0, "hides_diagonal": T - S - 1}[causal]
        keep = torch.ones(S, T, dtype=torch.bool).tril(diagonal=diagonal)
        scores = scores.masked_fill(~keep, NEG_INF)
    out = torch.softmax(scores, dim=softmax_dim) @ v
    if merge == "no_transpose":
        out = out.reshape(B, S, H * D_h)
    else:
        out = out.transpose(1, 2).reshape(B, S, H * D_h)
    return attn.W_o(out)


def _norm_variant(norm, x, unbiased=False):
    if not unbiased:
        return norm(x)
    mu = x.mean(-1, keepdim=True)
    var = x.var(-1, keepdim=True)  # torch's default: unbiased (divides by d - 1)
    return norm.weight * (x - mu) / torch.sqrt(var + 1e-5) + norm.bias


def _gpt_variant(model, idx, caches, start_pos, post_norm=False, no_final_norm=False, act="gelu",
                 inplace_residual=False, scaled_embedding=False, dropout=0.0, unbiased_norm=False, **attn_opts):
    x = model.tok_emb(idx)
    if scaled_embedding:
        x = x * math.sqrt(x.size(-1))

    def drop(h):
        return F.dropout(h, p=dropout, training=model.training) if dropout else h

    def norm(mod, h):
        return _norm_variant(mod, h, unbiased_norm)

    def ffn(blk, h):
        hidden = blk.ffn.linear1(h)
        hidden = F.relu(hidden) if act == "relu" else F.gelu(hidden, approximate="tanh" if act == "tanh" else "none")
        return blk.ffn.linear2(hidden)

    for i, blk in enumerate(model.blocks):
        cache = None if caches is None else caches[i]
        if post_norm:
            x = blk.norm1(x + _attention_variant(blk.attn, x, cache, start_pos, **attn_opts))
            x = blk.norm2(x + ffn(blk, x))
        elif inplace_residual:
            x += _attention_variant(blk.attn, blk.norm1(x), cache, start_pos, **attn_opts)
            x += ffn(blk, blk.norm2(x))
        else:
            x = x + drop(_attention_variant(blk.attn, norm(blk.norm1, x), cache, start_pos, **attn_opts))
            x = x + drop(ffn(blk, norm(blk.norm2, x)))
    return model.lm_head(x if no_final_norm else norm(model.norm_f, x)), caches


def _gpt_mutant(**opts):
    def forward(self, idx, caches=None, start_pos=0):
        return _gpt_variant(self, idx, caches, start_pos, **opts)

    return type("TinyGPT", (_GPTBase,), {"forward": forward, "__module__": __name__})


TINYGPT_MUTANTS = [
    Mutant("no_rope",
           "no RoPE was applied: rotate q and k by their positions (start_pos + i) before the scores; without it the model cannot tell positions apart.",
           _gpt_mutant(rope=None)),
    Mutant("no_causal_mask",
           "the attention is not causal: mask the scores of future keys (key j > query i) with -inf, or every position sees the tokens after it.",
           _gpt_mutant(causal=None)),
    Mutant("post_norm",
           "the blocks are post-norm (x = norm(x + attn(x))); this model is pre-norm: x = x + attn(norm1(x)), then x = x + ffn(norm2(x)).",
           _gpt_mutant(post_norm=True)),
    Mutant("no_final_norm",
           "the final LayerNorm norm_f is missing: logits = lm_head(norm_f(x)) after the last block.",
           _gpt_mutant(no_final_norm=True)),
    Mutant("rope_half_split",
           "RoPE rotated the half-split pairs (i, i + D_h/2); this course rotates interleaved pairs (2i, 2i + 1).",
           _gpt_mutant(rope="half_split")),
    Mutant("rope_on_q_only",
           "RoPE was applied to q only: rotate k too (by the same positions), so that q·k depends on the relative position.",
           _gpt_mutant(rope_q_only=True)),
    Mutant("kv_heads_repeat_not_interleave",
           "the kv heads were tiled with repeat (query head h used kv head h % num_kv_heads); use repeat_interleave so query head h uses kv head h // (num_heads // num_kv_heads).",
           _gpt_mutant(kv="repeat")),
    Mutant("heads_split_without_transpose",
           "the heads were split with view(B, H, S, D_h) straight from (B, S, H·D_h), which mixes positions and heads: view(B, S, H, D_h), then transpose(1, 2).",
           _gpt_mutant(split="view")),
    Mutant("heads_merged_without_transpose",
           "the heads were merged with reshape(B, S, H·D_h) straight from (B, H, S, D_h), which mixes positions and heads: transpose(1, 2) first, then reshape.",
           _gpt_mutant(merge="no_transpose")),
    Mutant("no_scaling", "the scores were not divided by sqrt(head_dim).", _gpt_mutant(scale="none")),
    Mutant("scale_by_head_dim", "the scores were divided by head_dim instead of sqrt(head_dim).",
           _gpt_mutant(scale="head_dim")),
    Mutant("scale_by_sqrt_d_model",
           "the scores were divided by sqrt(d_model); each head's scores are divided by sqrt(head_dim), head_dim = d_model // num_heads.",
           _gpt_mutant(scale="sqrt_d_model")),
    Mutant("softmax_wrong_dim",
           "the softmax was taken over the query dim (-2) instead of the key dim (-1): each row of weights must sum to 1.",
           _gpt_mutant(softmax_dim=-2)),
    Mutant("top_left_causal_with_cache",
           "the causal mask is top-left aligned (tril of an S × T matrix), so with a KV cache the new tokens cannot see the cached ones: align it bottom-right, key j visible iff j <= i + T - S.",
           _gpt_mutant(causal="top_left")),
    Mutant("causal_mask_hides_the_diagonal",
           "the causal mask also hides each token's own key (off by one: triu(diagonal=0) used as the mask of hidden keys); query i attends to keys 0 … i, itself included.",
           _gpt_mutant(causal="hides_diagonal")),
    Mutant("rope_ignores_start_pos",
           "RoPE positions always start at 0; with a KV cache the new tokens sit at positions start_pos, start_pos + 1, ...",
           _gpt_mutant(rope_from_zero=True)),
    Mutant("kv_heads_repeated_before_caching",
           "the kv heads were repeated before caching: the cache holds num_heads heads instead of num_kv_heads, which undoes GQA's memory saving. Cache k and v as (B, num_kv_heads, S, head_dim) and repeat them after cache.update.",
           _gpt_mutant(cache_repeated=True)),
    Mutant("relu_feed_forward",
           "the feed-forward uses ReLU (chapter 06's); this model's is linear2(gelu(linear1(x))), exact GELU (F.gelu or nn.GELU()).",
           _gpt_mutant(act="relu")),
    Mutant("gelu_tanh_approximation",
           "the feed-forward uses the tanh approximation of GELU; this model uses the exact GELU (F.gelu(x) or nn.GELU() with approximate='none').",
           _gpt_mutant(act="tanh")),
    Mutant("embedding_scaled_by_sqrt_d_model",
           "the token embedding was multiplied by sqrt(d_model) (as in the original Transformer); this model feeds tok_emb(idx) to the first block as it is.",
           _gpt_mutant(scaled_embedding=True)),
    Mutant("residual_dropout",
           "the blocks apply dropout to their residual branches, which is active in training mode (model.train()): this model has no dropout, so training and eval mode give the same logits.",
           _gpt_mutant(dropout=0.1)),
    Mutant("layernorm_unbiased_variance",
           "your LayerNorm uses the unbiased variance (x.var() divides by d − 1 by default); LayerNorm divides by d: x.var(dim=-1, unbiased=False, keepdim=True), or ((x - mean) ** 2).mean(-1, keepdim=True).",
           _gpt_mutant(unbiased_norm=True)),
    Mutant("inplace_residual",
           "an in-place residual (x += attn(norm1(x))) overwrites x, which LayerNorm saved for the backward pass, so backpropagation fails: write x = x + attn(norm1(x)).",
           _gpt_mutant(inplace_residual=True)),
]


# ---- variants: correct answers written differently (they must pass)
class _VLayerNorm(nn.Module):
    """From scratch, biased variance, float64 inside."""

    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(d))  # created before weight: the order does not matter
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        xd = x.to(F64)
        mu = xd.mean(-1, keepdim=True)
        var = ((xd - mu) ** 2).mean(-1, keepdim=True)
        return ((xd - mu) / torch.sqrt(var + self.eps)).to(x.dtype) * self.weight + self.bias


class _VFFN(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.linear2 = nn.Linear(4 * d, d)
        self.linear1 = nn.Linear(d, 4 * d)

    def forward(self, x):
        h = self.linear1(x)
        return self.linear2(0.5 * h * (1 + torch.erf(h / math.sqrt(2.0))))  # exact GELU by hand


class _VAttention(nn.Module):
    """Grouped heads by reshaping q to (B, H_kv, n_rep, S, D_h) (no repeat), einsum, rotate-half
    RoPE on de-interleaved pairs, an additive float mask, sin/cos in non-persistent buffers."""

    def __init__(self, d_model, h, h_kv, max_len):
        super().__init__()
        self.h, self.h_kv, self.d_h = h, h_kv, d_model // h
        self.W_o = nn.Linear(d_model, d_model, bias=False)
        self.W_v = nn.Linear(d_model, h_kv * self.d_h, bias=False)
        self.W_k = nn.Linear(d_model, h_kv * self.d_h, bias=False)
        self.W_q = nn.Linear(d_model, d_model, bias=False)
        inv = 1.0 / (10000.0 ** (torch.arange(0, self.d_h, 2, dtype=F64) / self.d_h))
        ang = torch.arange(max_len, dtype=F64)[:, None] * inv  # (max_len, D_h/2)
        self.register_buffer("cos", ang.cos().float(), persistent=False)
        self.register_buffer("sin", ang.sin().float(), persistent=False)

    def rope(self, x, start):
        S = x.size(-2)
        cos, sin = self.cos[start:start + S].to(x.dtype), self.sin[start:start + S].to(x.dtype)
        even, odd = x[..., ::2], x[..., 1::2]
        out = torch.empty_like(x)
        out[..., ::2] = even * cos - odd * sin  # writes into a new tensor: autograd is fine
        out[..., 1::2] = even * sin + odd * cos
        return out

    def forward(self, x, cache=None, start_pos=0):
        B, S, C = x.shape
        q = self.rope(self.W_q(x).reshape(B, S, self.h, self.d_h).permute(0, 2, 1, 3), start_pos)
        k = self.rope(self.W_k(x).reshape(B, S, self.h_kv, self.d_h).permute(0, 2, 1, 3), start_pos)
        v = self.W_v(x).reshape(B, S, self.h_kv, self.d_h).permute(0, 2, 1, 3)
        if cache is not None:
            k, v = cache.update(k, v)
        T = k.size(2)
        n_rep = self.h // self.h_kv
        qg = q.reshape(B, self.h_kv, n_rep, S, self.d_h)  # query heads grouped by their kv head
        scores = torch.einsum("bgrsd,bgtd->bgrst", qg, k) / math.sqrt(self.d_h)
        i = torch.arange(S)[:, None] + (T - S)
        j = torch.arange(T)[None, :]
        scores = scores + torch.where(j <= i, 0.0, -1e9).to(scores.dtype)  # no fully masked row when causal
        w = scores.softmax(dim=-1)
        o = torch.einsum("bgrst,bgtd->bgrsd", w, v).reshape(B, self.h, S, self.d_h)
        return self.W_o(o.permute(0, 2, 1, 3).reshape(B, S, C))


class _VBlock(nn.Module):
    def __init__(self, d_model, h, h_kv, max_len):
        super().__init__()
        self.ffn = _VFFN(d_model)
        self.norm2 = _VLayerNorm(d_model)
        self.attn = _VAttention(d_model, h, h_kv, max_len)
        self.norm1 = _VLayerNorm(d_model)


class _VTinyGPTScratch(nn.Module):
    """Parameters created in another order, every piece written by hand."""

    def __init__(self, vocab_size, d_model, n_layers, num_heads, num_kv_heads, max_len):
        super().__init__()
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        self.norm_f = _VLayerNorm(d_model)
        self.blocks = nn.ModuleList([_VBlock(d_model, num_heads, num_kv_heads, max_len) for _ in range(n_layers)])
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.max_len = max_len

    def forward(self, idx, caches=None, start_pos=0):
        assert start_pos + idx.size(1) <= self.max_len, "sequence longer than max_len"
        x = self.tok_emb(idx)
        for layer, b in enumerate(self.blocks):
            x = x + b.attn(b.norm1(x), None if caches is None else caches[layer], start_pos)
            x = x + b.ffn(b.norm2(x))
        return self.lm_head(self.norm_f(x)), caches


class _VRopeMHA(nn.Module):
    """repeat_kv by expand + reshape, complex RoPE in float64, F.scaled_dot_product_attention."""

    def __init__(self, d_model, h, h_kv):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = h, h_kv, d_model // h
        self.W_q = nn.Linear(d_model, d_model, bias=False)
        self.W_k = nn.Linear(d_model, h_kv * self.head_dim, bias=False)
        self.W_v = nn.Linear(d_model, h_kv * self.head_dim, bias=False)
        self.W_o = nn.Linear(d_model, d_model, bias=False)

    @staticmethod
    def rope(x, start):
        S, D = x.size(-2), x.size(-1)
        theta = 10000.0 ** (-torch.arange(0, D, 2, dtype=F64) / D)
        rot = torch.polar(torch.ones(S, D // 2, dtype=F64), torch.arange(start, start + S, dtype=F64)[:, None] * theta)
        xc = torch.view_as_complex(x.to(F64).reshape(*x.shape[:-1], D // 2, 2).contiguous())
        return torch.view_as_real(xc * rot).flatten(-2).to(x.dtype)

    def forward(self, x, cache, start_pos):
        B, S, C = x.shape
        split = lambda t, n: t.view(B, S, n, self.head_dim).transpose(1, 2)  # noqa: E731
        q = self.rope(split(self.W_q(x), self.num_heads), start_pos)
        k = self.rope(split(self.W_k(x), self.num_kv_heads), start_pos)
        v = split(self.W_v(x), self.num_kv_heads)
        if cache is not None:
            k, v = cache.update(k, v)
        T, n_rep = k.size(-2), self.num_heads // self.num_kv_heads
        k = k[:, :, None].expand(B, self.num_kv_heads, n_rep, T, self.head_dim).reshape(B, self.num_heads, T, -1)
        v = v[:, :, None].expand(B, self.num_kv_heads, n_rep, T, self.head_dim).reshape(B, self.num_heads, T, -1)
        mask = torch.ones(S, T, dtype=torch.bool).tril(T - S)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.W_o(o.transpose(1, 2).contiguous().view(B, S, C))


class _VTinyGPTLibrary(nn.Module):
    """nn.LayerNorm, nn.Sequential-free FFN with nn.GELU, SDPA; blocks stored in a plain ModuleList
    of ModuleDicts-like modules built inline."""

    def __init__(self, vocab_size, d_model, n_layers, num_heads, num_kv_heads, max_len):
        super().__init__()
        self.max_len = max_len
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.blocks = nn.ModuleList()
        for _ in range(n_layers):
            blk = nn.Module()
            blk.norm1, blk.attn = nn.LayerNorm(d_model), _VRopeMHA(d_model, num_heads, num_kv_heads)
            blk.norm2, blk.ffn = nn.LayerNorm(d_model), nn.Module()
            blk.ffn.linear1, blk.ffn.act, blk.ffn.linear2 = nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model)
            self.blocks.append(blk)
        self.norm_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)

    def forward(self, idx, caches=None, start_pos=0):
        h = self.tok_emb(idx)
        for n, blk in enumerate(self.blocks):
            h = h + blk.attn(blk.norm1(h), caches[n] if caches else None, start_pos)
            f = blk.ffn
            h = h + f.linear2(f.act(f.linear1(blk.norm2(h))))
        return self.lm_head(self.norm_f(h)), caches


TINYGPT_VARIANTS = [Variant("scratch_pieces_grouped_einsum_other_order", _VTinyGPTScratch, demo=True),
                    Variant("library_pieces_sdpa_complex_rope", _VTinyGPTLibrary)]

TINYGPT_CONTRACT = """A small decoder-only transformer: token embedding, n_layers pre-norm blocks, final norm, LM head.

    Sub-modules and parameters, by these names (the check loads its weights into them by name):
        tok_emb: nn.Embedding(vocab_size, d_model)   (no learned position embedding)
        blocks: nn.ModuleList of n_layers blocks; blocks[i] has
            norm1, norm2: LayerNorm(d_model) (eps 1e-5) with parameters weight and bias
            attn.W_q, attn.W_o: nn.Linear(d_model, d_model, bias=False)
            attn.W_k, attn.W_v: nn.Linear(d_model, num_kv_heads * head_dim, bias=False),
                head_dim = d_model // num_heads
            ffn.linear1: nn.Linear(d_model, 4 * d_model), ffn.linear2: nn.Linear(4 * d_model, d_model)
        norm_f: LayerNorm(d_model);  lm_head: nn.Linear(d_model, vocab_size, bias=False), not tied
        No other parameters (buffers, e.g. a RoPE table, are up to you); self.max_len = max_len.
    Block: x = x + attn(norm1(x)), then x = x + ffn(norm2(x)); ffn(h) = linear2(gelu(linear1(h)))
        with the exact GELU (F.gelu). logits = lm_head(norm_f(x)), x = tok_emb(idx) at the start.
        No dropout anywhere: training mode (model.train()) gives the same logits as eval mode.
    attn: causal grouped-query attention, softmax(q kᵀ / sqrt(head_dim)) v per head; query head h
        uses kv head h // (num_heads // num_kv_heads); RoPE (interleaved pairs, base 10000, as
        apply_rope) on q and k at positions start_pos, ..., start_pos + S - 1.
    forward(idx, caches=None, start_pos=0) -> (logits, caches):
        idx: long (B, S), start_pos + S <= max_len;  logits: (B, S, vocab_size)
        caches=None: no caching; returns (logits, None).
        caches: a list with one KV cache per layer, each with update(k_new, v_new) -> (k_all, v_all)
            (appends along dim -2); layer i calls caches[i].update with k_new, v_new of shape
            (B, num_kv_heads, S, head_dim) (kv heads not repeated) and attends to what it returns.
            start_pos = the number of tokens already cached; query i sees every cached key and
            the new keys up to itself. Returns (logits, caches), the list it was given.
    Compute in the dtype of the weights (the gradient cases convert the floating-point parameters
    and buffers to float64).
    """

def _submodule_names(n_layers: int) -> list:
    """The prompt's names, in the order a forward pass reaches them."""
    names = ["tok_emb"]
    for i in range(n_layers):
        b = f"blocks.{i}"
        names += [f"{b}.norm1", f"{b}.attn.W_q", f"{b}.attn.W_k", f"{b}.attn.W_v", f"{b}.attn.W_o", f"{b}.attn",
                  f"{b}.norm2", f"{b}.ffn.linear1", f"{b}.ffn.linear2", f"{b}.ffn"]
    return names + ["norm_f", "lm_head"]


def _locate_tinygpt(exercise, impl, cases, outputs, expected, errors) -> str | None:
    """The first sub-module, by the prompt's names, whose output differs from the reference's: forward
    hooks on the learner's model and the reference's, both built with the case's weights loaded by
    those names, compared call by call (the full sequence, then the cached chunks)."""
    from ._clues import locate_submodule

    return locate_submodule(exercise, impl, cases, outputs, expected, errors,
                            names=lambda case: _submodule_names(case.init["ctor"][2]))


TINYGPT_EXERCISE = Exercise(
    name="TinyGPT",
    reference=ref.TinyGPT,
    make_cases=_tinygpt_cases,
    kind="class",
    run=_run_tinygpt,
    mutants=TINYGPT_MUTANTS,
    variants=TINYGPT_VARIANTS,
    output_names=("logits", "logits with KV caches (prefill, then the chunks)",
                  "shapes of each layer's cached (k, v)"),
    # float32 logits of O(1-10) through a few layers; RoPE tables in float32, complex RoPE and
    # fused SDPA differ from the reference by ~1e-6: 1e-4 absolute is still far below every mistake
    atol=1e-4,
    contract=Contract(TINYGPT_CONTRACT, grad="every parameter, by the names above", same_dtype=True),
    locate=_locate_tinygpt,
)
check_TinyGPT = register(TINYGPT_EXERCISE)


# ---------------------------------------------------------------- generate
IGNORES_CACHE = ("use_cache=True was ignored: prefill the prompt once into one KV cache per layer, then "
                 "feed one token per step together with those caches.")
REFEEDS = ("with use_cache=True the whole sequence was fed again after the prefill: feed only the newest "
           "token, idx[:, -1:], at start_pos = idx.size(1) - 1; the cache already holds the rest.")
START_POS = ("start_pos with a KV cache is wrong: it must equal the number of tokens already in the "
             "cache, i.e. the position of the token being fed (idx.size(1) - 1 for the newest one).")
REPREFILLS = ("with use_cache=True fresh, empty caches were given to forward again after the prefill: create "
              "the caches once, prefill the prompt once, then reuse the same caches for every new token.")
NO_CROP = ("without the cache the sequence grew past max_len: crop it to its last max_len tokens, "
           "idx[:, -model.max_len:], before each forward.")
PLAIN_START_POS = ("without a cache, start_pos must stay 0: every step runs the whole sequence (cropped to its "
                   "last max_len tokens), so its first token sits at position 0; a non-zero start_pos shifts every "
                   "RoPE position (and overruns max_len). Call model(idx[:, -model.max_len:]) with caches=None.")
CROP_LENGTH = ("without the cache each step runs the whole sequence, cropped to its last max_len tokens: "
               "idx[:, -model.max_len:] (not fewer tokens, not only the newest ones).")
ONE_OBJECT = ("one cache object was given to every layer ([KVCache()] * n_layers repeats one object): each "
              "layer needs its own cache, [KVCache() for _ in model.blocks].")
STALE_OR_SHARED = ("a layer's cache held more positions after update than start_pos + S: each layer needs its "
                   "own, empty KV cache created inside generate (not storage shared at class level, not caches "
                   "kept from an earlier call).")


class _WatchedCache:
    """Stands for the learner's cache inside the reference model: checks what update returns."""

    def __init__(self, inner, expected: int, label: str):
        self.inner, self.expected, self.label = inner, expected, label
        self.tripwire = None

    def update(self, k_new, v_new):
        with self.tripwire if self.tripwire is not None else contextlib.nullcontext():
            out = self.inner.update(k_new, v_new)
        if not (isinstance(out, (tuple, list)) and len(out) == 2 and all(isinstance(t, torch.Tensor) for t in out)):
            raise CheckFailure(f"generate on case [{self.label}]: cache.update(k_new, v_new) should return "
                               f"(k_all, v_all), got {describe(out)}.")
        if out[0].size(-2) != self.expected:
            raise CheckFailure(f"generate on case [{self.label}]: {STALE_OR_SHARED}")
        return out


class _RecordingGPT(_GPTBase):
    """The reference TinyGPT that watches how ``generate`` calls it."""

    def forward(self, idx, caches=None, start_pos=0):
        s = idx.size(-1)
        if caches is not None:
            if len(caches) == 0:
                raise CheckFailure(f"generate on case [{self.case_label}]: caches is an empty list; pass one KV cache per layer (len(model.blocks)).")
            if len({id(c) for c in caches}) < len(caches):
                raise CheckFailure(f"generate on case [{self.case_label}]: {ONE_OBJECT}")
            key = id(caches[0])
            self.keep.append(caches[0])  # keep it alive, so its id is not reused
            fed = self.fed.get(key, 0)
            self.cached_calls += 1
            if fed > 0 and s > 1:
                raise CheckFailure(
                    f"generate on case [{self.case_label}]: after the prefill, forward got {s} tokens with a cache that "
                    f"already holds {fed}. Likely mistake: {REFEEDS}")
            if fed == 0 and self.cached_calls > 1:
                raise CheckFailure(
                    f"generate on case [{self.case_label}]: forward call number {self.cached_calls} "
                    f"with caches got {s} token(s) and empty caches. Likely mistake: {REPREFILLS}")
            if start_pos != fed:
                raise CheckFailure(
                    f"generate on case [{self.case_label}]: forward got {s} token(s) at start_pos={start_pos}, but the cache "
                    f"already holds {fed} tokens (expected start_pos={fed}). Likely mistake: {START_POS}")
            self.fed[key] = fed + s
        if caches is None and start_pos != 0:
            raise CheckFailure(
                f"generate on case [{self.case_label}]: forward got {s} token(s) with caches=None and "
                f"start_pos={start_pos}. Likely mistake: {PLAIN_START_POS}")
        if start_pos + s > self.max_len:
            raise CheckFailure(
                f"generate on case [{self.case_label}]: forward got a sequence of {s} tokens at start_pos={start_pos}, "
                f"longer than max_len={self.max_len}. Likely mistake: {NO_CROP}")
        if caches is None:  # without a cache, call k sees the whole sequence so far, cropped to max_len
            held = self.prompt_len + self.plain_calls
            self.plain_calls += 1
            if s != min(held, self.max_len):
                raise CheckFailure(
                    f"generate on case [{self.case_label}]: call {self.plain_calls} without the cache got {s} token(s), "
                    f"but the sequence then held {held} and max_len is {self.max_len}: expected its last "
                    f"{min(held, self.max_len)}. Likely mistake: {CROP_LENGTH}")
        watched = None if caches is None else [_WatchedCache(c, start_pos + s, self.case_label) for c in caches]
        with _outside_tripwire() as tripwire:  # the model is the check's code, not the learner's
            for w in watched or ():
                w.tripwire = tripwire  # ... but the learner's cache.update runs under it again
            logits, _ = super().forward(idx, watched, start_pos)
        return logits, caches


@contextlib.contextmanager
def _outside_tripwire():
    """Pop the learner guard's torch-function tripwire (budget checks on every op) while the check's
    own model runs; yields it (or None) so the learner's code inside can be put back under it."""
    from torch.overrides import _get_current_function_mode, _pop_mode_temporarily

    from ._core import _Tripwire

    if isinstance(_get_current_function_mode(), _Tripwire):
        with _pop_mode_temporarily() as mode:
            yield mode
    else:
        yield None


def _run_generate(fn, case: Case):
    if case.init.get("both"):  # the same prompt with and without the cache: greedy gives the same tokens
        return tuple(_run_generate(fn, Case(case.label, case.args, {"use_cache": flag}, init={**case.init, "both": False}))
                     for flag in (True, False))
    model = _build(_RecordingGPT, case, case.init["state"])
    model.case_label, model.fed, model.keep, model.cached_calls = case.label, {}, [], 0
    idx, max_new_tokens = case.args
    model.prompt_len, model.plain_calls = idx.size(1), 0
    out = fn(model, idx.clone(), max_new_tokens, **case.kwargs)
    if not isinstance(out, torch.Tensor):
        return out  # the comparison says what was expected
    if case.kwargs.get("use_cache", True) and max_new_tokens > 0 and model.cached_calls == 0:
        raise CheckFailure(f"generate on case [{case.label}]: forward was never given caches. Likely mistake: {IGNORES_CACHE}")
    return out


def _greedy_margin(config, state, idx, n) -> float:
    """The smallest gap between the best and second-best logit over the greedy steps (uncached,
    cropped to max_len): a gap far above float32 round-off makes every correct call sequence
    (prefill all at once or token by token, SDPA or by hand) pick the same tokens."""
    model = _GPTBase(*config)
    model.load_state_dict(state)
    margin = math.inf
    with torch.no_grad():
        for _ in range(n):
            logits, _ = model(idx[:, -config[5]:])
            top = logits[:, -1].topk(2, dim=-1).values
            margin = min(margin, float((top[:, 0] - top[:, 1]).min()))
            idx = torch.cat([idx, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return margin


def _generate_cases(seed: int) -> list:
    r, g = rng(seed), generator(seed)
    cases = []

    def add(label, config, batch, s, n, use_cache, both=False):
        vocab, d_model, n_layers, h, h_kv, max_len = config
        idx = torch.randint(0, vocab, (batch, s), generator=g)
        for _ in range(20):  # redraw the weights until no greedy step is a near tie
            state = _reference_model(config, g)
            if _greedy_margin(config, state, idx, n) > 1e-3:
                break
        kwargs = {} if use_cache is None else {"use_cache": use_cache}
        init = {"ctor": config, "seed": 0, "state": state, "both": both}
        flag = ("use_cache=True, then use_cache=False" if both else
                "use_cache=True (default)" if use_cache is None else f"use_cache={use_cache}")
        cases.append(Case(f"{label}: {_config_label(config)} with random weights, idx {tuple(idx.shape)}, "
                          f"max_new_tokens={n}, {flag}", (idx, n), kwargs, init=init))

    # Small models and few steps: the check is about the decoding loop, not the model.
    add("with the cache", (13, 8, 2, 2, 1, 12), 1, 3, 5, True)
    add("without the cache", (17, 8, 1, 2, 1, 12), 2, 4, 4, False)
    add("default use_cache", (23, 8, 1, 2, 1, 10), 1, 3, 4, None)
    add("the same prompt with and without the cache", (13, 16, 2, 4, 2, 12), 2, 3, 5, None, both=True)
    add("with the cache, filling max_len exactly", (13, 8, 1, 2, 2, 8), 2, 3, 5, True)
    add("without the cache, past max_len (crop)", (11, 8, 1, 2, 2, 6), 2, 4, 5, False)
    for i in range(2):  # random configurations
        h_kv = r.choice([1, 2])
        h = h_kv * r.choice([1, 2])
        max_len = r.randint(6, 10)
        use_cache = bool(i % 2 == 0)
        s = r.randint(1, 4)
        n = r.randint(1, max_len - s) if use_cache else r.randint(1, max_len - s + 2)
        add(f"random case {i + 1}", (r.randint(7, 30), 4 * h, r.randint(1, 2), h, h_kv, max_len),
            r.randint(1, 2), s, n, use_cache)
    add("prompt already at max_len, without the cache", (11, 8, 1, 2, 1, 5), 1, 5, 3, False)
    add("one-token prompt, with the cache", (19, 8, 1, 2, 1, 8), 2, 1, 5, True)
    add("max_new_tokens = 0", (9, 8, 1, 2, 1, 8), 2, 3, 0, True)
    return cases



def _generate_variant(model, idx, max_new_tokens, use_cache=True, *, sample=False, only_new=False,
                      ignore_cache=False, start_pos_shift=0, start_pos_zero=False, refeed=False, crop="last",
                      new_caches=False, n_steps=None, one_object=False, plain_start_pos=False):
    prompt_len = idx.size(1)
    use_cache = use_cache and not ignore_cache
    if use_cache and one_object:
        caches = [ConcatKVCache()] * len(model.blocks)
    else:
        caches = [ConcatKVCache() for _ in model.blocks] if use_cache else None
    with torch.no_grad():
        for step in range(max_new_tokens if n_steps is None else max(max_new_tokens + n_steps, 0)):
            if not use_cache:
                if crop == "last":
                    window = idx[:, -model.max_len:]
                elif crop == "first":
                    window = idx[:, :model.max_len]
                elif crop == "short":  # one token fewer than max_len
                    window = idx[:, -(model.max_len - 1):]
                else:
                    window = idx
                if plain_start_pos:  # the position of the newest token, as with a cache
                    logits, _ = model(window, None, window.size(1) - 1)
                else:
                    logits, _ = model(window)
            elif step == 0:
                logits, caches = model(idx, caches, start_pos=0)
            elif new_caches:  # a fresh prefill of everything, every step
                logits, caches = model(idx, [ConcatKVCache() for _ in model.blocks], start_pos=0)
            elif refeed:
                logits, caches = model(idx, caches, start_pos=0)
            else:
                pos = 0 if start_pos_zero else idx.size(1) - 1 + start_pos_shift
                logits, caches = model(idx[:, -1:], caches, start_pos=pos)
            if sample:
                next_id = torch.multinomial(torch.softmax(logits[:, -1, :], dim=-1), 1)
            else:
                next_id = logits[:, -1, :].argmax(dim=-1, keepdim=True)
            idx = torch.cat([idx, next_id], dim=1)
    return idx[:, prompt_len:] if only_new else idx


def _gen_mutant(**opts):
    def generate(model, idx, max_new_tokens, use_cache=True):
        return _generate_variant(model, idx, max_new_tokens, use_cache, **opts)

    return generate


def _gen_default_no_cache(model, idx, max_new_tokens, use_cache=False):
    return _generate_variant(model, idx, max_new_tokens, use_cache)


GENERATE_MUTANTS = [
    Mutant("samples_instead_of_argmax",
           "the next token was sampled from the softmax; greedy decoding takes the argmax of the last position's logits.",
           _gen_mutant(sample=True)),
    Mutant("returns_only_new_tokens",
           "only the new tokens were returned; return the prompt followed by them, shape (B, S + max_new_tokens).",
           _gen_mutant(only_new=True)),
    Mutant("one_token_too_few",
           "max_new_tokens - 1 tokens were generated (an off-by-one in the loop): append exactly max_new_tokens tokens.",
           _gen_mutant(n_steps=-1)),
    Mutant("no_crop_to_max_len", NO_CROP, _gen_mutant(crop=None)),
    Mutant("crop_keeps_first_tokens",
           "the sequence was cropped to its first max_len tokens (idx[:, :max_len]); keep the last ones, idx[:, -max_len:], which the next token follows.",
           _gen_mutant(crop="first")),
    Mutant("ignores_use_cache", IGNORES_CACHE, _gen_mutant(ignore_cache=True)),
    Mutant("use_cache_defaults_to_false", IGNORES_CACHE, _gen_default_no_cache),
    Mutant("refeeds_whole_sequence_with_cache", REFEEDS, _gen_mutant(refeed=True)),
    Mutant("new_caches_every_step", REPREFILLS, _gen_mutant(new_caches=True)),
    Mutant("start_pos_off_by_one", START_POS, _gen_mutant(start_pos_shift=1)),
    Mutant("start_pos_always_zero", START_POS, _gen_mutant(start_pos_zero=True)),
    Mutant("one_cache_object_for_all_layers", ONE_OBJECT, _gen_mutant(one_object=True)),
    Mutant("start_pos_without_cache", PLAIN_START_POS, _gen_mutant(plain_start_pos=True)),
    Mutant("crops_to_max_len_minus_one", CROP_LENGTH, _gen_mutant(crop="short")),
]


# ---- variants
class _ListCache:
    """A learner's own cache: lists of chunks, concatenated on every update."""

    def __init__(self):
        self.ks, self.vs = [], []

    def update(self, k_new, v_new):
        self.ks.append(k_new)
        self.vs.append(v_new)
        return torch.cat(self.ks, dim=2), torch.cat(self.vs, dim=2)


def _v_generate_position_counter(model, idx, max_new_tokens, use_cache=True):
    """Tracks the position in a counter, feeds the prompt as one chunk (test_reference_ch13_15 style)."""
    with torch.no_grad():
        caches = [_ListCache() for _ in range(len(model.blocks))] if use_cache else None
        feed, pos = idx, 0
        for _ in range(max_new_tokens):
            if not use_cache:
                feed, pos = idx[:, -model.max_len:], 0
            logits, caches = model(feed, caches, pos)
            nxt = torch.argmax(logits[:, -1], dim=-1)[:, None]
            if use_cache:
                pos += feed.size(1)
                feed = nxt
            idx = torch.cat((idx, nxt), 1)
    return idx


def _v_generate_token_by_token(model, idx, max_new_tokens, use_cache=True):
    """Prefills all but the last prompt token, then feeds one token per call (the last prompt token
    first); tokens collected in a list and concatenated once; topk instead of argmax."""
    if max_new_tokens == 0:
        return idx
    out = [idx]
    if not use_cache:
        seq = idx
        for _ in range(max_new_tokens):
            logits, _ = model(seq[:, max(0, seq.size(1) - model.max_len):], None)
            nxt = logits[:, -1].topk(1, dim=-1).indices
            out.append(nxt)
            seq = torch.cat([seq, nxt], dim=-1)
        return torch.cat(out, dim=1)
    caches = [ConcatKVCache() for _ in model.blocks]
    S = idx.size(1)
    if S > 1:
        model(idx[:, :-1], caches, 0)
    last, pos = idx[:, -1:], S - 1
    for _ in range(max_new_tokens):
        logits, caches = model(last, caches, start_pos=pos)
        last = logits[:, -1].topk(1, dim=-1).indices
        out.append(last)
        pos += 1
    return torch.cat(out, dim=1)


GENERATE_VARIANTS = [Variant("position_counter_list_cache", _v_generate_position_counter),
                     Variant("token_by_token_prefill_topk", _v_generate_token_by_token, demo=True)]

GENERATE_CONTRACT = """Greedy decoding: append the argmax token of the last position, max_new_tokens times.

    model: a TinyGPT as above, in eval mode; generate uses only model(idx, caches, start_pos)
        -> (logits, caches), model.max_len and len(model.blocks) (the number of layers).
    idx: long (B, S), the prompt.  Returns a long tensor (B, S + max_new_tokens): the prompt,
        then the new tokens.
    use_cache=True: create one new, empty KV cache per layer (your KVCache: update(k_new, v_new)
        -> (k_all, v_all), appending along dim -2), run the prompt through the model once
        (start_pos=0), then feed one token per call, the newest, at start_pos = the number of
        tokens already cached. The check keeps S + max_new_tokens <= model.max_len here.
    use_cache=False: every step runs the whole sequence, cropped to its last model.max_len
        tokens, with caches=None (start_pos=0).
    Both give the same tokens. No gradients are needed: torch.no_grad() is up to you (not checked).
    """

GENERATE_EXERCISE = Exercise(
    name="generate",
    reference=ref.generate,
    make_cases=_generate_cases,
    run=_run_generate,
    mutants=GENERATE_MUTANTS,
    variants=GENERATE_VARIANTS,
    contract=Contract(GENERATE_CONTRACT, same_dtype=False),
)
check_generate = register(GENERATE_EXERCISE)
