"""Checks for chapter 14 — the tiny GPT and greedy generation with a KV cache."""
import math

import torch
import torch.nn as nn

from .. import reference as ref
from .._guard import unguarded
from ._core import Case, CheckFailure, Exercise, Mutant, describe, generator, load_state_strict, rng
from ._registry import register
from ..reference._common import ConcatKVCache

__all__ = ["check_TinyGPT", "check_generate"]

NEG_INF = float("-inf")


# ---------------------------------------------------------------- shared helpers
def _random_state(model: nn.Module, g: torch.Generator) -> dict:
    """Random parameters with the reference's names, large enough that attention is peaked."""
    state = {}
    for name, p in model.state_dict().items():
        if name.endswith("norm1.weight") or name.endswith("norm2.weight") or name == "norm_f.weight":
            value = 1.0 + 0.2 * torch.randn(p.shape, generator=g)
        elif name.endswith("bias"):
            value = 0.2 * torch.randn(p.shape, generator=g)
        elif name == "tok_emb.weight":
            value = torch.randn(p.shape, generator=g)
        else:  # Linear weights (out, in): unit-variance outputs, q and k a little larger
            gain = 2.0 if name.endswith(("W_q.weight", "W_k.weight")) else 1.0
            value = gain * torch.randn(p.shape, generator=g) / math.sqrt(p.shape[1])
        state[name] = value
    return state


def _reference_model(config: tuple, g: torch.Generator):
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = unguarded(ref.TinyGPT)(*config)
    return _random_state(model, g)


def _load_params(module: nn.Module, state: dict, name: str) -> None:
    """Copy the reference's parameters in by name (buffers such as RoPE tables may differ)."""
    load_state_strict(module, state, name, parameters_only=True)


def _build(cls, case: Case) -> nn.Module:
    with torch.random.fork_rng():
        torch.manual_seed(case.init.get("seed", 0))
        module = cls(*case.init["ctor"])
    if not isinstance(module, nn.Module):
        raise CheckFailure(f"{cls.__name__}(...) should build an nn.Module, got {type(module).__name__}.")
    _load_params(module, case.init["state"], cls.__name__)
    return module.eval()


def _unpack(result, call: str):
    if not (isinstance(result, tuple) and len(result) == 2):
        raise CheckFailure(f"{call} should return a tuple (logits, caches), but it returned {describe(result)}.")
    return result


# ---------------------------------------------------------------- TinyGPT
def _run_tinygpt(cls, case: Case):
    """Uncached logits of the whole sequence, then the same sequence fed through KV caches."""
    model = _build(cls, case)
    idx = case.args[0]
    n_layers, max_len = case.init["ctor"][2], case.init["ctor"][5]
    if getattr(model, "max_len", None) != max_len:
        raise CheckFailure(f"TinyGPT(..., max_len={max_len}) should keep max_len as the attribute self.max_len "
                           f"(generate crops to it); got {getattr(model, 'max_len', 'no such attribute')!r}.")
    with torch.no_grad():
        logits, caches = _unpack(model(idx), "model(idx)")
        if caches is not None:
            raise CheckFailure("model(idx) without caches should return (logits, None): nothing is cached.")
        caches = [ConcatKVCache() for _ in range(n_layers)]
        pieces, pos = [], 0
        for n in [case.kwargs["prefill"], *case.kwargs["chunks"]]:
            call = f"model(idx[:, {pos}:{pos + n}], caches=caches, start_pos={pos})"
            piece, _ = _unpack(model(idx[:, pos:pos + n], caches=caches, start_pos=pos), call)
            pieces.append(piece)
            pos += n
    cached = torch.cat(pieces, dim=1) if all(isinstance(p, torch.Tensor) for p in pieces) else pieces
    return logits, cached


def _tinygpt_cases(seed: int) -> list:
    r, g = rng(seed), generator(seed)
    cases = []

    def add(label, config, batch, s, prefill, chunks):
        vocab, d_model, n_layers, h, h_kv, max_len = config
        idx = torch.randint(0, vocab, (batch, s), generator=g)
        assert prefill + sum(chunks) == s <= max_len
        init = {"ctor": config, "seed": 0, "state": _reference_model(config, g)}
        steps = f"prefill {prefill}" + (f", then chunks {chunks}" if chunks else "")
        cases.append(Case(
            f"{label}: TinyGPT(vocab_size={vocab}, d_model={d_model}, n_layers={n_layers}, num_heads={h}, "
            f"num_kv_heads={h_kv}, max_len={max_len}), idx {tuple(idx.shape)}; cached run: {steps}",
            (idx,), {"prefill": prefill, "chunks": chunks}, init=init))

    add("multi-query attention (1 kv head), one token per decode step", (13, 16, 1, 2, 1, 16), 2, 7, 3, [1, 1, 1, 1])
    add("grouped-query attention, decode chunks of 1 and 2 tokens", (17, 24, 2, 4, 2, 20), 1, 9, 4, [2, 1, 2])
    add("multi-head (num_kv_heads = num_heads), S = max_len", (11, 16, 2, 2, 2, 12), 2, 12, 1, [1] * 11)
    add("S = 1", (9, 8, 1, 2, 1, 8), 3, 1, 1, [])
    add("prefill only", (19, 32, 2, 4, 1, 24), 2, 10, 10, [])
    add("four kv heads, eight query heads", (23, 32, 1, 8, 4, 16), 1, 6, 2, [1, 3])
    for i in range(3):  # random configurations
        h_kv = r.choice([1, 2])
        h = h_kv * r.choice([1, 2, 3])
        d_model = h * r.choice([2, 4, 6])
        max_len = r.randint(8, 16)
        s = r.randint(2, max_len)
        prefill = r.randint(1, s - 1)
        rest, chunks = s - prefill, []
        while rest:
            chunks.append(min(rest, r.choice([1, 1, 2])))
            rest -= chunks[-1]
        add(f"random case {i + 1}", (r.randint(5, 30), d_model, r.randint(1, 2), h, h_kv, max_len),
            r.randint(1, 2), s, prefill, chunks)
    return cases


def _rope_variant(x, positions, half_split=False):
    d = x.size(-1)
    inv_freq = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)
    angles = positions.float()[:, None] * inv_freq[None, :]
    cos, sin = angles.cos(), angles.sin()
    if half_split:  # pairs (i, i + D/2) instead of (2i, 2i + 1)
        x1, x2 = x[..., : d // 2], x[..., d // 2:]
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)


def _attention_variant(attn, x, cache, start_pos, *, rope="interleaved", causal="bottom_right",
                       kv="repeat_interleave", rope_from_zero=False):
    B, S, _ = x.shape
    H, H_kv, D_h = attn.num_heads, attn.num_kv_heads, attn.head_dim
    q = attn.W_q(x).view(B, S, H, D_h).transpose(1, 2)
    k = attn.W_k(x).view(B, S, H_kv, D_h).transpose(1, 2)
    v = attn.W_v(x).view(B, S, H_kv, D_h).transpose(1, 2)
    positions = torch.arange(S) if rope_from_zero else torch.arange(start_pos, start_pos + S)
    if rope is not None:
        q = _rope_variant(q, positions, half_split=rope == "half_split")
        k = _rope_variant(k, positions, half_split=rope == "half_split")
    if cache is not None:
        k, v = cache.update(k, v)
    T = k.size(-2)
    if kv == "repeat":  # tiles the kv heads: head h gets kv head h % H_kv
        k, v = k.repeat(1, H // H_kv, 1, 1), v.repeat(1, H // H_kv, 1, 1)
    else:
        k, v = k.repeat_interleave(H // H_kv, dim=1), v.repeat_interleave(H // H_kv, dim=1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(D_h)
    if causal is not None:
        keep = torch.ones(S, T, dtype=torch.bool).tril(diagonal=T - S if causal == "bottom_right" else 0)
        scores = scores.masked_fill(~keep, NEG_INF)
    out = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, S, H * D_h)
    return attn.W_o(out)


def _gpt_variant(model, idx, caches, start_pos, post_norm=False, **attn_opts):
    x = model.tok_emb(idx)
    for i, blk in enumerate(model.blocks):
        cache = None if caches is None else caches[i]
        if post_norm:
            x = blk.norm1(x + _attention_variant(blk.attn, x, cache, start_pos, **attn_opts))
            x = blk.norm2(x + blk.ffn(x))
        else:
            x = x + _attention_variant(blk.attn, blk.norm1(x), cache, start_pos, **attn_opts)
            x = x + blk.ffn(blk.norm2(x))
    return model.lm_head(model.norm_f(x)), caches


_GPTBase = unguarded(ref.TinyGPT)


def _gpt_mutant(name, **opts):
    def forward(self, idx, caches=None, start_pos=0):
        return _gpt_variant(self, idx, caches, start_pos, **opts)

    return type(name, (_GPTBase,), {"forward": forward, "__module__": __name__})


TINYGPT_MUTANTS = [
    Mutant("no_rope",
           "no RoPE was applied: rotate q and k by their positions (start_pos + i) before the scores; without it the model cannot tell positions apart.",
           _gpt_mutant("TinyGPT", rope=None)),
    Mutant("no_causal_mask",
           "the attention is not causal: mask the scores of future keys (key j > query i) with -inf, or every position sees the tokens after it.",
           _gpt_mutant("TinyGPT", causal=None)),
    Mutant("post_norm",
           "the blocks are post-norm (x = norm(x + attn(x))); this model is pre-norm: x = x + attn(norm1(x)), then x = x + ffn(norm2(x)).",
           _gpt_mutant("TinyGPT", post_norm=True)),
    Mutant("rope_half_split",
           "RoPE rotated the half-split pairs (i, i + D_h/2); this course rotates interleaved pairs (2i, 2i + 1).",
           _gpt_mutant("TinyGPT", rope="half_split")),
    Mutant("kv_heads_repeat_not_interleave",
           "the kv heads were tiled with repeat (query head h used kv head h % num_kv_heads); use repeat_interleave so query head h uses kv head h // (num_heads // num_kv_heads).",
           _gpt_mutant("TinyGPT", kv="repeat")),
    Mutant("top_left_causal_with_cache",
           "the causal mask is top-left aligned (tril of an S × T matrix), so with a KV cache the new tokens cannot see the cached ones: align it bottom-right, key j visible iff j <= i + T - S.",
           _gpt_mutant("TinyGPT", causal="top_left")),
    Mutant("rope_ignores_start_pos",
           "RoPE positions always start at 0; with a KV cache the new tokens sit at positions start_pos, start_pos + 1, ...",
           _gpt_mutant("TinyGPT", rope_from_zero=True)),
]

TINYGPT_EXERCISE = Exercise(
    name="TinyGPT",
    reference=ref.TinyGPT,
    make_cases=_tinygpt_cases,
    kind="class",
    run=_run_tinygpt,
    mutants=TINYGPT_MUTANTS,
    output_names=("logits", "logits with KV caches (prefill, then the chunks)"),
)
check_TinyGPT = register(TINYGPT_EXERCISE)


# ---------------------------------------------------------------- generate
IGNORES_CACHE = ("use_cache=True was ignored: prefill the prompt once into one KV cache per layer, then "
                 "feed one token per step together with those caches.")
REFEEDS = ("with use_cache=True the whole sequence was fed again after the prefill: feed only the newest "
           "token, idx[:, -1:], at start_pos = idx.size(1) - 1; the cache already holds the rest.")
START_POS = ("start_pos with a KV cache is wrong (off by one?): it must equal the number of tokens already in the "
             "cache, i.e. the position of the token being fed (idx.size(1) - 1 for the newest one).")
REPREFILLS = ("with use_cache=True fresh, empty caches were given to forward again after the prefill: create "
              "the caches once, prefill the prompt once, then reuse the same caches for every new token.")
NO_CROP = ("without the cache the sequence grew past max_len: crop it to its last max_len tokens, "
           "idx[:, -model.max_len:], before each forward.")


class _RecordingGPT(_GPTBase):
    """The reference TinyGPT that watches how ``generate`` calls it."""

    def forward(self, idx, caches=None, start_pos=0):
        s = idx.size(-1)
        if caches is not None:
            if len(caches) == 0:
                raise CheckFailure(f"generate on case [{self.case_label}]: caches is an empty list; pass one KV cache per layer (len(model.blocks)).")
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
        if start_pos + s > self.max_len:
            raise CheckFailure(
                f"generate on case [{self.case_label}]: forward got a sequence of {s} tokens at start_pos={start_pos}, "
                f"longer than max_len={self.max_len}. Likely mistake: {NO_CROP}")
        return super().forward(idx, caches, start_pos)


def _run_generate(fn, case: Case):
    model = _build(_RecordingGPT, case)
    model.case_label, model.fed, model.keep, model.cached_calls = case.label, {}, [], 0
    idx, max_new_tokens = case.args
    out = fn(model, idx.clone(), max_new_tokens, **case.kwargs)
    if not isinstance(out, torch.Tensor):
        return out  # the comparison says what was expected
    if case.kwargs.get("use_cache", True) and max_new_tokens > 0 and model.cached_calls == 0:
        raise CheckFailure(f"generate on case [{case.label}]: forward was never given caches. Likely mistake: {IGNORES_CACHE}")
    return out


def _generate_cases(seed: int) -> list:
    r, g = rng(seed), generator(seed)
    cases = []

    def add(label, config, batch, s, n, use_cache):
        vocab, d_model, n_layers, h, h_kv, max_len = config
        idx = torch.randint(0, vocab, (batch, s), generator=g)
        kwargs = {} if use_cache is None else {"use_cache": use_cache}
        init = {"ctor": config, "seed": 0, "state": _reference_model(config, g)}
        flag = "use_cache=True (default)" if use_cache is None else f"use_cache={use_cache}"
        cases.append(Case(
            f"{label}: TinyGPT(vocab_size={vocab}, d_model={d_model}, n_layers={n_layers}, num_heads={h}, "
            f"num_kv_heads={h_kv}, max_len={max_len}) with random weights, idx {tuple(idx.shape)}, "
            f"max_new_tokens={n}, {flag}",
            (idx, n), kwargs, init=init))

    add("with the cache", (13, 16, 2, 2, 1, 16), 1, 3, 6, True)
    add("without the cache", (17, 16, 1, 4, 2, 16), 2, 4, 5, False)
    add("without the cache, past max_len (crop)", (11, 16, 2, 2, 2, 8), 2, 5, 8, False)
    add("prompt already at max_len, without the cache", (11, 16, 1, 2, 1, 6), 1, 6, 3, False)
    add("one-token prompt, with the cache", (19, 24, 1, 4, 1, 12), 2, 1, 7, True)
    add("max_new_tokens = 0", (9, 8, 1, 2, 1, 8), 2, 3, 0, True)
    add("default use_cache", (23, 16, 2, 2, 1, 12), 1, 4, 4, None)
    add("with the cache, filling max_len exactly", (13, 16, 1, 2, 2, 10), 2, 4, 6, True)
    for i in range(3):  # random configurations
        h_kv = r.choice([1, 2])
        h = h_kv * r.choice([1, 2])
        max_len = r.randint(8, 14)
        use_cache = bool(i % 2 == 0)
        s = r.randint(1, 5)
        n = r.randint(1, max_len - s) if use_cache else r.randint(1, max_len + 2)
        add(f"random case {i + 1}", (r.randint(7, 30), 4 * h, r.randint(1, 2), h, h_kv, max_len),
            r.randint(1, 2), s, n, use_cache)
    return cases


def _generate_variant(model, idx, max_new_tokens, use_cache=True, *, sample=False, only_new=False,
                      ignore_cache=False, start_pos_shift=0, refeed=False, crop="last",
                      new_caches=False):
    prompt_len = idx.size(1)
    use_cache = use_cache and not ignore_cache
    caches = [ConcatKVCache() for _ in model.blocks] if use_cache else None
    with torch.no_grad():
        for step in range(max_new_tokens):
            if not use_cache:
                if crop == "last":
                    window = idx[:, -model.max_len:]
                elif crop == "first":
                    window = idx[:, :model.max_len]
                else:
                    window = idx
                logits, _ = model(window)
            elif step == 0 or new_caches:  # new_caches: a fresh prefill of everything, every step
                logits, caches = model(idx, [ConcatKVCache() for _ in model.blocks], start_pos=0)
            elif refeed:
                logits, caches = model(idx, caches, start_pos=0)
            else:
                logits, caches = model(idx[:, -1:], caches, start_pos=idx.size(1) - 1 + start_pos_shift)
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


GENERATE_MUTANTS = [
    Mutant("samples_instead_of_argmax",
           "the next token was sampled from the softmax; greedy decoding takes the argmax of the last position's logits.",
           _gen_mutant(sample=True)),
    Mutant("returns_only_new_tokens",
           "only the new tokens were returned; return the prompt followed by them, shape (B, S + max_new_tokens).",
           _gen_mutant(only_new=True)),
    Mutant("ignores_use_cache", IGNORES_CACHE, _gen_mutant(ignore_cache=True)),
    Mutant("refeeds_whole_sequence_with_cache", REFEEDS, _gen_mutant(refeed=True)),
    Mutant("new_caches_every_step", REPREFILLS, _gen_mutant(new_caches=True)),
    Mutant("start_pos_off_by_one", START_POS, _gen_mutant(start_pos_shift=1)),
    Mutant("no_crop_to_max_len", NO_CROP, _gen_mutant(crop=None)),
    Mutant("crop_keeps_first_tokens",
           "the sequence was cropped to its first max_len tokens (idx[:, :max_len]); keep the last ones, idx[:, -max_len:], which the next token follows.",
           _gen_mutant(crop="first")),
]

GENERATE_EXERCISE = Exercise(
    name="generate",
    reference=ref.generate,
    make_cases=_generate_cases,
    run=_run_generate,
    mutants=GENERATE_MUTANTS,
)
check_generate = register(GENERATE_EXERCISE)
