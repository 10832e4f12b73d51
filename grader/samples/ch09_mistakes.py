"""Chapter 09 samples: the correct answers, and three submissions that each carry one realistic
mistake in every exercise (`repeat_kv`, `KVCache`, `GroupedQueryAttention`, `kv_cache_bytes`;
names from the mutant banks in utils/checks/_ch09.py) and one wrong quiz answer, so that every
exercise meets three distinct realistic mistakes; with the hostile sample below the chapter adds
five submissions to the bank.

The wrong `GroupedQueryAttention`s repeat the kv heads inline (correctly), not through the
submission's `repeat_kv`, which is wrong too; the check gives the module its own cache, so the
submission's wrong `KVCache` costs nothing there either: each mistake costs exactly one exercise.
The chapter has no derivation.

Built from the current release (``notebooks/``) with the solution's answers filled in, then wrong
answer code substituted, so the samples never drift from the source.
"""
from __future__ import annotations

from ._chapter import Chapter, src

ASSIGNMENT = "09_gqa_and_kv_cache"
FULL = {"repeat_kv": 2, "KVCache": 3, "GroupedQueryAttention": 5, "kv_cache_bytes": 2,
        "quiz_1": 1, "quiz_2": 1, "quiz_3": 1}


_CHAPTER = Chapter(ASSIGNMENT, FULL)
_src = src
correct, _with_answers, _expect = _CHAPTER.correct, _CHAPTER.with_answers, _CHAPTER.expect


# ---------------------------------------------------------------- repeat_kv mistakes
RK_TILED = _src('''
import torch


def repeat_kv(x, n_rep):
    return x.repeat(1, n_rep, 1, 1)  # [k0, k1, k0, k1] (mutant tile_instead_of_interleave)
''')

RK_NO_RESHAPE = _src('''
import torch


def repeat_kv(x, n_rep):
    B, H_kv, S, D = x.shape
    return x[:, :, None].expand(B, H_kv, n_rep, S, D)  # heads never merged (mutant expand_without_reshape)
''')

RK_NO_DIM = _src('''
import torch


def repeat_kv(x, n_rep):
    return x.repeat_interleave(n_rep)  # no dim=: flattens x first (mutant repeat_interleave_without_dim)
''')

# ---------------------------------------------------------------- KVCache mistakes
KV_CLASS_LISTS = _src('''
import torch


class KVCache:
    keys = []  # in the class body: shared by every instance (mutant class_level_lists)
    values = []

    def update(self, k_new, v_new):
        self.keys.append(k_new)
        self.values.append(v_new)
        return torch.cat(self.keys, dim=-2), torch.cat(self.values, dim=-2)
''')

KV_CAT_HEADS = _src('''
import torch


class KVCache:
    def __init__(self):
        self.k = None
        self.v = None

    def update(self, k_new, v_new):
        if self.k is None:
            self.k, self.v = k_new, v_new
        else:  # the head dim, not the sequence dim (mutant concatenates_along_heads)
            self.k = torch.cat([self.k, k_new], dim=1)
            self.v = torch.cat([self.v, v_new], dim=1)
        return self.k, self.v
''')

KV_PREPENDS = _src('''
import torch


class KVCache:
    def __init__(self):
        self.k = None
        self.v = None

    def update(self, k_new, v_new):
        if self.k is None:
            self.k, self.v = k_new, v_new
        else:  # newest first: the new positions go in front (mutant prepends_new_positions)
            self.k = torch.cat([k_new, self.k], dim=-2)
            self.v = torch.cat([v_new, self.v], dim=-2)
        return self.k, self.v
''')

# ---------------------------------------------------------------- GroupedQueryAttention mistakes
KV_SNAPSHOTS = _src('''
import torch


class KVCache:
    def __init__(self):
        self.k = self.v = None
        self.snapshots = []  # every (k_all, v_all) returned so far: the cache keeps O(S²) alive

    def update(self, k_new, v_new):
        self.k = k_new if self.k is None else torch.cat([self.k, k_new], dim=-2)
        self.v = v_new if self.v is None else torch.cat([self.v, v_new], dim=-2)
        self.snapshots.append((self.k, self.v))  # right values, over the kept-alive budget (issue 16 §1)
        return self.k, self.v
''')

_GQA = '''
import math

import torch
import torch.nn as nn


class GroupedQueryAttention(nn.Module):
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
        H, H_kv, D_h = self.num_heads, self.num_kv_heads, self.head_dim
        G = H // H_kv
        q = self.W_q(x).view(B, S, H, D_h).transpose(1, 2)
        k = self.W_k(x).view(B, S, H_kv, D_h).transpose(1, 2)
        v = self.W_v(x).view(B, S, H_kv, D_h).transpose(1, 2)
        {before_cache}
        if cache is not None:
            k, v = cache.update(k, v)
        S_k = k.size(-2)
        {after_cache}
        scores = q @ k.transpose(-2, -1) / math.sqrt(D_h)
        mask = {mask}
        weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
        out = (weights @ v).transpose(1, 2).reshape(B, S, d_model)
        return self.W_o(out), cache
'''
_REPEAT = "k, v = k.repeat_interleave(G, dim=1), v.repeat_interleave(G, dim=1)"
GQA_TOP_LEFT = _src(_GQA.format(
    before_cache="pass", after_cache=_REPEAT,
    mask="torch.ones(S, S_k, dtype=torch.bool).tril()  # top-left in decode (mutant top_left_causal_in_decode)"))
GQA_REPEAT_BEFORE_CACHE = _src(_GQA.format(
    before_cache=_REPEAT + "  # H heads into the cache (mutant quadratic_style_cache_of_repeated_heads)",
    after_cache="pass", mask="torch.ones(S, S_k, dtype=torch.bool).tril(diagonal=S_k - S)"))
GQA_VIEW_NO_TRANSPOSE = _src(_GQA.format(before_cache="pass", after_cache=_REPEAT,
                                         mask="torch.ones(S, S_k, dtype=torch.bool).tril(diagonal=S_k - S)")
                             .replace("view(B, S, H, D_h).transpose(1, 2)", "view(B, H, S, D_h)"
                                      "  # heads split without the transpose (mutant heads_mixed_by_view)")
                             .replace("view(B, S, H_kv, D_h).transpose(1, 2)", "view(B, H_kv, S, D_h)")
                             .replace("\n        pass", ""))

# ---------------------------------------------------------------- kv_cache_bytes mistakes
KVB_NO_FACTOR_2 = _src('''
def kv_cache_bytes(num_layers, num_kv_heads, head_dim, seq_len, batch_size, bytes_per_elem=2):
    return num_layers * num_kv_heads * head_dim * seq_len * batch_size * bytes_per_elem  # keys only (mutant no_factor_2)
''')

KVB_GIB = _src('''
def kv_cache_bytes(num_layers, num_kv_heads, head_dim, seq_len, batch_size, bytes_per_elem=2):
    n = 2 * num_layers * num_kv_heads * head_dim * seq_len * batch_size * bytes_per_elem
    return n / 2**30  # GiB, a float (mutant returns_gib)
''')

KVB_NO_BATCH = _src('''
def kv_cache_bytes(num_layers, num_kv_heads, head_dim, seq_len, batch_size, bytes_per_elem=2):
    return 2 * num_layers * num_kv_heads * head_dim * seq_len * bytes_per_elem  # one sequence (mutant forgets_batch)
''')

# ---------------------------------------------------------------- hostile: every exercise hangs
# Issue 7 §4: the worst a submission can cost. Every exercise sleeps for ever and swallows the
# interrupt that ends a cell, so the kernel is stopped only by the notebook's time limit and every
# re-check child only by its share of the re-check budget; the quiz answers are right and keep
# their points (compared as literals, though their cells never ran). tests/test_grader.py asserts
# that grading it takes at most two minutes.
_STALL = """import time


def _stall():
    while True:
        try:
            time.sleep(3600)
        except BaseException:
            pass
"""
HANG_RK = _src(_STALL + """

def repeat_kv(x, n_rep):
    _stall()
""")
HANG_KV = _src("""
class KVCache:
    def __init__(self):
        _stall()

    def update(self, k_new, v_new):
        _stall()
""")
HANG_GQA = _src("""
import torch.nn as nn


class GroupedQueryAttention(nn.Module):
    def __init__(self, d_model, num_heads, num_kv_heads):
        super().__init__()
        _stall()
""")
HANG_KVB = _src("""
def kv_cache_bytes(num_layers, num_kv_heads, head_dim, seq_len, batch_size, bytes_per_elem=2):
    _stall()
""")

SAMPLES = {
    "ch09_correct": ("chapter 09: the solution's answers", correct, FULL),
    "ch09_mistakes_tiled": (
        "chapter 09: tiled repeat_kv, class-level cache lists, top-left mask in decode, keys only in the byte count, quiz 1 'a'",
        lambda: _with_answers(repeat_kv=RK_TILED, KVCache=KV_CLASS_LISTS, GroupedQueryAttention=GQA_TOP_LEFT,
                              kv_cache_bytes=KVB_NO_FACTOR_2, quiz_1='answer_1 = "a"'),
        _expect(repeat_kv=0, KVCache=0, GroupedQueryAttention=0, kv_cache_bytes=0, quiz_1=0)),
    "ch09_mistakes_shapes": (
        "chapter 09: expand without reshape, a cache that keeps every snapshot it returned (over the kept-alive "
        "budget), repeated heads cached, bytes in GiB, quiz 2 'c'",
        lambda: _with_answers(repeat_kv=RK_NO_RESHAPE, KVCache=KV_SNAPSHOTS, GroupedQueryAttention=GQA_REPEAT_BEFORE_CACHE,
                              kv_cache_bytes=KVB_GIB, quiz_2='answer_2 = "c"'),
        _expect(repeat_kv=0, KVCache=0, GroupedQueryAttention=0, kv_cache_bytes=0, quiz_2=0)),
    "ch09_mistakes_order": (
        "chapter 09: repeat_interleave without dim, new positions prepended to the cache, heads split by view "
        "without the transpose, batch_size left out of the byte count, quiz 3 'b' (T key projections)",
        lambda: _with_answers(repeat_kv=RK_NO_DIM, KVCache=KV_PREPENDS, GroupedQueryAttention=GQA_VIEW_NO_TRANSPOSE,
                              kv_cache_bytes=KVB_NO_BATCH, quiz_3='answer_3 = "b"'),
        _expect(repeat_kv=0, KVCache=0, GroupedQueryAttention=0, kv_cache_bytes=0, quiz_3=0)),
    "ch09_hostile_hang_everything": (
        "chapter 09: every exercise sleeps for ever and swallows interrupts; quizzes right (issue 7: worst-case cost)",
        lambda: _with_answers(repeat_kv=HANG_RK, KVCache=HANG_KV, GroupedQueryAttention=HANG_GQA, kv_cache_bytes=HANG_KVB),
        _expect(repeat_kv=0, KVCache=0, GroupedQueryAttention=0, kv_cache_bytes=0)),
}
