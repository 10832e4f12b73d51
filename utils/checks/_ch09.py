"""Checks for chapter 09 — grouped-query attention and the KV cache.

``GroupedQueryAttention`` is checked without a cache and with one: prefill, then decode token by
token (or in chunks), must give the same outputs as one forward over the whole sequence. The cache
given to the learner's module is the course's own ``KVCache`` (``update`` and ``seq_len`` only),
so that exercise is graded independently of the learner's ``KVCache``.
"""
import math

import torch
import torch.nn as nn

from .. import reference as ref
from .._guard import unguarded
from ..reference._common import masked_softmax_impl
from ._core import Case, CheckFailure, Exercise, Mutant, describe, generator, load_state_strict, randn, rng
from ._forbid import MHA, SDPA
from ._registry import register

__all__ = ["check_repeat_kv", "check_KVCache", "check_GroupedQueryAttention", "check_kv_cache_bytes"]


# ---------------------------------------------------------------- repeat_kv
def _repeat_kv_cases(seed: int) -> list:
    r, g = rng(seed), generator(seed)
    cases = []

    def add(label, B, H_kv, S, D, n_rep):
        x = randn(B, H_kv, S, D, gen=g)
        cases.append(Case(f"{label}: x {tuple(x.shape)}, n_rep={n_rep}", (x, n_rep)))

    add("two kv heads, n_rep=2", 1, 2, 3, 4, 2)
    add("three kv heads, n_rep=3", 2, 3, 5, 2, 3)
    add("n_rep=1 returns x unchanged", 2, 2, 4, 3, 1)
    add("one kv head (multi-query), n_rep=4", 2, 1, 3, 4, 4)
    add("a single position (S = 1)", 3, 2, 1, 5, 2)
    add("head_dim 1", 1, 4, 6, 1, 2)
    for i in range(6):  # random shapes, odd sizes included
        add(f"random case {i + 1}", r.randint(1, 3), r.randint(2, 4), r.randint(1, 7), r.choice([1, 3, 4, 8]),
            r.randint(2, 4))
    return cases


def _rk_tile(x, n_rep):
    return x.repeat(1, n_rep, 1, 1)


def _rk_sequence(x, n_rep):
    return x.repeat_interleave(n_rep, dim=2)


def _rk_head_dim(x, n_rep):
    return x.repeat_interleave(n_rep, dim=-1)


TILE = (
    "the kv heads were tiled ([k0, k1, k0, k1], like x.repeat) instead of repeated in place "
    "([k0, k0, k1, k1]): query heads h·n_rep .. h·n_rep + n_rep − 1 share kv head h, so use "
    "repeat_interleave(n_rep, dim=1) or x[:, :, None].expand(...).reshape(...)."
)

REPEAT_KV_MUTANTS = [
    Mutant("tile_instead_of_interleave", TILE, _rk_tile),
    Mutant("repeat_along_sequence", "the positions were repeated (dim 2) instead of the heads: repeat along dim 1, the head dim of (B, H_kv, S, D).", _rk_sequence),
    Mutant("repeat_along_head_dim", "the features were repeated (the last dim) instead of the heads: repeat along dim 1, the head dim of (B, H_kv, S, D).", _rk_head_dim),
]

REPEAT_KV_EXERCISE = Exercise(
    name="repeat_kv",
    reference=ref.repeat_kv,
    make_cases=_repeat_kv_cases,
    mutants=REPEAT_KV_MUTANTS,
)
check_repeat_kv = register(REPEAT_KV_EXERCISE)


# ---------------------------------------------------------------- KVCache
MAX_UPDATES = 12
KV_CACHE_OUTPUTS = ("seq_len of a new, empty cache",) + tuple(
    name for i in range(1, MAX_UPDATES + 1)
    for name in (f"k_all after update {i}", f"v_all after update {i}", f"seq_len after update {i}")
)


def _kv_cache_cases(seed: int) -> list:
    r, g = rng(seed), generator(seed)
    cases = []

    def add(label, B, H_kv, D, D_v, sizes):
        steps = tuple((randn(B, H_kv, n, D, gen=g), randn(B, H_kv, n, D_v, gen=g)) for n in sizes)
        what = " + ".join(str(n) for n in sizes)
        cases.append(Case(f"{label}: B={B}, H_kv={H_kv}, D={D}, D_v={D_v}, updates of {what} positions", steps))

    add("prefill, then decode one token at a time", 2, 2, 4, 4, (5, 1, 1, 1))
    add("decode from an empty cache", 1, 3, 2, 2, (1, 1, 1))
    add("chunks of several positions", 2, 1, 3, 5, (3, 2, 4))
    add("a single update", 3, 2, 4, 4, (4,))
    add("a single token", 1, 1, 8, 8, (1,))
    for i in range(5):  # random shapes and update sizes
        sizes = (r.randint(1, 6),) + tuple(r.choice([1, 1, 2, 3]) for _ in range(r.randint(1, 5)))
        add(f"random case {i + 1}", r.randint(1, 3), r.randint(1, 4), r.choice([2, 3, 4]), r.choice([2, 3, 4]), sizes)
    return cases


def _seq_len(cache):
    n = cache.seq_len
    return n() if callable(n) else n  # a property or attribute is asked for; a method is accepted


def _run_kv_cache(cls, case: Case):
    cache = cls()
    results = [_seq_len(cache)]
    for k_new, v_new in case.args:
        try:
            got = cache.update(k_new, v_new)
        except RuntimeError as err:
            if "Sizes of tensors must match except in dimension" in str(err):  # torch.cat on the wrong dim
                raise CheckFailure(f"KVCache.update raised RuntimeError on case [{case.label}]: {err}\n"
                                   f"Likely mistake: {KV_CAT_HEADS}") from err
            raise
        if not (isinstance(got, (tuple, list)) and len(got) == 2):
            raise CheckFailure(
                f"KVCache.update(k_new, v_new) should return (k_all, v_all), but returned {describe(got)} "
                f"on case [{case.label}]."
            )
        results += [t.clone() if isinstance(t, torch.Tensor) else t for t in got]  # a snapshot
        results.append(_seq_len(cache))
    return tuple(results)


_RefKVCache = unguarded(ref.KVCache)


class _CacheKeepsOnlyNew(_RefKVCache):
    def update(self, k_new, v_new):
        self.k, self.v = k_new, v_new
        return k_new, v_new


class _CacheCatHeads(_RefKVCache):
    def update(self, k_new, v_new):
        if self.k is None:
            self.k, self.v = k_new, v_new
        else:
            self.k, self.v = torch.cat([self.k, k_new], dim=1), torch.cat([self.v, v_new], dim=1)
        return self.k, self.v


class _CachePrepends(_RefKVCache):
    def update(self, k_new, v_new):
        if self.k is None:
            self.k, self.v = k_new, v_new
        else:
            self.k, self.v = torch.cat([k_new, self.k], dim=-2), torch.cat([v_new, self.v], dim=-2)
        return self.k, self.v


class _CacheCountsUpdates(_RefKVCache):
    def __init__(self):
        super().__init__()
        self.n_updates = 0

    @property
    def seq_len(self):
        return self.n_updates

    def update(self, k_new, v_new):
        self.n_updates += 1
        return super().update(k_new, v_new)


KV_NOT_APPENDED = (
    "the cache keeps only the newest keys and values: append them to what is cached, "
    "torch.cat([self.k, k_new], dim=-2), and return everything cached so far."
)
KV_CAT_HEADS = (
    "the keys and values were concatenated along the wrong dim: k is (B, H_kv, S, D), so append "
    "along the sequence dim, torch.cat([self.k, k_new], dim=-2)."
)
KV_PREPENDS = "the new positions were put before the cached ones: append them at the end, torch.cat([old, new], dim=-2)."
KV_COUNTS_UPDATES = (
    "seq_len counts calls to update, not positions: a prefill of S tokens adds S, so use the "
    "cached k's size along dim -2."
)

KV_CACHE_MUTANTS = [
    Mutant("cache_not_appended", KV_NOT_APPENDED, _CacheKeepsOnlyNew),
    Mutant("concatenates_along_heads", KV_CAT_HEADS, _CacheCatHeads),
    Mutant("prepends_new_positions", KV_PREPENDS, _CachePrepends),
    Mutant("seq_len_counts_updates", KV_COUNTS_UPDATES, _CacheCountsUpdates),
]

KV_CACHE_EXERCISE = Exercise(
    name="KVCache",
    reference=ref.KVCache,
    make_cases=_kv_cache_cases,
    run=_run_kv_cache,  # a plain class or an nn.Module: KVCache(), then update(...) step by step
    mutants=KV_CACHE_MUTANTS,
    output_names=KV_CACHE_OUTPUTS,
)
check_KVCache = register(KV_CACHE_EXERCISE)


# ---------------------------------------------------------------- GroupedQueryAttention
GQA_OUTPUTS = (
    "out of forward(x) without a cache",
    "the cache returned by forward(x) without a cache",
    "out of prefill then decode with a KVCache (the step outputs concatenated over positions)",
)


def _gqa_cases(seed: int) -> list:
    r, g = rng(seed), generator(seed)
    cases = []

    def add(label, d_model, H, H_kv, B, S, steps):
        assert sum(steps) == S
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            module = unguarded(ref.GroupedQueryAttention)(d_model, H, H_kv)
        # Weights with std 1.5/sqrt(d_model): peaked enough that a wrong mask or grouping shows.
        state = {name: randn(*p.shape, gen=g, scale=1.5 / math.sqrt(d_model)) for name, p in module.state_dict().items()}
        x = randn(B, S, d_model, gen=g)
        dims = f"d_model={d_model}, num_heads={H}, num_kv_heads={H_kv}, x {tuple(x.shape)}"
        schedule = " + ".join(str(n) for n in steps)
        cases.append(Case(f"{label}: {dims}; with a cache: {schedule} positions", (x,),
                          init={"ctor": (d_model, H, H_kv), "seed": seed, "state": state, "steps": steps}))

    add("GQA (2 query heads per kv head), prefill 3 then decode 4 tokens", 16, 4, 2, 2, 7, (3, 1, 1, 1, 1))
    add("MQA (num_kv_heads = 1)", 12, 4, 1, 2, 6, (2, 1, 1, 1, 1))
    add("MHA (num_kv_heads = num_heads), decode from an empty cache", 12, 3, 3, 1, 5, (1, 1, 1, 1, 1))
    add("GQA with 3 query heads per kv head, two chunks", 24, 6, 2, 1, 6, (4, 2))
    add("a single position (S = 1)", 8, 2, 1, 2, 1, (1,))
    add("one prefill chunk through the cache (same as no cache)", 12, 4, 2, 2, 5, (5,))
    add("odd sizes (head_dim 3), uneven chunks", 18, 6, 3, 1, 9, (5, 1, 3))
    for i in range(5):  # random configurations and decode schedules
        H_kv, n_rep, D_h = r.randint(1, 3), r.randint(1, 3), r.choice([2, 3, 4])
        S = r.randint(2, 8)
        steps, left = [], S
        while left:
            n = r.randint(1, left) if not steps else r.choice([1, 1, min(2, left)])
            steps.append(min(n, left))
            left -= steps[-1]
        add(f"random case {i + 1}", H_kv * n_rep * D_h, H_kv * n_rep, H_kv, r.randint(1, 2), S, tuple(steps))
    return cases


KV_D_MODEL = (
    "W_k and W_v project to d_model features, as in multi-head attention: in GQA they project to "
    "num_kv_heads · head_dim, nn.Linear(d_model, num_kv_heads * head_dim, bias=False)."
)


def _build_gqa(cls, case: Case):
    d_model, H, H_kv = case.init["ctor"]
    with torch.random.fork_rng():
        torch.manual_seed(case.init["seed"])
        module = cls(d_model, H, H_kv)
    if not isinstance(module, nn.Module):
        raise CheckFailure(f"{cls.__name__}(...) should build an nn.Module, got {type(module).__name__}.")
    kv_out = H_kv * (d_model // H)
    for name in ("W_k", "W_v"):
        layer = getattr(module, name, None)
        if isinstance(layer, nn.Linear) and layer.out_features == d_model != kv_out:
            raise CheckFailure(
                f"{cls.__name__}.{name} maps d_model={d_model} to {layer.out_features} features, expected "
                f"{kv_out} (num_kv_heads={H_kv} × head_dim={d_model // H}) on case [{case.label}].\n"
                f"Likely mistake: {KV_D_MODEL}"
            )
    load_state_strict(module, case.init["state"], cls.__name__)
    return module.eval()


def _forward(module, x, cache, label):
    result = module(x) if cache is None else module(x, cache=cache)
    if not (isinstance(result, (tuple, list)) and len(result) == 2):
        call = "forward(x)" if cache is None else "forward(x, cache=cache)"
        raise CheckFailure(f"GroupedQueryAttention.{call} should return (out, cache), but returned "
                           f"{describe(result)} on case [{label}].")
    return result


def _run_gqa(cls, case: Case):
    module = _build_gqa(cls, case)
    (x,) = case.args
    out, returned_cache = _forward(module, x, None, case.label)
    cache, pieces, start = unguarded(ref.KVCache)(), [], 0  # the course's cache: see the module docstring
    for n in case.init["steps"]:
        piece, cache = _forward(module, x[:, start:start + n], cache, case.label)
        pieces.append(piece)
        start += n
    return out, returned_cache, torch.cat(pieces, dim=1)


class _GQAVariant(unguarded(ref.GroupedQueryAttention)):
    """The reference forward with switches: what the mutants compute."""

    tile = False  # repeat (tile) the kv heads instead of repeat_interleave
    causal = "bottom_right"  # or "none", or "top_left"
    append = True  # use the cached keys and values, not only the new ones
    transpose_heads = True  # False: view(B, H, S, D_h) straight away, heads mixed up
    scale_dim = "head_dim"  # or "d_model"

    def _heads(self, t, n_heads):
        B, S, _ = t.shape
        if self.transpose_heads:
            return t.view(B, S, n_heads, self.head_dim).transpose(1, 2)
        return t.view(B, n_heads, S, self.head_dim)

    def forward(self, x, cache=None):
        B, S, d_model = x.shape
        H, H_kv = self.num_heads, self.num_kv_heads
        q = self._heads(self.W_q(x), H)
        k = self._heads(self.W_k(x), self.W_k.out_features // self.head_dim)
        v = self._heads(self.W_v(x), self.W_v.out_features // self.head_dim)
        if cache is not None:
            k_all, v_all = cache.update(k, v)
            if self.append:
                k, v = k_all, v_all
        S_k, n_rep = k.size(-2), H // k.size(1)
        if self.tile:
            k, v = k.repeat(1, n_rep, 1, 1), v.repeat(1, n_rep, 1, 1)
        else:
            k, v = k.repeat_interleave(n_rep, dim=1), v.repeat_interleave(n_rep, dim=1)
        ones = torch.ones(S, S_k, dtype=torch.bool)
        mask = {"bottom_right": ones.tril(S_k - S), "top_left": ones.tril(0), "none": None}[self.causal]
        scale = math.sqrt(self.head_dim if self.scale_dim == "head_dim" else d_model)
        out = masked_softmax_impl(q @ k.transpose(-2, -1) / scale, mask) @ v
        return self.W_o(out.transpose(1, 2).reshape(B, S, d_model)), cache


class _GQATile(_GQAVariant):
    tile = True


class _GQANoCausal(_GQAVariant):
    causal = "none"


class _GQATopLeft(_GQAVariant):
    causal = "top_left"


class _GQACacheNotAppended(_GQAVariant):
    append = False


class _GQAViewNoTranspose(_GQAVariant):
    transpose_heads = False


class _GQAScaleByDModel(_GQAVariant):
    scale_dim = "d_model"


class _GQAKVToDModel(_GQAVariant):
    """Multi-head attention under the GQA name: W_k, W_v map to d_model (num_heads kv heads)."""

    def __init__(self, d_model, num_heads, num_kv_heads):
        super().__init__(d_model, num_heads, num_kv_heads)
        self.W_k = nn.Linear(d_model, d_model, bias=False)
        self.W_v = nn.Linear(d_model, d_model, bias=False)


class _GQANoValidation(_GQAVariant):
    def __init__(self, d_model, num_heads, num_kv_heads):
        nn.Module.__init__(self)
        self.num_heads, self.num_kv_heads = num_heads, num_kv_heads
        self.head_dim = d_model // num_heads
        self.W_q = nn.Linear(d_model, d_model, bias=False)
        self.W_k = nn.Linear(d_model, num_kv_heads * self.head_dim, bias=False)
        self.W_v = nn.Linear(d_model, num_kv_heads * self.head_dim, bias=False)
        self.W_o = nn.Linear(d_model, d_model, bias=False)


TOP_LEFT = (
    "the causal mask is aligned top-left during decoding: with P cached positions the S new queries "
    "are positions P .. P + S − 1, so query i may attend keys j ≤ i + (S_k − S) — "
    "torch.ones(S, S_k).tril(diagonal=S_k − S), bottom-right aligned (is_causal=True in PyTorch's SDPA is top-left)."
)
NO_CAUSAL = "no causal mask: a position attended to later positions; mask keys j > i (bottom-right aligned when there is a cache)."
CACHE_NOT_USED = (
    "the queries attended only to the new keys and values: use what cache.update(k, v) returns "
    "(everything cached so far), not the k, v of this step alone."
)
VIEW_NO_TRANSPOSE = (
    "the heads were mixed up: view(B, S, d) -> (B, H, S, D_h) directly splits the sequence, not the "
    "features; use view(B, S, H, D_h).transpose(1, 2)."
)
SCALE_D_MODEL = "the scores were divided by sqrt(d_model); each head's scores are divided by sqrt(head_dim), head_dim = d_model / num_heads."
NO_VALIDATION = (
    "invalid sizes were accepted: raise ValueError unless d_model % num_heads == 0 and "
    "num_heads % num_kv_heads == 0 (query heads must split evenly into groups)."
)

GQA_MUTANTS = [
    Mutant("tile_instead_of_interleave", TILE, _GQATile),
    Mutant("no_causal_mask", NO_CAUSAL, _GQANoCausal),
    Mutant("top_left_causal_in_decode", TOP_LEFT, _GQATopLeft),
    Mutant("cache_not_appended", CACHE_NOT_USED, _GQACacheNotAppended),
    Mutant("heads_mixed_by_view", VIEW_NO_TRANSPOSE, _GQAViewNoTranspose),
    Mutant("scale_by_d_model", SCALE_D_MODEL, _GQAScaleByDModel),
    Mutant("kv_projected_to_d_model", KV_D_MODEL, _GQAKVToDModel),
    Mutant("no_size_validation", NO_VALIDATION, _GQANoValidation),
]


def _check_validation(cls) -> None:
    """Invalid head counts raise ValueError when the module is built."""
    for d_model, H, H_kv, why in [(12, 4, 3, "num_heads % num_kv_heads != 0"),
                                  (10, 4, 2, "d_model % num_heads != 0")]:
        call = f"GroupedQueryAttention(d_model={d_model}, num_heads={H}, num_kv_heads={H_kv})"
        try:
            cls(d_model, H, H_kv)
        except ValueError:
            continue
        except Exception as err:
            detail = f": {err}" if str(err) else ""
            raise CheckFailure(f"{call} ({why}) raised {type(err).__name__}{detail}; raise ValueError instead.") from None
        raise CheckFailure(f"{call} ({why}) should raise ValueError, but built a module.\n"
                           f"Likely mistake: {NO_VALIDATION}")


GQA_EXERCISE = Exercise(
    name="GroupedQueryAttention",
    reference=ref.GroupedQueryAttention,
    make_cases=_gqa_cases,
    kind="class",
    run=_run_gqa,
    forbidden=(SDPA, MHA),
    mutants=GQA_MUTANTS,
    output_names=GQA_OUTPUTS,
    extra_checks=(_check_validation,),
)
check_GroupedQueryAttention = register(GQA_EXERCISE)


# ---------------------------------------------------------------- kv_cache_bytes
# (label, num_layers, num_kv_heads, head_dim, seq_len, batch_size, bytes_per_elem or None = default)
REAL_MODELS = [
    ("Llama-2-7B, 4k context, fp16", 32, 32, 128, 4096, 1, None),
    ("Llama-3-8B (GQA, 8 kv heads), 8k context, bf16", 32, 8, 128, 8192, 1, 2),
    ("Llama-2-70B (GQA), batch of 8", 80, 8, 128, 4096, 8, None),
    ("Mistral-7B, 32k context", 32, 8, 128, 32768, 1, 2),
    ("GPT-2 small (MHA), float32, batch of 4", 12, 12, 64, 1024, 4, 4),
    ("Falcon-7B (MQA, 1 kv head), batch of 16", 32, 1, 64, 2048, 16, 2),
    ("Llama-3-70B, int8 cache, batch of 2", 80, 8, 128, 8192, 2, 1),
    ("one layer, one head, one token", 1, 1, 1, 1, 1, None),
]


def _kv_bytes_cases(seed: int) -> list:
    r = rng(seed)
    rows = list(REAL_MODELS)
    for i in range(6):
        rows.append((f"random case {i + 1}", r.randint(1, 48), r.choice([1, 2, 4, 8, 16]), r.choice([32, 64, 80, 128]),
                     r.randint(1, 20000), r.randint(2, 32), r.choice([None, 1, 2, 4])))
    cases = []
    for label, L, H_kv, D, S, B, nbytes in rows:
        args = (L, H_kv, D, S, B)
        kwargs = {} if nbytes is None else {"bytes_per_elem": nbytes}
        shown = "default (2)" if nbytes is None else str(nbytes)
        cases.append(Case(f"{label}: num_layers={L}, num_kv_heads={H_kv}, head_dim={D}, seq_len={S}, "
                          f"batch_size={B}, bytes_per_elem={shown}", args, kwargs))
    return cases


def _kvb(factor=2, layers=1, batch=True, bytes_=True, scale=1):
    def impl(num_layers, num_kv_heads, head_dim, seq_len, batch_size, bytes_per_elem=2):
        n = factor * num_layers ** layers * num_kv_heads * head_dim * seq_len
        n *= batch_size if batch else 1
        n *= bytes_per_elem if bytes_ else 1
        return n * scale

    return impl


def _kvb_gib(*args, **kwargs):
    return ref.kv_cache_bytes.__wrapped__(*args, **kwargs) / 2**30


KV_BYTES_MUTANTS = [
    Mutant("no_factor_2", "only one of K and V was counted: the cache stores both, so multiply by 2.", _kvb(factor=1)),
    Mutant("bits_not_bytes", "that is bits, not bytes: bytes_per_elem already counts bytes, so do not multiply by 8.", _kvb(scale=8)),
    Mutant("forgets_batch", "batch_size is missing: every sequence in the batch has its own cache.", _kvb(batch=False)),
    Mutant("forgets_num_layers", "num_layers is missing: every layer keeps its own keys and values.", _kvb(layers=0)),
    Mutant("num_layers_twice", "num_layers appears twice in the product: count it once.", _kvb(layers=2)),
    Mutant("elements_not_bytes", "that is the number of elements: multiply by bytes_per_elem to get bytes.", _kvb(bytes_=False)),
    Mutant("returns_gib", "the result was converted to GiB (a float): return the number of bytes as an int, and convert only when printing.", _kvb_gib),
]

KV_BYTES_EXERCISE = Exercise(
    name="kv_cache_bytes",
    reference=ref.kv_cache_bytes,
    make_cases=_kv_bytes_cases,
    mutants=KV_BYTES_MUTANTS,
)
check_kv_cache_bytes = register(KV_BYTES_EXERCISE)
