"""Checks for chapter 01 — motivation: dot-product scores and attention pooling."""
import math
from dataclasses import replace

import torch

from .. import reference as ref
from ._contract import Contract
from ._core import Case, Exercise, Mutant, Variant, generator, randn, random_padding_mask, rng
from ._forbid import MHA, SDPA
from ._registry import register

__all__ = ["check_dot_product_score", "check_attention_pooling"]

F64 = torch.float64
NEG_INF = float("-inf")


# ---------------------------------------------------------------- dot_product_score
def _score_cases(seed: int) -> list:
    """Typical shapes first, then gradients, then edges (S = 1, D = 1, large values), then random."""
    r, g = rng(seed), generator(seed)
    cases = []

    def add(label, lead, s_q, s_k, d, grad=False, dtype=torch.float32):
        q = randn(*lead, s_q, d, gen=g, dtype=dtype)
        k = randn(*lead, s_k, d, gen=g, dtype=dtype)
        label = f"{label}: query {tuple(q.shape)}, keys {tuple(k.shape)}" + (" float64" if dtype == F64 else "")
        cases.append(Case(label, (q, k), grad=grad))

    add("batch dim (B), S_q ≠ S_k", (3,), 5, 7, 6)
    add("batch and heads (B, H)", (2, 3), 4, 6, 5)
    add("no batch dims, S_q ≠ S_k", (), 3, 6, 5)
    add("no batch dims, S_q = S_k = D", (), 4, 4, 4)
    add("B = S_k = D (square sizes)", (4,), 3, 4, 4)
    add("batch dim, S_q = S_k", (2,), 5, 5, 3)
    add("gradients (float64) of a random loss", (2,), 3, 4, 5, grad=True, dtype=F64)
    add("a single query (S_q = 1)", (2,), 1, 5, 4)
    add("D = 1", (2,), 3, 2, 1)
    for i in range(5):  # random shapes, odd sizes included
        lead = tuple(r.randint(1, 3) for _ in range(r.randint(0, 2)))
        add(f"random case {i + 1}", lead, r.randint(1, 8), r.randint(1, 8), r.choice([1, 3, 4, 7, 16]))
    return cases


def _score_rescale(case: Case, c: float) -> Case:
    q, k = case.args
    return replace(case, args=(q * c, k))


def _score_scale_names(case: Case) -> dict:
    q, k = case.args
    d = q.size(-1)
    names = {"1 (no scaling)": 1.0, "1/sqrt(D)": 1 / math.sqrt(d), "1/D": 1 / d, "sqrt(D)": math.sqrt(d),
             "1/sqrt(S_k)": 1 / math.sqrt(k.size(-2))}
    if q.dim() >= 3:
        names["1/sqrt(query.size(1))"] = 1 / math.sqrt(q.size(1))
    return names


def _score_scaled(query, keys):
    return query @ keys.transpose(-2, -1) / math.sqrt(query.size(-1))


def _score_transposed(query, keys):
    return keys @ query.transpose(-2, -1)


def _score_cosine(query, keys):
    qn = query / query.norm(dim=-1, keepdim=True)
    kn = keys / keys.norm(dim=-1, keepdim=True)
    return qn @ kn.transpose(-2, -1)


def _score_batched_T(query, keys):
    return query @ keys.T  # right for 2-D keys; reverses every dim of a batched tensor


def _score_transpose_1_2(query, keys):
    return query @ keys.transpose(1, 2)  # right for (B, S, D) only


def _score_no_transpose(query, keys):
    return query @ keys


def _score_bmm(query, keys):
    return torch.bmm(query, keys.transpose(-2, -1))  # (B, S, D) only


def _score_elementwise(query, keys):
    return (query * keys).sum(dim=-1)  # pairs query i with key i only


BATCHED_T_HINT = ("`.T` reverses *every* dimension of a batched tensor (keys (B, S_k, D) become (D, S_k, B)); "
                  "swap only the last two with keys.transpose(-2, -1) (or keys.mT).")

BMM_HINT = ("torch.bmm takes 3-D tensors only: use @ (torch.matmul), which also handles no batch dims and "
            "(B, H) leading dims.")

SCORE_MUTANTS = [
    Mutant("scaled_by_sqrt_d", "the scores were divided by sqrt(D): this exercise asks for the plain, unscaled dot product query @ keysᵀ (the scaling comes in chapter 03).", _score_scaled),
    Mutant("keys_times_query", "the scores are transposed (keys @ queryᵀ gives (..., S_k, S_q)): compute query @ keys.transpose(-2, -1) so that row i holds query i's score with every key.", _score_transposed),
    Mutant("cosine_similarity", "the query and key vectors were normalised (cosine similarity): the dot-product score is q·k without dividing by the norms.", _score_cosine),
    Mutant("batched_T", BATCHED_T_HINT, _score_batched_T),
    Mutant("transpose_1_2", "keys.transpose(1, 2) only works for exactly one leading dim: transpose the last two dims, keys.transpose(-2, -1), so no batch dims and (B, H) work too.", _score_transpose_1_2),
    Mutant("no_transpose", "query @ keys multiplies (S_q, D) by (S_k, D): transpose the keys' last two dims first, query @ keys.transpose(-2, -1).", _score_no_transpose),
    Mutant("bmm_3d_only", BMM_HINT, _score_bmm),
    Mutant("elementwise_product", "(query * keys).sum(-1) pairs query i with key i only (and needs S_q = S_k): every query must be scored against every key, query @ keys.transpose(-2, -1) of shape (..., S_q, S_k).", _score_elementwise),
]


def _v_score_einsum(query, keys):
    return torch.einsum("...qd,...kd->...qk", query, keys)


def _v_score_broadcast(query, keys):
    return (query.unsqueeze(-2) * keys.unsqueeze(-3)).sum(dim=-1)  # (..., S_q, 1, D) * (..., 1, S_k, D)


def _v_score_loops_float64(query, keys):
    assert query.size(-1) == keys.size(-1), "query and keys must share D"  # an assert is fine
    q, k = query.double(), keys.double()
    rows = [torch.stack([(q[..., i, :] * k[..., j, :]).sum(-1) for j in range(k.size(-2))], dim=-1)
            for i in range(q.size(-2))]
    return torch.stack(rows, dim=-2).to(query.dtype)


SCORE_EXERCISE = Exercise(
    name="dot_product_score",
    reference=ref.dot_product_score,
    make_cases=_score_cases,
    mutants=SCORE_MUTANTS,
    variants=[Variant("einsum", _v_score_einsum), Variant("broadcast_multiply_sum", _v_score_broadcast, demo=True),
              Variant("loops_float64", _v_score_loops_float64)],
    rescale=_score_rescale,
    scale_names=_score_scale_names,
    output_names=("scores",),
    contract=Contract("""The unscaled dot-product score of every query with every key: query @ keysᵀ.

    query: (..., S_q, D)   keys: (..., S_k, D), with the same leading dims (none, B, or B, H)
    Returns scores (..., S_q, S_k), scores[..., i, j] = query[..., i, :] · keys[..., j, :].
    No scaling: dividing by sqrt(D) comes in chapter 03.
    """, grad="query and keys", kinds={"query": "query", "keys": "key"}, off={"large": "no exp: a product of large inputs is exact to the tolerance"}),
)
check_dot_product_score = register(SCORE_EXERCISE)


# ---------------------------------------------------------------- attention_pooling
# Score functions handed to the learner's attention_pooling. They are plain code (not the
# guarded reference), because they run inside the learner's call.
def dot_score(query, keys):
    return query @ keys.transpose(-2, -1)


def scaled_dot_score(query, keys):
    return query @ keys.transpose(-2, -1) / math.sqrt(query.size(-1))


def bilinear_score(W):
    """score(q, k) = qᵀ W k with a fixed random (D, D) matrix W."""

    def score(query, keys):
        return query @ W @ keys.transpose(-2, -1)

    score.__name__ = "bilinear_score"
    return score


def neg_sq_distance_score(query, keys):
    """-||q - k||² / 2: the Gaussian kernel of Nadaraya-Watson regression."""
    return -0.5 * torch.cdist(query, keys) ** 2


def _scaled_score(fn, c: float):
    def score(query, keys):
        return c * fn(query, keys)

    score.__name__ = getattr(fn, "__name__", "score_fn")
    return score


def _pooling_cases(seed: int) -> list:
    """Typical shapes and score functions first, then masks, gradients, and the edges (S = 1,
    leading masked keys, a masked key holding the largest score, large scores, fully masked rows)."""
    r, g = rng(seed), generator(seed)
    cases = []

    def add(label, lead, s_q, s_k, d, d_v, score_fn, mask=None, grad=False, dtype=torch.float32):
        q = randn(*lead, s_q, d, gen=g, dtype=dtype)
        k = randn(*lead, s_k, d, gen=g, dtype=dtype)
        v = randn(*lead, s_k, d_v, gen=g, dtype=dtype)
        dims = f"query {tuple(q.shape)}, keys {tuple(k.shape)}, values {tuple(v.shape)}, score_fn={score_fn.__name__}"
        if mask is not None:
            dims += f", mask {tuple(mask.shape)}"
        if dtype == F64:
            dims += ", float64"
        kwargs = {"mask": mask} if mask is not None else {}
        cases.append(Case(f"{label}: {dims}", (q, k, v, score_fn), kwargs, grad=grad))

    def bilinear(d, dtype=torch.float32):
        return bilinear_score(randn(d, d, gen=g, dtype=dtype))

    add("dot product, S_q ≠ S_k, D ≠ D_v", (2,), 3, 6, 5, 7, dot_score)
    add("scaled dot product, batch and heads", (2, 3), 5, 7, 4, 3, scaled_dot_score)
    add("a random bilinear score qᵀ W k", (2,), 4, 5, 3, 2, bilinear(3))
    add("dot product, no batch dims, S_q = S_k", (), 4, 4, 6, 6, dot_score)
    add("a random bilinear score, S_q = S_k", (3,), 5, 5, 4, 4, bilinear(4))
    add("negative squared distance (Nadaraya-Watson)", (2,), 6, 4, 2, 3, neg_sq_distance_score)
    add("mask: some keys hidden", (2,), 4, 6, 8, 8, scaled_dot_score, mask=random_padding_mask(2, 4, 6, g))
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    add("causal mask (S_q, S_k) broadcast over B", (3,), 5, 5, 4, 2, dot_score, mask=causal)
    add("gradients (float64) of a random loss", (2,), 3, 5, 4, 3, bilinear(4, F64), grad=True, dtype=F64)
    grad_mask = random_padding_mask(2, 4, 5, g, fully_masked_row=True)
    grad_mask[1, 2, :3] = False  # a row whose leading keys are masked
    add("gradients (float64) with a fully masked row", (2,), 4, 5, 3, 2, bilinear(3, F64), mask=grad_mask,
        grad=True, dtype=F64)
    add("one query, many keys", (2,), 1, 8, 4, 5, bilinear(4))
    lead_mask = torch.ones(2, 3, 6, dtype=torch.bool)
    lead_mask[:, :, :4] = False  # the first keys of every row are masked: the softmax starts with -inf
    add("the first 4 keys masked in every row", (2,), 3, 6, 4, 3, dot_score, mask=lead_mask)
    add("mask with a fully masked query row", (2,), 4, 5, 3, 3, bilinear(3),
        mask=random_padding_mask(2, 4, 5, g, fully_masked_row=True))
    key_pad = torch.ones(3, 1, 6, dtype=torch.bool)
    key_pad[1, :, 4:] = False
    key_pad[2] = False  # an empty sequence: every query row of it is fully masked
    add("padding mask (B, 1, S_k), one sequence of length 0", (3,), 4, 6, 4, 5, neg_sq_distance_score, mask=key_pad)
    score_fns = [dot_score, scaled_dot_score, neg_sq_distance_score, None]
    for i in range(6):  # random shapes and score functions, odd sizes included
        lead = tuple(r.randint(1, 3) for _ in range(r.randint(0, 2)))
        s_q, s_k, d, d_v = r.randint(1, 7), r.randint(1, 7), r.choice([1, 3, 4, 8]), r.randint(1, 5)
        fn = r.choice(score_fns) or bilinear(d)
        m = None
        if i % 2:
            m = torch.rand(*lead, s_q, s_k, generator=g) > 0.4
            m[..., 0] = True
        add(f"random case {i + 1}", lead, s_q, s_k, d, d_v, fn, mask=m)
    return cases


def _pooling_rescale(case: Case, c: float) -> Case:
    q, k, v, fn = case.args
    return replace(case, args=(q, k, v, _scaled_score(fn, c)))


def _pooling_scale_names(case: Case) -> dict:
    q, k, v, _ = case.args
    d, d_v = q.size(-1), v.size(-1)
    return {"1 (the scores exactly as score_fn returns them)": 1.0, "1/sqrt(D)": 1 / math.sqrt(d), "1/D": 1 / d,
            "1/sqrt(D_v)": 1 / math.sqrt(d_v), "1/sqrt(S_k)": 1 / math.sqrt(k.size(-2))}


def _pool(scores, values, mask, dim=-1, fill=None, mask_after=False):
    """attention_pooling from given scores, with one mistake switched on."""
    if mask is not None and mask_after:
        w = torch.softmax(scores, dim=dim) * mask
    elif mask is not None and fill is not None:
        w = torch.softmax(scores.masked_fill(~mask, fill), dim=dim)
    elif mask is not None:
        w = torch.softmax(scores.masked_fill(~mask, NEG_INF), dim=dim).nan_to_num(0.0)
    else:
        w = torch.softmax(scores, dim=dim)
    return w @ values, w


def _pool_ignores_score_fn(query, keys, values, score_fn, mask=None):
    return _pool(query @ keys.transpose(-2, -1), values, mask)


def _pool_wrong_dim(query, keys, values, score_fn, mask=None):
    return _pool(score_fn(query, keys), values, mask, dim=-2)


def _pool_softmax_dim_1(query, keys, values, score_fn, mask=None):
    scores = score_fn(query, keys)
    if mask is not None:
        scores = scores.masked_fill(~mask, NEG_INF)
    w = torch.softmax(scores, dim=1).nan_to_num(0.0)  # dim=1: the keys only without batch dims
    return w @ values, w


def _pool_wrong_dim_global_max(query, keys, values, score_fn, mask=None):
    scores = score_fn(query, keys)
    if mask is not None:
        scores = scores.masked_fill(~mask, NEG_INF)
    e = torch.exp(scores - scores.max())  # one max over the whole tensor ...
    w = (e / e.sum(dim=-2, keepdim=True)).nan_to_num(0.0)  # ... normalised over the queries
    return w @ values, w


def _pool_no_softmax(query, keys, values, score_fn, mask=None):
    w = score_fn(query, keys)
    if mask is not None:
        w = w.masked_fill(~mask, 0.0)
    return w @ values, w


def _pool_mask_ignored(query, keys, values, score_fn, mask=None):
    return _pool(score_fn(query, keys), values, None)


def _pool_inverted_mask(query, keys, values, score_fn, mask=None):
    return _pool(score_fn(query, keys), values, None if mask is None else ~mask)


def _pool_mask_after(query, keys, values, score_fn, mask=None):
    return _pool(score_fn(query, keys), values, mask, mask_after=True)


def _pool_mask_multiplies(query, keys, values, score_fn, mask=None):
    scores = score_fn(query, keys)
    if mask is not None:
        scores = scores * mask  # a masked key gets score 0, which still has weight exp(0)
    return _pool(scores, values, None)


def _pool_neg_1e9(query, keys, values, score_fn, mask=None):
    return _pool(score_fn(query, keys), values, mask, fill=-1e9)


def _pool_nan_rows(query, keys, values, score_fn, mask=None):
    return _pool(score_fn(query, keys), values, mask, fill=NEG_INF)


def _pool_context_from_keys(query, keys, values, score_fn, mask=None):
    _, w = _pool(score_fn(query, keys), values, mask)
    return w @ keys, w


def _pool_args_swapped(query, keys, values, score_fn, mask=None):
    return _pool(score_fn(keys, query), values, mask)


def _pool_args_swapped_transposed(query, keys, values, score_fn, mask=None):
    return _pool(score_fn(keys, query).transpose(-2, -1), values, mask)


def _pool_bmm(query, keys, values, score_fn, mask=None):
    _, w = _pool(score_fn(query, keys), values, mask)
    return torch.bmm(w, values), w  # (B, S, S) only


def _pool_extra_scaling(query, keys, values, score_fn, mask=None):
    return _pool(score_fn(query, keys) / math.sqrt(query.size(-1)), values, mask)


def _pool_inplace_nan_fix(query, keys, values, score_fn, mask=None):
    scores = score_fn(query, keys)
    if mask is not None:
        scores = scores.masked_fill(~mask, NEG_INF)
    w = torch.softmax(scores, dim=-1)
    w[w.isnan()] = 0.0  # in place on the softmax's output: the forward is right, backward breaks
    return w @ values, w


def _pool_additive_bias(query, keys, values, score_fn, mask=None):
    scores = score_fn(query, keys)
    if mask is not None:
        bias = torch.zeros(mask.shape, dtype=scores.dtype).masked_fill(~mask, NEG_INF)
        scores = scores + bias  # the forward is right; the backward sends NaN through a fully masked row
    w = torch.softmax(scores, dim=-1)
    w = torch.where(torch.isnan(w), torch.zeros_like(w), w)
    return w @ values, w


def _pool_mask_after_renormalised(query, keys, values, score_fn, mask=None):
    w = torch.softmax(score_fn(query, keys), dim=-1)  # over every key, masked ones included ...
    if mask is not None:
        w = w * mask  # ... then the masked weights zeroed and the rest renormalised
        w = (w / w.sum(dim=-1, keepdim=True)).nan_to_num(0.0)
    return w @ values, w


def _pool_max_before_masking(query, keys, values, score_fn, mask=None):
    scores = score_fn(query, keys)
    e = torch.exp(scores - scores.amax(dim=-1, keepdim=True))  # the max of all scores, masked ones included
    if mask is not None:
        e = e * mask
    total = e.sum(dim=-1, keepdim=True)
    w = torch.where(total > 0, e / total, torch.zeros_like(e))
    return w @ values, w


def _pool_no_max_subtraction(query, keys, values, score_fn, mask=None):
    e = torch.exp(score_fn(query, keys))  # a softmax by hand without the max: exp overflows past ~88
    if mask is not None:
        e = e.masked_fill(~mask, 0.0)
    total = e.sum(dim=-1, keepdim=True)
    w = torch.where(total > 0, e / total, torch.zeros_like(e))
    return w @ values, w


WRONG_DIM_HINT = ("the softmax was taken over the query dim (-2) instead of the key dim (-1): each query's "
                  "weights over the keys must sum to 1.")
INPLACE_HINT = ("an in-place edit of the softmax's output (such as `w[w.isnan()] = 0` or `w.masked_fill_(...)`) "
                "gives the right forward values but breaks autograd, which needs that output for the backward "
                "pass: build a new tensor instead (torch.where(..., 0.0, w) or w.nan_to_num(0.0)).")
ADDITIVE_BIAS_HINT = ("the mask was applied by adding a -inf bias (scores + bias): the forward is right, but in a "
                      "fully masked row autograd sends NaN back through the addition into the scores; fill the "
                      "scores with masked_fill(~mask, -inf) or torch.where(mask, scores, -inf), which send no "
                      "gradient through masked entries.")
MASK_AFTER_MAX_HINT = ("the mask was applied after the softmax (or after subtracting the max), to the weights or the "
                      "exponentials, and the rest renormalised: when a masked key holds the largest score, every "
                      "allowed key's exp(score - max) underflows to 0 and the row comes out all zeros, and a fully "
                      "masked row sends NaN back through the division. Set the masked scores to -inf first, then take "
                      "the softmax of what remains (rule 3).")
MASK_MULTIPLIES_HINT = ("the scores were multiplied by the mask: a masked key's score becomes 0, which still gets "
                        "weight exp(0); set masked scores to -inf before the softmax.")

POOLING_MUTANTS = [
    Mutant("ignores_score_fn", "score_fn was ignored (the dot product query @ keysᵀ is hard-coded): compute the scores with score_fn(query, keys), whatever scoring rule it is.", _pool_ignores_score_fn),
    Mutant("softmax_wrong_dim", WRONG_DIM_HINT, _pool_wrong_dim),
    Mutant("softmax_wrong_dim_global_max", WRONG_DIM_HINT, _pool_wrong_dim_global_max),
    Mutant("softmax_dim_1", "the softmax was taken over dim=1: that is the key dim only for a 2-D (S_q, S_k) input; with a batch (B, S_q, S_k) it normalises over the queries, with (B, H, ...) over the heads. Use dim=-1, the last dim, whatever the leading dims.", _pool_softmax_dim_1),
    Mutant("no_softmax", "the raw scores were used as weights: turn them into a distribution over the keys with a softmax over the last dim.", _pool_no_softmax),
    Mutant("mask_ignored", "the mask was ignored: set the scores to -inf where the mask is False before the softmax.", _pool_mask_ignored),
    Mutant("inverted_mask", "the mask is inverted: True means 'may attend', so fill the scores where the mask is False.", _pool_inverted_mask),
    Mutant("mask_after_softmax", "the mask was applied after the softmax, so the remaining weights no longer sum to 1: mask the scores with -inf before the softmax.", _pool_mask_after),
    Mutant("mask_multiplies_scores", MASK_MULTIPLIES_HINT, _pool_mask_multiplies),
    Mutant("neg_1e9_fully_masked", "a fully masked row got uniform weights: filling with -1e9 (or a large negative number) spreads the weight evenly when every key is masked; such a row must give zero weights and a zero context.", _pool_neg_1e9),
    Mutant("nan_fully_masked", "a fully masked row gave NaN: softmax over a row of -inf is 0/0; replace those rows with zeros (e.g. nan_to_num or torch.where).", _pool_nan_rows),
    Mutant("context_from_keys", "the context averages the keys: the weights say how much of each *value* to take, so context = weights @ values.", _pool_context_from_keys),
    Mutant("score_fn_args_swapped", "score_fn was called as score_fn(keys, query): its arguments are (query, keys), and it returns scores (..., S_q, S_k).", _pool_args_swapped),
    Mutant("score_fn_args_swapped_transposed", "score_fn was called as score_fn(keys, query) and the result transposed: that equals score_fn(query, keys) only for a symmetric score such as the dot product. Call score_fn(query, keys): its arguments are (query, keys) in that order.", _pool_args_swapped_transposed),
    Mutant("bmm_3d_only", BMM_HINT, _pool_bmm),
    Mutant("extra_sqrt_d_scaling", "the scores were divided by sqrt(D): score_fn already defines the score, so use score_fn(query, keys) exactly as it returns it.", _pool_extra_scaling),
    Mutant("inplace_nan_fix", INPLACE_HINT, _pool_inplace_nan_fix),
    # Also names the same mistake made after the softmax (_pool_mask_after_renormalised): their
    # outputs agree on every case that either fails.
    Mutant("max_before_masking", MASK_AFTER_MAX_HINT, _pool_max_before_masking),
    Mutant("no_max_subtraction", "exp(scores) overflowed to inf (inf/inf = NaN) on large scores: a softmax written by hand must subtract each row's max first (chapter 00, section 2.6), or use torch.softmax, which rule 2 allows.", _pool_no_max_subtraction),
    Mutant("additive_inf_bias", ADDITIVE_BIAS_HINT, _pool_additive_bias),
]


# Correct answers written differently: they must pass.
def _v_pool_manual_softmax(query, keys, values, score_fn, mask=None):
    scores = score_fn(query, keys)
    if mask is not None:
        scores = torch.where(mask, scores, torch.tensor(NEG_INF, dtype=scores.dtype))
    m = scores.amax(dim=-1, keepdim=True)
    e = torch.exp(scores - torch.where(torch.isinf(m), torch.zeros_like(m), m))
    w = e / e.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(e.dtype).tiny)
    return torch.einsum("...qk,...kd->...qd", w, values), w


def _v_pool_float64_inside(query, keys, values, score_fn, mask=None):
    scores = score_fn(query, keys).double()
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), NEG_INF)
    w = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return (w @ values.double()).to(values.dtype), w.to(values.dtype)


def _v_pool_row_loop(query, keys, values, score_fn, mask=None):
    assert query.size(-1) == keys.size(-1), "query and keys must share D"  # an assert is fine
    scores = score_fn(query, keys)  # (..., S_q, S_k)
    if mask is not None:
        mask = mask.expand(scores.shape)
    rows = []
    for i in range(scores.size(-2)):  # one query row at a time
        s = scores[..., i, :]
        if mask is not None:
            s = s.masked_fill(~mask[..., i, :], NEG_INF)
        rows.append(torch.softmax(s, dim=-1).nan_to_num(0.0))
    w = torch.stack(rows, dim=-2)
    return w @ values, w


POOLING_EXERCISE = Exercise(
    name="attention_pooling",
    reference=ref.attention_pooling,
    make_cases=_pooling_cases,
    mutants=POOLING_MUTANTS,
    variants=[Variant("where_manual_softmax_einsum", _v_pool_manual_softmax),
              Variant("float64_inside", _v_pool_float64_inside, demo=True), Variant("row_loop", _v_pool_row_loop)],
    output_names=("context", "weights"),
    rescale=_pooling_rescale,
    scale_names=_pooling_scale_names,
    contract=Contract("""Attention as a weighted average of the values, for any scoring rule.

    query: (..., S_q, D)   keys: (..., S_k, D)   values: (..., S_k, D_v)
    score_fn(query, keys) -> scores (..., S_q, S_k): use them exactly as returned (no extra scaling)
    mask: bool, broadcastable to (..., S_q, S_k), True = may attend; or None
    Returns context (..., S_q, D_v) and weights (..., S_q, S_k): the weights are the softmax of
    the scores over the keys (masked keys get weight 0), and context == weights @ values.
    A fully masked query row gets zero weights and a zero context.
    """, forbid=(SDPA, MHA), grad="query, keys and values (fully masked rows included)"),
)
check_attention_pooling = register(POOLING_EXERCISE)
