"""Rules of chapters 09-10 that issues 16 and 17 found broken, each with the verdict and message it must get.

- KVCache: the budget weighs everything the cache keeps alive, not the largest tensor: a cache that
  also keeps every snapshot it returned fails, named; a doubling buffer and dict storage pass. A
  failure that a single cache shows too is not blamed on sharing between instances.
- GroupedQueryAttention: `if cache:` works with the check's caches; the gradient case through a
  cache is not labelled "without a cache"; an off-by-one causal mask (either way) and a softmax over
  the queries are named.
- sliding_window_attention: the work budget (multiply-adds of the products) rejects a loop that
  scores every key one query at a time, causal and not, and names it; a gather of each query's
  W keys (allowed by the prompt) and query blocks pass.
"""
import math
import time

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from utils.checks import EXERCISES, CheckFailure
from utils.checks._ch09 import HIDES_DIAGONAL, KV_MEMORY, SEES_NEXT, SOFTMAX_QUERIES, _kept_bytes
from utils.checks._ch10 import ALL_KEYS, MEMORY_D, MEMORY_WINDOW
from utils.checks._tripwires import WorkCounter
from utils.checks._core import run_check
from utils._guard import unguarded
from utils import reference as ref


def _fails(name, impl) -> str:
    with pytest.raises(CheckFailure) as info:
        run_check(EXERCISES[name], impl, quiet=True)
    return str(info.value)


# ---------------------------------------------------------------- KVCache
class CacheKeepingSnapshots:
    def __init__(self):
        self.k = self.v = None
        self.snapshots = []

    def update(self, k_new, v_new):
        self.k = k_new if self.k is None else torch.cat([self.k, k_new], dim=-2)
        self.v = v_new if self.v is None else torch.cat([self.v, v_new], dim=-2)
        self.snapshots.append((self.k, self.v))
        return self.k, self.v


class CacheInADict:
    def __init__(self):
        self.store = {}

    def update(self, k_new, v_new):
        if "k" in self.store:
            k_new, v_new = torch.cat((self.store["k"], k_new), 2), torch.cat((self.store["v"], v_new), 2)
        self.store["k"], self.store["v"] = k_new, v_new
        return k_new, v_new


class CacheCatOnLastDim:
    def __init__(self):
        self.k = None

    def update(self, k_new, v_new):
        if self.k is None:
            self.k, self.v = k_new, v_new
        else:
            self.k, self.v = torch.cat([self.k, k_new], -1), torch.cat([self.v, v_new], -1)
        return self.k, self.v


def test_cache_that_keeps_every_snapshot_fails_on_what_it_keeps_alive():
    msg = _fails("KVCache", CacheKeepingSnapshots)
    assert "1 of" in msg and "keeps" in msg and "bytes of tensors alive" in msg and KV_MEMORY in msg


def test_cache_in_a_dict_passes():
    run_check(EXERCISES["KVCache"], CacheInADict, quiet=True)


def test_kept_bytes_counts_each_storage_once():
    c = CacheKeepingSnapshots()
    k = torch.zeros(1, 1, 4, 2)
    c.update(k, k)
    assert _kept_bytes(c) == k.numel() * 4  # k and v are one tensor here: counted once
    view_holder = type("H", (), {})()
    big = torch.zeros(100)
    view_holder.a, view_holder.b = big[:10], big[50:]
    assert _kept_bytes(view_holder) == 400  # views keep their whole storage alive


def test_a_mistake_of_update_itself_is_not_blamed_on_sharing():
    msg = _fails("KVCache", CacheCatOnLastDim)
    assert "two caches" in msg and "share something" not in msg
    assert "update itself" in msg


# ---------------------------------------------------------------- GroupedQueryAttention
class GQA(nn.Module):
    shift, dim, truthy = 0, -1, False

    def __init__(self, d_model, num_heads, num_kv_heads):
        super().__init__()
        self.h, self.h_kv, self.d_h = num_heads, num_kv_heads, d_model // num_heads
        self.W_q = nn.Linear(d_model, d_model, bias=False)
        self.W_k = nn.Linear(d_model, num_kv_heads * self.d_h, bias=False)
        self.W_v = nn.Linear(d_model, num_kv_heads * self.d_h, bias=False)
        self.W_o = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x, cache=None):
        B, S, d = x.shape
        q = self.W_q(x).view(B, S, self.h, self.d_h).transpose(1, 2)
        k = self.W_k(x).view(B, S, self.h_kv, self.d_h).transpose(1, 2)
        v = self.W_v(x).view(B, S, self.h_kv, self.d_h).transpose(1, 2)
        if (cache if self.truthy else cache is not None):
            k, v = cache.update(k, v)
        S_k, G = k.size(2), self.h // self.h_kv
        k, v = k.repeat_interleave(G, 1), v.repeat_interleave(G, 1)
        mask = torch.ones(S, S_k, dtype=torch.bool).tril(S_k - S + self.shift)
        w = torch.softmax((q @ k.transpose(2, 3) / math.sqrt(self.d_h)).masked_fill(~mask, float("-inf")), dim=self.dim)
        return self.W_o((w @ v).transpose(1, 2).reshape(B, S, d)), cache


def test_if_cache_works_with_the_checks_caches():
    run_check(EXERCISES["GroupedQueryAttention"], type("GQAIfCache", (GQA,), {"truthy": True}), quiet=True)


def test_gradient_case_through_a_cache_is_not_called_without_a_cache():
    class WrongOnlyWithPrefix(GQA):
        def forward(self, x, cache=None):
            out, c = super().forward(x, cache)
            if x.dtype == torch.float64 and cache is not None and type(cache).__name__ == "_PrefixCache":
                out = out * 1.5
            return out, c

    msg = _fails("GroupedQueryAttention", WrongOnlyWithPrefix)
    first = msg.splitlines()[2]
    assert "through a cache" in msg.splitlines()[1] and "without a cache is off" not in first


@pytest.mark.parametrize("switches,hint", [({"shift": -1}, HIDES_DIAGONAL), ({"shift": 1}, SEES_NEXT),
                                           ({"dim": -2}, SOFTMAX_QUERIES)])
def test_mask_off_by_one_and_softmax_over_queries_are_named(switches, hint):
    msg = _fails("GroupedQueryAttention", type("GQAWrong", (GQA,), switches))
    assert hint in msg


# ---------------------------------------------------------------- sliding_window_attention
def per_query_all_keys(q, k, v, window, causal=False):
    S = q.size(-2)
    outs = []
    for i in range(S):
        d = i - torch.arange(S)
        ok = ((d >= 0) & (d <= window)) if causal else d.abs() <= window
        s = (q[..., i:i + 1, :] * k).sum(-1, keepdim=True).transpose(-2, -1) / math.sqrt(q.size(-1))  # elementwise
        outs.append(torch.softmax(s.masked_fill(~ok, float("-inf")), dim=-1) @ v)
    return torch.cat(outs, dim=-2)


def gather(q, k, v, window, causal=False):
    S = q.size(-2)
    idx = torch.arange(S)[:, None] + torch.arange(-window, 1 if causal else window + 1)
    valid = (idx >= 0) & (idx < S)
    idx = idx.clamp(0, S - 1)
    s = (q.unsqueeze(-2) * k[..., idx, :]).sum(-1) / math.sqrt(q.size(-1))  # (..., S, W)
    w = torch.softmax(s.masked_fill(~valid, float("-inf")), dim=-1)
    return (w.unsqueeze(-1) * v[..., idx, :]).sum(-2)


def test_loop_scoring_every_key_fails_on_work_and_is_named_fast():
    start = time.process_time()
    msg = _fails("sliding_window_attention", per_query_all_keys)
    assert msg.startswith("sliding_window_attention: 4 of") and ALL_KEYS in msg and "multiply-adds" in msg
    assert time.process_time() - start < 6.0


def test_gather_of_each_querys_keys_is_allowed_as_the_prompt_says():
    run_check(EXERCISES["sliding_window_attention"], gather, quiet=True)
    assert "gathering each query's W" in EXERCISES["sliding_window_attention"].contract.docstring()


@pytest.mark.parametrize("causal", [False, True])
def test_work_budget_separates_legal_from_forbidden(causal):
    S, D, w = 2048, MEMORY_D, MEMORY_WINDOW
    q = k = v = torch.randn(1, S, D)
    limit = S * S * 2 * D // 8
    counts = {}
    for name, fn in [("reference", unguarded(ref.sliding_window_attention)), ("gather", gather),
                     ("all keys", per_query_all_keys)]:
        counter = WorkCounter()
        with counter:
            fn(q, k, v, w, causal=causal)
        counts[name] = counter.work
    assert counts["reference"] * 10 < limit and counts["gather"] * 10 < limit
    assert counts["all keys"] > 4 * limit


def test_update_mistakes_outside_the_old_bank_are_named():
    from utils.checks._ch09 import KV_CAT_FEATURES, KV_KEEPS_FIRST

    class KeepsFirst:
        def __init__(self):
            self.k = None

        def update(self, k_new, v_new):
            if self.k is None:
                self.k, self.v = k_new, v_new
            return self.k, self.v

    assert KV_CAT_FEATURES in _fails("KVCache", CacheCatOnLastDim)
    assert KV_KEEPS_FIRST in _fails("KVCache", KeepsFirst)


# ---------------------------------------------------------------- issue 24: state only through update; an int only
def test_gqa_may_use_its_cache_only_through_update():
    """The contract says "use only that method": a module that reads cache.k (or seq_len) worked with
    the check's caches and failed, silently, with a KVCache that names its storage otherwise. The
    check's caches have no attribute but update, and the failure says so."""
    from utils.checks._ch09 import ONLY_UPDATE

    base = unguarded(ref.GroupedQueryAttention)

    class ReadsCacheK(base):
        def forward(self, x, cache=None):
            if cache is not None and getattr(cache, "k", None) is not None:
                pass
            past = cache.k.size(-2) if cache is not None and cache.k is not None else 0  # noqa: F841
            return super().forward(x, cache)

    msg = _fails("GroupedQueryAttention", ReadsCacheK)
    assert "AttributeError" in msg and ONLY_UPDATE in msg and "'k'" in msg


def test_kv_cache_bytes_is_a_python_int_and_a_meta_tensor_is_fine():
    import numpy as np

    from utils.checks._ch09 import RETURNS_NUMPY, RETURNS_TENSOR, SIGNATURE

    def as_tensor(num_layers, num_kv_heads, head_dim, seq_len, batch_size, bytes_per_elem=2):
        return torch.tensor([2, num_layers, num_kv_heads, head_dim, seq_len, batch_size, bytes_per_elem]).prod()

    def as_numpy(num_layers, num_kv_heads, head_dim, seq_len, batch_size, bytes_per_elem=2):
        return np.prod([2, num_layers, num_kv_heads, head_dim, seq_len, batch_size, bytes_per_elem])

    def renamed(num_layers, num_kv_heads, head_dim, seq_len, batch_size, nbytes=2):
        return 2 * num_layers * num_kv_heads * head_dim * seq_len * batch_size * nbytes

    def through_meta(num_layers, num_kv_heads, head_dim, seq_len, batch_size, bytes_per_elem=2):
        cache = torch.empty(num_layers, 2, batch_size, num_kv_heads, seq_len, head_dim, device="meta")
        return cache.numel() * bytes_per_elem  # billions of elements, none allocated

    def allocates(num_layers, num_kv_heads, head_dim, seq_len, batch_size, bytes_per_elem=2):
        return torch.zeros(num_layers, 2, batch_size, num_kv_heads, seq_len, head_dim).numel() * bytes_per_elem

    assert RETURNS_TENSOR in _fails("kv_cache_bytes", as_tensor)
    assert RETURNS_NUMPY in _fails("kv_cache_bytes", as_numpy)
    msg = _fails("kv_cache_bytes", renamed)
    assert SIGNATURE in msg and "float" not in msg
    run_check(EXERCISES["kv_cache_bytes"], through_meta, quiet=True)
    start = time.process_time()
    msg = _fails("kv_cache_bytes", allocates)  # refused before the 10 GB tensor is allocated
    assert "over its budget" in msg and time.process_time() - start < 2.0
