"""Tests for the chapter 09-10 checks, beyond what tests/test_checks.py proves for every exercise:

- KVCache is judged through ``update`` only (no ``seq_len``); storage shared between instances
  (class-level lists) is named, also when an earlier run left data in the shared lists; a class
  that merely declares a class-level default and makes its own storage in __init__ passes;
- a GroupedQueryAttention that repeats the kv heads before caching them fails, naming it; one
  without size validation passes and gets a tip;
- sliding_window_attention: the S×S shortcut fails on the budget case within seconds, naming it;
  a wrong scale factor is named; window 0 and window ≥ S are graded.
"""
import math
import re
import time

import pytest
import torch
import torch.nn as nn

from utils.checks import EXERCISES, CheckFailure
from utils.checks._ch09 import REPEATED_IN_CACHE, SHARED
from utils.checks._ch10 import FULL_MATRIX
from utils.checks._core import run_check


# ---------------------------------------------------------------- KVCache
class CacheWithoutSeqLen:
    """Correct, written from the curriculum alone: update only, tensors made in __init__."""

    def __init__(self):
        self.k = self.v = None

    def update(self, k_new, v_new):
        self.k = k_new if self.k is None else torch.cat((self.k, k_new), dim=2)
        self.v = v_new if self.v is None else torch.cat((self.v, v_new), dim=2)
        return self.k, self.v


class CacheWithClassDefaultButOwnLists:
    keys = []  # a class-level default, shadowed in __init__: harmless

    def __init__(self):
        self.keys, self.values = [], []

    def update(self, k_new, v_new):
        self.keys.append(k_new)
        self.values.append(v_new)
        return torch.cat(self.keys, -2), torch.cat(self.values, -2)


def make_shared_cache():
    class SharedCache:
        k_list = []
        v_list = []

        def update(self, k_new, v_new):
            self.k_list.append(k_new)
            self.v_list.append(v_new)
            return torch.cat(self.k_list, dim=-2), torch.cat(self.v_list, dim=-2)

    return SharedCache


@pytest.mark.parametrize("impl", [CacheWithoutSeqLen, CacheWithClassDefaultButOwnLists])
def test_kv_cache_needs_no_seq_len_and_may_declare_class_defaults(impl):
    run_check(EXERCISES["KVCache"], impl, quiet=True)


def test_kv_cache_with_class_level_lists_is_named_even_with_leftovers():
    cls = make_shared_cache()
    for _ in range(2):  # the second run starts with the first run's tensors in the shared lists
        with pytest.raises(CheckFailure) as info:
            run_check(EXERCISES["KVCache"], cls, quiet=True)
        msg = str(info.value)
        assert SHARED in msg and "k_list" in msg and "two caches" in msg
        assert "wrong dim" not in msg


# ---------------------------------------------------------------- GroupedQueryAttention
class GQA(nn.Module):
    """Written from the contract; `repeat_first` stores num_heads heads in the cache (the mistake);
    no size validation at all (not graded)."""

    repeat_first = False

    def __init__(self, d_model, num_heads, num_kv_heads):
        super().__init__()
        self.h, self.h_kv, self.d_h = num_heads, num_kv_heads, d_model // num_heads
        self.W_q = nn.Linear(d_model, d_model, bias=False)
        self.W_k = nn.Linear(d_model, num_kv_heads * self.d_h, bias=False)
        self.W_v = nn.Linear(d_model, num_kv_heads * self.d_h, bias=False)
        self.W_o = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x, cache=None):
        B, S, d = x.shape
        n_rep = self.h // self.h_kv
        q = self.W_q(x).view(B, S, self.h, self.d_h).transpose(1, 2)
        k = self.W_k(x).view(B, S, self.h_kv, self.d_h).transpose(1, 2)
        v = self.W_v(x).view(B, S, self.h_kv, self.d_h).transpose(1, 2)
        if self.repeat_first:
            k, v = k.repeat_interleave(n_rep, 1), v.repeat_interleave(n_rep, 1)
        if cache is not None:
            k, v = cache.update(k, v)
        if not self.repeat_first:
            k, v = k.repeat_interleave(n_rep, 1), v.repeat_interleave(n_rep, 1)
        S_k = k.size(2)
        scores = q @ k.transpose(2, 3) / math.sqrt(self.d_h)
        mask = torch.ones(S, S_k, dtype=torch.bool).tril(S_k - S)
        w = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
        return self.W_o((w @ v).transpose(1, 2).reshape(B, S, d)), cache


class GQARepeatsBeforeCaching(GQA):
    repeat_first = True


def test_gqa_without_validation_passes_with_a_tip(capsys):
    run_check(EXERCISES["GroupedQueryAttention"], GQA)
    out = capsys.readouterr().out
    assert "✅" in out and "Tip (not graded)" in out


def test_gqa_that_caches_repeated_heads_fails_and_is_named():
    with pytest.raises(CheckFailure) as info:
        run_check(EXERCISES["GroupedQueryAttention"], GQARepeatsBeforeCaching, quiet=True)
    assert REPEATED_IN_CACHE in str(info.value)


# ---------------------------------------------------------------- sliding_window_attention
def _full(q, k, v, window, causal=False):
    S = q.size(-2)
    d = torch.arange(S)[:, None] - torch.arange(S)[None, :]
    allowed = ((d >= 0) & (d <= window)) if causal else d.abs() <= window
    scores = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def test_sliding_window_s_by_s_shortcut_fails_fast_on_the_budget_case():
    ex = EXERCISES["sliding_window_attention"]
    assert any(c.budget is not None and c.args[0].size(-2) == 2048 for c in ex.make_cases(0))
    start = time.perf_counter()
    with pytest.raises(CheckFailure) as info:
        run_check(ex, _full, quiet=True)
    msg = str(info.value)
    assert FULL_MATRIX in msg and "budget at S = 1,024" in msg
    failed = re.match(r"sliding_window_attention: (\d+) of \d+ cases failed \((\d+) raised", msg)
    assert failed and failed.group(1) == failed.group(2), msg  # only the budget cases failed: every small case passed
    assert time.perf_counter() - start < 4.0


def test_sliding_window_wrong_scale_is_named():
    def over_d(q, k, v, window, causal=False):
        return _full(q * math.sqrt(q.size(-1)) / q.size(-1), k, v, window, causal)

    with pytest.raises(CheckFailure) as info:
        run_check(EXERCISES["sliding_window_attention"], over_d, quiet=True)
    assert "1/D" in str(info.value)


def test_sliding_window_edges_stay_graded():
    ex = EXERCISES["sliding_window_attention"]
    labels = [c.label for c in ex.make_cases(0)]
    assert any("window=0 (output = v)" in lb for lb in labels)
    assert any("window > S, causal (full causal attention)" in lb for lb in labels)
    assert any(c.grad and c.args[0].dtype == torch.float64 for c in ex.make_cases(0))

    def window_zero_wrong(q, k, v, window, causal=False):
        return _full(q, k, v, max(window, 1), causal)  # window 0 treated as 1

    with pytest.raises(CheckFailure, match="window=0"):
        run_check(ex, window_zero_wrong, quiet=True)
