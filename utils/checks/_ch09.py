"""Checks for chapter 09 — grouped-query attention and the KV cache.

``GroupedQueryAttention`` is checked without a cache and with one: prefill, then decode token by
token (or in chunks), must give the same outputs as one forward over the whole sequence. The cache
given to the learner's module is the course's own (it only offers ``update``, as the contract
says), so that exercise is graded independently of the learner's ``KVCache``; it also records the
shape of what the module stores, which must be num_kv_heads heads, never the repeated num_heads.

``KVCache`` is checked through ``update`` only (the curriculum names no other attribute): the
snapshots it returns, two instances used at once (nothing shared between instances; a failure that
a single cache shows too is not blamed on sharing), and a long decode under a memory budget: the
largest tensor, and every tensor storage reachable from the cache object afterwards (what it keeps
alive), against k_all and v_all.
"""
import math
import types

import torch
import torch.nn as nn

from .. import reference as ref
from .._guard import ForbiddenCall, unguarded
from ..reference._common import masked_softmax_impl
from ._contract import Contract
from ._core import (DEFAULT_SECONDS, Budget, BudgetExceeded, Case, CheckFailure, Exercise, Mutant, Variant, compare,
                    describe, generator, load_state_strict, randn, reseed, rng)
from ._forbid import MHA, SDPA
from ._registry import register

__all__ = ["check_repeat_kv", "check_KVCache", "check_GroupedQueryAttention", "check_kv_cache_bytes"]

F64 = torch.float64


# ---------------------------------------------------------------- repeat_kv
def _repeat_kv_cases(seed: int) -> list:
    r, g = rng(seed), generator(seed)
    cases = []

    def add(label, B, H_kv, S, D, n_rep):
        x = randn(B, H_kv, S, D, gen=g)
        cases.append(Case(f"{label}: x {tuple(x.shape)}, n_rep={n_rep}", (x, n_rep)))

    add("two kv heads, n_rep=2", 2, 2, 3, 4, 2)
    add("three kv heads, n_rep=3", 2, 3, 5, 2, 3)
    add("one kv head (multi-query), n_rep=4", 2, 1, 3, 4, 4)
    add("n_rep=1 returns x unchanged", 2, 2, 4, 3, 1)
    add("a single position (S = 1)", 3, 2, 1, 5, 2)
    add("head_dim 1", 1, 4, 6, 1, 2)
    add("batch of 1", 1, 2, 3, 4, 3)
    for i in range(5):  # random shapes, odd sizes included
        add(f"random case {i + 1}", r.randint(1, 3), r.randint(2, 4), r.randint(1, 7), r.choice([1, 3, 4, 8]),
            r.randint(2, 4))
    return cases


def _rk_tile(x, n_rep):
    return x.repeat(1, n_rep, 1, 1)


def _rk_sequence(x, n_rep):
    return x.repeat_interleave(n_rep, dim=2)


def _rk_head_dim(x, n_rep):
    return x.repeat_interleave(n_rep, dim=-1)


def _rk_batch(x, n_rep):
    return x.repeat_interleave(n_rep, dim=0)


def _rk_no_dim(x, n_rep):
    return x.repeat_interleave(n_rep)  # without dim: flattened first


def _rk_expand_no_reshape(x, n_rep):
    B, H_kv, S, D = x.shape
    return x[:, :, None].expand(B, H_kv, n_rep, S, D)


def _v_rk_expand(x, n_rep):
    B, H_kv, S, D = x.shape
    return x.unsqueeze(2).expand(-1, -1, n_rep, -1, -1).reshape(B, H_kv * n_rep, S, D)


def _v_rk_loop(x, n_rep):
    return torch.cat([x[:, h:h + 1] for h in range(x.size(1)) for _ in range(n_rep)], dim=1)


def _v_rk_index(x, n_rep):
    return x.index_select(1, torch.arange(x.size(1) * n_rep) // n_rep)


TILE = (
    "the kv heads were tiled ([k0, k1, k0, k1], like x.repeat) instead of repeated in place "
    "([k0, k0, k1, k1]): query heads h·n_rep .. h·n_rep + n_rep − 1 share kv head h."
)

REPEAT_KV_MUTANTS = [
    Mutant("tile_instead_of_interleave", TILE, _rk_tile),
    Mutant("repeat_along_sequence", "the positions were repeated (dim 2) instead of the heads: repeat along dim 1, the head dim of (B, H_kv, S, D).", _rk_sequence),
    Mutant("repeat_along_head_dim", "the features were repeated (the last dim) instead of the heads: repeat along dim 1, the head dim of (B, H_kv, S, D).", _rk_head_dim),
    Mutant("repeat_along_batch", "the batch was repeated (dim 0) instead of the heads: repeat along dim 1, the head dim of (B, H_kv, S, D).", _rk_batch),
    Mutant("repeat_interleave_without_dim", "repeat_interleave without dim= flattens the tensor first: give dim=1 (the head dim).", _rk_no_dim),
    Mutant("expand_without_reshape", "the expanded tensor (B, H_kv, n_rep, S, D) was returned as it is: merge H_kv and n_rep into one head dim with reshape(B, H_kv * n_rep, S, D).", _rk_expand_no_reshape),
]

REPEAT_KV_EXERCISE = Exercise(
    name="repeat_kv",
    reference=ref.repeat_kv,
    make_cases=_repeat_kv_cases,
    mutants=REPEAT_KV_MUTANTS,
    variants=[Variant("expand_reshape", _v_rk_expand), Variant("loop_cat", _v_rk_loop, demo=True),
              Variant("index_select", _v_rk_index)],
    contract=Contract("""Repeat each key/value head n_rep times, consecutively, so that H_kv heads serve H_kv · n_rep query heads.

    x: (B, H_kv, S, D)   n_rep: int ≥ 1
    Returns (B, H_kv · n_rep, S, D) whose head h is kv head h // n_rep: [k0, k0, k1, k1] for
    H_kv = 2, n_rep = 2 (not the tiled [k0, k1, k0, k1]). n_rep = 1 returns x unchanged.
    """, kinds={"x": "tensor"}),
)
check_repeat_kv = register(REPEAT_KV_EXERCISE)


# ---------------------------------------------------------------- KVCache
MAX_UPDATES = 12
KV_CACHE_OUTPUTS = tuple(
    name for i in range(1, MAX_UPDATES + 1) for name in (f"k_all after update {i}", f"v_all after update {i}"))

SHARED = (
    "the cached keys and values are class-level attributes (e.g. a list written in the class body), "
    "shared by every KVCache instance: one layer's cache then holds another layer's positions. "
    "Create the storage in __init__ (self.k = None, or self.ks = []), so each instance has its own."
)
KV_NOT_APPENDED = (
    "the cache keeps only the newest keys and values: append them to what is cached, "
    "torch.cat([self.k, k_new], dim=-2), and return everything cached so far."
)
KV_CAT_HEADS = (
    "the keys and values were concatenated along the wrong dim: k is (B, H_kv, S, D), so append "
    "along the sequence dim, torch.cat([self.k, k_new], dim=-2)."
)
KV_PREPENDS = "the new positions were put before the cached ones: append them at the end, torch.cat([old, new], dim=-2)."
KV_RETURNS_NEW = ("update returned only the new keys and values: it must return everything cached so far, "
                  "k_all (B, H_kv, S_total, D) and v_all.")
KV_CAT_FEATURES = ("the keys and values were concatenated along the features (the last dim) instead of the "
                   "positions: k is (B, H_kv, S, D), so append along dim -2, torch.cat([self.k, k_new], dim=-2).")
KV_KEEPS_FIRST = ("the cache kept only its first update: on every later update append the new positions, "
                  "self.k = torch.cat([self.k, k_new], dim=-2) (an `if self.k is None:` with no else branch?).")
KV_KEYS_TWICE = "update returned the keys twice: return (k_all, v_all), the cached values second."
KV_V_FROM_K = "the values were appended to the cached keys (a copy-paste slip): v_all = torch.cat([self.v, v_new], dim=-2)."
KV_MEMORY = (
    "a KV cache holds each position's key and value once, so its memory grows as S_total: no tensor "
    "larger than a few times k_all, and no more kept in the cache than a few times k_all and v_all "
    "(never one copy of the cache per update, nor a list of the snapshots update returned)"
)

LONG_PREFILL, LONG_STEPS, LONG_D = 64, 960, 2  # 1,024 positions, decoded one at a time after a prefill
KEPT_FACTOR = 4  # what a cache may keep alive: 4 × (k_all + v_all) (a doubling buffer keeps up to 2 ×)


def _update(cache, k_new, v_new, label):
    got = cache.update(k_new, v_new)
    if not (isinstance(got, (tuple, list)) and len(got) == 2):
        raise CheckFailure(f"KVCache.update(k_new, v_new) should return (k_all, v_all), but returned "
                           f"{describe(got)} on case [{label}].")
    return got


def _snapshot(t):
    return t.clone() if isinstance(t, torch.Tensor) else t


def _run_kv_cache(cls, case: Case):
    """KVCache(), then update(...) step by step; a snapshot of what each update returns."""
    cache = cls()
    results = []
    for k_new, v_new in case.args:
        results += [_snapshot(t) for t in _update(cache, k_new, v_new, case.label)]
    return tuple(results)


def _class_level_storage(cls) -> tuple:
    """Names of mutable containers (lists, dicts, tensors) defined in the learner's class body."""
    names = set()
    for klass in getattr(cls, "__mro__", ()):
        if klass in (object, nn.Module) or klass.__module__.startswith("torch"):
            continue
        for name, value in vars(klass).items():
            if not name.startswith("__") and isinstance(value, (list, dict, torch.Tensor)):
                names.add(name)
    return tuple(sorted(names))


def _run_two_caches(cls, case: Case):
    """Two caches (two layers) updated in turn; any error is recorded rather than raised, so the
    judge can say whether the instances share their storage."""
    shared = _class_level_storage(cls)
    (a1, a2), (b1, b2) = case.args
    solo, solo_error = [], None  # the same updates as cache A's, on one cache alone
    try:
        C = cls()
        for k, v in (a1, a2):
            solo.append(tuple(_snapshot(t) for t in _update(C, k, v, case.label)))
    except (ForbiddenCall, NotImplementedError, BudgetExceeded, CheckFailure):
        raise
    except Exception as err:  # noqa: BLE001 - judged below
        solo_error = f"{type(err).__name__}: {err}"
    outs, error = [], None
    try:
        A = cls()
        B = cls()
        for cache, (k, v) in ((A, a1), (B, b1), (A, a2), (B, b2)):
            outs.append(tuple(_snapshot(t) for t in _update(cache, k, v, case.label)))
    except (ForbiddenCall, NotImplementedError, BudgetExceeded, CheckFailure):
        raise
    except Exception as err:  # noqa: BLE001 - judged below, with the class-level storage in view
        error = f"{type(err).__name__}: {err}"
    return {"class_level": shared, "error": error, "outputs": outs, "solo": solo, "solo_error": solo_error}


def _judge_two_caches(a1, a2, b1, b2):
    cat = lambda x, y: torch.cat([x, y], dim=-2)  # noqa: E731
    expected = [a1, b1, (cat(a1[0], a2[0]), cat(a1[1], a2[1])), (cat(b1[0], b2[0]), cat(b1[1], b2[1]))]
    steps = ["the first update of cache A", "the first update of cache B", "the second update of cache A",
             "the second update of cache B"]

    def judge(got) -> str | None:
        shared, error, outs = got["class_level"], got["error"], got["outputs"]
        problem = None
        if error is not None:
            problem = f"{steps[len(outs)]} raised {error}"
        else:
            for step, e, o in zip(steps, expected, outs):
                msg = compare(tuple(e), tuple(o), 1e-6, 1e-5)
                if msg:
                    problem = f"after {step}, {msg.replace('output[0]', 'k_all').replace('output[1]', 'v_all')}"
                    break
        if problem is None:
            return None
        where = "two caches used in turn (one per layer)"
        if shared:
            return f"{where}: {problem}\nLikely mistake: {SHARED} (class-level: {', '.join(shared)})"
        solo_ok = got.get("solo_error") is None and len(got.get("solo", ())) == 2 and all(
            compare(tuple(e), tuple(o), 1e-6, 1e-5) is None for e, o in zip(expected[0::2], got["solo"]))
        if solo_ok:  # alone it works, next to another instance it does not: shared storage
            return (f"{where}: {problem} The same updates on a single cache are right, so the two instances "
                    "share something: each KVCache instance must keep its own keys and values.")
        return (f"{where}: {problem} (A single cache given the same updates fails too: the mistake is in "
                "update itself, not in sharing between instances.)")

    return judge


_NOT_CONTAINERS = (str, bytes, int, float, complex, bool, type(None), type, types.ModuleType, types.FunctionType,
                   types.BuiltinFunctionType, types.MethodType, torch.dtype, torch.device, torch.Generator)


def _kept_bytes(obj) -> int:
    """Bytes of every tensor storage reachable from ``obj``'s attributes (through lists, tuples,
    dicts, sets and objects, an nn.Module's parameters and buffers included), each storage once."""
    seen_storages, seen_objects, total = set(), set(), 0
    stack = [obj]
    while stack:
        o = stack.pop()
        if isinstance(o, torch.Tensor):
            st = o.untyped_storage()
            key = (st.data_ptr(), st.nbytes())
            if key not in seen_storages:
                seen_storages.add(key)
                total += st.nbytes()
            continue
        if id(o) in seen_objects or isinstance(o, _NOT_CONTAINERS):
            continue
        seen_objects.add(id(o))
        if isinstance(o, dict):
            stack.extend(o.values())
        elif isinstance(o, (list, tuple, set, frozenset)):
            stack.extend(o)
        else:
            attrs = getattr(o, "__dict__", None)
            if isinstance(attrs, dict):
                stack.extend(attrs.values())
            for slot in getattr(type(o), "__slots__", ()):
                stack.append(getattr(o, slot, None))
    return total


def _run_long_decode(cls, case: Case):
    """A prefill, then LONG_STEPS single-token updates: only the final k_all, v_all are kept. Then
    what the cache keeps alive (every tensor reachable from it) is weighed against k_all + v_all."""
    cache = cls()
    got = None
    for k_new, v_new in case.args[0]:
        got = _update(cache, k_new, v_new, case.label)
    k_all, v_all = got
    if isinstance(k_all, torch.Tensor) and isinstance(v_all, torch.Tensor):
        allowed = KEPT_FACTOR * (k_all.numel() * k_all.element_size() + v_all.numel() * v_all.element_size())
        kept = _kept_bytes(cache)
        if kept > allowed:
            raise BudgetExceeded(
                f"after the {len(case.args[0])} updates the cache keeps {kept:,} bytes of tensors alive where "
                f"this case allows at most {KEPT_FACTOR} × (k_all + v_all) = {allowed:,} bytes: {KV_MEMORY}")
    return tuple(got)


def _kv_cache_cases(seed: int) -> list:
    r, g = rng(seed), generator(seed)
    cases = []

    def steps(B, H_kv, D, D_v, sizes):
        return tuple((randn(B, H_kv, n, D, gen=g), randn(B, H_kv, n, D_v, gen=g)) for n in sizes)

    def add(label, B, H_kv, D, D_v, sizes):
        what = " + ".join(str(n) for n in sizes)
        cases.append(Case(f"{label}: B={B}, H_kv={H_kv}, D={D}, D_v={D_v}, updates of {what} positions",
                          steps(B, H_kv, D, D_v, sizes)))

    # Two caches first: one per layer is how a model uses them, and storage shared between
    # instances (a class-level list) shows here, named, before it garbles every other case.
    a1, a2 = steps(2, 2, 4, 3, (3, 1))
    b1, b2 = steps(2, 2, 4, 3, (2, 1))
    cases.append(Case("two caches (two layers) updated in turn: A gets 3 then 1 positions, B gets 2 then 1; "
                      "B=2, H_kv=2, D=4, D_v=3", ((a1, a2), (b1, b2)), run=_run_two_caches,
                      judge=_judge_two_caches(a1, a2, b1, b2)))
    add("prefill, then decode one token at a time", 2, 2, 4, 4, (5, 1, 1, 1))
    add("decode from an empty cache", 1, 3, 2, 2, (1, 1, 1))
    add("chunks of several positions, D ≠ D_v", 2, 1, 3, 5, (3, 2, 4))
    add("a single update", 3, 2, 4, 4, (4,))
    add("a single token", 1, 1, 8, 8, (1,))
    for i in range(4):  # random shapes and update sizes
        sizes = (r.randint(1, 6),) + tuple(r.choice([1, 1, 2, 3]) for _ in range(r.randint(1, 5)))
        add(f"random case {i + 1}", r.randint(1, 3), r.randint(1, 4), r.choice([2, 3, 4]), r.choice([2, 3, 4]), sizes)
    long = steps(1, 1, LONG_D, LONG_D, (LONG_PREFILL,) + (1,) * LONG_STEPS)
    total = LONG_PREFILL + LONG_STEPS
    limit = 4 * total * LONG_D
    cases.append(Case(f"memory budget: a prefill of {LONG_PREFILL} then {LONG_STEPS} single tokens, B=1, H_kv=1, "
                      f"D=D_v={LONG_D} (no tensor above 4 × k_all = {limit:,} elements; the cache keeps at most "
                      f"{KEPT_FACTOR} × (k_all + v_all) alive)", (long,),
                      run=_run_long_decode, budget=Budget(numel=limit, seconds=DEFAULT_SECONDS, why=KV_MEMORY)))
    return cases


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


class _CacheReturnsNew(_RefKVCache):
    def update(self, k_new, v_new):
        super().update(k_new, v_new)
        return k_new, v_new


class _CacheVFromK(_RefKVCache):
    def update(self, k_new, v_new):
        if self.k is None:
            self.k, self.v = k_new, v_new
        else:
            self.v = torch.cat([self.k, v_new], dim=-2)
            self.k = torch.cat([self.k, k_new], dim=-2)
        return self.k, self.v


class _CacheCatFeatures(_RefKVCache):
    def update(self, k_new, v_new):
        if self.k is None:
            self.k, self.v = k_new, v_new
        else:
            self.k, self.v = torch.cat([self.k, k_new], dim=-1), torch.cat([self.v, v_new], dim=-1)
        return self.k, self.v


class _CacheKeepsFirst(_RefKVCache):
    def update(self, k_new, v_new):
        if self.k is None:
            self.k, self.v = k_new, v_new
        return self.k, self.v


class _CacheKeysTwice(_RefKVCache):
    def update(self, k_new, v_new):
        k_all, _ = super().update(k_new, v_new)
        return k_all, k_all


class _CacheSharedLists:
    """The classic Python slip: lists in the class body are shared by every instance."""

    keys = []
    values = []

    def update(self, k_new, v_new):
        self.keys.append(k_new)
        self.values.append(v_new)
        return torch.cat(self.keys, dim=-2), torch.cat(self.values, dim=-2)


class _CacheHistory(_RefKVCache):
    """Keeps, besides the cache, a padded copy of everything cached after every update."""

    def __init__(self):
        super().__init__()
        self.history = None  # (n_updates, B, H_kv, S_total, D)

    def update(self, k_new, v_new):
        k_all, v_all = super().update(k_new, v_new)
        if self.history is None:
            self.history = k_all[None]
        else:
            pad = k_all.size(-2) - self.history.size(-2)
            padded = torch.nn.functional.pad(self.history, (0, 0, 0, pad))
            self.history = torch.cat([padded, k_all[None]], dim=0)
        return k_all, v_all


class _VCacheList:
    """A correct cache written differently: lists made in __init__, concatenated on demand."""

    def __init__(self):
        self.ks, self.vs = [], []

    def update(self, k_new, v_new):
        self.ks.append(k_new)
        self.vs.append(v_new)
        return torch.cat(self.ks, dim=2), torch.cat(self.vs, dim=2)


class _VCacheBuffer(nn.Module):
    """Preallocated buffers that double when full (an nn.Module); returns views of the filled part."""

    def __init__(self):
        super().__init__()
        self.k_buf = self.v_buf = None
        self.n = 0

    def _grow(self, buf, new, need):
        if buf is None:
            return new.new_zeros(*new.shape[:-2], need, new.size(-1))
        if buf.size(-2) >= need:
            return buf
        bigger = buf.new_zeros(*buf.shape[:-2], max(need, 2 * buf.size(-2)), buf.size(-1))
        bigger[..., :self.n, :] = buf[..., :self.n, :]
        return bigger

    def update(self, k_new, v_new):
        need = self.n + k_new.size(-2)
        self.k_buf, self.v_buf = self._grow(self.k_buf, k_new, need), self._grow(self.v_buf, v_new, need)
        self.k_buf[..., self.n:need, :] = k_new
        self.v_buf[..., self.n:need, :] = v_new
        self.n = need
        return self.k_buf[..., :need, :], self.v_buf[..., :need, :]


KV_CACHE_MUTANTS = [
    Mutant("cache_not_appended", KV_NOT_APPENDED, _CacheKeepsOnlyNew),
    Mutant("concatenates_along_heads", KV_CAT_HEADS, _CacheCatHeads),
    Mutant("prepends_new_positions", KV_PREPENDS, _CachePrepends),
    Mutant("returns_only_new", KV_RETURNS_NEW, _CacheReturnsNew),
    Mutant("values_appended_to_keys", KV_V_FROM_K, _CacheVFromK),
    Mutant("concatenates_along_features", KV_CAT_FEATURES, _CacheCatFeatures),
    Mutant("keeps_only_the_first_update", KV_KEEPS_FIRST, _CacheKeepsFirst),
    Mutant("returns_keys_as_values", KV_KEYS_TWICE, _CacheKeysTwice),
    Mutant("class_level_lists", SHARED, _CacheSharedLists),
    Mutant("quadratic_history_of_snapshots", KV_MEMORY, _CacheHistory),
]

KV_CACHE_EXERCISE = Exercise(
    name="KVCache",
    reference=ref.KVCache,
    make_cases=_kv_cache_cases,
    run=_run_kv_cache,  # a plain class or an nn.Module: KVCache(), then update(...) step by step
    mutants=KV_CACHE_MUTANTS,
    variants=[Variant("lists_made_in_init", _VCacheList), Variant("doubling_buffers_module", _VCacheBuffer, demo=True)],
    output_names=KV_CACHE_OUTPUTS,
    contract=Contract("""The keys and values of every position seen so far, for one attention layer.

    KVCache() starts empty. Each instance keeps its own keys and values (a model has one cache
    per layer): create the storage in __init__, not in the class body.
    update(k_new, v_new): k_new (B, H_kv, S_new, D), v_new (B, H_kv, S_new, D_v) are appended after
        the cached positions along the sequence dim (-2). Returns everything cached so far,
        k_all (B, H_kv, S_total, D) and v_all (B, H_kv, S_total, D_v).
    State between calls (the point of a cache): update is the only method the check calls, and
    the only one a model may call; what one update returns depends on every earlier update of the
    same instance, and on nothing else (no other instance, no class-level storage).
    Memory budget: the check decodes 1,024 positions one by one; no tensor may exceed 4 × the
    size of k_all, and all the tensors the cache keeps (everything reachable from its attributes)
    may total at most 4 × the bytes of k_all and v_all (a cache holds each position once).
    """, stateless=False),
)
check_KVCache = register(KV_CACHE_EXERCISE)


# ---------------------------------------------------------------- GroupedQueryAttention
GQA_OUTPUTS = (
    # A gradient case "through a cache" calls forward(x, cache=<the check's cache holding P positions>):
    # its label says so, and so does the name of its first output.
    "out of one forward over x (no cache, unless the case says 'through a cache')",
    "the cache returned by that forward",
    "out of prefill then decode with a cache (the step outputs concatenated over positions)",
)

KV_D_MODEL = (
    "W_k and W_v project to d_model features, as in multi-head attention: in GQA they project to "
    "num_kv_heads · head_dim, nn.Linear(d_model, num_kv_heads * head_dim, bias=False)."
)
REPEATED_IN_CACHE = (
    "the keys and values were repeated to num_heads heads before they went into the cache: the cache "
    "must hold the num_kv_heads heads (B, num_kv_heads, S, head_dim) — that is GQA's whole saving — "
    "so call cache.update first and repeat what it returns, for the attention only."
)
OTHER_CACHE = ("forward(x, cache=cache) must return (out, cache) with the very cache it was given "
               "(generation passes it on to the next step).")


ONLY_UPDATE = ("the cache may be used only through update(k_new, v_new), which returns everything cached so far, "
               "(k_all, v_all): the check's cache has no other attribute (your KVCache's names are not part of the "
               "contract); take the number of cached positions from what update returns (k_all.size(-2) minus the "
               "new positions), never from cache.k or cache.seq_len.")


def _check_stored(cache, k_new, v_new):
    """What a GQA module passes to cache.update: (B, num_kv_heads, S, head_dim), never repeated heads."""
    heads, head_dim, label = object.__getattribute__(cache, "_c_shape")
    for name, t in (("k_new", k_new), ("v_new", v_new)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise CheckFailure(f"cache.update received {name} = {describe(t)} on case [{label}]; "
                               f"expected (B, num_kv_heads, S, head_dim).")
        if t.size(1) != heads or t.size(-1) != head_dim:
            if t.size(1) > heads and t.size(-1) == head_dim:
                raise CheckFailure(
                    f"forward(x, cache) stored {name} of shape {tuple(t.shape)} in the cache on case "
                    f"[{label}]: {t.size(1)} heads where num_kv_heads = {heads}.\n"
                    f"Likely mistake: {REPEATED_IN_CACHE}")
            raise CheckFailure(
                f"forward(x, cache) stored {name} of shape {tuple(t.shape)} in the cache on case "
                f"[{label}]; expected (B, num_kv_heads={heads}, S, head_dim={head_dim}).")


class _OnlyUpdate:
    """The check's caches offer ``update`` and nothing else, as the contract says ("use only that
    method"): any other attribute a learner's module reads (``cache.k``, ``cache.seq_len``) raises
    AttributeError with the rule, instead of working with the check's cache and failing, silently,
    with the learner's own KVCache that names its storage otherwise."""

    def __getattr__(self, name):  # only for names that are not found: the cache's state has private names
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        raise AttributeError(f"the check's cache has no attribute {name!r}: {ONLY_UPDATE}")


class _RecordingCache(_OnlyUpdate):
    """The check's own KV cache (update only, as the contract says; it does not use utils.reference,
    which the grader's re-run does not have), checking what the learner's module stores in it."""

    __slots__ = ("_c_k", "_c_v", "_c_shape")

    def __init__(self, expected_heads, head_dim, label):
        self._c_k = self._c_v = None
        self._c_shape = (expected_heads, head_dim, label)

    def update(self, k_new, v_new):
        _check_stored(self, k_new, v_new)
        if self._c_k is None:
            self._c_k, self._c_v = k_new, v_new
        else:
            self._c_k, self._c_v = torch.cat([self._c_k, k_new], dim=-2), torch.cat([self._c_v, v_new], dim=-2)
        return self._c_k, self._c_v


class _PrefixCache(_OnlyUpdate, tuple):
    """A cache that already holds P positions and never changes: update returns the prefix followed
    by the new keys and values, without storing them, so one object serves the reference and the
    learner in a gradient case (the harness passes it as the `cache` argument).

    It is an empty tuple to the outside world: returned by forward, it compares equal to the
    reference's, and the grader's re-run can send it back as plain data (an empty list).
    """

    def __new__(cls, *args, **kwargs):
        return super().__new__(cls, ())

    def __init__(self, k=None, v=None, expected_heads=None, head_dim=None, label=""):
        self._c_k, self._c_v = k, v
        self._c_shape = (expected_heads, head_dim, label)

    def update(self, k_new, v_new):
        _check_stored(self, k_new, v_new)
        return (torch.cat([self._c_k.to(k_new.dtype), k_new], dim=-2),
                torch.cat([self._c_v.to(v_new.dtype), v_new], dim=-2))

    def __bool__(self):  # an object, as a cache is: `if cache:` must see it (a tuple that is empty would not)
        return True

    def __repr__(self):
        return "<the check's cache>"


def _gqa_case(label, d_model, H, H_kv, B, S, steps, seed, g, grad=False, prefix=0):
    assert sum(steps) == S
    kv = H_kv * (d_model // H)
    shapes = {"W_q.weight": (d_model, d_model), "W_k.weight": (kv, d_model), "W_v.weight": (kv, d_model),
              "W_o.weight": (d_model, d_model)}
    # Weights with std 1.5/sqrt(d_model): peaked enough that a wrong mask or grouping shows.
    state = {name: randn(*shape, gen=g, scale=1.5 / math.sqrt(d_model)) for name, shape in shapes.items()}
    x = randn(B, S, d_model, gen=g, dtype=F64 if grad else torch.float32)
    dims = f"d_model={d_model}, num_heads={H}, num_kv_heads={H_kv}, x {tuple(x.shape)}"
    init = {"ctor": (d_model, H, H_kv), "seed": seed, "state": state, "steps": steps}
    if grad and prefix:
        kv_shape = (B, H_kv, prefix, d_model // H)
        cache = _PrefixCache(randn(*kv_shape, gen=g, dtype=F64), randn(*kv_shape, gen=g, dtype=F64), H_kv,
                             d_model // H, label)
        return Case(f"{label}: {dims}, after {prefix} cached positions", (x,), {"cache": cache}, init=init, grad=True)
    if grad:
        return Case(f"{label}: {dims}", (x,), init=init, grad=True)
    schedule = " + ".join(str(n) for n in steps)
    return Case(f"{label}: {dims}; with a cache: {schedule} positions", (x,), init=init, run=_run_gqa)


def _gqa_cases(seed: int) -> list:
    r, g = rng(seed), generator(seed)
    cases = []

    def add(*args, **kwargs):
        cases.append(_gqa_case(*args, seed=seed, g=g, **kwargs))

    add("GQA (2 query heads per kv head), prefill 3 then decode 3 tokens", 16, 4, 2, 2, 6, (3, 1, 1, 1))
    add("MQA (num_kv_heads = 1)", 12, 4, 1, 2, 5, (2, 1, 2))
    add("MHA (num_kv_heads = num_heads), decode from an empty cache", 12, 3, 3, 1, 3, (1, 1, 1))
    add("GQA with 3 query heads per kv head, two chunks", 24, 6, 2, 1, 6, (4, 2))
    add("gradients (float64) of a random loss of out, GQA, no cache", 16, 4, 2, 2, 5, (5,), grad=True)
    add("gradients (float64), MQA, a single batch element", 12, 6, 1, 1, 4, (4,), grad=True)
    add("gradients (float64) through a cache: 3 new positions", 16, 4, 2, 2, 3, (3,), grad=True, prefix=4)
    add("a single position (S = 1)", 8, 2, 1, 2, 1, (1,))
    add("one prefill chunk through the cache (same as no cache)", 12, 4, 2, 2, 5, (5,))
    add("odd sizes (head_dim 3), uneven chunks", 18, 6, 3, 1, 9, (5, 1, 3))
    for i in range(2):  # random configurations and decode schedules
        H_kv, n_rep, D_h = r.randint(1, 3), r.randint(1, 3), r.choice([2, 3, 4])
        S = r.randint(2, 8)
        steps, left = [], S
        while left:
            n = r.randint(1, left) if not steps else r.choice([1, 1, min(2, left)])
            steps.append(min(n, left))
            left -= steps[-1]
        add(f"random case {i + 1}", H_kv * n_rep * D_h, H_kv * n_rep, H_kv, r.randint(1, 2), S, tuple(steps))
    return cases


def _build_gqa(cls, case: Case):
    d_model, H, H_kv = case.init["ctor"]
    saved = torch.get_rng_state()  # (torch.random.fork_rng is slow: it also visits every device type)
    try:
        reseed(case.init["seed"])
        module = cls(d_model, H, H_kv)
    finally:
        torch.set_rng_state(saved)
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
    if cache is not None and result[1] is not cache:
        raise CheckFailure(f"GroupedQueryAttention.forward(x, cache=cache) returned {describe(result[1])} as its "
                           f"cache on case [{label}].\nLikely mistake: {OTHER_CACHE}")
    return result


def _run_gqa(cls, case: Case):
    module = _build_gqa(cls, case)
    (x,) = case.args
    d_model, H, H_kv = case.init["ctor"]
    out, returned_cache = _forward(module, x, None, case.label)
    cache, pieces, start = _RecordingCache(H_kv, d_model // H, case.label), [], 0
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
    scale = "head_dim"  # or "d_model", "none"
    repeat_before_cache = False  # store num_heads heads in the cache
    output_projection = True
    return_cache = True
    softmax_dim = -1  # or -2: normalised over the queries

    def _heads(self, t, n_heads):
        B, S, _ = t.shape
        if self.transpose_heads:
            return t.view(B, S, n_heads, self.head_dim).transpose(1, 2)
        return t.view(B, n_heads, S, self.head_dim)

    def _repeat(self, t, n_rep):
        return t.repeat(1, n_rep, 1, 1) if self.tile else t.repeat_interleave(n_rep, dim=1)

    def forward(self, x, cache=None):
        B, S, d_model = x.shape
        H = self.num_heads
        q = self._heads(self.W_q(x), H)
        k = self._heads(self.W_k(x), self.W_k.out_features // self.head_dim)
        v = self._heads(self.W_v(x), self.W_v.out_features // self.head_dim)
        if self.repeat_before_cache:
            k, v = self._repeat(k, H // k.size(1)), self._repeat(v, H // v.size(1))
        if cache is not None:
            k_all, v_all = cache.update(k, v)
            if self.append:
                k, v = k_all, v_all
        S_k = k.size(-2)
        k, v = self._repeat(k, H // k.size(1)), self._repeat(v, H // v.size(1))
        ones = torch.ones(S, S_k, dtype=torch.bool)
        mask = {"bottom_right": ones.tril(S_k - S), "top_left": ones.tril(0), "none": None,
                "hides_diagonal": ones.tril(S_k - S - 1), "sees_next": ones.tril(S_k - S + 1)}[self.causal]
        scale = {"head_dim": math.sqrt(self.head_dim), "d_model": math.sqrt(d_model), "none": 1.0}[self.scale]
        scores = q @ k.transpose(-2, -1) / scale
        if self.softmax_dim != -1 or self.causal == "hides_diagonal":  # plain softmax: what a learner writes
            out = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=self.softmax_dim) @ v
        else:
            out = masked_softmax_impl(scores, mask) @ v
        out = out.transpose(1, 2).reshape(B, S, d_model)
        return (self.W_o(out) if self.output_projection else out), (cache if self.return_cache else None)


def _gqa_mutant(name, **switches):
    return type(name, (_GQAVariant,), switches)


class _GQAKVToDModel(_GQAVariant):
    """Multi-head attention under the GQA name: W_k, W_v map to d_model (num_heads kv heads)."""

    def __init__(self, d_model, num_heads, num_kv_heads):
        super().__init__(d_model, num_heads, num_kv_heads)
        self.W_k = nn.Linear(d_model, d_model, bias=False)
        self.W_v = nn.Linear(d_model, d_model, bias=False)


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
NO_SCALING = "the scores were not divided by sqrt(head_dim)."
NO_W_O = "the output projection W_o was not applied: merge the heads back to (B, S, d_model), then apply W_o."
HIDES_DIAGONAL = (
    "the causal mask is off by one and hides the diagonal: a position may attend to itself, keys j ≤ i + (S_k − S) — "
    "torch.ones(S, S_k).tril(diagonal=S_k − S), not diagonal=S_k − S − 1 (or triu(S_k − S) for the masked part). "
    "Without a cache the first query then has no key at all, and its softmax gives NaN."
)
SEES_NEXT = (
    "the causal mask is off by one and lets each query see the next position: keep keys j ≤ i + (S_k − S) — "
    "torch.ones(S, S_k).tril(diagonal=S_k − S), not diagonal=S_k − S + 1 (or hide triu(S_k − S + 1), not triu(S_k − S + 2))."
)
SOFTMAX_QUERIES = ("the softmax ran over the queries (dim −2) instead of over the keys (the last dim): each query's "
                   "weights over the keys it may see must sum to 1, torch.softmax(scores, dim=-1).")

GQA_MUTANTS = [
    Mutant("tile_instead_of_interleave", TILE, _gqa_mutant("_GQATile", tile=True)),
    Mutant("no_causal_mask", NO_CAUSAL, _gqa_mutant("_GQANoCausal", causal="none")),
    Mutant("top_left_causal_in_decode", TOP_LEFT, _gqa_mutant("_GQATopLeft", causal="top_left")),
    Mutant("cache_not_appended", CACHE_NOT_USED, _gqa_mutant("_GQACacheNotAppended", append=False)),
    Mutant("heads_mixed_by_view", VIEW_NO_TRANSPOSE, _gqa_mutant("_GQAViewNoTranspose", transpose_heads=False)),
    Mutant("scale_by_d_model", SCALE_D_MODEL, _gqa_mutant("_GQAScaleByDModel", scale="d_model")),
    Mutant("no_scaling", NO_SCALING, _gqa_mutant("_GQANoScaling", scale="none")),
    Mutant("no_output_projection", NO_W_O, _gqa_mutant("_GQANoWo", output_projection=False)),
    Mutant("causal_mask_hides_the_diagonal", HIDES_DIAGONAL, _gqa_mutant("_GQAHidesDiagonal", causal="hides_diagonal")),
    Mutant("causal_mask_sees_the_next_position", SEES_NEXT, _gqa_mutant("_GQASeesNext", causal="sees_next")),
    Mutant("softmax_over_the_queries", SOFTMAX_QUERIES, _gqa_mutant("_GQASoftmaxQueries", softmax_dim=-2)),
    Mutant("kv_projected_to_d_model", KV_D_MODEL, _GQAKVToDModel),
    Mutant("returns_no_cache", OTHER_CACHE, _gqa_mutant("_GQAReturnsNone", return_cache=False)),
    # GQA exists to shrink the cache by num_heads / num_kv_heads; repeating before caching undoes it.
    Mutant("quadratic_style_cache_of_repeated_heads", REPEATED_IN_CACHE,
           _gqa_mutant("_GQARepeatBeforeCache", repeat_before_cache=True)),
]


class _VGQAGrouped(nn.Module):
    """No repeat at all: queries grouped as (B, H_kv, n_rep, S, D_h) against (B, H_kv, 1, S_k, D_h);
    parameters created in another order; an assert instead of ValueError; einsum."""

    def __init__(self, d_model, num_heads, num_kv_heads):
        super().__init__()
        assert d_model % num_heads == 0 and num_heads % num_kv_heads == 0
        self.h, self.h_kv, self.d_h = num_heads, num_kv_heads, d_model // num_heads
        self.W_o = nn.Linear(d_model, d_model, bias=False)
        self.W_v = nn.Linear(d_model, num_kv_heads * self.d_h, bias=False)
        self.W_k = nn.Linear(d_model, num_kv_heads * self.d_h, bias=False)
        self.W_q = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x, cache=None):
        B, S, _ = x.shape
        h, h_kv, d_h = self.h, self.h_kv, self.d_h
        q = self.W_q(x).view(B, S, h_kv, h // h_kv, d_h).permute(0, 2, 3, 1, 4)  # (B, H_kv, n_rep, S, D_h)
        k = self.W_k(x).view(B, S, h_kv, d_h).transpose(1, 2)  # (B, H_kv, S, D_h)
        v = self.W_v(x).view(B, S, h_kv, d_h).transpose(1, 2)
        if cache is not None:
            k, v = cache.update(k, v)
        S_k = k.size(2)
        s = torch.einsum("bgrqd,bgkd->bgrqk", q, k) * d_h ** -0.5
        allowed = torch.arange(S_k)[None, :] <= torch.arange(S)[:, None] + (S_k - S)
        s = torch.where(allowed, s, torch.tensor(float("-inf"), dtype=s.dtype))
        e = torch.exp(s - s.amax(-1, keepdim=True))
        w = e / e.sum(-1, keepdim=True)
        out = torch.einsum("bgrqk,bgkd->bqgrd", w, v).reshape(B, S, h * d_h)
        return self.W_o(out), cache


class _VGQALoops(nn.Module):
    """One head at a time, float64 inside, no validation at all (not graded)."""

    def __init__(self, d_model, num_heads, num_kv_heads):
        super().__init__()
        self.num_heads, self.num_kv_heads = num_heads, num_kv_heads
        self.head_dim = d_model // num_heads
        self.W_q = nn.Linear(d_model, d_model, bias=False)
        self.W_k = nn.Linear(d_model, num_kv_heads * self.head_dim, bias=False)
        self.W_v = nn.Linear(d_model, num_kv_heads * self.head_dim, bias=False)
        self.W_o = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x, cache=None):
        B, S, d_model = x.shape
        d_h, group = self.head_dim, self.num_heads // self.num_kv_heads
        q = self.W_q(x).reshape(B, S, self.num_heads, d_h).permute(0, 2, 1, 3)
        k = self.W_k(x).reshape(B, S, self.num_kv_heads, d_h).permute(0, 2, 1, 3)
        v = self.W_v(x).reshape(B, S, self.num_kv_heads, d_h).permute(0, 2, 1, 3)
        if cache is not None:
            k, v = cache.update(k, v)
        S_k = k.size(2)
        mask = torch.ones(S, S_k, dtype=torch.bool).tril(S_k - S)
        heads = []
        for h in range(self.num_heads):
            qh, kh, vh = q[:, h].double(), k[:, h // group].double(), v[:, h // group].double()
            w = torch.softmax((qh @ kh.transpose(1, 2) / math.sqrt(d_h)).masked_fill(~mask, float("-inf")), -1)
            heads.append((w @ vh).to(x.dtype))
        return self.W_o(torch.cat(heads, dim=-1)), cache


def _tip_validation(cls) -> str | None:
    """Advice only: invalid head counts are best refused when the module is built."""
    for d_model, H, H_kv, why in [(12, 4, 3, "num_heads % num_kv_heads != 0"), (10, 4, 2, "d_model % num_heads != 0")]:
        try:
            cls(d_model, H, H_kv)
        except Exception:  # noqa: BLE001 - any refusal (ValueError, assert) is fine
            continue
        return (f"GroupedQueryAttention(d_model={d_model}, num_heads={H}, num_kv_heads={H_kv}) ({why}) built a "
                "module; raising ValueError there would catch a wrong configuration early.")
    return None


def _gqa_scale_names(case: Case) -> dict:
    d_model, H, H_kv = case.init["ctor"]
    d_h = d_model // H
    return {"1/sqrt(head_dim)": 1 / math.sqrt(d_h), "1 (no scaling)": 1.0, "1/sqrt(d_model)": 1 / math.sqrt(d_model),
            "1/head_dim": 1 / d_h, "1/sqrt(num_kv_heads · head_dim)": 1 / math.sqrt(H_kv * d_h),
            "1/sqrt(num_heads)": 1 / math.sqrt(H)}


def _gqa_rescale(case: Case, c: float) -> Case:
    """The same case with every score multiplied by c (W_q scaled by c)."""
    from dataclasses import replace

    state = dict(case.init["state"])
    state["W_q.weight"] = state["W_q.weight"] * c
    return replace(case, init={**case.init, "state": state})


GQA_EXERCISE = Exercise(
    name="GroupedQueryAttention",
    reference=ref.GroupedQueryAttention,
    make_cases=_gqa_cases,
    kind="class",  # most cases run _run_gqa (with a cache); gradient cases build the module in float64
    mutants=GQA_MUTANTS,
    variants=[Variant("grouped_einsum_no_repeat", _VGQAGrouped), Variant("loops_float64_no_validation", _VGQALoops, demo=True)],
    output_names=GQA_OUTPUTS,
    tips=(_tip_validation,),
    rescale=_gqa_rescale,
    scale_names=_gqa_scale_names,
    contract=Contract("""Causal self-attention with num_heads query heads sharing num_kv_heads key/value heads (GQA).

    num_kv_heads = num_heads is multi-head attention, num_kv_heads = 1 multi-query attention.
    Query head h uses kv head h // (num_heads // num_kv_heads): consecutive query heads form a group.

    Parameters (names are part of the contract), with head_dim = d_model // num_heads, and no
    other parameters or buffers:
        W_q: nn.Linear(d_model, d_model, bias=False)
        W_k, W_v: nn.Linear(d_model, num_kv_heads * head_dim, bias=False)
        W_o: nn.Linear(d_model, d_model, bias=False)

    forward(x, cache=None):
        x: (B, S, d_model), the S newest positions   returns (out (B, S, d_model), cache)
        Scores are q kᵀ / sqrt(head_dim).
        Without a cache: causal attention over x; returns (out, None).
        With a cache (any object with update(k_new, v_new) -> (k_all, v_all), such as your
        KVCache; use only that method: the check's cache has no other attribute, so take the
        number of cached positions from what update returns): pass it this step's keys and values,
        (B, num_kv_heads, S, head_dim) each — the cache holds num_kv_heads heads, never keys
        repeated to num_heads — and attend to everything it returns with bottom-right-aligned
        causality (query i, the (P + i)-th position after P cached ones, sees keys 0 .. P + i);
        returns (out, the same cache object).
        Prefill then decode token by token gives the same outputs as one forward over the whole x.
    The module keeps no state between calls: what carries over from one decode step to the next
    lives in the cache it is given.
    """, fills=True, forbid=(SDPA, MHA), grad="x and every parameter", kinds={"x": "tokens"}),
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
    # the signature's default once more, left out of a case that gives it (the core's defaults case,
    # which skips exercises with their own runner)
    given = next(c for c in cases if c.kwargs.get("bytes_per_elem") == 2)
    cases.append(Case(f"bytes_per_elem left out (the signature's default): {given.label}", given.args, {}))
    return cases


def _kvb(factor=2, layers=1, batch=True, bytes_=True, scale=1, default_bytes=2):
    def impl(num_layers, num_kv_heads, head_dim, seq_len, batch_size, bytes_per_elem=default_bytes):
        n = factor * num_layers ** layers * num_kv_heads * head_dim * seq_len
        n *= batch_size if batch else 1
        n *= bytes_per_elem if bytes_ else 1
        return n * scale

    return impl


def _kvb_gib(*args, **kwargs):
    return ref.kv_cache_bytes.__wrapped__(*args, **kwargs) / 2**30


def _kvb_float(*args, **kwargs):
    return float(ref.kv_cache_bytes.__wrapped__(*args, **kwargs))


def _v_kvb_prod(num_layers, num_kv_heads, head_dim, seq_len, batch_size, bytes_per_elem=2):
    per_token = 2 * num_kv_heads * head_dim * bytes_per_elem  # K and V of one position in one layer
    return math.prod([per_token, num_layers, seq_len, batch_size])


def _v_kvb_tensor_sizes(num_layers, num_kv_heads, head_dim, seq_len, batch_size, bytes_per_elem=2):
    k_numel = batch_size * num_kv_heads * seq_len * head_dim  # one layer's k: (B, H_kv, S, D)
    return sum(2 * k_numel * bytes_per_elem for _ in range(num_layers))


def _v_kvb_meta_tensor(num_layers, num_kv_heads, head_dim, seq_len, batch_size, bytes_per_elem=2):
    dtype = {1: torch.int8, 2: torch.float16, 4: torch.float32, 8: torch.float64}[bytes_per_elem]
    k = torch.empty(num_layers, 2, batch_size, num_kv_heads, seq_len, head_dim, dtype=dtype, device="meta")
    return k.numel() * k.element_size()  # a meta tensor allocates nothing: only its shape and dtype


RETURNS_TENSOR = ("the result is a torch.Tensor: return the number of bytes as a Python int, multiplying the "
                  "ints themselves (no tensor is needed; int(t) or t.item() converts one).")
RETURNS_NUMPY = ("the result is a numpy number, not a Python int: multiply the ints themselves, or wrap the result "
                 "in int(...).")


RETURNS_GIB = ("the result was converted to GiB (a float): return the number of bytes as an int, and convert only "
               "when printing.")
RETURNS_FLOAT = "the result is a float: return the number of bytes as a Python int (avoid `/`, use * only)."
SIGNATURE = ("the signature is kv_cache_bytes(num_layers, num_kv_heads, head_dim, seq_len, batch_size, "
             "bytes_per_elem=2): the check passes bytes_per_elem by that name.")


def _run_kv_bytes(fn, case: Case):
    """The call; a result that is not a Python int is refused here, with its type named: a tensor, a
    numpy number, a bool, and a float that is the right number of bytes (or of GiB). A float of another
    value goes on to the comparison, which says what it should be."""
    try:
        out = fn(*case.args, **case.kwargs)
    except TypeError as err:
        if "keyword argument" in str(err) and "bytes_per_elem" in str(err):
            raise CheckFailure(f"kv_cache_bytes raised TypeError: {err}.\nLikely mistake: {SIGNATURE}") from None
        raise
    if type(out) is int:
        return out
    kind = type(out)
    if isinstance(out, float):
        num_layers, num_kv_heads, head_dim, seq_len, batch_size = case.args
        want = 2 * num_layers * num_kv_heads * head_dim * seq_len * batch_size * case.kwargs.get("bytes_per_elem", 2)
        if out == want:
            raise CheckFailure(f"kv_cache_bytes returned a float ({out!r}), the right number as a float.\n"
                               f"Likely mistake: {RETURNS_FLOAT}")
        if abs(out * 2**30 - want) <= 1e-6 * want:
            raise CheckFailure(f"kv_cache_bytes returned a float ({out!r}): {want:,} bytes in GiB.\n"
                               f"Likely mistake: {RETURNS_GIB}")
        return out
    where = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    if isinstance(out, torch.Tensor):
        raise CheckFailure(f"kv_cache_bytes returned {describe(out)}.\nLikely mistake: {RETURNS_TENSOR}")
    if kind.__module__ == "numpy":
        raise CheckFailure(f"kv_cache_bytes returned a {where} ({out!r}).\nLikely mistake: {RETURNS_NUMPY}")
    raise CheckFailure(f"kv_cache_bytes returned a {where} ({out!r}): return the number of bytes as a Python int.")


def _kvb_tensor(num_layers, num_kv_heads, head_dim, seq_len, batch_size, bytes_per_elem=2):
    return torch.tensor([2, num_layers, num_kv_heads, head_dim, seq_len, batch_size, bytes_per_elem]).prod()


def _kvb_numpy(num_layers, num_kv_heads, head_dim, seq_len, batch_size, bytes_per_elem=2):
    import numpy as np

    return np.prod([2, num_layers, num_kv_heads, head_dim, seq_len, batch_size, bytes_per_elem], dtype=np.int64)


KV_BYTES_MUTANTS = [
    Mutant("no_factor_2", "only one of K and V was counted: the cache stores both, so multiply by 2.", _kvb(factor=1)),
    Mutant("bits_not_bytes", "that is bits, not bytes: bytes_per_elem already counts bytes, so do not multiply by 8.", _kvb(scale=8)),
    Mutant("forgets_batch", "batch_size is missing: every sequence in the batch has its own cache.", _kvb(batch=False)),
    Mutant("forgets_num_layers", "num_layers is missing: every layer keeps its own keys and values.", _kvb(layers=0)),
    Mutant("num_layers_twice", "num_layers appears twice in the product: count it once.", _kvb(layers=2)),
    Mutant("elements_not_bytes", "that is the number of elements: multiply by bytes_per_elem to get bytes.", _kvb(bytes_=False)),
    Mutant("default_float32", "bytes_per_elem defaults to 2 (float16/bfloat16), not 4.", _kvb(default_bytes=4)),
    Mutant("returns_gib", RETURNS_GIB, _kvb_gib),
    Mutant("returns_float", RETURNS_FLOAT, _kvb_float),
    Mutant("returns_a_tensor", RETURNS_TENSOR, _kvb_tensor),
    Mutant("returns_a_numpy_number", RETURNS_NUMPY, _kvb_numpy),
]

KV_BYTES_EXERCISE = Exercise(
    name="kv_cache_bytes",
    reference=ref.kv_cache_bytes,
    make_cases=_kv_bytes_cases,
    run=_run_kv_bytes,
    mutants=KV_BYTES_MUTANTS,
    variants=[Variant("per_token_prod", _v_kvb_prod), Variant("sum_of_tensor_sizes", _v_kvb_tensor_sizes, demo=True),
              Variant("meta_tensor_numel", _v_kvb_meta_tensor)],
    contract=Contract("""Bytes a KV cache holds: keys and values, for every layer, kv head, position and sequence.

    num_layers, num_kv_heads, head_dim, seq_len, batch_size: ints
    bytes_per_elem: bytes per stored number, 2 for float16/bfloat16 (the default), 4 for float32,
        1 for int8/fp8
    Returns the number of bytes as a Python int (not a tensor, a numpy number or a float): the
    answer is arithmetic on ints, and no tensor needs to be allocated (a real cache holds billions
    of elements; a tensor on device="meta" allocates nothing and is fine).
    """, same_dtype=False),
)
check_kv_cache_bytes = register(KV_BYTES_EXERCISE)
