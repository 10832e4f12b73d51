"""Checks for chapter 10 — sliding-window and sparse attention.

``sliding_window_attention`` exists to save memory and work: besides its values (window 0 gives
v, a window of at least S − 1 gives full attention) and its float64 gradients, it is checked at
S = 2048 under two budgets, causal and not: the largest tensor (an S×S score matrix or mask
exceeds it) and the multiply-adds of its products (scoring every key, even one query at a time,
exceeds it). A gather of each query's W keys, (S, W, D), is within both, as the prompt says.
"""
import math
from dataclasses import replace

import torch
import torch.nn.functional as F

from .. import reference as ref
from ..reference._common import masked_softmax_impl
from ._contract import Contract, Cost
from ._core import Case, Exercise, Mutant, Variant, generator, randn, rng
from ._forbid import MHA, SDPA
from ._registry import register

__all__ = ["check_sliding_window_mask", "check_sliding_window_attention", "check_strided_sparse_mask"]

F64 = torch.float64


def _distance(s):
    """(s, s) int tensor i − j: how far key j lies behind query i."""
    return torch.arange(s).unsqueeze(1) - torch.arange(s).unsqueeze(0)


# ---------------------------------------------------------------- sliding_window_mask
def _mask_cases(seed: int) -> list:
    r = rng(seed)
    cases = []

    def add(label, s, window, causal=None):
        kwargs = {} if causal is None else {"causal": causal}
        flag = "" if causal is None else f", causal={causal}"
        cases.append(Case(f"{label}: s={s}, window={window}{flag}", (s, window), kwargs))

    add("default (non-causal)", 7, 2)
    add("causal", 7, 2, True)
    add("window=1, non-causal (tridiagonal)", 8, 1, False)
    add("window=1, causal", 8, 1, True)
    add("window=0 keeps the diagonal", 5, 0, False)
    add("window=0, causal", 5, 0, True)
    add("a single position (s = 1)", 1, 0)
    add("a single position, wide window", 1, 3, True)
    add("window = s − 1 (full attention)", 6, 5, False)
    add("window = s − 1, causal (full causal)", 6, 5, True)
    add("window = s", 4, 4, False)
    add("window > s, causal", 4, 9, True)
    add("a long sequence (s > 255; positions past any 8-bit integer)", 300, 5)
    add("a long sequence, causal", 260, 7, True)
    for i in range(6):  # random sizes, odd ones included
        s = r.randint(2, 17)
        add(f"random case {i + 1}", s, r.randint(0, s), r.random() < 0.5)
    return cases


def _band(s, lo, hi):
    """True where lo ≤ i − j ≤ hi."""
    d = _distance(s)
    return (d >= lo) & (d <= hi)


def _mask_off_by_one(s, window, causal=False):
    d = _distance(s)
    return ((d >= 0) & (d < window)) if causal else (d.abs() < window)


def _mask_causal_one_short(s, window, causal=False):
    d = _distance(s)
    return ((d >= 0) & (d < window)) if causal else d.abs() <= window


def _mask_causal_one_long(s, window, causal=False):
    d = _distance(s)
    return ((d >= 0) & (d <= window + 1)) if causal else d.abs() <= window


def _mask_ignores_causal(s, window, causal=False):
    return _band(s, -window, window)


def _mask_one_sided(s, window, causal=False):
    return _band(s, 0, window)


def _mask_causal_looks_ahead(s, window, causal=False):
    return _band(s, -window, 0) if causal else _band(s, -window, window)


def _mask_causal_ignores_window(s, window, causal=False):
    return _band(s, 0, s) if causal else _band(s, -window, window)


def _mask_inverted(s, window, causal=False):
    return ~ref.sliding_window_mask.__wrapped__(s, window, causal)


def _mask_float(s, window, causal=False):
    return ref.sliding_window_mask.__wrapped__(s, window, causal).float()


def _mask_long(s, window, causal=False):
    return ref.sliding_window_mask.__wrapped__(s, window, causal).long()


def _mask_int8_positions(s, window, causal=False):
    """Positions as int8: i − j wraps past 127, so long sequences get stray True entries."""
    i, j = torch.arange(s).to(torch.int8)[:, None], torch.arange(s).to(torch.int8)[None, :]
    d = i - j
    return ((d >= 0) & (d <= window)) if causal else (d.abs() <= window)


def _v_mask_loops(s, window, causal=False):
    m = torch.zeros(s, s, dtype=torch.bool)
    for i in range(s):
        for j in range(s):
            m[i, j] = (0 <= i - j <= window) if causal else abs(i - j) <= window
    return m


def _v_mask_tril_triu(s, window, causal=False):
    ones = torch.ones(s, s, dtype=torch.bool)
    upper = 0 if causal else window
    return ones.tril(upper) & ones.triu(-window)


OFF_BY_ONE = "the window is off by one: key j is inside the window when |i − j| ≤ window (≤, not <), so window=0 still keeps the diagonal."
IGNORES_CAUSAL = "causal=True was ignored: a causal window keeps only keys behind the query, 0 ≤ i − j ≤ window."
ONE_SIDED = "the non-causal window covers one side only: without causal, query i sees keys on both sides, |i − j| ≤ window."
LOOKS_AHEAD = "the causal window looks at the future: it must keep keys j ≤ i (0 ≤ i − j ≤ window), not j ≥ i — check the sign of i − j."
CAUSAL_NO_WINDOW = "with causal=True the window was dropped (plain causal attention): keep only 0 ≤ i − j ≤ window."
CAUSAL_ONE_SHORT = ("the causal window is one key short: with causal=True a query sees itself and the `window` keys "
                    "behind it, 0 ≤ i − j ≤ window (≤, not <): window + 1 keys, not window.")
CAUSAL_ONE_LONG = ("the causal window is one key too long: with causal=True a query sees itself and the `window` keys "
                   "behind it, 0 ≤ i − j ≤ window: window + 1 keys, not window + 2.")

MASK_MUTANTS = [
    Mutant("off_by_one_window", OFF_BY_ONE, _mask_off_by_one),
    Mutant("ignores_causal", IGNORES_CAUSAL, _mask_ignores_causal),
    Mutant("one_sided_window", ONE_SIDED, _mask_one_sided),
    Mutant("causal_looks_ahead", LOOKS_AHEAD, _mask_causal_looks_ahead),
    Mutant("causal_ignores_window", CAUSAL_NO_WINDOW, _mask_causal_ignores_window),
    Mutant("causal_window_one_short", CAUSAL_ONE_SHORT, _mask_causal_one_short),
    Mutant("causal_window_one_long", CAUSAL_ONE_LONG, _mask_causal_one_long),
    Mutant("inverted_mask", "the mask is inverted: True means 'may attend', so the positions inside the window are True.", _mask_inverted),
    Mutant("float_mask", "the mask holds 0/1 floats: return a bool tensor (True = may attend), e.g. from a comparison.", _mask_float),
    Mutant("integer_mask", "the mask holds 0/1 integers: return a bool tensor (True = may attend), e.g. from a comparison.", _mask_long),
    Mutant("int8_positions", "the positions were held in a small integer type (int8 wraps past 127, uint8 past 255), so i − j "
           "wraps on long sequences: build them with torch.arange(s), whose int64 holds any length.", _mask_int8_positions),
]

MASK_EXERCISE = Exercise(
    name="sliding_window_mask",
    reference=ref.sliding_window_mask,
    make_cases=_mask_cases,
    mutants=MASK_MUTANTS,
    variants=[Variant("python_loops", _v_mask_loops), Variant("tril_and_triu", _v_mask_tril_triu, demo=True)],
    contract=Contract("""Bool (s, s) sliding-window mask, True = may attend: query i sees key j iff |i − j| ≤ window.

    s: int, the sequence length   window: int ≥ 0   causal: bool
    With causal=True only the keys behind the query (itself included): 0 ≤ i − j ≤ window.
    window = 0 keeps the diagonal only; window ≥ s − 1 gives full (or full causal) attention.
    """, same_dtype=False),
)
check_sliding_window_mask = register(MASK_EXERCISE)


# ---------------------------------------------------------------- sliding_window_attention
# The budget cases: S = 2048 positions, D = D_v = 4, window 3 (W = 7 keys per query; causal 4),
# causal and not. Two limits, both stated in the prompt:
# - memory: no tensor above S²/8 = 524,288 elements. The legal tensors are S·W·D = 57,344 at most
#   (an unfold view, or a gather of each query's keys): 9× below; an (S, S) matrix or mask is 8× above.
# - work: the multiply-adds of the products (matmuls, einsums, elementwise `*`) total at most
#   S²·(D + D_v)/8 = 4,194,304. Banded: S·W·(D + D_v) ≈ 115k (36× below); query blocks of 64 against
#   the 70 keys they can reach ≈ 1.2M (3.6× below); scoring every key, whether in one (S, S) matrix
#   or one query at a time, is S²·(D + D_v) ≈ 33.6M (8× above).
FULL_MATRIX = (
    "sliding-window attention never builds the S×S score matrix (or mask): score each query against "
    "its 2·window + 1 neighbours only (e.g. pad k and v, then unfold them into windows), so memory "
    "grows as S·window, not S²"
)
ALL_KEYS = (
    "sliding-window attention scores each query against its 2·window + 1 (causal: window + 1) neighbours "
    "only, never against all S keys: S·W·(D + D_v) multiply-adds, not S²·(D + D_v). A loop over the queries "
    "that scores every key (and masks afterwards) does the full quadratic work, even though each of its "
    "tensors is small: slice each query's window of keys, or pad and unfold them"
)
MEMORY_D, MEMORY_WINDOW = 4, 3
# The probe: one sequence of S = 8,192 (one sequence, so that no loop over a batch fits its scores under
# the cap; 8,192, so that a loop over the queries stays within 10 s): the re-check's memory cap there,
# S² bytes (64 MiB), is a quarter of its scores in float32, half of them in float16
PROBE_S = 8192


def _memory_case(S: int, causal: bool) -> Case:
    g = generator(S + causal)
    q, k, v = (randn(1, S, MEMORY_D, gen=g) for _ in range(3))
    return Case(f"window={MEMORY_WINDOW}, causal={causal}", (q, k, v, MEMORY_WINDOW), {"causal": causal})


SWA_COST = Cost(sizes=({"S": 1024}, {"S": 2048}), variants=({"causal": False}, {"causal": True}), build=_memory_case,
                numel=lambda S: S * S // 8, numel_text="S²/8", work=lambda S: S * S * 2 * MEMORY_D // 8,
                work_text="S²·(D + D_v)/8",
                setting=f"D = D_v = {MEMORY_D}, window = {MEMORY_WINDOW}, causal and not",
                why=FULL_MATRIX + "; " + ALL_KEYS,
                probe={"S": PROBE_S}, probe_variants=({"causal": True},), probe_bytes=lambda S: S * S,
                probe_text="S² bytes (a quarter of the S×S scores in float32, half of them in float16)")


def _far_key_inputs(g, lead, s, d, d_v, dtype):
    """Every query points along u; key 0 is 100·u: it holds the largest score (~150) of every row,
    but lies outside the window of the later queries."""
    u = randn(d, gen=g, dtype=dtype)
    u = u / u.norm()
    q = 3 * u + randn(*lead, s, d, gen=g, scale=0.3, dtype=dtype)
    k = randn(*lead, s, d, gen=g, dtype=dtype)
    k[..., 0, :] = 100 * u
    return q, k, randn(*lead, s, d_v, gen=g, dtype=dtype)


def _swa_cases(seed: int) -> list:
    r, g = rng(seed), generator(seed)
    cases = []

    def add(label, lead, s, d, d_v, window, causal=None, scale=1.0, grad=False, dtype=torch.float32, qkv=None):
        q, k, v = qkv or (randn(*lead, s, d, gen=g, scale=scale, dtype=dtype),
                          randn(*lead, s, d, gen=g, scale=scale, dtype=dtype), randn(*lead, s, d_v, gen=g, dtype=dtype))
        kwargs = {} if causal is None else {"causal": causal}
        flag = "" if causal is None else f", causal={causal}"
        cases.append(Case(f"{label}: q, k {tuple(q.shape)}, v {tuple(v.shape)}, window={window}{flag}",
                          (q, k, v, window), kwargs, grad=grad))

    add("batch of 2, default (non-causal)", (2,), 6, 4, 4, 1)
    add("causal, batch and heads (B, H)", (2, 3), 7, 4, 5, 2, True)
    add("no batch dims, D ≠ D_v, odd sizes", (), 9, 5, 7, 3, False)
    add("gradients (float64) of a random loss of out", (2,), 6, 3, 4, 1, False, grad=True, dtype=F64)
    add("gradients (float64), causal, (B, H): the first queries' windows start with masked slots",
        (2, 2), 7, 4, 3, 2, True, grad=True, dtype=F64)
    add("window=0 (output = v)", (2,), 5, 4, 3, 0, False)
    add("window=0, causal (output = v)", (2,), 5, 4, 3, 0, True)
    add("gradients (float64), window=0", (2,), 4, 3, 2, 0, False, grad=True, dtype=F64)
    add("window = S − 1 (full attention)", (2,), 6, 8, 4, 5, False)
    add("window = S (full attention)", (2, 2), 5, 4, 4, 5, False)
    add("window > S, causal (full causal attention)", (2,), 5, 4, 3, 8, True)
    add("a single position (S = 1)", (1,), 1, 4, 2, 0)
    add("a single position, wide window, causal", (2,), 1, 3, 2, 4, True)
    add("key 0, outside most windows, holds every row's largest score (~150)", (2,), 8, 4, 3, 1, False,
        qkv=_far_key_inputs(g, (2,), 8, 4, 3, torch.float32))
    add("the same, causal", (2,), 8, 4, 3, 2, True, qkv=_far_key_inputs(g, (2,), 8, 4, 3, torch.float32))
    add("gradients (float64), causal, key 0 holds the largest scores", (2,), 6, 4, 3, 1, True, grad=True,
        dtype=F64, qkv=_far_key_inputs(g, (2,), 6, 4, 3, F64))
    add("large-magnitude inputs (|scores| ~ 1000)", (2,), 8, 16, 4, 2, False, scale=30.0)
    add("large-magnitude inputs, causal", (2,), 8, 16, 4, 3, True, scale=30.0)
    for i in range(4):  # random shapes and windows
        lead = tuple(r.randint(1, 3) for _ in range(r.randint(0, 2)))
        s = r.randint(2, 13)
        add(f"random case {i + 1}", lead, s, r.choice([1, 3, 4, 8]), r.randint(1, 6), r.randint(0, s), r.random() < 0.5)
    return cases


def _swa_rescale(case: Case, c: float) -> Case:
    """The same case with every score multiplied by c (q scaled by c)."""
    q, *rest = case.args
    return replace(case, args=(q * c, *rest))


def _swa_scale_names(case: Case) -> dict:
    q, k, v, window = case.args[:4]
    d, d_v, s = q.size(-1), v.size(-1), q.size(-2)
    return {"1/sqrt(D)": 1 / math.sqrt(d), "1 (no scaling)": 1.0, "1/D": 1 / d,
            "1/sqrt(D_v) (the size of v)": 1 / math.sqrt(d_v), "sqrt(D)": math.sqrt(d), "1/sqrt(S)": 1 / math.sqrt(s),
            "1/sqrt(2·window + 1) (the window's width)": 1 / math.sqrt(2 * window + 1)}


def _masked_attention(q, k, v, mask, scale=None):
    """Full S×S attention with a bool mask: what the mutants (and the naive version) compute."""
    scale = 1.0 / math.sqrt(q.size(-1)) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale  # (..., S, S)
    return masked_softmax_impl(scores, mask) @ v


def _swa_with_mask(mask_fn, scale=None):
    def impl(q, k, v, window, causal=False):
        return _masked_attention(q, k, v, mask_fn(q.size(-2), window, causal), scale)

    return impl


def _true_mask(s, window, causal):
    return ref.sliding_window_mask.__wrapped__(s, window, causal)


def _swa_no_scaling(q, k, v, window, causal=False):
    return _masked_attention(q, k, v, _true_mask(q.size(-2), window, causal), scale=1.0)


def _banded(q, k, v, window, causal=False, mask_padding=True, dim=-1, inplace_after=False):
    """The banded computation (the reference's), with switches for the mutants."""
    S = q.size(-2)
    w = min(window, S - 1)
    left, right = w, (0 if causal else w)
    W = left + right + 1
    k_win = F.pad(k, (0, 0, left, right)).unfold(-2, W, 1)  # (..., S, D, W)
    v_win = F.pad(v, (0, 0, left, right)).unfold(-2, W, 1)  # (..., S, D_v, W)
    scores = (q.unsqueeze(-2) @ k_win).squeeze(-2) / math.sqrt(q.size(-1))  # (..., S, W)
    key_pos = torch.arange(S).unsqueeze(1) - left + torch.arange(W).unsqueeze(0)
    is_key = (key_pos >= 0) & (key_pos < S)
    if mask_padding:
        scores = scores.masked_fill(~is_key, float("-inf"))
    weights = torch.softmax(scores, dim=dim)
    if inplace_after:
        weights.masked_fill_(~is_key, 0.0)  # in place on the softmax's output: backward breaks
    return (v_win @ weights.unsqueeze(-1)).squeeze(-1)


def _swa_padding_not_masked(q, k, v, window, causal=False):
    return _banded(q, k, v, window, causal, mask_padding=False)


def _swa_wrong_dim(q, k, v, window, causal=False):
    return _banded(q, k, v, window, causal, dim=-2).nan_to_num(0.0)


def _swa_inplace(q, k, v, window, causal=False):
    return _banded(q, k, v, window, causal, inplace_after=True)


def _swa_mask_after_softmax(q, k, v, window, causal=False):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    return (torch.softmax(scores, dim=-1) * _true_mask(q.size(-2), window, causal)) @ v


def _swa_max_before_mask(q, k, v, window, causal=False):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    e = torch.exp(scores - scores.amax(dim=-1, keepdim=True)) * _true_mask(q.size(-2), window, causal)
    return (e / e.sum(dim=-1, keepdim=True)) @ v


def _swa_query_loop_all_keys(q, k, v, window, causal=False):
    """One query at a time against every key, masked afterwards: small tensors, quadratic work."""
    S = q.size(-2)
    outs = []
    for i in range(S):
        d = i - torch.arange(S)  # (S,): how far each key lies behind query i
        ok = ((d >= 0) & (d <= window)) if causal else d.abs() <= window
        s = (q[..., i:i + 1, :] @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))  # (..., 1, S): every key
        outs.append(torch.softmax(s.masked_fill(~ok, float("-inf")), dim=-1) @ v)
    return torch.cat(outs, dim=-2)


PADDING_NOT_MASKED = (
    "the zero padding at the ends of the sequence took part in the softmax: padded slots are not "
    "keys, so mask them with -inf before the softmax (only the first and last `window` queries differ)."
)
WRONG_DIM = "the softmax ran over the queries (dim -2) instead of each query's keys (the last dim): each query's weights must sum to 1."
INPLACE = ("an in-place edit of the softmax's output (such as weights.masked_fill_(...) or weights[...] = 0) gives the "
           "right values but breaks autograd, which needs that output for the backward pass: mask the scores "
           "before the softmax, or build a new tensor.")
MASK_AFTER = ("the window was applied after the softmax, so the remaining weights no longer sum to 1: mask the scores "
              "with -inf before the softmax.")
MAX_BEFORE_MASK = ("the row maximum was taken over every key, the ones outside the window included: when such a key "
                   "holds the largest score, exp(score − max) underflows to 0 for every key in the window (0/0 = NaN). "
                   "Mask first, then take the maximum over the keys that remain.")

SWA_MUTANTS = [
    Mutant("off_by_one_window", OFF_BY_ONE, _swa_with_mask(_mask_off_by_one)),
    Mutant("ignores_causal", IGNORES_CAUSAL, _swa_with_mask(_mask_ignores_causal)),
    Mutant("one_sided_window", ONE_SIDED, _swa_with_mask(_mask_one_sided)),
    Mutant("causal_looks_ahead", LOOKS_AHEAD, _swa_with_mask(_mask_causal_looks_ahead)),
    Mutant("causal_ignores_window", CAUSAL_NO_WINDOW, _swa_with_mask(_mask_causal_ignores_window)),
    Mutant("causal_window_one_short", CAUSAL_ONE_SHORT, _swa_with_mask(_mask_causal_one_short)),
    Mutant("causal_window_one_long", CAUSAL_ONE_LONG, _swa_with_mask(_mask_causal_one_long)),
    Mutant("no_scaling", "the scores were not divided by sqrt(D).", _swa_no_scaling),
    Mutant("padding_not_masked", PADDING_NOT_MASKED, _swa_padding_not_masked),
    Mutant("softmax_wrong_dim", WRONG_DIM, _swa_wrong_dim),
    Mutant("inplace_after_softmax", INPLACE, _swa_inplace),
    Mutant("mask_after_softmax", MASK_AFTER, _swa_mask_after_softmax),
    Mutant("max_before_mask", MAX_BEFORE_MASK, _swa_max_before_mask),
    Mutant("quadratic_masked_full", FULL_MATRIX, _swa_with_mask(_true_mask)),
    Mutant("quadratic_work_query_loop_over_all_keys", ALL_KEYS, _swa_query_loop_all_keys),
]


def _v_swa_gather(q, k, v, window, causal=False):
    """Each query's neighbours gathered with an index tensor (S, W); einsum; masked slots by torch.where."""
    S = q.size(-2)
    offsets = torch.arange(-window, 1 if causal else window + 1)  # (W,)
    idx = torch.arange(S)[:, None] + offsets  # (S, W)
    valid = (idx >= 0) & (idx < S)
    idx = idx.clamp(0, S - 1)
    k_nb, v_nb = k[..., idx, :], v[..., idx, :]  # (..., S, W, D)
    scores = torch.einsum("...sd,...swd->...sw", q, k_nb) / math.sqrt(q.size(-1))
    scores = torch.where(valid, scores, torch.tensor(float("-inf"), dtype=scores.dtype))
    e = torch.exp(scores - scores.amax(-1, keepdim=True))
    w = e / e.sum(-1, keepdim=True)
    return torch.einsum("...sw,...swd->...sd", w, v_nb)


def _v_swa_blocked(q, k, v, window, causal=False, block=64):
    """Blocks of queries, each against the keys its block can reach (a small masked matrix), float64 inside."""
    S = q.size(-2)
    assert window >= 0  # an assert instead of ValueError is fine
    qd, kd, vd = q.double(), k.double(), v.double()
    outs = []
    for start in range(0, S, block):
        stop = min(start + block, S)
        lo, hi = max(0, start - window), stop if causal else min(S, stop + window)
        s = qd[..., start:stop, :] @ kd[..., lo:hi, :].transpose(-2, -1) / math.sqrt(q.size(-1))
        d = torch.arange(start, stop)[:, None] - torch.arange(lo, hi)[None, :]
        allowed = (d >= 0) & (d <= window) if causal else d.abs() <= window
        w = torch.softmax(s.masked_fill(~allowed, float("-inf")), dim=-1)
        outs.append(w @ vd[..., lo:hi, :])
    return torch.cat(outs, dim=-2).to(q.dtype)


SWA_EXERCISE = Exercise(
    name="sliding_window_attention",
    reference=ref.sliding_window_attention,
    make_cases=_swa_cases,
    mutants=SWA_MUTANTS,
    variants=[Variant("gather_einsum", _v_swa_gather, demo=True), Variant("query_blocks_float64", _v_swa_blocked)],
    rescale=_swa_rescale,
    scale_names=_swa_scale_names,
    contract=Contract("""Self-attention where query i sees only the keys within `window` of it, without an S×S matrix.

    q: (..., S, D)   k: (..., S, D)   v: (..., S, D_v)   window: int ≥ 0   causal: bool
    Returns out (..., S, D_v), equal to softmax(q kᵀ / sqrt(D)) v masked with
    sliding_window_mask(S, window, causal): window = 0 gives v; window ≥ S − 1 gives full (or
    full causal) attention.
    Score each query against its neighbours only, never all S keys; gathering each query's W
    keys into an (..., S, W, D) tensor is allowed.
    """, forbid=(SDPA, MHA), grad="q, k and v", budgets=(SWA_COST,), shapes={"q": ["...", "S", "D"], "k": ["...", "S", "D"], "v": ["...", "S", "D_v"]}),
)
check_sliding_window_attention = register(SWA_EXERCISE)


# ---------------------------------------------------------------- strided_sparse_mask
def _strided_cases(seed: int) -> list:
    r = rng(seed)
    cases = [Case(f"{label}: s={s}, stride={stride}", (s, stride)) for label, s, stride in [
        ("stride 3", 10, 3),
        ("stride 2", 9, 2),
        ("stride 4, a few strides long", 17, 4),
        ("stride 1 (full causal)", 6, 1),
        ("a single position (s = 1)", 1, 2),
        ("stride = s (local part only)", 5, 5),
        ("stride > s", 4, 7),
        ("s = 2·stride + 1", 7, 3),
    ]]
    for i in range(6):  # random sizes, odd ones included
        s = r.randint(3, 20)
        stride = r.randint(2, max(2, s // 2))
        cases.append(Case(f"random case {i + 1}: s={s}, stride={stride}", (s, stride)))
    return cases


def _strided(s, local, strided, causal=True):
    d = _distance(s)
    keep = local(d) | strided(d)
    return (d >= 0) & keep if causal else keep


def _strided_no_local(s, stride):
    return _strided(s, lambda d: torch.zeros_like(d, dtype=torch.bool), lambda d: d % stride == 0)


def _strided_no_strided(s, stride):
    return _strided(s, lambda d: d < stride, lambda d: torch.zeros_like(d, dtype=torch.bool))


def _strided_not_causal(s, stride):
    return _strided(s, lambda d: d.abs() < stride, lambda d: d % stride == 0, causal=False)


def _strided_modulo_on_j(s, stride):
    j = torch.arange(s).unsqueeze(0)
    return _strided(s, lambda d: d < stride, lambda d: (j % stride == 0).expand_as(d))


def _strided_precedence(s, stride):
    d = _distance(s)
    return (d >= 0) & (d < stride) | (d % stride == 0)  # & binds tighter than |: the bug itself


def _strided_inverted(s, stride):
    return ~ref.strided_sparse_mask.__wrapped__(s, stride)


def _strided_fixed_pattern(s, stride):
    i, j = torch.arange(s).unsqueeze(1), torch.arange(s).unsqueeze(0)
    return (j <= i) & ((i // stride == j // stride) | (j % stride == stride - 1))


def _strided_float(s, stride):
    return ref.strided_sparse_mask.__wrapped__(s, stride).float()


def _v_strided_loops(s, stride):
    return torch.tensor([[j <= i and ((i - j) < stride or (i - j) % stride == 0) for j in range(s)] for i in range(s)],
                        dtype=torch.bool).reshape(s, s)


def _v_strided_tril(s, stride):
    ones = torch.ones(s, s, dtype=torch.bool)
    local = ones.tril() & ones.triu(-(stride - 1))
    d = _distance(s)
    return local | (torch.remainder(d, stride) == 0).tril()


def _tip_stride_zero(fn) -> str | None:
    try:
        fn(4, 0)
    except Exception:  # noqa: BLE001 - any refusal is fine
        return None
    return "strided_sparse_mask(4, stride=0) returned a mask; raising ValueError for stride < 1 would catch a wrong call early."


STRIDED_MUTANTS = [
    Mutant("no_local_part", "the local part is missing: besides every stride-th key back, query i also sees its last `stride` keys, (i − j) < stride.", _strided_no_local),
    Mutant("no_strided_part", "the strided part is missing: besides the last `stride` keys, query i sees every key a whole number of strides back, (i − j) % stride == 0.", _strided_no_strided),
    Mutant("not_causal", "the pattern is not causal: a query may only see keys j ≤ i (keep i − j ≥ 0).", _strided_not_causal),
    Mutant("modulo_on_j", "the strided part tested j % stride == 0 (fixed columns); the strided pattern counts strides back from the query: (i − j) % stride == 0.", _strided_modulo_on_j),
    Mutant("strided_part_not_causal", "the strided part reaches into the future: `causal & local | strided` means `(causal & local) | strided` (& binds tighter than |); write causal & (local | strided).", _strided_precedence),
    Mutant("inverted_mask", "the mask is inverted: True means 'may attend'.", _strided_inverted),
    Mutant("fixed_pattern", "this is the *fixed* pattern of Sparse Transformers (the same block of `stride` positions, plus the last position of every block); the strided pattern counts back from the query: (i − j) < stride or (i − j) % stride == 0.", _strided_fixed_pattern),
    Mutant("float_mask", "the mask holds 0/1 floats: return a bool tensor (True = may attend), e.g. from a comparison.", _strided_float),
]

STRIDED_EXERCISE = Exercise(
    name="strided_sparse_mask",
    reference=ref.strided_sparse_mask,
    make_cases=_strided_cases,
    mutants=STRIDED_MUTANTS,
    variants=[Variant("python_loops", _v_strided_loops), Variant("tril_triu_remainder", _v_strided_tril, demo=True)],
    tips=(_tip_stride_zero,),
    contract=Contract("""Bool (s, s) causal strided pattern of Sparse Transformers (Child et al., 2019), True = may attend.

    s: int, the sequence length   stride: int ≥ 1
    Query i sees key j iff j ≤ i and either j is among its last `stride` positions
    ((i − j) < stride, the local part, itself included) or a whole number of strides back
    ((i − j) % stride == 0, the strided part).
    """, same_dtype=False),
)
check_strided_sparse_mask = register(STRIDED_EXERCISE)
