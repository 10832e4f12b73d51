"""Checks for chapter 03 — scaled dot-product attention."""
import math
from dataclasses import replace

import torch

from .. import reference as ref
from ._contract import Contract, Dropout
from ._core import (DEFAULT_SECONDS, Budget, Case, Exercise, Mutant, Variant, describe, generator, randn,
                    random_padding_mask, reseed, rng)
from ._forbid import MHA, SDPA
from ._guards import DTYPE, INPLACE, dropout_hint
from ._registry import register

__all__ = ["check_scaled_dot_product_attention", "check_dot_product_variance"]


# ---------------------------------------------------------------- scaled_dot_product_attention
F64 = torch.float64


def _sdpa_cases(seed: int) -> list:
    """Typical cases first, then edges: the first failure a learner sees is the most telling."""
    r, g = rng(seed), generator(seed)
    cases = []

    def add(label, lead, s_q, s_k, d, d_v, mask=None, grad=False, dtype=torch.float32):
        q = randn(*lead, s_q, d, gen=g, dtype=dtype)
        k = randn(*lead, s_k, d, gen=g, dtype=dtype)
        v = randn(*lead, s_k, d_v, gen=g, dtype=dtype)
        dims = f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        if mask is not None:
            dims += f", mask {tuple(mask.shape)}"
        cases.append(Case(f"{label}: {dims}", (q, k, v), {"mask": mask} if mask is not None else {}, grad=grad))

    add("batch of 2, S_q ≠ S_k", (2,), 3, 6, 8, 5)
    add("batch and heads (B, H)", (2, 3), 5, 7, 4, 6)
    add("no batch dims, S_q = S_k", (), 4, 4, 8, 8)
    add("mask: some keys hidden", (2,), 4, 6, 8, 8, mask=random_padding_mask(2, 4, 6, g))
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    add("causal mask broadcast over (B, H)", (2, 2), 5, 5, 4, 4, mask=causal)
    key_pad = torch.ones(3, 1, 1, 6, dtype=torch.bool)
    key_pad[1, ..., 4:] = False
    add("padding mask (B, 1, 1, S_k) over heads", (3, 2), 4, 6, 4, 5, mask=key_pad)
    add("gradients (float64) of a random loss of out and weights", (2,), 4, 5, 6, 3, grad=True, dtype=F64)
    add("mask with a fully masked query row", (2,), 4, 5, 8, 3,
        mask=random_padding_mask(2, 4, 5, g, fully_masked_row=True))
    add("gradients (float64) with a fully masked row", (2,), 4, 5, 6, 3, grad=True, dtype=F64,
        mask=random_padding_mask(2, 4, 5, g, fully_masked_row=True))
    for i in range(6):  # random shapes, odd sizes included
        lead = tuple(r.randint(1, 3) for _ in range(r.randint(0, 2)))
        s_q, s_k, d, d_v = r.randint(1, 9), r.randint(1, 9), r.choice([1, 3, 4, 8, 17]), r.randint(1, 6)
        m = None
        if i % 2:
            m = torch.rand(*lead, s_q, s_k, generator=g) > 0.4
            m[..., 0] = True
        add(f"random case {i + 1}", lead, s_q, s_k, d, d_v, mask=m)
    return cases


def _sdpa_rescale(case: Case, c: float) -> Case:
    """The same case with every score multiplied by c (q scaled by c)."""
    q, *rest = case.args
    return replace(case, args=(q * c, *rest))


def _sdpa_scale_names(case: Case) -> dict:
    q, k, v = case.args[:3]
    d, d_v = q.size(-1), v.size(-1)
    names = {"1/sqrt(d_k)": 1 / math.sqrt(d), "1 (no scaling)": 1.0, "1/d_k": 1 / d,
             "1/sqrt(D_v) (the size of v)": 1 / math.sqrt(d_v), "sqrt(d_k)": math.sqrt(d),
             "1/sqrt(S_k)": 1 / math.sqrt(k.size(-2)), "1/sqrt(S_q)": 1 / math.sqrt(q.size(-2))}
    if q.dim() >= 2:
        names["1/sqrt(q.size(1))"] = 1 / math.sqrt(q.size(1))
    if q.dim() >= 3:
        names["1/sqrt(q.size(0))"] = 1 / math.sqrt(q.size(0))
    return names


def _softmax_wrong_dim(q, k, v, mask=None, dropout_p=0.0):
    return _sdpa_variant(q, k, v, mask, dim=-2)


def _softmax_wrong_dim_global_max(q, k, v, mask=None, dropout_p=0.0):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    e = torch.exp(scores - scores.max())  # one max over the whole tensor: still exact ...
    w = (e / e.sum(dim=-2, keepdim=True)).nan_to_num(0.0)  # ... but normalised over the queries
    return w @ v, w


def _mask_after_softmax(q, k, v, mask=None, dropout_p=0.0):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    w = torch.softmax(scores, dim=-1)
    if mask is not None:
        w = w * mask
    return w @ v, w


def _inverted_mask(q, k, v, mask=None, dropout_p=0.0):
    return _sdpa_variant(q, k, v, None if mask is None else ~mask)


def _neg_1e9(q, k, v, mask=None, dropout_p=0.0):
    return _sdpa_variant(q, k, v, mask, fill=-1e9)


def _nan_rows(q, k, v, mask=None, dropout_p=0.0):
    return _sdpa_variant(q, k, v, mask, fill=float("-inf"))


def _inplace_nan_fix(q, k, v, mask=None, dropout_p=0.0):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = torch.softmax(scores, dim=-1)
    w[w.isnan()] = 0.0  # in place on the softmax's output: the forward is right, backward breaks
    return w @ v, w


def _batched_T(q, k, v, mask=None, dropout_p=0.0):
    kt = k.T if k.dim() > 1 else k  # .T reverses *every* dim of a batched tensor
    scores = torch.matmul(q, kt.transpose(-2, -1).transpose(-2, -1) if k.dim() <= 2 else kt) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return w @ v, w


def _sdpa_variant(q, k, v, mask, scale=None, dim=-1, fill=None):
    scale = 1.0 / math.sqrt(q.size(-1)) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale
    if mask is not None and fill is not None:
        w = torch.softmax(scores.masked_fill(~mask, fill), dim=dim)
    elif mask is not None:
        w = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=dim).nan_to_num(0.0)
    else:
        w = torch.softmax(scores, dim=dim)
    return w @ v, w


def _no_scaling(q, k, v, mask=None, dropout_p=0.0):
    return _sdpa_variant(q, k, v, mask, scale=1.0)


def _scale_by_d(q, k, v, mask=None, dropout_p=0.0):
    return _sdpa_variant(q, k, v, mask, scale=1.0 / q.size(-1))


def _scale_by_size_1(q, k, v, mask=None, dropout_p=0.0):
    return _sdpa_variant(q, k, v, mask, scale=1.0 / math.sqrt(q.size(1)) if q.dim() >= 2 else 1.0)


INPLACE_HINT = ("an in-place edit of the softmax's output (such as `w[w.isnan()] = 0`) gives the right "
                "forward values but breaks autograd, which needs that output for the backward pass: build a "
                "new tensor instead (torch.where(..., 0.0, w) or w.nan_to_num(0.0)).")
BATCHED_T_HINT = ("`.T` reverses *every* dimension of a batched tensor (a (B, S, D) key becomes (D, S, B)); "
                  "swap only the last two with k.transpose(-2, -1).")
WRONG_DIM_HINT = ("the softmax was taken over the query dim (-2) instead of the key dim (-1): each row of "
                  "weights must sum to 1.")

SDPA_MUTANTS = [
    Mutant("no_scaling", "the scores were not divided by sqrt(d_k).", _no_scaling),
    Mutant("scale_by_d", "the scores were divided by d_k instead of sqrt(d_k).", _scale_by_d),
    Mutant("scale_by_d_v", "the scores were divided by sqrt(D_v) (the size of v) instead of sqrt(d_k) (the size of q and k).",
           lambda q, k, v, mask=None, dropout_p=0.0: _sdpa_variant(q, k, v, mask, scale=1.0 / math.sqrt(v.size(-1)))),
    Mutant("scale_by_size_1", "multiplied by 1/sqrt(q.size(1))", _scale_by_size_1),
    Mutant("softmax_wrong_dim", WRONG_DIM_HINT, _softmax_wrong_dim),
    Mutant("softmax_wrong_dim_global_max", WRONG_DIM_HINT, _softmax_wrong_dim_global_max),
    Mutant("mask_after_softmax", "the mask was applied after the softmax, so the remaining weights no longer sum to 1: mask the scores with -inf before the softmax.", _mask_after_softmax),
    Mutant("inverted_mask", "the mask is inverted: True means 'may attend', so fill the scores where the mask is False.", _inverted_mask),
    Mutant("neg_1e9_fully_masked", "a fully masked row got uniform weights: filling with -1e9 (or a large negative number) spreads the weight evenly when every key is masked; such a row must give zero weights and a zero output.", _neg_1e9),
    Mutant("nan_fully_masked", "a fully masked row gave NaN: softmax over a row of -inf is 0/0; replace those rows with zeros (e.g. nan_to_num or torch.where).", _nan_rows),
    Mutant("inplace_nan_fix", INPLACE_HINT, _inplace_nan_fix),
    Mutant("batched_T", BATCHED_T_HINT, _batched_T),
]

DROPOUT_NOT_RESCALED = "dropout zeroed weights but did not rescale the kept ones by 1/(1 - dropout_p)."
DROPOUT_IGNORED = "dropout_p > 0 was ignored: no attention weight was dropped."
DROPOUT_RENORMALISED = ("the weights were renormalised after dropout (divided by their new row sums): the prompt "
                        "rescales every kept weight by exactly 1/(1 - dropout_p), so a row's sum is 1 only on average.")
DROPOUT_ON_OUTPUT = ("dropout was applied to the output, not to the attention weights: drop entries of "
                     "`weights` and return out = weights @ v.")


def _run_twice(fn, case: Case):
    """Dropout's probes: two calls in a row (the random state runs on between them): (out, weights)
    of the first, then of the second, so that the judge sees whether each call draws a new mask."""
    first = fn(*case.args, **case.kwargs)
    second = fn(*case.args, **case.kwargs)
    as_tuple = lambda r: tuple(r) if isinstance(r, (tuple, list)) else (r,)  # noqa: E731
    return as_tuple(first) + as_tuple(second)


def _dropout_probe(p: float, seed: int) -> Case:
    """q, k (2, 64, 8) and v all ones: out is the row sums of the dropped weights; called twice at p > 0."""
    g = generator(1234)
    q, k = randn(2, 64, 8, gen=g), randn(2, 64, 8, gen=g)
    twice = p > 0  # (the p = 0 probe is compared with the reference, and also left out as the default)
    return Case("q, k (2, 64, 8), v all ones (2, 64, 1)" + (", called twice" if twice else ""),
                (q, k, torch.ones(2, 64, 1)), {"dropout_p": p}, run=_run_twice if twice else None)


DROPOUT_SAME_EVERY_CALL = ("every call drew the same dropout mask (a generator seeded inside the function, or a mask "
                           "kept from an earlier call): draw a new mask on every call from torch's global generator "
                           "(torch.rand_like, torch.bernoulli or F.dropout).")
DROPOUT_SHARED_OVER_BATCH = ("one dropout mask was shared by the batch (and the heads): draw a mask of the weights' "
                             "full shape (..., S_q, S_k), not one (S_q, S_k) mask broadcast over the leading dims.")
DROPOUT_WHOLE_ROWS = ("whole query rows were kept or dropped together: dropout zeroes each attention weight "
                      "independently, one draw per weight (a mask of shape (..., S_q, S_k)), not one per row "
                      "(..., S_q, 1).")
DROPOUT_WHOLE_COLUMNS = ("whole key columns were kept or dropped together (a key dropped for every query at once): "
                         "one draw per weight (..., S_q, S_k), not one per key (..., 1, S_k).")


def _agreement(a: torch.Tensor, b: torch.Tensor) -> str | None:
    """Whether two keep masks agree more often than two independent draws of their rates would: the
    share of equal entries against p_a·p_b + (1 − p_a)(1 − p_b), with 6 standard errors + 1% of slack
    (a correct dropout exceeds it with probability below 1e-9)."""
    pa, pb = 1 - float(a.double().mean()), 1 - float(b.double().mean())
    expect = pa * pb + (1 - pa) * (1 - pb)
    if expect > 0.98:  # nearly nothing (or nearly everything) dropped: the rate's own test speaks
        return None
    agree = float((a == b).double().mean())
    bound = 6 * math.sqrt(expect * (1 - expect) / a.numel()) + 0.01
    return None if agree <= expect + bound else f"{100 * agree:.1f}% (independent draws: {100 * expect:.1f}% ± {100 * bound:.1f}%)"


def _dispersion(keep: torch.Tensor, dim: int) -> float | None:
    """The variance of the dropped share along ``dim``'s slices (rows or columns) over a binomial's,
    p(1 − p)/n: about 1 for independent draws (a χ² over the slices), n when whole slices go together."""
    p = 1 - float(keep.double().mean())
    if not 0.02 < p < 0.98:
        return None
    share = 1 - keep.double().mean(dim=dim).reshape(-1)
    n = keep.size(dim)
    return float(share.var()) / (p * (1 - p) / n)


def _out_is_weights_at_v(case: Case, got) -> str | None:
    if len(got) == 4:  # the probe's two calls
        for out, w in (got[:2], got[2:]):
            msg = _out_is_weights_at_v(case, (out, w))
            if msg:
                return msg
        return _independent(case, got)
    out, w = got
    if not torch.allclose(out.double(), w.double().sum(-1, keepdim=True), atol=1e-4, rtol=1e-4):
        hint = DROPOUT_ON_OUTPUT if bool((w != 0).all()) else ""
        return ("out is not weights @ v (v is all ones, so out should be the row sums of the dropped weights)."
                + (f" Likely mistake: {hint}" if hint else ""))
    return None


def _independent(case: Case, got) -> str | None:
    """Each weight dropped independently: of the other calls (a new mask each time), of the other
    batch entries, of the other weights in its row and in its column."""
    if not case.kwargs.get("dropout_p"):
        return None
    keep1, keep2 = got[1] != 0, got[3] != 0
    if keep1.shape != keep2.shape or keep1.dim() < 3:
        return None
    seen = _agreement(keep1, keep2)
    if seen:
        return f"the two calls kept the same weights at {seen} of the positions. Likely mistake: {DROPOUT_SAME_EVERY_CALL}"
    seen = _agreement(keep1[0], keep1[1])
    if seen:
        return (f"the two batch entries kept the same weights at {seen} of the positions. "
                f"Likely mistake: {DROPOUT_SHARED_OVER_BATCH}")
    for dim, hint, what in ((-1, DROPOUT_WHOLE_ROWS, "query row"), (-2, DROPOUT_WHOLE_COLUMNS, "key column")):
        ratio = _dispersion(keep1, dim)
        if ratio is not None and ratio > 2.5:  # a χ² over 128 slices passes 2.5 with probability below 1e-15
            return (f"the share dropped per {what} varies {ratio:.0f} times as much as independent draws allow. "
                    f"Likely mistake: {hint}")
    return None


SDPA_DROPOUT = Dropout(on="each attention weight, independently (of the other weights, and of earlier calls: a new "
                          "mask on every call)",
                       arg="dropout_p", probe=_dropout_probe,
                       values=lambda case, got: got[1], consistent=_out_is_weights_at_v,
                       hints={"ignored": DROPOUT_IGNORED, "not_rescaled": DROPOUT_NOT_RESCALED,
                              "renormalised": DROPOUT_RENORMALISED})


def _dropout_not_rescaled(q, k, v, mask=None, dropout_p=0.0):
    out, w = ref.scaled_dot_product_attention.__wrapped__(q, k, v, mask)
    if dropout_p > 0:
        w = w * (torch.rand_like(w) >= dropout_p)
    return w @ v, w


def _dropout_renormalised(q, k, v, mask=None, dropout_p=0.0):
    out, w = ref.scaled_dot_product_attention.__wrapped__(q, k, v, mask)
    if dropout_p > 0:
        w = torch.nn.functional.dropout(w, dropout_p, training=True)
        w = w / w.sum(dim=-1, keepdim=True).clamp_min(1e-9)
    return w @ v, w


def _dropout_ignored(q, k, v, mask=None, dropout_p=0.0):
    return ref.scaled_dot_product_attention.__wrapped__(q, k, v, mask)


def _dropout_on_output(q, k, v, mask=None, dropout_p=0.0):
    out, w = ref.scaled_dot_product_attention.__wrapped__(q, k, v, mask)
    return torch.nn.functional.dropout(out, dropout_p, training=dropout_p > 0), w


def _dropout_keep_probability(q, k, v, mask=None, dropout_p=0.0):
    out, w = ref.scaled_dot_product_attention.__wrapped__(q, k, v, mask)
    if dropout_p > 0:
        w = torch.nn.functional.dropout(w, 1 - dropout_p, training=True) * (1 - dropout_p) / dropout_p
    return w @ v, w


def _dropout_by_1_over_p(q, k, v, mask=None, dropout_p=0.0):
    out, w = ref.scaled_dot_product_attention.__wrapped__(q, k, v, mask)
    if dropout_p > 0:
        w = w * (torch.rand_like(w) >= dropout_p) / dropout_p
    return w @ v, w


def _dropout_with_mask(q, k, v, mask, dropout_p, shape_of, generator=None):
    out, w = ref.scaled_dot_product_attention.__wrapped__(q, k, v, mask)
    if dropout_p > 0:
        keep = torch.rand(shape_of(w), generator=generator, dtype=w.dtype) >= dropout_p
        w = w * keep / (1 - dropout_p)
    return w @ v, w


def _dropout_same_every_call(q, k, v, mask=None, dropout_p=0.0):
    return _dropout_with_mask(q, k, v, mask, dropout_p, lambda w: w.shape, torch.Generator().manual_seed(0))


def _dropout_shared_over_batch(q, k, v, mask=None, dropout_p=0.0):
    return _dropout_with_mask(q, k, v, mask, dropout_p, lambda w: w.shape[-2:])


def _dropout_whole_rows(q, k, v, mask=None, dropout_p=0.0):
    return _dropout_with_mask(q, k, v, mask, dropout_p, lambda w: (*w.shape[:-1], 1))


def _dropout_whole_columns(q, k, v, mask=None, dropout_p=0.0):
    return _dropout_with_mask(q, k, v, mask, dropout_p, lambda w: (*w.shape[:-2], 1, w.shape[-1]))


SDPA_DROPOUT_MUTANTS = [
    Mutant("dropout_not_rescaled", DROPOUT_NOT_RESCALED, _dropout_not_rescaled),
    Mutant("dropout_ignored", DROPOUT_IGNORED, _dropout_ignored),
    Mutant("dropout_renormalised", DROPOUT_RENORMALISED, _dropout_renormalised),
    Mutant("dropout_on_output", DROPOUT_ON_OUTPUT, _dropout_on_output),
    Mutant("dropout_keep_probability", dropout_hint("keep_probability", "dropout_p"), _dropout_keep_probability),
    Mutant("dropout_rescaled_by_1_over_p", dropout_hint("rescaled_by_1_over_p", "dropout_p"), _dropout_by_1_over_p),
    Mutant("dropout_same_mask_every_call", DROPOUT_SAME_EVERY_CALL, _dropout_same_every_call),
    Mutant("dropout_mask_shared_over_batch", DROPOUT_SHARED_OVER_BATCH, _dropout_shared_over_batch),
    Mutant("dropout_whole_query_rows", DROPOUT_WHOLE_ROWS, _dropout_whole_rows),
    Mutant("dropout_whole_key_columns", DROPOUT_WHOLE_COLUMNS, _dropout_whole_columns),
]


# Mistakes that only the core's guards and adversarial inputs catch (dropout done right in each).
def _dropped(w, v, dropout_p):
    w = torch.nn.functional.dropout(w, dropout_p) if dropout_p > 0 else w
    return w @ v, w


def _inplace_scale_q(q, k, v, mask=None, dropout_p=0.0):
    q *= 1.0 / math.sqrt(q.size(-1))  # scales the caller's q
    return _dropped(_sdpa_variant(q, k, v, mask, scale=1.0)[1], v, dropout_p)


def _float32_inside(q, k, v, mask=None, dropout_p=0.0):
    return _dropped(_sdpa_variant(q.float(), k.float(), v.float(), mask)[1], v.float(), dropout_p)


def _renormalised_after_softmax(q, k, v, mask=None, dropout_p=0.0):
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1)
    if mask is not None:
        w = w * mask
        w = w / w.sum(-1, keepdim=True).clamp_min(1e-30)  # exact, unless the masked key took all the weight
    return _dropped(w, v, dropout_p)


def _zero_keys_are_padding(q, k, v, mask=None, dropout_p=0.0):
    real = (k != 0).any(-1)[..., None, :]  # padding told apart by its all-zero key vector
    return _dropped(_sdpa_variant(q, k, v, real if mask is None else mask & real)[1], v, dropout_p)


def _no_max_subtraction(q, k, v, mask=None, dropout_p=0.0):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    e = torch.exp(s) if mask is None else torch.exp(s).masked_fill(~mask, 0.0)
    w = torch.where(e.sum(-1, keepdim=True) > 0, e / e.sum(-1, keepdim=True), torch.zeros_like(e))
    return _dropped(w, v, dropout_p)


def _flatten_with_view(q, k, v, mask=None, dropout_p=0.0):
    lead = q.shape[:-2]
    q3, k3, v3 = q.view(-1, *q.shape[-2:]), k.view(-1, *k.shape[-2:]), v.view(-1, *v.shape[-2:])
    m3 = None if mask is None else mask.expand(*lead, q.size(-2), k.size(-2)).reshape(-1, q.size(-2), k.size(-2))
    w = ref.scaled_dot_product_attention.__wrapped__(q3, k3, v3, m3, dropout_p)[1].view(*lead, q.size(-2), k.size(-2))
    return w @ v, w


GUARD_MUTANTS = [
    Mutant("inplace_scale_q", f"scaled_dot_product_attention {INPLACE.format(name='q')}", _inplace_scale_q),
    Mutant("float32_result", DTYPE.format(got="float32", want="float64"), _float32_inside),
    Mutant("renormalised_after_softmax", "the mask was applied after the softmax (then the rows renormalised): when a masked key holds the largest score by far, every other weight underflows to 0 first; mask the scores with -inf before the softmax.",
           _renormalised_after_softmax),
    Mutant("zero_keys_are_padding", "keys whose vector is all zeros were treated as padding: only the mask says which keys are hidden; a real key may be the zero vector.",
           _zero_keys_are_padding),
    Mutant("no_max_subtraction", "exp of the raw scores overflows to inf past 88 (float32) or 709 (float64): subtract each row's max before exp (torch.softmax does).",
           _no_max_subtraction),
    Mutant("flatten_with_view", "`.view` on an input fails when the input is not contiguous (a transposed or expanded tensor): use .reshape, or keep the leading dims and let @ broadcast.",
           _flatten_with_view),
]


# Correct answers written differently: they must pass.
def _v_einsum(q, k, v, mask=None, dropout_p=0.0):
    scores = torch.einsum("...qd,...kd->...qk", q, k) / q.shape[-1] ** 0.5
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), float("-inf"))
    m = scores.amax(dim=-1, keepdim=True)
    e = torch.exp(scores - torch.where(torch.isinf(m), torch.zeros_like(m), m))
    w = e / e.sum(dim=-1, keepdim=True).clamp_min(1e-30)
    if dropout_p > 0:
        w = w * (torch.rand_like(w) >= dropout_p) / (1 - dropout_p)
    return torch.einsum("...qk,...kd->...qd", w, v), w


def _v_float64_inside(q, k, v, mask=None, dropout_p=0.0):
    dtype = q.dtype
    q, k, v = q.double(), k.double(), v.double()
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = torch.where(mask, scores, torch.tensor(float("-inf"), dtype=torch.float64))
    w = torch.softmax(scores, dim=-1)
    w = torch.where(torch.isnan(w), torch.zeros_like(w), w)
    if dropout_p > 0:
        w = torch.nn.functional.dropout(w, dropout_p)
    return (w @ v).to(dtype), w.to(dtype)


def _v_loops(q, k, v, mask=None, dropout_p=0.0):
    assert q.size(-1) == k.size(-1), "q and k must share d_k"  # an assert instead of ValueError is fine
    lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    s_q, s_k = q.size(-2), k.size(-2)
    full = torch.ones(*lead, s_q, s_k, dtype=torch.bool) if mask is None else \
        mask.expand(*lead, s_q, s_k) if mask.dim() >= 2 else mask.expand(*lead, s_q, s_k)
    qq, kk, vv = q.expand(*lead, *q.shape[-2:]), k.expand(*lead, *k.shape[-2:]), v.expand(*lead, *v.shape[-2:])
    rows_w, rows_o = [], []
    flat = [()] if not lead else [tuple(i) for i in torch.cartesian_prod(*[torch.arange(n) for n in lead]).reshape(-1, len(lead)).tolist()]
    for idx in flat:
        ws, os_ = [], []
        for i in range(s_q):
            s = (kk[idx] @ qq[idx][i]) / math.sqrt(q.size(-1))  # (S_k,)
            allowed = full[idx][i]
            if not bool(allowed.any()):
                w = torch.zeros(s_k, dtype=q.dtype)
            else:
                s = s.masked_fill(~allowed, float("-inf"))
                e = torch.exp(s - s.max())
                w = e / e.sum()
            ws.append(w)
            os_.append(w @ vv[idx])
        rows_w.append(torch.stack(ws))
        rows_o.append(torch.stack(os_))
    w = torch.stack(rows_w).reshape(*lead, s_q, s_k)
    if dropout_p > 0:
        w = torch.nn.functional.dropout(w, dropout_p)
    return w @ vv, w


SDPA_VARIANTS = [Variant("einsum_and_manual_softmax", _v_einsum), Variant("float64_inside", _v_float64_inside, demo=True),
                 Variant("python_loops", _v_loops)]

SDPA_EXERCISE = Exercise(
    name="scaled_dot_product_attention",
    reference=ref.scaled_dot_product_attention,
    make_cases=_sdpa_cases,
    mutants=SDPA_MUTANTS + SDPA_DROPOUT_MUTANTS + GUARD_MUTANTS,
    variants=SDPA_VARIANTS,
    output_names=("out", "weights"),
    rescale=_sdpa_rescale,
    scale_names=_sdpa_scale_names,
    contract=Contract("""softmax(q kᵀ / sqrt(d_k)) v, with an optional bool mask and dropout on the weights.

    q: (..., S_q, d_k)   k: (..., S_k, d_k)   v: (..., S_k, d_v)
    mask: bool, broadcastable to (..., S_q, S_k), True = may attend; or None
    dropout_p: float in [0, 1), applied to the weights whenever dropout_p > 0
    Returns out (..., S_q, d_v) and weights (..., S_q, S_k), with out == weights @ v (the
    weights after dropout). A fully masked query row gets zero weights and a zero output.
    """, forbid=(SDPA, MHA), grad="q, k and v, through out and weights", dropout=SDPA_DROPOUT),
)
check_scaled_dot_product_attention = register(SDPA_EXERCISE)


# ---------------------------------------------------------------- dot_product_variance
# The estimate is reproducible, not statistical (issue 18 §2: closed form x chi-square noise passed a
# statistical judge). The draw order that the prompt states, and that the check reproduces exactly:
#   1. the check seeds torch's global generator with the case seed (``_seeded``) right before each call;
#   2. q = torch.randn(n_samples, d_k)   -- float32, torch's global generator, FIRST draw;
#   3. k = torch.randn(n_samples, d_k)   -- float32, global generator, SECOND draw; nothing else drawn;
#   4. dots = (q * k).sum(-1), divided by sqrt(d_k) when scaled; return dots.var() (unbiased,
#      divide by n_samples - 1) as a Python float.
# Any answer that follows the prompt returns the reference's value up to float32 rounding (rtol 1e-4);
# a value that was not computed from these exact samples (a closed form, noise around it, another
# draw) differs by the sampling error, about sqrt(2 / n_samples) relative: 2e-2 at n_samples = 4,096.
N_SAMPLES = 4096  # enough to tell a measurement from a formula; small enough for a fast check
ALL_PAIRS = ("compute one dot product per pair, (q * k).sum(dim=-1), not all n_samples² pairs "
             "(q @ k.T): that matrix has n_samples² entries")
CLOSED_FORM = ("your answer does not depend on the random samples (it is the closed form d_k or 1): "
               "the exercise is to *measure* the variance of n_samples dot products drawn as the prompt says.")
NOT_THESE_SAMPLES = ("your value is close to the theory but is not the variance of the samples the prompt "
                     "prescribes: draw q = torch.randn(n_samples, d_k) first, then k = torch.randn(n_samples, d_k) "
                     "(float32, torch's global generator, which the check seeds; draw nothing else before them), "
                     "and return the variance of these exact dot products.")


PROBE_N = 16384  # all pairs there: 1 GiB in float32; the re-check's process may obtain 256 MiB
PROBE_BYTES = 256 * 2**20


def _variance_budget(case: Case) -> Budget:
    d_k, n = (case.args[0], case.args[1]) if len(case.args) >= 2 else (64, 64)
    return Budget(numel=max(2**16, 2 * n * d_k), seconds=DEFAULT_SECONDS, why=ALL_PAIRS,
                  memory=PROBE_BYTES if n >= PROBE_N else None)


def _seeded(seed: int):
    """The case's runner: seed torch's global generator, then call (the prompt says the check does)."""
    def run(fn, case: Case):
        reseed(seed)
        return fn(*case.args, **case.kwargs)

    return run


def _variance_features(case: Case) -> dict:
    d_k, n, scaled = case.args
    return {"scaled=True": bool(scaled), "d_k = 1": d_k == 1, "n_samples below 10": n < 10}


def _judge_exact(d_k: int, n: int, scaled: bool, seed: int):
    """Compare with the variance of the prescribed samples, and say what a value near the theory means."""
    from .._guard import unguarded

    def judge(got) -> str | None:
        if isinstance(got, bool) or not isinstance(got, float):
            return f"dot_product_variance should return a Python float (use .item()), got {describe(got)}."
        with torch.random.fork_rng():
            reseed(seed)
            want = unguarded(ref.dot_product_variance)(d_k, n, scaled)
        if math.isfinite(got) and abs(got - want) <= 1e-6 + 1e-4 * abs(want):
            return None
        theory = 1.0 if scaled else float(d_k)
        sigma = theory * math.sqrt(2 / (n - 1) + 6 / (d_k * n))  # std of a sample variance of q·k
        msg = f"expected {want:.6g} (the variance of the samples the prompt prescribes), got {got:.6g}."
        if got == theory:
            return f"{msg} {CLOSED_FORM[0].upper()}{CLOSED_FORM[1:]}"
        if math.isfinite(got) and abs(got - theory) < 6 * sigma:
            return f"{msg} {NOT_THESE_SAMPLES[0].upper()}{NOT_THESE_SAMPLES[1:]}"
        return msg

    return judge


def _variance_cases(seed: int) -> list:
    r = rng(seed)
    dims = [16, 64, 1, 4, 256] + [r.choice([2, 8, 32, 100, 128]) for _ in range(1)]
    # First, two judged cases: their message says what a value near the theory but not equal means.
    cases = [Case(f"d_k=16, n_samples={N_SAMPLES}, scaled={scaled} (judged)", (16, N_SAMPLES, scaled),
                  run=_seeded(seed * 100 + 90 + int(scaled)),
                  judge=_judge_exact(16, N_SAMPLES, scaled, seed * 100 + 90 + int(scaled)))
             for scaled in (False, True)]
    for i, d_k in enumerate(dims):
        for scaled in (False, True):
            cases.append(Case(f"d_k={d_k}, n_samples={N_SAMPLES}, scaled={scaled}", (d_k, N_SAMPLES, scaled),
                              tol=(1e-6, 1e-4), run=_seeded(seed * 100 + 2 * i + int(scaled))))
    for j, (d_k, n, scaled) in enumerate([(16, 6, False), (16, 6, True), (3, 2, False), (7, 13, True)]):
        # few samples: the measured variance is far from the theory; a formula cannot match it
        cases.append(Case(f"d_k={d_k}, n_samples={n}, scaled={scaled}", (d_k, n, scaled), tol=(1e-6, 1e-4),
                          run=_seeded(seed * 100 + 50 + j)))
    # The rule at a size where breaking it takes gigabytes (the grader's re-check caps the memory)
    cases.append(Case(f"d_k=4, n_samples={PROBE_N}, scaled=True (in the re-check, at most "
                      f"{PROBE_BYTES // 2**20} MiB of memory; all n_samples² pairs would be 1 GiB)", (4, PROBE_N, True),
                      tol=(1e-6, 1e-4), run=_seeded(seed * 100 + 60)))
    return cases


def _dots(d_k, n_samples, scaled, dtype=torch.float32):
    q = torch.randn(n_samples, d_k, dtype=dtype)
    k = torch.randn(n_samples, d_k, dtype=dtype)
    dots = (q * k).sum(-1)
    return dots / math.sqrt(d_k) if scaled else dots


def _var_scale_by_d(d_k, n_samples, scaled):
    v = ref.dot_product_variance.__wrapped__(d_k, n_samples, False)
    return v / d_k**2 if scaled else v


def _var_returns_std(d_k, n_samples, scaled):
    return math.sqrt(ref.dot_product_variance.__wrapped__(d_k, n_samples, scaled))


def _var_ignores_flag(d_k, n_samples, scaled):
    return ref.dot_product_variance.__wrapped__(d_k, n_samples, False)


def _var_uniform(d_k, n_samples, scaled):
    q, k = torch.rand(n_samples, d_k), torch.rand(n_samples, d_k)
    dots = (q * k).sum(-1) / (math.sqrt(d_k) if scaled else 1.0)
    return dots.var().item()


def _var_mean_square_of_sum(d_k, n_samples, scaled):
    return _dots(d_k, n_samples, scaled).mean().item()


def _var_all_pairs(d_k, n_samples, scaled):
    q, k = torch.randn(n_samples, d_k), torch.randn(n_samples, d_k)
    dots = (q @ k.T).diagonal() / (math.sqrt(d_k) if scaled else 1.0)  # (N, N) to keep N entries
    return dots.var().item()


def _var_closed_form(d_k, n_samples, scaled):
    return 1.0 if scaled else float(d_k)


def _var_biased(d_k, n_samples, scaled):
    return _dots(d_k, n_samples, scaled).var(unbiased=False).item()


def _var_float64_draw(d_k, n_samples, scaled):
    return _dots(d_k, n_samples, scaled, dtype=torch.float64).var().item()


def _var_column_vectors(d_k, n_samples, scaled):
    q, k = torch.randn(d_k, n_samples), torch.randn(d_k, n_samples)  # samples as columns: other numbers
    dots = (q * k).sum(0) / (math.sqrt(d_k) if scaled else 1.0)
    return dots.var().item()


def _var_one_draw_for_both(d_k, n_samples, scaled):
    q, k = torch.randn(2, d_k, n_samples).unbind(0)  # one call, and (d_k, n_samples): other numbers
    dots = (q * k).sum(0) / (math.sqrt(d_k) if scaled else 1.0)
    return dots.var().item()


def _var_scaled_variance_not_dots(d_k, n_samples, scaled):
    v = ref.dot_product_variance.__wrapped__(d_k, n_samples, False)
    return v / math.sqrt(d_k) if scaled else v


def _v_var_float64(d_k, n_samples, scaled):
    q = torch.randn(n_samples, d_k)  # float32 draws, as the prompt says; float64 arithmetic after
    k = torch.randn(n_samples, d_k)
    dots = torch.einsum("nd,nd->n", q.double(), k.double())
    if scaled:
        dots /= d_k ** 0.5
    return float(((dots - dots.mean()) ** 2).sum() / (n_samples - 1))


def _v_var_chunked_loop(d_k, n_samples, scaled):
    q = torch.randn(n_samples, d_k)
    k = torch.randn(n_samples, d_k)
    total, total_sq = 0.0, 0.0  # running sums in Python floats (float64), 1,000 rows at a time
    for start in range(0, n_samples, 1000):
        d = (q[start:start + 1000] * k[start:start + 1000]).sum(dim=1).double()
        if scaled:
            d = d / math.sqrt(d_k)
        total += float(d.sum())
        total_sq += float((d * d).sum())
    mean = total / n_samples
    return (total_sq - n_samples * mean * mean) / (n_samples - 1)


def _v_var_matmul_rows(d_k, n_samples, scaled):
    q = torch.randn(n_samples, d_k)
    k = torch.randn(n_samples, d_k)
    dots = (q.unsqueeze(1) @ k.unsqueeze(2)).reshape(n_samples)  # (N, 1, d) @ (N, d, 1): N dot products
    scale = 1 / math.sqrt(d_k) if scaled else 1.0
    return torch.var(dots * scale, correction=1).item()


VARIANCE_MUTANTS = [
    Mutant("scale_by_d", "with scaled=True you divided q·k by d_k, which divides the variance by d_k²; divide by sqrt(d_k).", _var_scale_by_d),
    Mutant("scaled_the_variance_by_sqrt_d", "with scaled=True you divided the variance by sqrt(d_k); divide each dot product by sqrt(d_k) (which divides the variance by d_k).", _var_scaled_variance_not_dots),
    Mutant("returns_std", "you returned the standard deviation (sqrt of the variance).", _var_returns_std),
    Mutant("ignores_scaled", "the `scaled` flag is ignored: with scaled=True divide each q·k by sqrt(d_k).", _var_ignores_flag),
    Mutant("uniform_samples", "q and k were drawn from a uniform distribution (torch.rand); the exercise uses standard normals (torch.randn).", _var_uniform),
    Mutant("returns_mean", "you returned the mean of q·k (about 0), not its variance.", _var_mean_square_of_sum),
    Mutant("all_pairs", ALL_PAIRS, _var_all_pairs),
    Mutant("closed_form", CLOSED_FORM, _var_closed_form),
    Mutant("biased_variance", "you divided by n_samples (the biased variance): the prompt asks for the sample variance that divides by n_samples - 1, as Tensor.var() does.", _var_biased),
    Mutant("float64_draws", "q and k were drawn in float64: torch.randn(..., dtype=torch.float64) draws other numbers than the float32 draws the prompt prescribes; draw in float32 (the default) and convert afterwards if you like.", _var_float64_draw),
    Mutant("samples_as_columns", "q and k were drawn with shape (d_k, n_samples) (samples as columns): the prompt prescribes q = torch.randn(n_samples, d_k) and then k = torch.randn(n_samples, d_k), one sample per row, which draws the numbers in another arrangement.", _var_column_vectors),
    Mutant("one_draw_for_both", "q and k came from one draw (or another shape): the prompt prescribes two draws, q = torch.randn(n_samples, d_k) and then k = torch.randn(n_samples, d_k).", _var_one_draw_for_both),
]

VARIANCE_EXERCISE = Exercise(
    name="dot_product_variance",
    reference=ref.dot_product_variance,
    make_cases=_variance_cases,
    mutants=VARIANCE_MUTANTS,
    variants=[Variant("float64_einsum_manual", _v_var_float64),
              Variant("chunked_running_sums", _v_var_chunked_loop, demo=True),
              Variant("batched_matmul_rows", _v_var_matmul_rows)],
    budget=_variance_budget,
    features=_variance_features,
    contract=Contract("""Empirical variance of q·k over n_samples independent pairs q, k ~ N(0, I_{d_k}).

    d_k: int, the size of q and k;  n_samples: int, the number of pairs;
    scaled: bool, divide each q·k by sqrt(d_k) first.  Returns a Python float.
    Draw exactly, from torch's global generator (the check seeds it before each call):
    first q = torch.randn(n_samples, d_k), then k = torch.randn(n_samples, d_k) (float32),
    and nothing else. One dot product per row pair, q[i]·k[i] (never all n_samples² pairs:
    the check has a memory budget). Return the sample variance of these n_samples numbers,
    dividing by n_samples - 1 (what Tensor.var() does). The check compares with the value
    these exact samples give, to float32 rounding.
    """, same_dtype=False),
)
check_dot_product_variance = register(VARIANCE_EXERCISE)
