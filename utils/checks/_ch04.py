"""Checks for chapter 04 — masking: causal masks, padding masks, masked softmax."""
import torch

from .. import reference as ref
from ._contract import Contract
from ._core import Case, Exercise, Mutant, Variant, generator, randn, random_padding_mask, rng
from ._guards import INPLACE
from ._registry import register

__all__ = ["check_causal_mask", "check_padding_mask", "check_masked_softmax"]

F64 = torch.float64
NEG_INF = float("-inf")


# ---------------------------------------------------------------- causal_mask
def _causal_cases(seed: int) -> list:
    r = rng(seed)
    cases = [
        Case("s_q=4 (s_k omitted; square)", (4,)),
        Case("s_q=3 < s_k=7 (3 new queries after 4 cached keys)", (3, 7)),
        Case("s_q = s_k = 6", (6, 6)),
        Case("s_q=5, s_k=None", (5,), {"s_k": None}),
        Case("s_q=1 < s_k=5 (one decoding step)", (1, 5)),
        Case("s_q=6 > s_k=4 (the first 2 query rows see no key)", (6, 4)),
        Case("s_q = s_k = 1", (1, 1)),
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


def _causal_sign_flipped(s_q, s_k=None):
    s_q, s_k = _sizes(s_q, s_k)
    return torch.ones(s_q, s_k, dtype=torch.bool).tril(diagonal=s_q - s_k)


def _causal_inverted(s_q, s_k=None):
    return ~ref.causal_mask.__wrapped__(s_q, s_k)


def _causal_upper(s_q, s_k=None):
    s_q, s_k = _sizes(s_q, s_k)
    return torch.ones(s_q, s_k, dtype=torch.bool).triu(diagonal=s_k - s_q)


def _causal_float(s_q, s_k=None):
    return ref.causal_mask.__wrapped__(s_q, s_k).float()


def _causal_long(s_q, s_k=None):
    return ref.causal_mask.__wrapped__(s_q, s_k).long()


def _causal_additive(s_q, s_k=None):
    m = ref.causal_mask.__wrapped__(s_q, s_k)
    return torch.zeros(m.shape).masked_fill(~m, NEG_INF)


def _causal_s_k_ignored(s_q, s_k=None):
    return torch.ones(s_q, s_q, dtype=torch.bool).tril()


def _causal_crop_square(s_q, s_k=None):
    s_q, s_k = _sizes(s_q, s_k)
    return torch.ones(s_k, s_k, dtype=torch.bool).tril()[-s_q:]  # right for s_q <= s_k only


def _causal_transposed(s_q, s_k=None):
    s_q, s_k = _sizes(s_q, s_k)
    return torch.ones(s_k, s_q, dtype=torch.bool).triu(diagonal=s_q - s_k)  # (s_k, s_q): keys as rows


def _causal_plus_one(s_q, s_k=None):
    s_q, s_k = _sizes(s_q, s_k)
    return torch.ones(s_q, s_k, dtype=torch.bool).tril(diagonal=s_k - s_q + 1)


def _causal_abs_offset(s_q, s_k=None):
    s_q, s_k = _sizes(s_q, s_k)
    return torch.ones(s_q, s_k, dtype=torch.bool).tril(diagonal=abs(s_k - s_q))


CAUSAL_MUTANTS = [
    Mutant("top_left_aligned", "the mask is aligned top-left (j <= i); with s_q ≠ s_k the course aligns it bottom-right, so the last query sees every key: query i may attend key j iff j <= i + (s_k - s_q) (tril with diagonal=s_k - s_q).", _causal_top_left),
    Mutant("diagonal_sign_flipped", "the offset has the wrong sign (tril with diagonal=s_q - s_k): query i may attend key j iff j <= i + (s_k - s_q), i.e. diagonal=s_k - s_q.", _causal_sign_flipped),
    Mutant("diagonal_excluded", "the diagonal is masked (j < i instead of j <= i): a token may attend to itself.", _causal_strict),
    Mutant("inverted", "the mask is inverted (True where attention is blocked): in this course True means 'may attend', so keep the lower triangle.", _causal_inverted),
    Mutant("upper_triangle", "the mask keeps the upper triangle (future keys): a query may attend the keys at or before its position, the lower triangle (tril).", _causal_upper),
    Mutant("float_mask", "the mask is a float tensor of 0s and 1s: return a bool tensor (e.g. torch.ones(s_q, s_k, dtype=torch.bool).tril(...)).", _causal_float),
    Mutant("integer_mask", "the mask is an integer tensor of 0s and 1s (torch.ones gives float, .long() or .int() integers): return a bool tensor, dtype=torch.bool.", _causal_long),
    Mutant("additive_float_mask", "the mask is an additive float mask (0 / -inf, like nn.Transformer.generate_square_subsequent_mask): this course uses bool masks, True = may attend.", _causal_additive),
    Mutant("s_k_ignored", "s_k was ignored (the mask is always s_q × s_q): the mask has shape (s_q, s_k), and s_k defaults to s_q only when it is None.", _causal_s_k_ignored),
    Mutant("transposed", "the mask is transposed: it has one row per key and one column per query. Rows are queries: shape (s_q, s_k), query i may attend key j iff j <= i + (s_k - s_q).", _causal_transposed),
    Mutant("diagonal_off_by_one_up", "the band is one too wide (tril with diagonal=s_k - s_q + 1): every query also sees the key right after its own position, the next token. Query i may attend key j iff j <= i + (s_k - s_q).", _causal_plus_one),
    Mutant("absolute_offset", "the offset was taken as |s_k - s_q|: right when s_q <= s_k, but when s_q > s_k the offset s_k - s_q is negative and the first s_q - s_k rows see no key.", _causal_abs_offset),
    Mutant("rows_of_a_square_mask", "the mask keeps the last s_q rows of a square (s_k, s_k) triangle: right when s_q <= s_k, but when s_q > s_k there are only s_k rows; build the (s_q, s_k) mask directly with tril(diagonal=s_k - s_q).", _causal_crop_square),
]


def _v_causal_arange(s_q, s_k=None):
    s_k = s_q if s_k is None else s_k
    assert s_q >= 0 and s_k >= 0, "sizes must be non-negative"  # an assert instead of ValueError is fine
    i = torch.arange(s_q).unsqueeze(1)  # (S_q, 1)
    j = torch.arange(s_k).unsqueeze(0)  # (1, S_k)
    return j <= i + (s_k - s_q)  # (S_q, S_k) bool


def _v_causal_loops(s_q, s_k=None):
    if s_k is None:
        s_k = s_q
    rows = [[j - (s_k - s_q) <= i for j in range(s_k)] for i in range(s_q)]
    return torch.tensor(rows, dtype=torch.bool).reshape(s_q, s_k)


def _v_causal_triu_complement(s_q, s_k=None):
    s_k = s_k or s_q
    return ~torch.triu(torch.ones(s_q, s_k, dtype=torch.bool), diagonal=s_k - s_q + 1)


def _negative_size_tip(fn) -> str | None:
    """Not graded: a negative size is a bug in the caller; a clear error helps find it."""
    try:
        fn(-1, 3)
    except Exception:  # noqa: BLE001 - any error is fine
        return None
    return "causal_mask(-1, 3) returned a result: a clear error (ValueError or assert) for a negative size would catch a caller's bug early."


CAUSAL_EXERCISE = Exercise(
    name="causal_mask",
    reference=ref.causal_mask,
    make_cases=_causal_cases,
    mutants=CAUSAL_MUTANTS,
    variants=[Variant("arange_comparison_assert", _v_causal_arange), Variant("python_loops", _v_causal_loops, demo=True),
              Variant("triu_complement", _v_causal_triu_complement)],
    tips=(_negative_size_tip,),
    contract=Contract("""Causal mask aligned bottom-right: query i may attend key j iff j <= i + (s_k - s_q).

    s_q, s_k: ints >= 1; s_k=None means s_k = s_q (the usual lower triangle).
    Returns a bool tensor (s_q, s_k), True = may attend. The last query sees every key (s_q
    new tokens after s_k - s_q cached ones); when s_q > s_k the first s_q - s_k rows are all False.
    """, same_dtype=False),
)
check_causal_mask = register(CAUSAL_EXERCISE)


# ---------------------------------------------------------------- padding_mask
def _padding_cases(seed: int) -> list:
    r = rng(seed)
    cases = []

    def add(label, lengths, max_len, dtype=torch.long):
        lengths = torch.tensor(lengths, dtype=dtype)
        what = "" if dtype == torch.long else f" ({str(dtype).replace('torch.', '')})"
        cases.append(Case(f"{label}: lengths={lengths.tolist()}{what}, max_len={max_len}", (lengths, max_len)))

    add("mixed lengths", [3, 5, 1], 5)
    add("every sequence shorter than max_len", [1, 2, 3, 2], 6)
    add("one sequence", [2], 4)
    add("B = max_len (shapes alone cannot tell batch from positions)", [1, 3, 0, 2], 4)
    add("int32 lengths", [2, 4], 5, dtype=torch.int32)
    add("a sequence of length 0 (all padding)", [0, 3], 3)
    add("no padding at all", [4, 4], 4)
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


def _padding_one_short(lengths, max_len):
    return (torch.arange(max_len) < lengths.unsqueeze(-1) - 1).unsqueeze(1)  # p < L - 1


def _padding_no_middle_dim(lengths, max_len):
    return _padding(lengths, max_len)


def _padding_query_axis(lengths, max_len):
    return _padding(lengths, max_len).unsqueeze(-1)


def _padding_inverted(lengths, max_len):
    return ~_padding(lengths, max_len).unsqueeze(1)


def _padding_float(lengths, max_len):
    return _padding(lengths, max_len).unsqueeze(1).float()


def _padding_left(lengths, max_len):
    return (torch.arange(max_len) >= max_len - lengths.unsqueeze(-1)).unsqueeze(1)


def _padding_no_unsqueeze(lengths, max_len):
    return (torch.arange(max_len) < lengths).unsqueeze(1)  # (max_len,) < (B,): only when B == max_len


def _padding_longest(lengths, max_len):
    return _padding(lengths, int(lengths.max())).unsqueeze(1)


def _padding_unsqueezes_lengths(lengths, max_len):
    lengths.unsqueeze_(-1)  # reshapes the caller's tensor in place: (B,) -> (B, 1)
    return (torch.arange(max_len) < lengths).unsqueeze(1)


PADDING_MUTANTS = [
    Mutant("lengths_unsqueezed_in_place", f"padding_mask {INPLACE.format(name='lengths')}: its shape went from",
           _padding_unsqueezes_lengths),
    Mutant("off_by_one", "the mask is off by one (position <= length): a sequence of length L has real tokens at positions 0 .. L-1, so use position < length.", _padding_off_by_one),
    Mutant("off_by_one_short", "the mask is one token short (position < length - 1, or position + 1 < length): the last real token of every sequence is hidden. A sequence of length L has real tokens at positions 0 .. L-1: use position < length.", _padding_one_short),
    Mutant("missing_middle_dim", "the mask has shape (B, max_len): add the middle dim, (B, 1, max_len), so that it broadcasts over the queries of scores (B, S_q, S_k).", _padding_no_middle_dim),
    Mutant("masks_queries", "the mask has shape (B, max_len, 1), which masks queries (rows), not keys: padding hides keys, so the shape is (B, 1, max_len).", _padding_query_axis),
    Mutant("inverted", "the mask is inverted (True at the padding): in this course True means 'may attend', i.e. a real token.", _padding_inverted),
    Mutant("float_mask", "the mask is a float tensor: return a bool tensor (a comparison such as positions < lengths gives one).", _padding_float),
    Mutant("padding_on_the_left", "the real tokens were put at the end (left padding): a sequence of length L occupies positions 0 .. L-1, the padding comes after it.", _padding_left),
    Mutant("lengths_not_unsqueezed", "arange(max_len) < lengths compares position p with sequence p (it broadcasts (max_len,) against (B,)): compare against lengths[:, None], (1, max_len) < (B, 1) -> (B, max_len).", _padding_no_unsqueeze),
    Mutant("longest_length_not_max_len", "the mask is as long as the longest sequence (lengths.max()), not max_len: the keys it masks have max_len positions, so the last dim is max_len.", _padding_longest),
]


def _v_padding_loops(lengths, max_len):
    mask = torch.zeros(len(lengths), 1, max_len, dtype=torch.bool)
    for b, n in enumerate(lengths.tolist()):
        mask[b, 0, :n] = True
    return mask


def _v_padding_broadcast_3d(lengths, max_len):
    assert lengths.dim() == 1, "lengths must be (B,)"
    positions = torch.arange(max_len, dtype=lengths.dtype).view(1, 1, max_len)  # (1, 1, max_len)
    return positions < lengths.view(-1, 1, 1)  # (B, 1, max_len)


def _v_padding_expand_ge(lengths, max_len):
    pos = torch.arange(max_len).expand(lengths.numel(), max_len)  # (B, max_len)
    return ~(pos >= lengths[:, None].long())[:, None, :]


def _padding_tip(fn) -> str | None:
    """Not graded: a length above max_len is a caller's bug."""
    try:
        fn(torch.tensor([2, 7]), 5)
    except Exception:  # noqa: BLE001 - any error is fine
        return None
    return "padding_mask(torch.tensor([2, 7]), 5) returned a result: a clear error (ValueError or assert) for a length above max_len would catch a caller's bug early."


PADDING_EXERCISE = Exercise(
    name="padding_mask",
    reference=ref.padding_mask,
    make_cases=_padding_cases,
    mutants=PADDING_MUTANTS,
    variants=[Variant("python_loops", _v_padding_loops, demo=True), Variant("broadcast_3d_assert", _v_padding_broadcast_3d),
              Variant("expand_and_negate", _v_padding_expand_ge)],
    tips=(_padding_tip,),
    contract=Contract("""Key-padding mask: True at the real tokens (positions < length), False at the padding.

    lengths: (B,) integer tensor, each in [0, max_len]   max_len: int >= 1
    Returns a bool tensor (B, 1, max_len): mask[b, 0, p] is True iff p < lengths[b]. The middle 1
    broadcasts over the queries of scores (B, S_q, S_k). A length of 0 gives an all-False row.
    """, same_dtype=False),
)
check_padding_mask = register(PADDING_EXERCISE)


# ---------------------------------------------------------------- masked_softmax
def _softmax_cases(seed: int) -> list:
    """Typical masks first, then gradients (float64, fully masked rows included), then the edges."""
    r, g = rng(seed), generator(seed)
    cases = []

    def add(label, scores, mask, grad=False):
        dims = f"scores {tuple(scores.shape)}, mask {tuple(mask.shape)}"
        if scores.dtype == F64:
            dims += ", float64"
        cases.append(Case(f"{label}: {dims}", (scores, mask), grad=grad))

    add("a random mask", randn(2, 4, 6, gen=g), random_padding_mask(2, 4, 6, g))
    add("causal mask (S_q, S_k) broadcast over (B, H)", randn(2, 3, 5, 5, gen=g), torch.ones(5, 5, dtype=torch.bool).tril())
    pad = torch.ones(3, 1, 1, 5, dtype=torch.bool)
    pad[0, ..., 3:] = False
    pad[2] = False  # an empty sequence: all its rows are fully masked
    add("padding mask (B, 1, 1, S_k) over heads, one sequence of length 0", randn(3, 2, 4, 5, gen=g), pad)
    add("gradients (float64) of a random loss", randn(2, 4, 5, gen=g, dtype=F64, scale=2.0),
        random_padding_mask(2, 4, 5, g), grad=True)
    gmask = random_padding_mask(2, 4, 6, g, fully_masked_row=True)
    gmask[1, 2, :4] = False  # a row whose leading keys are masked
    add("gradients (float64) with a fully masked row and leading masked keys", randn(2, 4, 6, gen=g, dtype=F64),
        gmask, grad=True)
    add("a fully masked row", randn(2, 4, 5, gen=g), random_padding_mask(2, 4, 5, g, fully_masked_row=True))
    bottom_right = torch.ones(6, 4, dtype=torch.bool).tril(diagonal=-2)  # rows 0 and 1 see no key
    add("causal mask with s_q > s_k (two fully masked rows)", randn(2, 6, 4, gen=g), bottom_right)
    lead = torch.ones(3, 7, dtype=torch.bool)
    lead[:, :4] = False  # every row starts with a block of -inf
    add("the first 4 keys masked in every row", randn(2, 3, 7, gen=g), lead)
    add("every score far below 0 (around -200), a fully masked row", randn(2, 4, 6, gen=g) - 200.0,
        random_padding_mask(2, 4, 6, g, fully_masked_row=True))
    add("a key mask (S_k,) broadcast over every row", randn(2, 3, 5, gen=g), torch.tensor([True, False, True, True, False]))
    add("everything masked", randn(2, 3, gen=g), torch.zeros(2, 3, dtype=torch.bool))
    add("nothing masked", randn(3, 4, gen=g), torch.ones(3, 4, dtype=torch.bool))
    add("a single score (S = 1)", randn(1, 1, gen=g), torch.ones(1, 1, dtype=torch.bool))
    for i in range(5):  # random shapes, odd sizes included
        lead_dims = tuple(r.randint(1, 3) for _ in range(r.randint(0, 2)))
        s_q, s_k = r.randint(1, 7), r.randint(1, 7)
        m = torch.rand(*lead_dims, s_q, s_k, generator=g) > 0.4
        add(f"random case {i + 1}", randn(*lead_dims, s_q, s_k, gen=g, scale=3.0), m)
    return cases


def _msm(scores, mask, fill=NEG_INF, dim=-1, nan_to_zero=True):
    scores = scores.masked_fill(~mask, fill)
    w = torch.softmax(scores, dim=dim)
    return w.nan_to_num(0.0) if nan_to_zero else w


def _msm_neg_1e9(scores, mask):
    return _msm(scores, mask, fill=-1e9)


def _msm_nan_rows(scores, mask):
    return _msm(scores, mask, nan_to_zero=False)


def _msm_after(scores, mask):
    return torch.softmax(scores, dim=-1) * mask


def _msm_after_renormalised(scores, mask):
    w = torch.softmax(scores, dim=-1) * mask
    return w / w.sum(dim=-1, keepdim=True).clamp_min(1e-30)


def _msm_inverted(scores, mask):
    return _msm(scores, ~mask)


def _msm_ignored(scores, mask):
    return torch.softmax(scores, dim=-1)


def _msm_fill_zero(scores, mask):
    return _msm(scores, mask, fill=0.0)


def _msm_wrong_dim(scores, mask):
    return _msm(scores, mask, dim=-2)


def _msm_inplace_nan_fix(scores, mask):
    w = torch.softmax(scores.masked_fill(~mask, NEG_INF), dim=-1)
    w[w.isnan()] = 0.0  # in place on the softmax's output: the forward is right, backward breaks
    return w


def _msm_additive_bias(scores, mask):
    bias = torch.zeros(mask.shape, dtype=scores.dtype).masked_fill(~mask, NEG_INF)
    return torch.softmax(scores + bias, dim=-1).nan_to_num(0.0)  # NaN flows back through the +


def _msm_max_before_mask(scores, mask):
    e = torch.exp(scores - scores.amax(dim=-1, keepdim=True)) * mask  # max over masked keys too
    return e / e.sum(dim=-1, keepdim=True).clamp_min(1e-30)


def _msm_sum_everything(scores, mask):
    s = scores.masked_fill(~mask, NEG_INF)
    e = torch.exp(s - s.amax(dim=-1, keepdim=True).nan_to_num(0.0, neginf=0.0))
    return e / e.sum()


def _msm_no_keepdim(scores, mask):
    s = scores.masked_fill(~mask, NEG_INF)
    e = torch.exp(s - s.amax(dim=-1, keepdim=True).nan_to_num(0.0, neginf=0.0))
    return (e / e.sum(dim=-1)).nan_to_num(0.0)


def _msm_dim_1(scores, mask):
    return _msm(scores, mask, dim=1)


def _msm_no_max(scores, mask):
    e = torch.exp(scores) * mask  # no max subtracted: exp overflows for large scores
    return e / e.sum(dim=-1, keepdim=True).clamp_min(1e-30)


def _msm_max_clamped_at_zero(scores, mask):
    s = scores.masked_fill(~mask, NEG_INF)
    e = torch.exp(s - s.amax(dim=-1, keepdim=True).clamp_min(0.0))  # the max of a masked row is -inf: clamped to 0
    return e / e.sum(dim=-1, keepdim=True).clamp_min(1e-30)


INPLACE_HINT = ("an in-place edit of the softmax's output (such as `w[w.isnan()] = 0`) gives the right forward "
                "values but breaks autograd, which needs that output for the backward pass: build a new tensor "
                "instead (torch.where(..., 0.0, w) or w.nan_to_num(0.0)).")
ADDITIVE_HINT = ("the mask was added as a -inf bias (scores + bias): in a fully masked row the softmax's NaN then "
                 "flows back through the addition into the gradient of scores. Fill the masked scores with "
                 "masked_fill or torch.where, which sends no gradient to them.")

MASKED_SOFTMAX_MUTANTS = [
    Mutant("neg_1e9_fully_masked", "a fully masked row got uniform weights: filling with -1e9 (or a large negative number) spreads the weight evenly when every key is masked; fill with -inf and turn the NaN rows into zeros.", _msm_neg_1e9),
    Mutant("nan_fully_masked", "a fully masked row gave NaN: softmax over a row of -inf is 0/0; replace those rows with zeros (e.g. nan_to_num or torch.where).", _msm_nan_rows),
    Mutant("mask_after_softmax", "the mask was applied after the softmax, so the remaining weights no longer sum to 1: mask the scores with -inf before the softmax.", _msm_after),
    Mutant("mask_after_softmax_renormalised", "the weights were masked after the softmax and renormalised: mathematically the same, but a masked key with a far larger score makes every allowed weight underflow to 0 first. Mask the scores with -inf before the softmax.", _msm_after_renormalised),
    Mutant("inverted_mask", "the mask is inverted: True means 'may attend', so fill the scores where the mask is False.", _msm_inverted),
    Mutant("mask_ignored", "the mask was ignored: set the scores to -inf where the mask is False before the softmax.", _msm_ignored),
    Mutant("fill_zero", "masked scores were set to 0 (e.g. scores * mask), which still gets weight exp(0): set them to -inf so that they get exactly zero weight.", _msm_fill_zero),
    Mutant("softmax_wrong_dim", "the softmax was taken over dim -2 instead of the last dim (the keys): each row must sum to 1.", _msm_wrong_dim),
    Mutant("softmax_dim_1", "the softmax was taken over dim 1, which is the last dim only for 2-D scores: for scores (B, H, S_q, S_k) it runs over the heads. Use dim=-1 (the keys).", _msm_dim_1),
    Mutant("exp_without_max", "the exponentials were taken without subtracting the row's max (exp(scores) * mask): a score of 300 overflows float32's exp (about 88 is the limit) to inf, and inf * 0 or inf / inf is NaN. Fill the masked scores with -inf and use torch.softmax, which subtracts the max.", _msm_no_max),
    Mutant("max_clamped_at_zero", "the max subtracted for stability was clamped at 0 (clamp_min(0) to tame the -inf max of a fully masked row): for a row whose scores are all far below 0 (around -200) every exp then underflows to 0 and the row comes out all zeros. Subtract the row's own max, and replace only an infinite max (torch.where(torch.isinf(m), 0, m)).", _msm_max_clamped_at_zero),
    Mutant("inplace_nan_fix", INPLACE_HINT, _msm_inplace_nan_fix),
    Mutant("additive_inf_bias", ADDITIVE_HINT, _msm_additive_bias),
    Mutant("max_before_mask", "the max subtracted for stability was taken over every key, masked ones included: when a masked key holds a far larger score, every allowed key underflows to 0. Mask first (-inf), then take the max of what is left.", _msm_max_before_mask),
    Mutant("sum_over_everything", "the exponentials were divided by their sum over the whole tensor (e.sum() with no dim): normalise each row, e.sum(dim=-1, keepdim=True).", _msm_sum_everything),
    Mutant("sum_without_keepdim", "the row sums lost their last dim (e.sum(dim=-1) without keepdim=True), so they broadcast against the wrong axis: use keepdim=True.", _msm_no_keepdim),
]


def _v_msm_manual_float64(scores, mask):
    """Float64 inside, a hand-written stable softmax, torch.where everywhere."""
    s = scores.double()
    s = torch.where(mask, s, torch.full_like(s, NEG_INF))
    m = s.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)  # a fully masked row: shift by 0
    e = torch.exp(s - m)  # exp(-inf) = 0 at masked keys
    total = e.sum(dim=-1, keepdim=True)
    w = e / torch.where(total > 0, total, torch.ones_like(total))
    return w.to(scores.dtype)


def _v_msm_where_rows(scores, mask):
    assert mask.dtype == torch.bool, "mask must be bool"  # an assert instead of ValueError is fine
    mask = mask.expand_as(scores)
    w = torch.softmax(scores.masked_fill(mask.logical_not(), NEG_INF), dim=-1)
    return torch.where(mask.any(dim=-1, keepdim=True), w, torch.zeros_like(w))


def _v_msm_loops(scores, mask):
    mask = mask.expand_as(scores)
    flat_s, flat_m = scores.reshape(-1, scores.size(-1)), mask.reshape(-1, scores.size(-1))
    rows = []
    for s, m in zip(flat_s, flat_m):
        if not bool(m.any()):
            rows.append(torch.zeros_like(s))
            continue
        e = torch.exp(s[m] - s[m].max())  # only the allowed scores
        rows.append(torch.zeros_like(s).index_put((m.nonzero().squeeze(-1),), e / e.sum()))
    return torch.stack(rows).reshape(scores.shape)


MASKED_SOFTMAX_EXERCISE = Exercise(
    name="masked_softmax",
    reference=ref.masked_softmax,
    make_cases=_softmax_cases,
    mutants=MASKED_SOFTMAX_MUTANTS,
    variants=[Variant("manual_float64_where", _v_msm_manual_float64), Variant("where_on_rows_assert", _v_msm_where_rows),
              Variant("python_loops_over_rows", _v_msm_loops, demo=True)],
    input_names=("scores", "mask"),
    contract=Contract("""Softmax over the last dim of scores, restricted to the keys where mask is True.

    scores: (..., S_q, S_k) float   mask: bool, broadcastable to scores, True = may attend
    Returns weights with the shape of scores: masked keys get exactly 0, each row sums to 1 over
    its allowed keys, and a fully masked row gets all-zero weights (never NaN), whatever the
    magnitude of the scores (a masked key may hold the largest score).
    """, grad="scores (fully masked rows included)"),
)
check_masked_softmax = register(MASKED_SOFTMAX_EXERCISE)
