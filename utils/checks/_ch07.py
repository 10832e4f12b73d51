"""Checks for chapter 07 — visualising attention: entropy per query, attention rollout."""
import math

import torch

from .. import reference as ref
from ..reference._common import masked_softmax_impl
from ._contract import Contract
from ._core import Case, Exercise, Mutant, Variant, generator, randn, rng
from ._guards import DTYPE
from ._registry import register

__all__ = ["check_attention_entropy", "check_attention_rollout"]


def _weights(*shape, gen, scale=1.0, mask=None):
    """Attention weights: a masked softmax of random scores, rows sum to 1 (or 0 if fully masked)."""
    return masked_softmax_impl(randn(*shape, gen=gen, scale=scale), mask)


# ---------------------------------------------------------------- attention_entropy
def _entropy_cases(seed: int) -> list:
    r, g = rng(seed), generator(seed)
    cases = []

    def add(label, w):
        cases.append(Case(f"{label}: weights {tuple(w.shape)}", (w,)))

    add("(B, H, S_q, S_k), S_q ≠ S_k", _weights(2, 3, 4, 6, gen=g))
    add("(S_q, S_k), no leading dims", _weights(5, 5, gen=g))
    add("a single query (S_q = 1)", _weights(2, 1, 7, gen=g))
    add("a single key (S_k = 1): entropy 0", _weights(2, 4, 1, gen=g))
    add("uniform rows: entropy ln S_k", torch.full((2, 3, 5), 1 / 5))
    add("one-hot rows: entropy 0", torch.eye(6)[torch.randperm(6, generator=g)].expand(2, 6, 6).clone())
    mask = torch.rand(2, 5, 7, generator=g) > 0.4
    mask[..., 0] = True
    add("masked keys (zero weights)", _weights(2, 5, 7, gen=g, mask=mask))
    mask = torch.ones(2, 2, 4, 4, dtype=torch.bool).tril()
    mask[1, 0, 2] = False
    add("causal weights with a fully masked query row (all zeros)", _weights(2, 2, 4, 4, gen=g, mask=mask))
    add("peaked rows from large scores (some weights underflow to 0)", _weights(3, 4, 6, gen=g, scale=60.0))
    add("float64 weights", _weights(2, 3, 5, gen=g).double())
    tiny = _weights(2, 3, 6, gen=g)
    tiny[0, 0] = torch.tensor([1.0 - 1e-30, 1e-30, 0.0, 0.0, 0.0, 0.0])  # a weight of 1e-30: 0 · ln 0 nearby
    add("a weight of 1e-30 next to zeros", tiny)
    for i in range(4):
        lead = tuple(r.randint(1, 3) for _ in range(r.randint(0, 2)))
        s_q, s_k = r.randint(1, 8), r.randint(1, 8)
        m = None
        if i % 2:
            m = torch.rand(*lead, s_q, s_k, generator=g) > 0.5
            m[..., 0] = True
        add(f"random case {i + 1}", _weights(*lead, s_q, s_k, gen=g, scale=r.choice([0.5, 2.0, 8.0]), mask=m))
    return cases


def _entropy_log2(weights):
    return -torch.special.xlogy(weights, weights).sum(-1) / math.log(2.0)


def _entropy_no_minus(weights):
    return torch.special.xlogy(weights, weights).sum(-1)


def _entropy_nan_on_zero(weights):
    return -(weights * torch.log(weights)).sum(-1)


def _entropy_wrong_dim(weights):
    return -torch.special.xlogy(weights, weights).sum(-2)


def _entropy_normalised(weights):
    return -torch.special.xlogy(weights, weights).sum(-1) / math.log(weights.size(-1))


ENTROPY_MUTANTS = [
    Mutant("log2", "the entropy is in bits (log2); the exercise asks for nats: use the natural log (torch.log).", _entropy_log2),
    Mutant("missing_minus", "the minus sign is missing: entropy is -Σ w·ln w, which is ≥ 0.", _entropy_no_minus),
    Mutant("nan_on_zero_weights", "a zero weight gave NaN: 0 · ln 0 = 0 · (-inf) = NaN in floating point; treat 0 · ln 0 as 0 (torch.where(w > 0, w * w.log(), 0) or torch.special.xlogy(w, w)).",
           _entropy_nan_on_zero),
    Mutant("wrong_dim", "the sum ran over the query dim (-2); each query's distribution is a row over the keys: sum over dim=-1.", _entropy_wrong_dim),
    Mutant("normalised_by_log_S_k", "the entropy was divided by ln S_k (normalised entropy); return the plain entropy in nats.", _entropy_normalised),
]

ENTROPY_MUTANTS += [
    Mutant("float64_result", DTYPE.format(got="float64", want="float32"), lambda w: -torch.special.xlogy(w.double(), w.double()).sum(-1)),
    Mutant("float32_result", DTYPE.format(got="float32", want="float64"), lambda w: -torch.special.xlogy(w.float(), w.float()).sum(-1)),
]

ENTROPY_MUTANTS += [
    Mutant("keepdim", "the result kept the key dim as size 1, (..., S_q, 1): sum over dim=-1 without keepdim, so it returns (..., S_q).",
           lambda w: -torch.special.xlogy(w, w).sum(-1, keepdim=True)),
    Mutant("mean_over_keys", "the terms were averaged over the keys (mean) instead of summed: entropy is -Σ_j w_j ln w_j.",
           lambda w: -torch.special.xlogy(w, w).mean(-1)),
    Mutant("log10", "the entropy used log10; the exercise asks for nats: use the natural log (torch.log).",
           lambda w: -torch.special.xlogy(w, w).sum(-1) / math.log(10.0)),
    Mutant("missing_weight_factor", "the weight factor is missing: entropy is -Σ_j w_j · ln w_j, not -Σ_j ln w_j.",
           lambda w: -torch.where(w > 0, w.log(), torch.zeros_like(w)).sum(-1)),
]


# Correct answers written differently: they must pass.
def _v_entropy_where(weights):
    logw = torch.where(weights > 0, weights, torch.ones_like(weights)).log()  # ln 1 = 0 where w == 0
    return -(weights * logw).sum(dim=-1)


def _v_entropy_eps_float64(weights):
    w = weights.double()
    return (-(w * torch.log(w + 1e-300)).sum(-1)).to(weights.dtype)


def _v_entropy_loops(weights):
    flat = weights.reshape(-1, weights.size(-1))
    out = []
    for row in flat:
        h = 0.0
        for p in row.tolist():
            if p > 0:
                h -= p * math.log(p)
        out.append(h)
    return torch.tensor(out, dtype=weights.dtype).reshape(weights.shape[:-1])


check_attention_entropy = register(Exercise(
    name="attention_entropy",
    reference=ref.attention_entropy,
    make_cases=_entropy_cases,
    mutants=ENTROPY_MUTANTS,
    variants=[Variant("where_log", _v_entropy_where), Variant("float64_log_eps", _v_entropy_eps_float64, demo=True),
              Variant("python_loops", _v_entropy_loops)],
    contract=Contract("""Shannon entropy (in nats) of each query's attention distribution.

    weights: (..., S_q, S_k), each row sums to 1, or is all zeros for a fully masked query
    Returns (..., S_q): -Σ_j w_j · ln w_j over the key dim (dim -1), natural log.
    0 · ln 0 counts as 0: zero weights add nothing, and an all-zero row gives 0, never NaN.
    The result ranges from 0 (all weight on one key) to ln S_k (uniform).
    """, kinds={"weights": "tensor"}),
))


# ---------------------------------------------------------------- attention_rollout
def _rollout_cases(seed: int) -> list:
    r, g = rng(seed), generator(seed)
    cases = []

    def add(label, layers):
        B, H, S, _ = layers[0].shape
        cases.append(Case(f"{label}: {len(layers)} layer(s) of weights (B, H, S, S) = {(B, H, S, S)}", (layers,)))

    def stack(L, B, H, S, **kw):
        return [_weights(B, H, S, S, gen=g, **kw) for _ in range(L)]

    add("one layer", stack(1, 2, 3, 4))
    add("two layers", stack(2, 2, 3, 5))
    add("four layers, one head", stack(4, 1, 1, 5))
    add("three layers, S = 1", stack(3, 2, 2, 1))
    add("sharp attention from large scores", stack(3, 2, 4, 6, scale=8.0))
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    add("causal attention", stack(3, 2, 2, 6, mask=causal))
    pad = torch.ones(2, 1, 1, 5, dtype=torch.bool)
    pad[1, ..., 3:] = False  # the second sequence has 2 padding tokens ...
    pad_q = pad.transpose(-1, -2) & pad  # ... that neither attend nor are attended to: zero rows
    add("padding: zero rows and columns", stack(3, 2, 3, 5, mask=pad_q))
    dropped = [w * (torch.rand(w.shape, generator=g) > 0.3) / 0.7 for w in stack(2, 2, 2, 4)]
    add("weights after dropout (rows do not sum to 1)", dropped)
    for i in range(4):
        L, B, H, S = r.randint(2, 5), r.randint(1, 3), r.randint(1, 4), r.randint(2, 7)
        add(f"random case {i + 1}", stack(L, B, H, S, scale=r.choice([1.0, 3.0])))
    return cases


def _rollout_variant(layer_weights, order="left", residual=True, renorm=True, heads="mean", last_only=False,
                     renorm_dim=-1, product="matmul", first_only=False):
    if last_only:
        layer_weights = layer_weights[-1:]
    if first_only:
        layer_weights = layer_weights[:1]
    rollout = None
    for A in layer_weights:
        S = A.shape[-1]
        A = {"mean": A.mean(dim=1), "max": A.amax(dim=1), "sum": A.sum(dim=1), "keep": A}[heads]
        if residual:
            A = 0.5 * A + 0.5 * torch.eye(S, dtype=A.dtype)
        if renorm:
            A = A / A.sum(dim=renorm_dim, keepdim=True)
        if rollout is None:
            rollout = A
        elif product == "elementwise":
            rollout = A * rollout
        else:
            rollout = A @ rollout if order == "left" else rollout @ A
    return rollout.mean(dim=1) if heads == "keep" else rollout


ROLLOUT_MUTANTS = [
    Mutant("wrong_order", "the layers were multiplied in the wrong order (Ã_1 ··· Ã_L); rollout = Ã_L ··· Ã_1: multiply each new layer on the left, rollout = A @ rollout.",
           lambda lw: _rollout_variant(lw, order="right")),
    Mutant("no_residual", "the residual path is missing: add the identity, Ã = 0.5·A + 0.5·I, before renormalising.",
           lambda lw: _rollout_variant(lw, residual=False)),
    Mutant("no_renormalisation", "the rows were not renormalised after adding the identity: divide each row of 0.5·A + 0.5·I by its sum (rows of attention weights need not sum to 1, e.g. masked or dropped rows).",
           lambda lw: _rollout_variant(lw, renorm=False)),
    Mutant("max_over_heads", "the heads were combined with a max; Abnar & Zuidema average them: A.mean(dim=1).",
           lambda lw: _rollout_variant(lw, heads="max")),
    Mutant("sum_over_heads", "the heads were summed, which outweighs the identity by a factor H; average them: A.mean(dim=1).",
           lambda lw: _rollout_variant(lw, heads="sum")),
    Mutant("last_layer_only", "only the last layer was used: rollout multiplies the residual-adjusted attention of every layer.",
           lambda lw: _rollout_variant(lw, last_only=True)),
]

def _rollout_normalised_before_identity(layer_weights):
    rollout = None
    for A in layer_weights:
        A = A.mean(dim=1)
        A = A / A.sum(dim=-1, keepdim=True)  # an all-zero row (a padded query): 0 / 0
        A = 0.5 * A + 0.5 * torch.eye(A.size(-1), dtype=A.dtype)
        rollout = A if rollout is None else A @ rollout
    return rollout


ROLLOUT_MUTANTS += [
    Mutant("normalised_before_adding_identity", "the rows were normalised before adding the identity instead of after: an all-zero row (a padded query) gives 0 / 0 = NaN; add 0.5·I first, then divide each row by its sum.",
           _rollout_normalised_before_identity),
]

ROLLOUT_MUTANTS += [
    Mutant("renormalised_columns", "the renormalisation divided by the column sums (dim -2): each row of 0.5·A + 0.5·I must sum to 1, so divide by its row sum (dim=-1, keepdim=True).",
           lambda lw: _rollout_variant(lw, renorm_dim=-2)),
    Mutant("elementwise_product", "the layers were combined elementwise (A * rollout); rollout composes them as matrix products: rollout = A @ rollout.",
           lambda lw: _rollout_variant(lw, product="elementwise")),
    Mutant("heads_averaged_at_the_end", "each head was rolled out on its own and the heads averaged at the end; rollout averages the heads of each layer first (A.mean(dim=1)), then composes the layers.",
           lambda lw: _rollout_variant(lw, heads="keep")),
    Mutant("first_layer_only", "only the first layer was used (the loop returned or overwrote too early): rollout multiplies the residual-adjusted attention of every layer.",
           lambda lw: _rollout_variant(lw, first_only=True)),
]


# Correct answers written differently: they must pass.
def _v_rollout_plus_identity(layer_weights):
    """rownorm(A + I) equals rownorm(0.5·A + 0.5·I); the product built from the last layer down."""
    mats = []
    for A in layer_weights:
        A = A.mean(dim=1)
        A = A + torch.eye(A.size(-1), dtype=A.dtype).expand_as(A)
        mats.append(A / A.sum(dim=-1, keepdim=True))
    rollout = mats[-1]
    for A in reversed(mats[:-1]):
        rollout = rollout @ A  # Ã_L ··· Ã_l
    return rollout


def _v_rollout_float64_einsum(layer_weights):
    dtype = layer_weights[0].dtype
    rollout = None
    for A in layer_weights:
        A = A.double()
        S = A.size(-1)
        A = 0.5 * torch.einsum("bhij->bij", A) / A.size(1) + 0.5 * torch.eye(S, dtype=torch.float64)
        A = A / A.sum(-1, keepdim=True)
        rollout = A if rollout is None else torch.einsum("bij,bjk->bik", A, rollout)
    return rollout.to(dtype)


check_attention_rollout = register(Exercise(
    name="attention_rollout",
    reference=ref.attention_rollout,
    make_cases=_rollout_cases,
    mutants=ROLLOUT_MUTANTS,
    variants=[Variant("plus_identity_from_the_top", _v_rollout_plus_identity),
              Variant("float64_einsum", _v_rollout_float64_einsum, demo=True)],
    contract=Contract("""Attention rollout (Abnar & Zuidema, 2020): how much each output position draws on each input token.

    layer_weights: a list with one (B, H, S, S) tensor per layer, first layer first
    Returns (B, S, S): row i = position i after the last layer, column j = input token j.
    For each layer l: average over the heads, add the residual path and renormalise the rows,
        Ã_l = rownorm(0.5 · mean_h A_l + 0.5 · I)
    then compose through the layers, the last layer on the left:
        rollout = Ã_L · Ã_{L-1} ··· Ã_1
    Rows of A need not sum to 1 (masked or dropped weights): renormalise after adding I.
    """, kinds={"layer_weights": "tensor"}),
))
