"""Checks for chapter 02 — additive (Bahdanau) attention."""
import math
from dataclasses import replace

import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import reference as ref
from .._guard import unguarded
from ._contract import Contract
from ._core import (Case, Exercise, Mutant, Variant, generator, layout_judge, parameter_layout, randn,
                    random_padding_mask, rng)
from ._forbid import MHA, SDPA
from ._registry import register

__all__ = ["check_AdditiveAttention"]

F64 = torch.float64
NEG_INF = float("-inf")


# ---------------------------------------------------------------- the parameters the check loads
def _layout(dq: int, dk: int, attn_dim: int) -> dict:
    """The parameters the contract names, with their shapes (nn.Linear stores (out, in))."""
    return {"W_q.weight": [attn_dim, dq], "W_k.weight": [attn_dim, dk], "w_v.weight": [1, attn_dim]}


BIAS_HINT = ("the nn.Linear layers have biases: create W_q, W_k and w_v with bias=False, as the exercise "
             "states (score = w_vᵀ tanh(W_q q + W_k k) has no bias terms).")
NAMES_HINT = ("use the attribute names the exercise gives: self.W_q, self.W_k and self.w_v, each an nn.Linear "
              "(the check loads its weights into them by name).")
SHAPES_HINT = ("nn.Linear(in_features, out_features) stores a weight of shape (out, in): W_q = nn.Linear(query_dim, "
               "attn_dim), W_k = nn.Linear(key_dim, attn_dim), w_v = nn.Linear(attn_dim, 1).")
HINTS = {"bias": BIAS_HINT, "no_bias": NAMES_HINT, "names": NAMES_HINT, "shapes": SHAPES_HINT}


# ---------------------------------------------------------------- cases
def _scores_by_hand(state: dict, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """w_vᵀ tanh(W_q q_i + W_k k_j), written out here (the reference is not available to the grader's
    re-run, which rebuilds these cases)."""
    feats = torch.tanh((q @ state["W_q.weight"].T).unsqueeze(2) + (k @ state["W_k.weight"].T).unsqueeze(1))
    return (feats @ state["w_v.weight"].T).squeeze(-1)  # (B, S_q, S_k)


def _case_scores(case) -> torch.Tensor:
    return _scores_by_hand(case.init["state"], case.args[0].float(), case.args[1].float())


def _cases(seed: int) -> list:
    """The parameters first, then typical sizes and masks, gradients (float64, for the inputs and
    W_q, W_k, w_v), then the edges (S = 1, attn_dim = 1, leading masked keys, a masked key holding
    the largest score, large scores, fully masked rows), then random sizes."""
    r, g = rng(seed), generator(seed)
    cases = []
    dims = (4, 6, 8)
    cases.append(Case(f"the parameters of AdditiveAttention{dims}: names and shapes",
                      init={"ctor": dims, "seed": seed, "buffers": True}, run=parameter_layout,
                      judge=layout_judge(f"AdditiveAttention{dims}", _layout(*dims), HINTS)))

    def add(label, batch, s_q, s_k, dq, dk, attn_dim, d_v, mask=None, scale=1.0, grad=False, dtype=torch.float32,
            v_scale=1.0, hide_best=False, tol=None):
        # Random parameters (loaded into your module by name), large enough that tanh bends.
        state = {name: randn(*shape, gen=g) for name, shape in _layout(dq, dk, attn_dim).items()}
        state["w_v.weight"] = state["w_v.weight"] * v_scale
        q = randn(batch, s_q, dq, gen=g, scale=scale, dtype=dtype)
        k = randn(batch, s_k, dk, gen=g, scale=scale, dtype=dtype)
        v = randn(batch, s_k, d_v, gen=g, dtype=dtype)
        if hide_best:  # mask out the key with the largest score of every row
            best = _scores_by_hand(state, q.float(), k.float()).argmax(dim=-1, keepdim=True)
            mask = torch.ones(batch, s_q, s_k, dtype=torch.bool).scatter(-1, best, False)
        label = (f"{label}: AdditiveAttention({dq}, {dk}, {attn_dim}), query {tuple(q.shape)}, "
                 f"keys {tuple(k.shape)}, values {tuple(v.shape)}")
        if mask is not None:
            label += f", mask {tuple(mask.shape)}"
        if dtype == F64:
            label += ", float64"
        init = {"ctor": (dq, dk, attn_dim), "ctor_kwargs": {}, "seed": seed, "state": state}
        cases.append(Case(label, (q, k, v), {"mask": mask} if mask is not None else {}, init=init, grad=grad, tol=tol))

    add("S_q ≠ S_k, all sizes different", 2, 3, 5, 4, 6, 8, 3)
    add("S_q = S_k (each query must see every key)", 2, 4, 4, 3, 3, 5, 2)
    add("S_q = S_k, query_dim ≠ key_dim", 3, 5, 5, 2, 6, 4, 4)
    add("query_dim = key_dim, S_q ≠ S_k", 2, 3, 6, 5, 5, 4, 3)
    add("mask: some keys hidden", 2, 4, 6, 5, 4, 6, 3, mask=random_padding_mask(2, 4, 6, g))
    key_pad = torch.ones(3, 1, 6, dtype=torch.bool)
    key_pad[0, :, 3:] = False
    key_pad[2] = False  # an empty source sentence: every query row is fully masked
    add("padding mask (B, 1, S_k), one sequence of length 0", 3, 4, 6, 4, 5, 6, 3, mask=key_pad)
    add("causal mask (S_q, S_k)", 2, 5, 5, 4, 4, 4, 3, mask=torch.ones(5, 5, dtype=torch.bool).tril())
    add("gradients (float64) for the inputs and W_q, W_k, w_v", 2, 3, 4, 3, 5, 4, 2, grad=True, dtype=F64)
    grad_mask = random_padding_mask(2, 4, 5, g, fully_masked_row=True)
    grad_mask[1, 2, :3] = False  # a row whose leading keys are masked
    add("gradients (float64) with a fully masked row", 2, 4, 5, 4, 3, 5, 3, mask=grad_mask, grad=True, dtype=F64)
    add("a single decoder step (S_q = 1)", 2, 1, 6, 5, 3, 7, 4)
    add("attn_dim = 1", 2, 3, 4, 3, 3, 1, 2)
    lead_mask = torch.ones(2, 3, 6, dtype=torch.bool)
    lead_mask[:, :, :4] = False  # the softmax of every row starts with -inf
    add("the first 4 keys masked in every row", 2, 3, 6, 4, 5, 6, 3, mask=lead_mask)
    add("the key with the largest score is masked in every row", 2, 4, 5, 3, 4, 6, 3, hide_best=True)
    # Scores of several hundred: float32 rounds them by ~1e-4, so an answer computed in float64 differs
    # from the float32 reference by up to ~1e-4 in the output (seed 2001: 1.7e-5 at -0.068 failed 1e-5 + 1e-4·|x|).
    add("large-magnitude inputs and scores (tanh saturates, w_v ~ 100)", 2, 4, 5, 6, 4, 8, 3, scale=20.0, v_scale=100.0,
        tol=(3e-4, 1e-3))
    add("mask with a fully masked query row, S_q = S_k", 2, 5, 5, 3, 4, 6, 2,
        mask=random_padding_mask(2, 5, 5, g, fully_masked_row=True))
    for i in range(4):  # random sizes, odd ones included; half of them with S_q = S_k
        b, s_q = r.randint(1, 3), r.randint(1, 7)
        s_k = s_q if i % 2 == 0 else r.randint(1, 7)
        dq, dk, attn_dim, d_v = (r.choice([1, 2, 3, 5, 8]) for _ in range(4))
        m = None
        if i % 2 == 1:
            m = torch.rand(b, s_q, s_k, generator=g) > 0.4
            m[..., 0] = True
        add(f"random case {i + 1}", b, s_q, s_k, dq, dk, attn_dim, d_v, mask=m)
    return cases


def _rescale(case: Case, c: float) -> Case:
    """The same case with every score multiplied by c (w_v scaled by c)."""
    state = dict(case.init["state"])
    state["w_v.weight"] = state["w_v.weight"] * c
    return replace(case, init={**case.init, "state": state})


def _scale_names(case: Case) -> dict:
    dq, dk, attn_dim = case.init["ctor"]
    return {"1 (no scaling)": 1.0, "1/sqrt(attn_dim)": 1 / math.sqrt(attn_dim), "1/attn_dim": 1 / attn_dim,
            "1/sqrt(query_dim)": 1 / math.sqrt(dq), "1/sqrt(key_dim)": 1 / math.sqrt(dk),
            "sqrt(attn_dim)": math.sqrt(attn_dim)}


# ---------------------------------------------------------------- mutants
_Ref = unguarded(ref.AdditiveAttention)


def _attend(scores, values, mask, dim=-1, fill=NEG_INF, nan_to_zero=True):
    """Masked softmax over the keys and the weighted sum of the values, mistakes switchable."""
    if mask is not None:
        scores = scores.masked_fill(~mask, fill)
    w = torch.softmax(scores, dim=dim)
    if nan_to_zero:
        w = w.nan_to_num(0.0)
    return w @ values, w


class _NoTanh(_Ref):
    def forward(self, query, keys, values, mask=None):
        features = self.W_q(query).unsqueeze(2) + self.W_k(keys).unsqueeze(1)
        return _attend(self.w_v(features).squeeze(-1), values, mask)


class _TanhOnEachProjection(_Ref):
    def forward(self, query, keys, values, mask=None):
        features = torch.tanh(self.W_q(query)).unsqueeze(2) + torch.tanh(self.W_k(keys)).unsqueeze(1)
        return _attend(self.w_v(features).squeeze(-1), values, mask)


class _TanhOutside(_Ref):
    def forward(self, query, keys, values, mask=None):
        features = self.W_q(query).unsqueeze(2) + self.W_k(keys).unsqueeze(1)
        return _attend(torch.tanh(self.w_v(features).squeeze(-1)), values, mask)


class _PairsQiWithKi(_Ref):
    """Tiles queries and keys with `repeat` for both: entry (i, j) pairs key j with query (i·S_k + j) mod S_q.

    With S_q = S_k that is query j with key j — the q_i + k_i pairing, the same for every row.
    """

    def forward(self, query, keys, values, mask=None):
        B, S_q, _ = query.shape
        S_k = keys.size(1)
        q = self.W_q(query).repeat(1, S_k, 1)  # (B, S_q*S_k, A), should be repeat_interleave
        k = self.W_k(keys).repeat(1, S_q, 1)  # (B, S_q*S_k, A)
        scores = self.w_v(torch.tanh(q + k)).view(B, S_q, S_k)
        return _attend(scores, values, mask)


class _ViewNotTranspose(_Ref):
    """Builds (B, S_k, S_q) scores and reshapes them with view instead of transposing."""

    def forward(self, query, keys, values, mask=None):
        B, S_q, _ = query.shape
        S_k = keys.size(1)
        features = torch.tanh(self.W_q(query).unsqueeze(1) + self.W_k(keys).unsqueeze(2))  # (B, S_k, S_q, A)
        scores = self.w_v(features).squeeze(-1).view(B, S_q, S_k)
        return _attend(scores, values, mask)


class _DotProduct(_Ref):
    def forward(self, query, keys, values, mask=None):
        scores = self.W_q(query) @ self.W_k(keys).transpose(-2, -1)
        return _attend(scores, values, mask)


class _ProjectionsSwapped(_Ref):
    def forward(self, query, keys, values, mask=None):
        features = torch.tanh(self.W_k(query).unsqueeze(2) + self.W_q(keys).unsqueeze(1))
        return _attend(self.w_v(features).squeeze(-1), values, mask)


class _WvIgnored(_Ref):
    def forward(self, query, keys, values, mask=None):
        features = torch.tanh(self.W_q(query).unsqueeze(2) + self.W_k(keys).unsqueeze(1))
        return _attend(features.sum(-1), values, mask)


class _ScoreMixin(_Ref):
    def scores(self, query, keys):
        features = torch.tanh(self.W_q(query).unsqueeze(2) + self.W_k(keys).unsqueeze(1))
        return self.w_v(features).squeeze(-1)


class _WrongDim(_ScoreMixin):
    def forward(self, query, keys, values, mask=None):
        return _attend(self.scores(query, keys), values, mask, dim=1)


class _ScaledBySqrtAttnDim(_ScoreMixin):
    def forward(self, query, keys, values, mask=None):
        return _attend(self.scores(query, keys) / math.sqrt(self.W_q.out_features), values, mask)


class _MaskIgnored(_ScoreMixin):
    def forward(self, query, keys, values, mask=None):
        return _attend(self.scores(query, keys), values, None)


class _InvertedMask(_ScoreMixin):
    def forward(self, query, keys, values, mask=None):
        return _attend(self.scores(query, keys), values, None if mask is None else ~mask)


class _MaskAfterSoftmax(_ScoreMixin):
    def forward(self, query, keys, values, mask=None):
        w = torch.softmax(self.scores(query, keys), dim=-1)
        if mask is not None:
            w = w * mask
        return w @ values, w


class _MaskMultiplies(_ScoreMixin):
    def forward(self, query, keys, values, mask=None):
        scores = self.scores(query, keys)
        return _attend(scores if mask is None else scores * mask, values, None)


class _Neg1e9(_ScoreMixin):
    def forward(self, query, keys, values, mask=None):
        return _attend(self.scores(query, keys), values, mask, fill=-1e9)


class _NanRows(_ScoreMixin):
    def forward(self, query, keys, values, mask=None):
        return _attend(self.scores(query, keys), values, mask, nan_to_zero=False)


class _InplaceNanFix(_ScoreMixin):
    def forward(self, query, keys, values, mask=None):
        scores = self.scores(query, keys)
        if mask is not None:
            scores = scores.masked_fill(~mask, NEG_INF)
        w = torch.softmax(scores, dim=-1)
        w[w.isnan()] = 0.0  # in place on the softmax's output: the forward is right, backward breaks
        return w @ values, w


class _AdditiveInfBias(_ScoreMixin):
    def forward(self, query, keys, values, mask=None):
        scores = self.scores(query, keys)
        if mask is not None:
            scores = scores + torch.zeros(mask.shape, dtype=scores.dtype).masked_fill(~mask, NEG_INF)
        w = torch.softmax(scores, dim=-1)
        w = torch.where(torch.isnan(w), torch.zeros_like(w), w)
        return w @ values, w


class _ContextFromNanWeights(_ScoreMixin):
    def forward(self, query, keys, values, mask=None):
        scores = self.scores(query, keys)
        if mask is not None:
            scores = scores.masked_fill(~mask, NEG_INF)
        w = torch.softmax(scores, dim=-1)  # NaN in a fully masked row ...
        return (w @ values).nan_to_num(0.0), w.nan_to_num(0.0)  # ... multiplied into the context, cleaned after


class _LinearWithBias(_Ref):
    def __init__(self, query_dim, key_dim, attn_dim):
        super().__init__(query_dim, key_dim, attn_dim)
        self.W_q = nn.Linear(query_dim, attn_dim)  # bias=True by default
        self.W_k = nn.Linear(key_dim, attn_dim)
        self.w_v = nn.Linear(attn_dim, 1)


class _NamedV(nn.Module):
    def __init__(self, query_dim, key_dim, attn_dim):
        super().__init__()
        self.W_q = nn.Linear(query_dim, attn_dim, bias=False)
        self.W_k = nn.Linear(key_dim, attn_dim, bias=False)
        self.v = nn.Linear(attn_dim, 1, bias=False)  # the exercise calls it w_v

    def forward(self, query, keys, values, mask=None):
        features = torch.tanh(self.W_q(query).unsqueeze(2) + self.W_k(keys).unsqueeze(1))
        return _attend(self.v(features).squeeze(-1), values, mask)


class _LinearInOutSwapped(nn.Module):
    def __init__(self, query_dim, key_dim, attn_dim):
        super().__init__()
        self.W_q = nn.Linear(attn_dim, query_dim, bias=False)  # nn.Linear(in, out): the sizes are swapped
        self.W_k = nn.Linear(attn_dim, key_dim, bias=False)
        self.w_v = nn.Linear(1, attn_dim, bias=False)

    def forward(self, query, keys, values, mask=None):
        features = torch.tanh((query @ self.W_q.weight).unsqueeze(2) + (keys @ self.W_k.weight).unsqueeze(1))
        return _attend((features @ self.w_v.weight).squeeze(-1), values, mask)


WRONG_DIM_HINT = ("the softmax was taken over the query dim instead of the key dim (-1): each query's weights "
                  "over the keys must sum to 1.")
INPLACE_HINT = ("an in-place edit of the softmax's output (such as `w[w.isnan()] = 0` or `w.masked_fill_(...)`) "
                "gives the right forward values but breaks autograd, which needs that output for the backward "
                "pass: build a new tensor instead (torch.where(..., 0.0, w) or w.nan_to_num(0.0)).")
ADDITIVE_BIAS_HINT = ("the mask was applied by adding a -inf bias (scores + bias): the forward is right, but in a "
                      "fully masked row autograd sends NaN back through the addition into the scores and the "
                      "parameters; fill the scores with masked_fill(~mask, -inf) or torch.where(mask, scores, -inf), "
                      "which send no gradient through masked entries.")

MUTANTS = [
    Mutant("no_tanh", "the tanh is missing: score = w_vᵀ tanh(W_q q + W_k k); without it the score is linear and splits into a query part plus a key part.", _NoTanh),
    Mutant("tanh_on_each_projection", "the tanh was applied to each projection separately, tanh(W_q q) + tanh(W_k k): the score then splits into a query part plus a key part, the softmax over the keys cancels the query part, and every query gets the same weights. Apply one tanh to the sum: w_vᵀ tanh(W_q q + W_k k).", _TanhOnEachProjection),
    Mutant("tanh_after_w_v", "the tanh was applied after w_v: apply it to W_q q + W_k k (the hidden layer), then project with w_v.", _TanhOutside),
    Mutant("pairs_q_i_with_k_i", "score (i, j) does not pair query i with key j (q + k without unsqueeze pairs q_i with k_i only; `repeat` on both tiles the wrong query): broadcast W_q(query).unsqueeze(2) + W_k(keys).unsqueeze(1) to (B, S_q, S_k, attn_dim).", _PairsQiWithKi),
    Mutant("view_instead_of_transpose", "the scores were built as (B, S_k, S_q) and reshaped with view, which scrambles query and key: build them as (B, S_q, S_k) (query.unsqueeze(2) + keys.unsqueeze(1)) or use transpose.", _ViewNotTranspose),
    Mutant("dot_product_scores", "the scores are dot products (W_q q)·(W_k k): additive attention scores with w_vᵀ tanh(W_q q + W_k k).", _DotProduct),
    Mutant("projections_swapped", "W_q was applied to the keys and W_k to the queries: project the queries with W_q and the keys with W_k.", _ProjectionsSwapped),
    Mutant("w_v_ignored", "w_v was not used (the tanh features were summed instead): score = w_v(tanh(W_q q + W_k k)), a learned weighting of the attn_dim features.", _WvIgnored),
    Mutant("softmax_wrong_dim", WRONG_DIM_HINT, _WrongDim),
    Mutant("scaled_by_sqrt_attn_dim", "the scores were divided by sqrt(attn_dim): additive attention uses w_vᵀ tanh(W_q q + W_k k) as it is, without the scaling of dot-product attention.", _ScaledBySqrtAttnDim),
    Mutant("mask_ignored", "the mask was ignored: set the scores to -inf where the mask is False before the softmax.", _MaskIgnored),
    Mutant("inverted_mask", "the mask is inverted: True means 'may attend', so fill the scores where the mask is False.", _InvertedMask),
    Mutant("mask_after_softmax", "the mask was applied after the softmax, so the remaining weights no longer sum to 1: mask the scores with -inf before the softmax.", _MaskAfterSoftmax),
    Mutant("mask_multiplies_scores", "the scores were multiplied by the mask: a masked key's score becomes 0, which still gets weight exp(0); set masked scores to -inf before the softmax.", _MaskMultiplies),
    Mutant("neg_1e9_fully_masked", "a fully masked row got uniform weights: filling with -1e9 (or a large negative number) spreads the weight evenly when every key is masked; such a row must give zero weights and a zero context.", _Neg1e9),
    Mutant("nan_fully_masked", "a fully masked row gave NaN: softmax over a row of -inf is 0/0; replace those rows with zeros (e.g. nan_to_num or torch.where).", _NanRows),
    Mutant("inplace_nan_fix", INPLACE_HINT, _InplaceNanFix),
    Mutant("additive_inf_bias", ADDITIVE_BIAS_HINT, _AdditiveInfBias),
    Mutant("context_from_nan_weights", "the context was computed from weights that still hold NaN (a fully masked row) and cleaned afterwards: the forward is right, but NaN · 0 sends NaN back into dL/dvalues. Zero the weights of fully masked rows first (a new tensor: masked_fill, torch.where or nan_to_num), then compute weights @ values.", _ContextFromNanWeights),
    Mutant("linear_with_bias", BIAS_HINT, _LinearWithBias),
    Mutant("attribute_named_v", NAMES_HINT, _NamedV),
    Mutant("linear_in_out_swapped", SHAPES_HINT, _LinearInOutSwapped),
]


# ---------------------------------------------------------------- correct answers written differently
class _VOtherOrderEinsum(nn.Module):
    """Parameters created in another order; einsum for w_v; torch.where and a hand-written softmax."""

    def __init__(self, query_dim, key_dim, attn_dim):
        super().__init__()
        self.w_v = nn.Linear(attn_dim, 1, bias=False)
        self.W_k = nn.Linear(key_dim, attn_dim, bias=False)
        self.W_q = nn.Linear(query_dim, attn_dim, bias=False)

    def forward(self, query, keys, values, mask=None):
        feats = torch.tanh(self.W_q(query)[:, :, None, :] + self.W_k(keys)[:, None, :, :])  # (B, S_q, S_k, A)
        scores = torch.einsum("bqka,a->bqk", feats, self.w_v.weight[0])
        if mask is not None:
            scores = torch.where(mask, scores, torch.full_like(scores, NEG_INF))
        m = scores.amax(dim=-1, keepdim=True)
        e = torch.exp(scores - torch.where(torch.isinf(m), torch.zeros_like(m), m))
        w = e / e.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(e.dtype).tiny)
        return torch.einsum("bqk,bkd->bqd", w, values), w


class _VDecoderStepsFloat64(nn.Module):
    """One query (decoder step) at a time, as in Bahdanau et al., computed in float64."""

    def __init__(self, query_dim, key_dim, attn_dim):
        super().__init__()
        self.W_q = nn.Linear(query_dim, attn_dim, bias=False)
        self.W_k = nn.Linear(key_dim, attn_dim, bias=False)
        self.w_v = nn.Linear(attn_dim, 1, bias=False)

    def forward(self, query, keys, values, mask=None):
        assert query.dim() == 3 and keys.dim() == 3, "query and keys must be (B, S, D)"  # an assert is fine
        k_proj = F.linear(keys.double(), self.W_k.weight.double())  # (B, S_k, A)
        full = None if mask is None else mask.expand(query.size(0), query.size(1), keys.size(1))
        ws = []
        for i in range(query.size(1)):
            q_proj = F.linear(query[:, i].double(), self.W_q.weight.double())  # (B, A)
            s = F.linear(torch.tanh(q_proj.unsqueeze(1) + k_proj), self.w_v.weight.double()).squeeze(-1)  # (B, S_k)
            if full is not None:
                s = s.masked_fill(~full[:, i], NEG_INF)
            ws.append(torch.softmax(s, dim=-1).nan_to_num(0.0))
        w = torch.stack(ws, dim=1)  # (B, S_q, S_k)
        return (w @ values.double()).to(values.dtype), w.to(values.dtype)


class _VExpandCat(nn.Module):
    """Expands both projections to (B, S_q, S_k, A) explicitly; the weights through a Sequential."""

    def __init__(self, query_dim, key_dim, attn_dim):
        super().__init__()
        self.W_k = nn.Linear(key_dim, attn_dim, bias=False)
        self.W_q = nn.Linear(query_dim, attn_dim, bias=False)
        self.w_v = nn.Linear(attn_dim, 1, bias=False)
        self.act = nn.Tanh()

    def forward(self, query, keys, values, mask=None):
        B, S_q, S_k = query.size(0), query.size(1), keys.size(1)
        q = self.W_q(query).unsqueeze(2).expand(B, S_q, S_k, -1)
        k = self.W_k(keys).unsqueeze(1).expand(B, S_q, S_k, -1)
        scores = self.w_v(self.act(q + k)).squeeze(-1)
        if mask is not None:
            scores = scores.masked_fill(~mask, NEG_INF)
        w = torch.softmax(scores, dim=-1)
        w = torch.where(torch.isnan(w), torch.zeros_like(w), w)
        return torch.bmm(w, values), w


EXERCISE = Exercise(
    name="AdditiveAttention",
    reference=ref.AdditiveAttention,
    make_cases=_cases,
    kind="class",
    mutants=MUTANTS,
    variants=[Variant("other_parameter_order_einsum", _VOtherOrderEinsum),
              Variant("decoder_steps_float64", _VDecoderStepsFloat64, demo=True), Variant("expand_and_bmm", _VExpandCat)],
    output_names=("context", "weights"),
    rescale=_rescale,
    scale_names=_scale_names,
    input_names=("query", "keys", "values"),
    contract=Contract("""Additive (Bahdanau) attention: score(q_i, k_j) = w_vᵀ tanh(W_q q_i + W_k k_j).

    __init__(query_dim, key_dim, attn_dim) creates these three layers (in any order), and no
    other parameters or buffers; the check loads its weights into them by name:
        self.W_q = nn.Linear(query_dim, attn_dim, bias=False)
        self.W_k = nn.Linear(key_dim, attn_dim, bias=False)
        self.w_v = nn.Linear(attn_dim, 1, bias=False)
    forward(query, keys, values, mask=None):
        query: (B, S_q, query_dim)   keys: (B, S_k, key_dim)   values: (B, S_k, D_v)
        mask: bool, broadcastable to (B, S_q, S_k), True = may attend; or None
        Returns context (B, S_q, D_v) and weights (B, S_q, S_k): the weights are the softmax of
        the scores over the keys (masked keys get weight 0), and context == weights @ values.
        A fully masked query row gets zero weights and a zero context.
    """, forbid=(SDPA, MHA), grad="query, keys, values, W_q, W_k and w_v (fully masked rows included)", kinds={"mask": "mask"}, scores=_case_scores),
)
check_AdditiveAttention = register(EXERCISE)
