"""Checks for chapter 01 — motivation: dot-product scores and attention pooling."""
import math

import torch

from .. import reference as ref
from ._core import Case, Exercise, Mutant, generator, randn, random_padding_mask, rng
from ._forbid import MHA, SDPA
from ._registry import register

__all__ = ["check_dot_product_score", "check_attention_pooling"]


# ---------------------------------------------------------------- dot_product_score
def _score_cases(seed: int) -> list:
    r, g = rng(seed), generator(seed)
    cases = []

    def add(label, lead, s_q, s_k, d, scale=1.0):
        q, k = randn(*lead, s_q, d, gen=g, scale=scale), randn(*lead, s_k, d, gen=g, scale=scale)
        cases.append(Case(f"{label}: query {tuple(q.shape)}, keys {tuple(k.shape)}", (q, k)))

    add("no batch dims, S_q = S_k", (), 4, 4, 8)
    add("no batch dims, S_q ≠ S_k", (), 3, 6, 5)
    add("a single query (S_q = 1)", (2,), 1, 5, 4)
    add("a single query and key (S = 1)", (1,), 1, 1, 3)
    add("D = 1", (2,), 3, 2, 1)
    add("batch dim (B)", (3,), 5, 7, 6)
    add("batch and heads (B, H)", (2, 3), 4, 6, 5)
    add("large-magnitude inputs", (2,), 3, 4, 16, scale=30.0)
    for i in range(5):  # random shapes, odd sizes included
        lead = tuple(r.randint(1, 3) for _ in range(r.randint(0, 2)))
        add(f"random case {i + 1}", lead, r.randint(1, 8), r.randint(1, 8), r.choice([1, 3, 4, 7, 16]))
    return cases


def _score_scaled(query, keys):
    return query @ keys.transpose(-2, -1) / math.sqrt(query.size(-1))


def _score_transposed(query, keys):
    return keys @ query.transpose(-2, -1)


def _score_cosine(query, keys):
    qn = query / query.norm(dim=-1, keepdim=True)
    kn = keys / keys.norm(dim=-1, keepdim=True)
    return qn @ kn.transpose(-2, -1)


SCORE_MUTANTS = [
    Mutant("scaled_by_sqrt_d", "the scores were divided by sqrt(D): this exercise asks for the plain, unscaled dot product query @ keysᵀ (the scaling comes in chapter 03).", _score_scaled),
    Mutant("keys_times_query", "the scores are transposed (keys @ queryᵀ gives (..., S_k, S_q)): compute query @ keys.transpose(-2, -1) so that row i holds query i's score with every key.", _score_transposed),
    Mutant("cosine_similarity", "the query and key vectors were normalised (cosine similarity): the dot-product score is q·k without dividing by the norms.", _score_cosine),
]

SCORE_EXERCISE = Exercise(
    name="dot_product_score",
    reference=ref.dot_product_score,
    make_cases=_score_cases,
    mutants=SCORE_MUTANTS,
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


def _pooling_cases(seed: int) -> list:
    r, g = rng(seed), generator(seed)
    cases = []

    def add(label, lead, s_q, s_k, d, d_v, score_fn, mask=None, scale=1.0):
        q, k = randn(*lead, s_q, d, gen=g, scale=scale), randn(*lead, s_k, d, gen=g, scale=scale)
        v = randn(*lead, s_k, d_v, gen=g)
        dims = f"query {tuple(q.shape)}, keys {tuple(k.shape)}, values {tuple(v.shape)}, score_fn={score_fn.__name__}"
        if mask is not None:
            dims += f", mask {tuple(mask.shape)}"
        kwargs = {"mask": mask} if mask is not None else {}
        cases.append(Case(f"{label}: {dims}", (q, k, v, score_fn), kwargs))

    def bilinear(d):
        return bilinear_score(randn(d, d, gen=g))

    add("dot product, S_q = S_k", (), 4, 4, 6, 6, dot_score)
    add("dot product, S_q ≠ S_k, D ≠ D_v", (2,), 3, 6, 5, 7, dot_score)
    add("scaled dot product, batch and heads", (2, 3), 5, 7, 4, 3, scaled_dot_score)
    add("a random bilinear score qᵀ W k", (2,), 4, 5, 3, 2, bilinear(3))
    add("a random bilinear score, S_q = S_k", (3,), 5, 5, 4, 4, bilinear(4))
    add("negative squared distance (Nadaraya-Watson)", (2,), 6, 4, 2, 3, neg_sq_distance_score)
    add("a single query and key (S = 1)", (1,), 1, 1, 4, 3, dot_score)
    add("one query, many keys", (2,), 1, 8, 4, 5, bilinear(4))
    add("large-magnitude scores", (2,), 4, 5, 16, 4, dot_score, scale=5.0)
    add("mask: some keys hidden", (2,), 4, 6, 8, 8, scaled_dot_score, mask=random_padding_mask(2, 4, 6, g))
    add("mask with a fully masked query row", (2,), 4, 5, 3, 3, bilinear(3),
        mask=random_padding_mask(2, 4, 5, g, fully_masked_row=True))
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    add("causal mask (S_q, S_k) broadcast over B", (3,), 5, 5, 4, 2, dot_score, mask=causal)
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


def _pool(scores, values, mask, dim=-1, fill=None, mask_after=False):
    """attention_pooling from given scores, with one mistake switched on."""
    if mask is not None and mask_after:
        w = torch.softmax(scores, dim=dim) * mask
    elif mask is not None and fill is not None:
        w = torch.softmax(scores.masked_fill(~mask, fill), dim=dim)
    elif mask is not None:
        w = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=dim).nan_to_num(0.0)
    else:
        w = torch.softmax(scores, dim=dim)
    return w @ values, w


def _pool_ignores_score_fn(query, keys, values, score_fn, mask=None):
    return _pool(query @ keys.transpose(-2, -1), values, mask)


def _pool_wrong_dim(query, keys, values, score_fn, mask=None):
    return _pool(score_fn(query, keys), values, mask, dim=-2)


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


def _pool_neg_1e9(query, keys, values, score_fn, mask=None):
    return _pool(score_fn(query, keys), values, mask, fill=-1e9)


def _pool_nan_rows(query, keys, values, score_fn, mask=None):
    return _pool(score_fn(query, keys), values, mask, fill=float("-inf"))


def _pool_context_from_keys(query, keys, values, score_fn, mask=None):
    _, w = _pool(score_fn(query, keys), values, mask)
    return w @ keys, w


POOLING_MUTANTS = [
    Mutant("ignores_score_fn", "score_fn was ignored (the dot product query @ keysᵀ is hard-coded): compute the scores with score_fn(query, keys), whatever scoring rule it is.", _pool_ignores_score_fn),
    Mutant("softmax_wrong_dim", "the softmax was taken over the query dim (-2) instead of the key dim (-1): each query's weights over the keys must sum to 1.", _pool_wrong_dim),
    Mutant("no_softmax", "the raw scores were used as weights: turn them into a distribution over the keys with a softmax over the last dim.", _pool_no_softmax),
    Mutant("mask_ignored", "the mask was ignored: set the scores to -inf where the mask is False before the softmax.", _pool_mask_ignored),
    Mutant("inverted_mask", "the mask is inverted: True means 'may attend', so fill the scores where the mask is False.", _pool_inverted_mask),
    Mutant("mask_after_softmax", "the mask was applied after the softmax, so the remaining weights no longer sum to 1: mask the scores with -inf before the softmax.", _pool_mask_after),
    Mutant("neg_1e9_fully_masked", "a fully masked row got uniform weights: filling with -1e9 (or a large negative number) spreads the weight evenly when every key is masked; such a row must give zero weights and a zero context.", _pool_neg_1e9),
    Mutant("nan_fully_masked", "a fully masked row gave NaN: softmax over a row of -inf is 0/0; replace those rows with zeros (e.g. nan_to_num or torch.where).", _pool_nan_rows),
    Mutant("context_from_keys", "the context averages the keys: the weights say how much of each *value* to take, so context = weights @ values.", _pool_context_from_keys),
]

POOLING_EXERCISE = Exercise(
    name="attention_pooling",
    reference=ref.attention_pooling,
    make_cases=_pooling_cases,
    forbidden=(SDPA, MHA),
    mutants=POOLING_MUTANTS,
    output_names=("context", "weights"),
)
check_attention_pooling = register(POOLING_EXERCISE)
