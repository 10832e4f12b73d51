"""Checks for chapter 04 — masking: causal masks, padding masks, masked softmax."""
import torch

from .. import reference as ref
from ._core import Case, Exercise, Mutant, generator, randn, random_padding_mask, rng
from ._registry import register

__all__ = ["check_causal_mask", "check_padding_mask", "check_masked_softmax"]


# ---------------------------------------------------------------- causal_mask
def _causal_cases(seed: int) -> list:
    r = rng(seed)
    cases = [
        Case("s_q=4 (s_k omitted: square)", (4,)),
        Case("s_q=5, s_k=None", (5,), {"s_k": None}),
        Case("s_q = s_k = 6", (6, 6)),
        Case("s_q = s_k = 1", (1, 1)),
        Case("s_q=3 < s_k=7 (new queries after 4 cached keys)", (3, 7)),
        Case("s_q=1 < s_k=5 (one decoding step)", (1, 5)),
        Case("s_q=6 > s_k=4 (the first 2 query rows see no key)", (6, 4)),
        Case("s_q=2 > s_k=1", (2, 1)),
    ]
    for i in range(6):  # random sizes, odd ones included, never square
        s_q = r.randint(1, 9)
        s_k = r.choice([k for k in range(1, 10) if k != s_q])
        cases.append(Case(f"random case {i + 1}: s_q={s_q}, s_k={s_k}", (s_q, s_k)))
    return cases


def _sizes(s_q, s_k):
    return s_q, s_q if s_k is None else s_k


def _causal_top_left(s_q, s_k=None):
    s_q, s_k = _sizes(s_q, s_k)
    return torch.ones(s_q, s_k, dtype=torch.bool).tril()


def _causal_strict(s_q, s_k=None):
    s_q, s_k = _sizes(s_q, s_k)
    return torch.ones(s_q, s_k, dtype=torch.bool).tril(diagonal=s_k - s_q - 1)


def _causal_inverted(s_q, s_k=None):
    return ~ref.causal_mask.__wrapped__(s_q, s_k)


def _causal_upper(s_q, s_k=None):
    s_q, s_k = _sizes(s_q, s_k)
    return torch.ones(s_q, s_k, dtype=torch.bool).triu(diagonal=s_k - s_q)


def _causal_float(s_q, s_k=None):
    return ref.causal_mask.__wrapped__(s_q, s_k).float()


def _causal_additive(s_q, s_k=None):
    m = ref.causal_mask.__wrapped__(s_q, s_k)
    return torch.zeros(m.shape).masked_fill(~m, float("-inf"))


CAUSAL_MUTANTS = [
    Mutant("top_left_aligned", "the mask is aligned top-left (j <= i); with s_q ≠ s_k the course aligns it bottom-right, so the last query sees every key: query i may attend key j iff j <= i + (s_k - s_q) (tril with diagonal=s_k - s_q).", _causal_top_left),
    Mutant("diagonal_excluded", "the diagonal is masked (j < i instead of j <= i): a token may attend to itself.", _causal_strict),
    Mutant("inverted", "the mask is inverted (True where attention is blocked): in this course True means 'may attend', so keep the lower triangle.", _causal_inverted),
    Mutant("upper_triangle", "the mask keeps the upper triangle (future keys): a query may attend the keys at or before its position, the lower triangle (tril).", _causal_upper),
    Mutant("float_mask", "the mask is a float tensor of 0s and 1s: return a bool tensor (e.g. torch.ones(s_q, s_k, dtype=torch.bool).tril(...)).", _causal_float),
    Mutant("additive_float_mask", "the mask is an additive float mask (0 / -inf, like nn.Transformer.generate_square_subsequent_mask): this course uses bool masks, True = may attend.", _causal_additive),
]

CAUSAL_EXERCISE = Exercise(
    name="causal_mask",
    reference=ref.causal_mask,
    make_cases=_causal_cases,
    mutants=CAUSAL_MUTANTS,
)
check_causal_mask = register(CAUSAL_EXERCISE)


# ---------------------------------------------------------------- padding_mask
def _padding_cases(seed: int) -> list:
    r = rng(seed)
    cases = []

    def add(label, lengths, max_len):
        lengths = torch.tensor(lengths, dtype=torch.long)
        cases.append(Case(f"{label}: lengths={lengths.tolist()}, max_len={max_len}", (lengths, max_len)))

    add("mixed lengths", [3, 5, 1], 5)
    add("one sequence", [2], 4)
    add("a sequence of length 0 (all padding)", [0, 3], 3)
    add("no padding at all", [4, 4], 4)
    add("every sequence shorter than max_len", [1, 2, 3, 2], 6)
    add("max_len = 1", [1, 0, 1], 1)
    for i in range(6):  # random batches, odd sizes included
        max_len = r.randint(1, 9)
        add(f"random case {i + 1}", [r.randint(0, max_len) for _ in range(r.randint(1, 5))], max_len)
    return cases


def _padding(lengths, max_len, le=False):
    positions = torch.arange(max_len)
    return positions <= lengths.unsqueeze(-1) if le else positions < lengths.unsqueeze(-1)


def _padding_off_by_one(lengths, max_len):
    return _padding(lengths, max_len, le=True).unsqueeze(1)


def _padding_no_middle_dim(lengths, max_len):
    return _padding(lengths, max_len)


def _padding_query_axis(lengths, max_len):
    return _padding(lengths, max_len).unsqueeze(-1)


def _padding_inverted(lengths, max_len):
    return ~_padding(lengths, max_len).unsqueeze(1)


def _padding_float(lengths, max_len):
    return _padding(lengths, max_len).unsqueeze(1).float()


PADDING_MUTANTS = [
    Mutant("off_by_one", "the mask is off by one (position <= length): a sequence of length L has real tokens at positions 0 .. L-1, so use position < length.", _padding_off_by_one),
    Mutant("missing_middle_dim", "the mask has shape (B, max_len): add the middle dim, (B, 1, max_len), so that it broadcasts over the queries of scores (B, S_q, S_k).", _padding_no_middle_dim),
    Mutant("masks_queries", "the mask has shape (B, max_len, 1), which masks queries (rows), not keys: padding hides keys, so the shape is (B, 1, max_len).", _padding_query_axis),
    Mutant("inverted", "the mask is inverted (True at the padding): in this course True means 'may attend', i.e. a real token.", _padding_inverted),
    Mutant("float_mask", "the mask is a float tensor: return a bool tensor (a comparison such as positions < lengths gives one).", _padding_float),
]

PADDING_EXERCISE = Exercise(
    name="padding_mask",
    reference=ref.padding_mask,
    make_cases=_padding_cases,
    mutants=PADDING_MUTANTS,
)
check_padding_mask = register(PADDING_EXERCISE)


# ---------------------------------------------------------------- masked_softmax
def _softmax_cases(seed: int) -> list:
    r, g = rng(seed), generator(seed)
    cases = []

    def add(label, scores, mask):
        dims = f"scores {tuple(scores.shape)}, mask " + ("None" if mask is None else str(tuple(mask.shape)))
        cases.append(Case(f"{label}: {dims}", (scores, mask)))

    add("no mask (mask=None)", randn(2, 3, 5, gen=g), None)
    add("a random mask", randn(2, 4, 6, gen=g), random_padding_mask(2, 4, 6, g))
    add("a fully masked row", randn(2, 4, 5, gen=g), random_padding_mask(2, 4, 5, g, fully_masked_row=True))
    add("causal mask (S_q, S_k) broadcast over (B, H)", randn(2, 3, 5, 5, gen=g), torch.ones(5, 5, dtype=torch.bool).tril())
    bottom_right = torch.ones(6, 4, dtype=torch.bool).tril(diagonal=-2)  # rows 0 and 1 see no key
    add("causal mask with s_q > s_k (two fully masked rows)", randn(2, 6, 4, gen=g), bottom_right)
    pad = torch.ones(3, 1, 1, 5, dtype=torch.bool)
    pad[0, ..., 3:] = False
    pad[2] = False  # an empty sequence: all its rows are fully masked
    add("padding mask (B, 1, 1, S_k) over heads, one sequence of length 0", randn(3, 2, 4, 5, gen=g), pad)
    add("everything masked", randn(2, 3, gen=g), torch.zeros(2, 3, dtype=torch.bool))
    add("nothing masked", randn(3, 4, gen=g), torch.ones(3, 4, dtype=torch.bool))
    add("a single score (S = 1)", randn(1, 1, gen=g), torch.ones(1, 1, dtype=torch.bool))
    add("large-magnitude scores", randn(2, 4, 6, gen=g, scale=500.0), random_padding_mask(2, 4, 6, g, fully_masked_row=True))
    for i in range(6):  # random shapes, odd sizes included
        lead = tuple(r.randint(1, 3) for _ in range(r.randint(0, 2)))
        s_q, s_k = r.randint(1, 7), r.randint(1, 7)
        m = None
        if i % 3:
            m = torch.rand(*lead, s_q, s_k, generator=g) > 0.4
        add(f"random case {i + 1}", randn(*lead, s_q, s_k, gen=g, scale=3.0), m)
    return cases


def _msm(scores, mask, fill=float("-inf"), dim=-1, nan_to_zero=True):
    if mask is not None:
        scores = scores.masked_fill(~mask, fill)
    w = torch.softmax(scores, dim=dim)
    return w.nan_to_num(0.0) if nan_to_zero else w


def _msm_neg_1e9(scores, mask):
    return _msm(scores, mask, fill=-1e9)


def _msm_nan_rows(scores, mask):
    return _msm(scores, mask, nan_to_zero=False)


def _msm_after(scores, mask):
    w = torch.softmax(scores, dim=-1)
    return w if mask is None else w * mask


def _msm_inverted(scores, mask):
    return _msm(scores, None if mask is None else ~mask)


def _msm_ignored(scores, mask):
    return _msm(scores, None)


def _msm_fill_zero(scores, mask):
    return _msm(scores, mask, fill=0.0)


def _msm_wrong_dim(scores, mask):
    return _msm(scores, mask, dim=-2)


MASKED_SOFTMAX_MUTANTS = [
    Mutant("neg_1e9_fully_masked", "a fully masked row got uniform weights: filling with -1e9 (or a large negative number) spreads the weight evenly when every key is masked; fill with -inf and turn the NaN rows into zeros.", _msm_neg_1e9),
    Mutant("nan_fully_masked", "a fully masked row gave NaN: softmax over a row of -inf is 0/0; replace those rows with zeros (e.g. nan_to_num or torch.where).", _msm_nan_rows),
    Mutant("mask_after_softmax", "the mask was applied after the softmax, so the remaining weights no longer sum to 1: mask the scores with -inf before the softmax.", _msm_after),
    Mutant("inverted_mask", "the mask is inverted: True means 'may attend', so fill the scores where the mask is False.", _msm_inverted),
    Mutant("mask_ignored", "the mask was ignored: set the scores to -inf where the mask is False before the softmax.", _msm_ignored),
    Mutant("fill_zero", "masked scores were set to 0, which still gets weight exp(0): set them to -inf so that they get exactly zero weight.", _msm_fill_zero),
    Mutant("softmax_wrong_dim", "the softmax was taken over dim -2 instead of the last dim (the keys): each row must sum to 1.", _msm_wrong_dim),
]

MASKED_SOFTMAX_EXERCISE = Exercise(
    name="masked_softmax",
    reference=ref.masked_softmax,
    make_cases=_softmax_cases,
    mutants=MASKED_SOFTMAX_MUTANTS,
)
check_masked_softmax = register(MASKED_SOFTMAX_EXERCISE)
