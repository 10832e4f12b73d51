"""Checks for chapter 10 — sliding-window and sparse attention."""
import math

import torch
import torch.nn.functional as F

from .. import reference as ref
from ..reference._common import masked_softmax_impl
from ._core import Case, CheckFailure, Exercise, Mutant, compare, generator, largest_tensor, randn, rng
from ._forbid import MHA, SDPA
from ._registry import register

__all__ = ["check_sliding_window_mask", "check_sliding_window_attention", "check_strided_sparse_mask"]


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
    add("window=0 keeps the diagonal", 5, 0, False)
    add("window=0, causal", 5, 0, True)
    add("a single position (s = 1)", 1, 0)
    add("a single position, wide window", 1, 3, True)
    add("window = s − 1 (full attention)", 6, 5, False)
    add("window = s − 1, causal (full causal)", 6, 5, True)
    add("window = s", 4, 4, False)
    add("window > s, causal", 4, 9, True)
    add("window=1, non-causal (tridiagonal)", 8, 1, False)
    add("window=1, causal", 8, 1, True)
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


def _mask_ignores_causal(s, window, causal=False):
    return _band(s, -window, window)


def _mask_one_sided(s, window, causal=False):
    return _band(s, 0, window)


def _mask_causal_looks_ahead(s, window, causal=False):
    return _band(s, -window, 0) if causal else _band(s, -window, window)


def _mask_inverted(s, window, causal=False):
    return ~ref.sliding_window_mask.__wrapped__(s, window, causal)


def _mask_float(s, window, causal=False):
    return ref.sliding_window_mask.__wrapped__(s, window, causal).float()


OFF_BY_ONE = "the window is off by one: key j is inside the window when |i − j| ≤ window (≤, not <), so window=0 still keeps the diagonal."
IGNORES_CAUSAL = "causal=True was ignored: a causal window keeps only keys behind the query, 0 ≤ i − j ≤ window."
ONE_SIDED = "the non-causal window covers one side only: without causal, query i sees keys on both sides, |i − j| ≤ window."
LOOKS_AHEAD = "the causal window looks at the future: it must keep keys j ≤ i (0 ≤ i − j ≤ window), not j ≥ i — check the sign of i − j."

MASK_MUTANTS = [
    Mutant("off_by_one_window", OFF_BY_ONE, _mask_off_by_one),
    Mutant("ignores_causal", IGNORES_CAUSAL, _mask_ignores_causal),
    Mutant("one_sided_window", ONE_SIDED, _mask_one_sided),
    Mutant("causal_looks_ahead", LOOKS_AHEAD, _mask_causal_looks_ahead),
    Mutant("inverted_mask", "the mask is inverted: True means 'may attend', so the positions inside the window are True.", _mask_inverted),
    Mutant("float_mask", "the mask holds 0/1 floats: return a bool tensor (True = may attend), e.g. from a comparison.", _mask_float),
]

MASK_EXERCISE = Exercise(
    name="sliding_window_mask",
    reference=ref.sliding_window_mask,
    make_cases=_mask_cases,
    mutants=MASK_MUTANTS,
)
check_sliding_window_mask = register(MASK_EXERCISE)


# ---------------------------------------------------------------- sliding_window_attention
def _swa_cases(seed: int) -> list:
    r, g = rng(seed), generator(seed)
    cases = []

    def add(label, lead, s, d, d_v, window, causal=None, scale=1.0):
        q = randn(*lead, s, d, gen=g, scale=scale)
        k = randn(*lead, s, d, gen=g, scale=scale)
        v = randn(*lead, s, d_v, gen=g)
        kwargs = {} if causal is None else {"causal": causal}
        flag = "" if causal is None else f", causal={causal}"
        cases.append(Case(f"{label}: q, k {tuple(q.shape)}, v {tuple(v.shape)}, window={window}{flag}",
                          (q, k, v, window), kwargs))

    add("no batch dims, default (non-causal)", (), 6, 4, 4, 1)
    add("causal, batch and heads (B, H)", (2, 3), 7, 4, 5, 2, True)
    add("window=0 (output = v)", (2,), 5, 4, 3, 0, False)
    add("window=0, causal (output = v)", (2,), 5, 4, 3, 0, True)
    add("a single position (S = 1)", (1,), 1, 4, 2, 0)
    add("a single position, wide window, causal", (2,), 1, 3, 2, 4, True)
    add("window = S − 1 (full attention)", (2,), 6, 8, 4, 5, False)
    add("window = S (full attention)", (2, 2), 5, 4, 4, 5, False)
    add("window > S, causal (full causal attention)", (2,), 5, 4, 3, 8, True)
    add("D ≠ D_v, odd sizes", (3,), 9, 5, 7, 3, False)
    add("large-magnitude inputs", (2,), 8, 16, 4, 2, False, scale=30.0)
    add("large-magnitude inputs, causal", (2,), 8, 16, 4, 3, True, scale=30.0)
    for i in range(6):  # random shapes and windows
        lead = tuple(r.randint(1, 3) for _ in range(r.randint(0, 2)))
        s = r.randint(2, 13)
        add(f"random case {i + 1}", lead, s, r.choice([1, 3, 4, 8]), r.randint(1, 6),
            r.randint(0, s), r.random() < 0.5)
    return cases


def _masked_attention(q, k, v, mask, scale=None):
    """Full S×S attention with a bool mask: what the mutants (and the naive version) compute."""
    scale = 1.0 / math.sqrt(q.size(-1)) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale  # (..., S, S)
    return masked_softmax_impl(scores, mask) @ v


def _swa_with_mask(mask_fn, scale=None):
    def impl(q, k, v, window, causal=False):
        return _masked_attention(q, k, v, mask_fn(q.size(-2), window, causal), scale)

    return impl


def _swa_no_scaling(q, k, v, window, causal=False):
    mask = ref.sliding_window_mask.__wrapped__(q.size(-2), window, causal)
    return _masked_attention(q, k, v, mask, scale=1.0)


def _swa_padding_not_masked(q, k, v, window, causal=False):
    """The banded version, but the zero-padded slots stay in the softmax (score 0, value 0)."""
    left, right = window, (0 if causal else window)
    W = left + right + 1
    k_win = F.pad(k, (0, 0, left, right)).unfold(-2, W, 1)  # (..., S, D, W)
    v_win = F.pad(v, (0, 0, left, right)).unfold(-2, W, 1)  # (..., S, D_v, W)
    scores = (q.unsqueeze(-2) @ k_win).squeeze(-2) / math.sqrt(q.size(-1))
    weights = torch.softmax(scores, dim=-1)
    return (v_win @ weights.unsqueeze(-1)).squeeze(-1)


FULL_MATRIX = (
    "the full S×S score matrix (or mask) was built: a banded implementation scores each query "
    "against its 2·window + 1 neighbours only (e.g. pad k and v, then unfold them into windows), "
    "so memory grows as S·window, not S²."
)
PADDING_NOT_MASKED = (
    "the zero padding at the ends of the sequence took part in the softmax: padded slots are not "
    "keys, so mask them with -inf before the softmax (only the first and last `window` queries differ)."
)

SWA_MUTANTS = [
    Mutant("off_by_one_window", OFF_BY_ONE, _swa_with_mask(_mask_off_by_one)),
    Mutant("ignores_causal", IGNORES_CAUSAL, _swa_with_mask(_mask_ignores_causal)),
    Mutant("one_sided_window", ONE_SIDED, _swa_with_mask(_mask_one_sided)),
    Mutant("causal_looks_ahead", LOOKS_AHEAD, _swa_with_mask(_mask_causal_looks_ahead)),
    Mutant("no_scaling", "the scores were not divided by sqrt(D).", _swa_no_scaling),
    Mutant("padding_not_masked", PADDING_NOT_MASKED, _swa_padding_not_masked),
    Mutant("full_score_matrix", FULL_MATRIX, _swa_with_mask(lambda s, w, c: ref.sliding_window_mask.__wrapped__(s, w, c))),
]

# small D and window keep every banded tensor under ~32k elements (torch then stays on one
# thread, so the check is fast even on a busy machine); the S×S matrix is 4M elements either way
MEMORY_S, MEMORY_D, MEMORY_WINDOW = 2048, 2, 3


def _check_swa_memory(fn) -> None:
    """At S = 2048, window = 3 no tensor may hold S²/4 elements or more (banded: ~S·7·D)."""
    S, D, window = MEMORY_S, MEMORY_D, MEMORY_WINDOW
    g = generator(2048)
    q, k, v = randn(1, S, D, gen=g), randn(1, S, D, gen=g), randn(1, S, D, gen=g)
    limit = S * S // 4
    for causal in (False, True):
        out, numel, shape, op = largest_tensor(fn, q, k, v, window, causal=causal)
        where = f"memory check (q, k, v {tuple(q.shape)}, window={window}, causal={causal})"
        if numel >= limit:
            raise CheckFailure(
                f"{where}: sliding_window_attention built a tensor of shape {shape} ({numel:,} elements, from {op}); "
                f"a banded implementation needs far fewer than S²/4 = {limit:,}. Likely mistake: {FULL_MATRIX}"
            )
        msg = compare(ref.sliding_window_attention.__wrapped__(q, k, v, window, causal=causal), out, 1e-5, 1e-4)
        if msg:
            raise CheckFailure(f"{where}: {msg}")


SWA_EXERCISE = Exercise(
    name="sliding_window_attention",
    reference=ref.sliding_window_attention,
    make_cases=_swa_cases,
    forbidden=(SDPA, MHA),
    mutants=SWA_MUTANTS,
    extra_checks=(_check_swa_memory,),
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


STRIDED_MUTANTS = [
    Mutant("no_local_part", "the local part is missing: besides every stride-th key back, query i also sees its last `stride` keys, (i − j) < stride.", _strided_no_local),
    Mutant("no_strided_part", "the strided part is missing: besides the last `stride` keys, query i sees every key a whole number of strides back, (i − j) % stride == 0.", _strided_no_strided),
    Mutant("not_causal", "the pattern is not causal: a query may only see keys j ≤ i (keep i − j ≥ 0).", _strided_not_causal),
    Mutant("modulo_on_j", "the strided part tested j % stride == 0 (fixed columns); the strided pattern counts strides back from the query: (i − j) % stride == 0.", _strided_modulo_on_j),
    Mutant("strided_part_not_causal", "the strided part reaches into the future: `causal & local | strided` means `(causal & local) | strided` (& binds tighter than |); write causal & (local | strided).", _strided_precedence),
    Mutant("inverted_mask", "the mask is inverted: True means 'may attend'.", _strided_inverted),
]

STRIDED_EXERCISE = Exercise(
    name="strided_sparse_mask",
    reference=ref.strided_sparse_mask,
    make_cases=_strided_cases,
    mutants=STRIDED_MUTANTS,
)
check_strided_sparse_mask = register(STRIDED_EXERCISE)
