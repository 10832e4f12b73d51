"""Checks for chapter 08 — the backward pass of attention, by hand.

Every case is float64: the point of the chapter is that the hand-derived gradients are *exactly*
the gradients, so the tolerances (atol 1e-10, rtol 1e-8) leave room for a different order of
operations (float64 rounding, ~1e-15) but not for a computation that slipped into float32 (~1e-7)
or for an approximation.

``softmax_backward`` and ``sdpa_backward`` run with autograd forbidden (and SDPA, and PyTorch's
own softmax backward). ``ScaledDotProductAttentionFunction`` cannot run that way as a whole: the
check itself calls ``torch.autograd.grad`` on its output (and ``torch.autograd.gradcheck``). So
the check calls the learner's class through a subclass whose ``backward`` runs inside the
autograd and softmax-backward tripwires: a backward that calls autograd (``torch.autograd.grad``,
``.backward()``, ``torch.func.vjp`` ...) or PyTorch's own softmax backward
(``torch._softmax_backward_data``) is refused and scores zero, while the check's own autograd calls
pass.
"""
import math
from dataclasses import replace

import torch
from torch.autograd.function import BackwardCFunction
from torch.autograd.gradcheck import GradcheckError

from .. import reference as ref
from .._guard import unguarded
from ..reference._common import masked_softmax_impl
from ._contract import Contract
from ._core import Case, CheckFailure, Exercise, Mutant, Variant, describe, generator, learner_code, randn, rng
from ._forbid import AUTOGRAD, SDPA, SOFTMAX_BACKWARD
from ._registry import register

F64_ALREADY = {"float64": "every case is float64 already"}

__all__ = [
    "check_softmax_backward",
    "check_sdpa_backward",
    "check_ScaledDotProductAttentionFunction",
]

F64 = torch.float64
# float64: exactness is the point (see the module docstring).
ATOL, RTOL = 1e-10, 1e-8


def _dims(**tensors) -> str:
    return ", ".join(f"{name} {tuple(t.shape)}" for name, t in tensors.items() if t is not None)


def _random_mask(lead, s_q, s_k, g, fully_masked_row=False):
    """A bool mask (*lead, S_q, S_k), True = may attend; optionally one fully masked query row."""
    mask = torch.rand(*lead, s_q, s_k, generator=g) > 0.35
    mask[..., 0] = True
    if fully_masked_row:
        mask.view(-1, s_q, s_k)[0, min(1, s_q - 1)] = False
    return mask


# ---------------------------------------------------------------- softmax_backward
def _softmax_backward_cases(seed: int) -> list:
    r, g = rng(seed), generator(seed)
    cases = []

    def add(label, shape, scale=1.0, mask=None):
        s = randn(*shape, gen=g, scale=scale, dtype=F64)
        a = masked_softmax_impl(s, mask)  # a valid softmax output (rows of zeros where fully masked)
        grad_a = randn(*shape, gen=g, dtype=F64)
        cases.append(Case(f"{label}: a, grad_a {tuple(shape)}", (a, grad_a)))

    add("a single row (1-D)", (7,))
    add("rows of a matrix", (3, 5))
    add("batch and heads (B, H, S_q, S_k)", (2, 3, 4, 6))
    add("a single entry per row (N = 1; the gradient is 0)", (4, 1))
    add("large-magnitude scores (nearly one-hot rows)", (2, 5, 8), scale=40.0)
    m = _random_mask((2,), 4, 6, g)
    add("masked rows (zeros in a)", (2, 4, 6), mask=m)
    m = _random_mask((2,), 4, 5, g, fully_masked_row=True)
    add("a fully masked row (a row of zeros)", (2, 4, 5), mask=m)
    for i in range(6):  # random shapes, odd sizes included
        shape = tuple(r.randint(1, 4) for _ in range(r.randint(0, 3))) + (r.choice([2, 3, 5, 9, 16]),)
        add(f"random case {i + 1}", shape, scale=r.choice([1.0, 3.0]))
    return cases


def _sb_no_subtraction(a, grad_a):
    return a * grad_a


def _sb_wrong_dim(a, grad_a):
    dim = -2 if a.dim() >= 2 else -1  # the mistake needs a second dim; a 1-D row has only one
    return a * (grad_a - (grad_a * a).sum(dim=dim, keepdim=True))


def _sb_sum_without_a(a, grad_a):
    return a * (grad_a - grad_a.sum(dim=-1, keepdim=True))


def _sb_missing_outer_a(a, grad_a):
    return grad_a - (grad_a * a).sum(dim=-1, keepdim=True)


def _sb_log_softmax(a, grad_a):
    return grad_a - a * grad_a.sum(dim=-1, keepdim=True)


SB_NO_SUBTRACTION = (
    "you kept only the diagonal of the softmax Jacobian (a ⊙ grad_a): every output a_j depends on "
    "every score, so subtract the row term, dL/ds = a ⊙ (grad_a − Σ_j grad_a_j a_j)."
)
SB_WRONG_DIM = "the sum Σ_j grad_a_j a_j was taken over the wrong dim: sum over the softmax dim (-1), with keepdim=True."
SB_SUM_WITHOUT_A = "the row term is Σ_j grad_a_j · a_j (weighted by a), not the plain sum Σ_j grad_a_j."
SB_MISSING_OUTER_A = "the outer factor a is missing: dL/ds = a ⊙ (grad_a − Σ_j grad_a_j a_j), multiplied elementwise by a."
SB_LOG_SOFTMAX = (
    "that is the backward of log_softmax (grad − softmax · Σ grad); for softmax it is "
    "a ⊙ (grad_a − Σ_j grad_a_j a_j)."
)

SB_SUM_EVERYTHING = ("the sum Σ_j grad_a_j a_j ran over the whole tensor (no dim): there is one such sum per row, "
                     "(grad_a * a).sum(dim=-1, keepdim=True).")
SB_NO_KEEPDIM = ("the row sum lost its last dim (no keepdim=True), so it broadcasts against the wrong dim of a: "
                 "use (grad_a * a).sum(dim=-1, keepdim=True).")

SB_FLOAT32_INSIDE = ("a float32 tensor was made inside (torch.zeros(...) without dtype=, or a .float()): the row sum "
                     "has float32 precision (~1e-7 relative) in a float64 case; keep the inputs' dtype, "
                     "e.g. torch.zeros(..., dtype=a.dtype) or simply (grad_a * a).sum(dim=-1, keepdim=True).")


def _sb_float32_inside(a, grad_a):
    dot = torch.zeros(a.shape[:-1] + (1,))  # float32: no dtype given
    dot += (grad_a * a).sum(dim=-1, keepdim=True)
    return a * (grad_a - dot)


SOFTMAX_BACKWARD_MUTANTS = [
    Mutant("no_subtraction", SB_NO_SUBTRACTION, _sb_no_subtraction),
    Mutant("wrong_reduction_dim", SB_WRONG_DIM, _sb_wrong_dim),
    Mutant("sum_without_a", SB_SUM_WITHOUT_A, _sb_sum_without_a),
    Mutant("missing_outer_a", SB_MISSING_OUTER_A, _sb_missing_outer_a),
    Mutant("log_softmax_backward", SB_LOG_SOFTMAX, _sb_log_softmax),
    Mutant("sum_over_everything", SB_SUM_EVERYTHING, lambda a, grad_a: a * (grad_a - (grad_a * a).sum())),
    Mutant("sum_without_keepdim", SB_NO_KEEPDIM, lambda a, grad_a: a * (grad_a - (grad_a * a).sum(dim=-1))),
    Mutant("float32_tensor_made_inside", SB_FLOAT32_INSIDE, _sb_float32_inside),
]


# Correct answers written differently: they must pass.
def _v_sb_jacobian(a, grad_a):
    """The Jacobian diag(a) − a aᵀ built per row, then J grad_a (J is symmetric)."""
    jac = torch.diag_embed(a) - a.unsqueeze(-1) * a.unsqueeze(-2)  # (..., N, N)
    return torch.einsum("...ij,...j->...i", jac, grad_a)


def _v_sb_expanded(a, grad_a):
    return a * grad_a - a * torch.einsum("...n,...n->...", a, grad_a).unsqueeze(-1)


def _v_sb_loops(a, grad_a):
    assert a.shape == grad_a.shape, "a and grad_a must have the same shape"
    flat_a, flat_g = a.reshape(-1, a.size(-1)), grad_a.reshape(-1, a.size(-1))
    rows = []
    for ar, gr in zip(flat_a, flat_g):
        dot = sum(float(x) * float(y) for x, y in zip(ar, gr))
        rows.append(ar * (gr - dot))
    return torch.stack(rows).reshape(a.shape)

SOFTMAX_BACKWARD_EXERCISE = Exercise(
    name="softmax_backward",
    reference=ref.softmax_backward,
    make_cases=_softmax_backward_cases,
    mutants=SOFTMAX_BACKWARD_MUTANTS,
    variants=[Variant("explicit_jacobian", _v_sb_jacobian, demo=True), Variant("expanded_einsum", _v_sb_expanded),
              Variant("row_loops_assert", _v_sb_loops)],
    atol=ATOL,
    rtol=RTOL,
    contract=Contract("""dL/ds for a = softmax(s, dim=-1), given a and dL/da, written by hand.

    a: (..., N), rows of a softmax (a row of zeros, from a fully masked row, is allowed)
    grad_a: (..., N) = dL/da
    Returns dL/ds (..., N), each row through the Jacobian of its own softmax (over the last dim).
    The check works in float64 and compares to 1e-10: keep the inputs' dtype.
    """, forbid=(AUTOGRAD, SOFTMAX_BACKWARD), kinds={"a": "tensor", "grad_a": "tensor"}, off=F64_ALREADY),
)
check_softmax_backward = register(SOFTMAX_BACKWARD_EXERCISE)


# ---------------------------------------------------------------- sdpa_backward
def _attention_cases(seed: int, n_random: int) -> list:
    """(label, q, k, v, grad_out, mask) tuples in float64, shared by sdpa_backward and the Function."""
    r, g = rng(seed), generator(seed)
    out = []

    def add(label, lead, s_q, s_k, d, d_v, mask=None, scale=1.0, q=None, k=None):
        q = randn(*lead, s_q, d, gen=g, scale=scale, dtype=F64) if q is None else q
        k = randn(*lead, s_k, d, gen=g, scale=scale, dtype=F64) if k is None else k
        v = randn(*lead, s_k, d_v, gen=g, dtype=F64)
        grad_out = randn(*lead, s_q, d_v, gen=g, dtype=F64)
        out.append((f"{label}: {_dims(q=q, k=k, v=v, mask=mask)}", q, k, v, grad_out, mask))

    add("no batch dims, S_q = S_k", (), 4, 4, 8, 8)
    add("S_q ≠ S_k, D ≠ D_v", (2,), 3, 6, 5, 7)
    add("a single query and key (S = 1)", (1,), 1, 1, 4, 3)
    add("batch and heads (B, H)", (2, 3), 5, 7, 4, 6)
    add("large-magnitude inputs (saturated softmax)", (2,), 5, 4, 16, 4, scale=6.0)
    add("mask: some keys hidden", (2,), 4, 6, 8, 5, mask=_random_mask((2,), 4, 6, g))
    add("mask with a fully masked query row", (2,), 4, 5, 8, 3,
        mask=_random_mask((2,), 4, 5, g, fully_masked_row=True))
    add("causal mask (S_q, S_k) broadcast over (B, H)", (2, 2), 5, 5, 4, 4,
        mask=torch.ones(5, 5, dtype=torch.bool).tril())
    key_pad = torch.ones(3, 1, 1, 6, dtype=torch.bool)
    key_pad[1, ..., 4:] = False
    add("padding mask (B, 1, 1, S_k) over heads", (3, 2), 4, 6, 4, 5, mask=key_pad)
    # The largest score sits on a masked key: the weights must be masked before the softmax.
    q = randn(2, 3, 4, gen=g, dtype=F64)
    k = randn(2, 5, 4, gen=g, dtype=F64)
    k[:, 2] = 8 * q.mean(dim=1)
    hide = torch.ones(2, 3, 5, dtype=torch.bool)
    hide[..., 2] = False
    add("a masked key holds the largest score", (2,), 3, 5, 4, 3, mask=hide, q=q, k=k)
    for i in range(n_random):  # random shapes, odd sizes included
        lead = tuple(r.randint(1, 3) for _ in range(r.randint(0, 2)))
        s_q, s_k = r.randint(1, 8), r.randint(1, 8)
        d, d_v = r.choice([1, 3, 4, 8]), r.randint(1, 6)
        mask = _random_mask(lead, s_q, s_k, g, fully_masked_row=i % 4 == 1) if i % 2 else None
        add(f"random case {i + 1}", lead, s_q, s_k, d, d_v, mask=mask)
    return out


def _sdpa_backward_cases(seed: int) -> list:
    cases = []
    for label, q, k, v, grad_out, mask in _attention_cases(seed, n_random=7):
        kwargs = {} if mask is None else {"mask": mask}
        cases.append(Case(label, (q, k, v, grad_out), kwargs))
    return cases


def _sdpa_backward_variant(q, k, v, grad_out, mask=None, *, scale_dq=True, scale_dk=True, jacobian="full",
                           rowsum_dim=-1, dk_transposed=True, dv_transposed=True, use_mask=True,
                           ones_grad_out=False, scale=None, forward_scale=None, weights_fn=None):
    """sdpa_backward with one step done wrong: what the mutants compute."""
    if ones_grad_out:
        grad_out = torch.ones_like(grad_out)
    scale = 1.0 / math.sqrt(q.size(-1)) if scale is None else scale(q, v)
    fscale = scale if forward_scale is None else forward_scale
    scores = q @ k.transpose(-2, -1) * fscale
    if weights_fn is not None:
        weights = weights_fn(scores, mask)
    else:
        weights = masked_softmax_impl(scores, mask if use_mask else None)
    dv = (weights.transpose(-2, -1) if dv_transposed else weights) @ grad_out
    d_weights = grad_out @ v.transpose(-2, -1)
    if jacobian == "full":
        d_scores = weights * (d_weights - (d_weights * weights).sum(dim=rowsum_dim, keepdim=True))
    elif jacobian == "diagonal":  # a ⊙ dA only
        d_scores = weights * d_weights
    else:  # "identity": the softmax skipped altogether
        d_scores = d_weights
    dq = d_scores @ k * (scale if scale_dq else 1.0)
    dk = (d_scores.transpose(-2, -1) if dk_transposed else d_scores) @ q * (scale if scale_dk else 1.0)
    return dq, dk, dv


def _bw(**how):
    def impl(q, k, v, grad_out, mask=None):
        return _sdpa_backward_variant(q, k, v, grad_out, mask, **how)

    return impl


def _bw_float32(q, k, v, grad_out, mask=None):
    grads = ref.sdpa_backward.__wrapped__(q.float(), k.float(), v.float(), grad_out.float(), mask)
    return tuple(t.double() for t in grads)


DQ_NO_SCALE = "dq is missing the 1/sqrt(D) factor: the scores are S = q kᵀ / sqrt(D), so dq = dS k / sqrt(D) (and dk = dSᵀ q / sqrt(D))."
DK_NOT_TRANSPOSED = "dk = dSᵀ q / sqrt(D) — (S_k, S_q) x (S_q, D) -> (S_k, D): dS must be transposed (dS q only fits when S_q = S_k)."
DV_NOT_TRANSPOSED = "dv = Aᵀ grad_out — (S_k, S_q) x (S_q, D_v) -> (S_k, D_v): the weights must be transposed (A grad_out only fits when S_q = S_k)."
SKIP_SOFTMAX = "dq and dk were computed from dA (the gradient of the weights) instead of dS (the gradient of the scores): pass dA through the softmax backward first, dS = A ⊙ (dA − rowsum(dA ⊙ A))."
NO_SUBTRACTION = "the softmax backward kept only A ⊙ dA: subtract the row term, dS = A ⊙ (dA − rowsum(dA ⊙ A))."
ROWSUM_WRONG_DIM = "in dS = A ⊙ (dA − rowsum(dA ⊙ A)) the sum must run over the keys (dim -1, keepdim=True), not the queries."
MASK_IGNORED = "the mask was not applied when recomputing the weights in the backward: A must be the same masked softmax as in the forward."
FLOAT32 = "part of the computation ran in float32 (the inputs are float64): a tensor made without dtype=..., or .float(); keep the inputs' dtype so the gradients are exact."
IGNORES_GRAD_OUT = "grad_out was ignored (as if dL/dout were all ones): chain it in, dv = Aᵀ grad_out and dA = grad_out vᵀ."
DK_NO_SCALE = "dk is missing the 1/sqrt(D) factor: the scores are S = q kᵀ / sqrt(D), so dk = dSᵀ q / sqrt(D) (dq has it, dk needs it too)."
NO_SCALE_BACKWARD = ("dq and dk are both missing the 1/sqrt(D) factor: the scores are S = q kᵀ / sqrt(D), so the chain rule "
                     "brings it into both, dq = dS k / sqrt(D) and dk = dSᵀ q / sqrt(D).")
SCALE_BY_D = "the scores were scaled by 1/D instead of 1/sqrt(D) (in the recomputed forward and in dq, dk): S = q kᵀ / sqrt(D)."
SCALE_BY_D_V = ("the scores were scaled by 1/sqrt(D_v) (the size of v) instead of 1/sqrt(D) (the size of q and k), "
                "in the recomputed forward and in dq, dk.")
WEIGHTS_UNSCALED = ("the weights recomputed in the backward were not scaled: A = softmax(q kᵀ / sqrt(D)) exactly as in the "
                    "forward, then dq = dS k / sqrt(D) and dk = dSᵀ q / sqrt(D).")
NAN_ROWS = ("a fully masked row gave NaN gradients: the softmax of a row of -inf is 0/0; that row's weights are zeros "
            "(e.g. nan_to_num or torch.where), and then its gradients are zeros too.")
MASK_AFTER_SOFTMAX = ("the mask was applied after the softmax (weights * mask), so the kept weights no longer sum to 1: "
                      "fill the masked scores with -inf before the softmax, as in the forward.")


FINITE_FILL = ("the masked scores were filled with a large finite number (e.g. -1e9) instead of -inf: a fully masked "
               "row then has equal scores and gets uniform weights, not zeros, so its gradients are not zero; fill with "
               "-inf and replace that row's NaNs by zeros (or zero it with torch.where).")


def _softmax_finite_fill(scores, mask):
    return torch.softmax(scores if mask is None else scores.masked_fill(~mask, -1e9), dim=-1)


def _softmax_then_mask(scores, mask):
    w = torch.softmax(scores, dim=-1)
    return w if mask is None else w * mask


def _softmax_nan_rows(scores, mask):
    return torch.softmax(scores if mask is None else scores.masked_fill(~mask, float("-inf")), dim=-1)

SDPA_BACKWARD_MUTANTS = [
    Mutant("dq_missing_scale", DQ_NO_SCALE, _bw(scale_dq=False)),
    Mutant("dk_dS_not_transposed", DK_NOT_TRANSPOSED, _bw(dk_transposed=False)),
    Mutant("dv_weights_not_transposed", DV_NOT_TRANSPOSED, _bw(dv_transposed=False)),
    Mutant("skip_softmax_backward", SKIP_SOFTMAX, _bw(jacobian="identity")),
    Mutant("softmax_backward_no_subtraction", NO_SUBTRACTION, _bw(jacobian="diagonal")),
    Mutant("softmax_backward_wrong_dim", ROWSUM_WRONG_DIM, _bw(rowsum_dim=-2)),
    Mutant("mask_ignored_in_backward", MASK_IGNORED, _bw(use_mask=False)),
    Mutant("ignores_grad_out", IGNORES_GRAD_OUT, _bw(ones_grad_out=True)),
    Mutant("computed_in_float32", FLOAT32, _bw_float32),
    Mutant("dk_missing_scale", DK_NO_SCALE, _bw(scale_dk=False)),
    Mutant("no_scale_in_backward", NO_SCALE_BACKWARD, _bw(scale_dq=False, scale_dk=False)),
    Mutant("scale_by_d", SCALE_BY_D, _bw(scale=lambda q, v: 1.0 / q.size(-1))),
    Mutant("scale_by_d_v", SCALE_BY_D_V, _bw(scale=lambda q, v: 1.0 / math.sqrt(v.size(-1)))),
    Mutant("recomputed_weights_unscaled", WEIGHTS_UNSCALED, _bw(forward_scale=1.0)),
    Mutant("nan_fully_masked", NAN_ROWS, _bw(weights_fn=_softmax_nan_rows)),
    Mutant("mask_after_softmax", MASK_AFTER_SOFTMAX, _bw(weights_fn=_softmax_then_mask)),
    Mutant("finite_fill_minus_1e9", FINITE_FILL, _bw(weights_fn=_softmax_finite_fill)),
]


# Correct answers written differently: they must pass.
def _v_bw_einsum(q, k, v, grad_out, mask=None):
    """einsum, a hand-made masked softmax (exp of shifted scores, zero rows by where)."""
    d = q.shape[-1]
    scores = torch.einsum("...qd,...kd->...qk", q, k) / d ** 0.5
    if mask is not None:
        scores = torch.where(mask, scores, torch.tensor(float("-inf"), dtype=scores.dtype))
    m = scores.amax(dim=-1, keepdim=True)
    e = torch.exp(scores - torch.where(torch.isinf(m), torch.zeros_like(m), m))
    a = e / e.sum(dim=-1, keepdim=True).clamp_min(1e-300)
    dv = torch.einsum("...qk,...qe->...ke", a, grad_out)
    da = torch.einsum("...qe,...ke->...qk", grad_out, v)
    ds = a * da - a * torch.einsum("...qk,...qk->...q", a, da).unsqueeze(-1)
    dq = torch.einsum("...qk,...kd->...qd", ds, k) / d ** 0.5
    dk = torch.einsum("...qk,...qd->...kd", ds, q) / d ** 0.5
    return dq, dk, dv


def _v_bw_jacobian(q, k, v, grad_out, mask=None):
    """The softmax Jacobian built per row; the scale folded into q first; assert for validation."""
    assert q.size(-1) == k.size(-1), "q and k must share D"
    qs = q * q.size(-1) ** -0.5
    scores = qs @ k.mT
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), -math.inf)
    a = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    dv = a.mT @ grad_out
    da = grad_out @ v.mT
    jac = torch.diag_embed(a) - a.unsqueeze(-1) * a.unsqueeze(-2)  # (..., S_q, S_k, S_k)
    ds = (jac @ da.unsqueeze(-1)).squeeze(-1)
    return ds @ k * q.size(-1) ** -0.5, ds.mT @ qs, dv

_SHAPE_ERRORS = ("cannot be multiplied", "batch2", "must match the size of tensor")


def _shape_error_message(name, label, err) -> str:
    return (
        f"{name} raised RuntimeError on case [{label}]: {err}\n"
        "The shapes do not fit, which usually means a transpose is missing or misplaced "
        "(S_q ≠ S_k here). Likely mistake, one of:\n"
        f"  {DK_NOT_TRANSPOSED}\n  {DV_NOT_TRANSPOSED}"
    )


def _run_sdpa_backward(fn, case: Case):
    try:
        return fn(*case.args, **case.kwargs)
    except NotImplementedError:
        raise
    except RuntimeError as err:
        if any(s in str(err) for s in _SHAPE_ERRORS):
            raise CheckFailure(_shape_error_message("sdpa_backward", case.label, err)) from err
        raise


def _scale_rescaler(runner, dq_index):
    """``Exercise.rescale`` for the backward: the case with every score multiplied by c.

    Scaling q by c multiplies the scores by c; then dk and dv are those of scores scaled by
    c/sqrt(D), and dq = dS k c/sqrt(D) is c times the reference's dq on the scaled q.
    """
    def rescale(case: Case, c: float) -> Case:
        # Snap c to a known wrong factor when it is within 0.1%: the core's search refines c to about
        # 1e-7, too coarse for this chapter's float64 tolerance (1e-10), so without snapping it
        # would never confirm a match (a workaround inside this chapter).
        names = _scale_names(case)
        right = next(iter(names.values()))
        for value in names.values():
            if abs(math.log(c) - math.log(value / right)) < 1e-3:
                c = value / right
                break
        q, *rest = case.args
        base = case.run or runner

        def run(impl, cs):
            out = list(base(impl, cs))
            out[dq_index] = out[dq_index] * c
            return tuple(out)

        return replace(case, args=(q * c, *rest), run=run)

    return rescale


def _scale_names(case: Case) -> dict:
    q, k, v = case.args[:3]
    d, d_v = q.size(-1), v.size(-1)
    names = {"1/sqrt(D)": 1 / math.sqrt(d), "1 (no scaling)": 1.0, "1/D": 1 / d,
             "1/sqrt(D_v) (the size of v)": 1 / math.sqrt(d_v), "sqrt(D)": math.sqrt(d),
             "1/sqrt(S_k)": 1 / math.sqrt(k.size(-2)), "1/sqrt(S_q)": 1 / math.sqrt(q.size(-2))}
    if q.dim() >= 3:
        names["1/sqrt(q.size(1))"] = 1 / math.sqrt(q.size(1))
    return names


SDPA_BACKWARD_EXERCISE = Exercise(
    name="sdpa_backward",
    reference=ref.sdpa_backward,
    make_cases=_sdpa_backward_cases,
    run=_run_sdpa_backward,
    mutants=SDPA_BACKWARD_MUTANTS,
    variants=[Variant("einsum_own_softmax", _v_bw_einsum), Variant("jacobian_scale_folded_into_q", _v_bw_jacobian, demo=True)],
    atol=ATOL,
    rtol=RTOL,
    output_names=("dq", "dk", "dv"),
    rescale=_scale_rescaler(_run_sdpa_backward, 0),
    scale_names=_scale_names,
    contract=Contract("""Gradients of out = softmax(q kᵀ / sqrt(D), masked) v with respect to q, k and v, by hand.

    q: (..., S_q, D)   k: (..., S_k, D)   v: (..., S_k, D_v)   grad_out: (..., S_q, D_v) = dL/dout
    mask: bool, broadcastable to (..., S_q, S_k), True = may attend; or None
    Returns (dq, dk, dv): dq (..., S_q, D), dk (..., S_k, D), dv (..., S_k, D_v).
    Recompute the weights from q, k and the mask as in the forward.
    A fully masked query row has zero weights, a zero output and zero gradients (never NaN).
    The check works in float64 and compares to 1e-10: keep the inputs' dtype.
    """, forbid=(AUTOGRAD, SDPA, SOFTMAX_BACKWARD), kinds={"q": "query", "k": "key", "v": "value", "grad_out": "tensor", "mask": "mask"},
    shapes={"grad_out": ["...", "S_q", "D_v"]}, off=F64_ALREADY),
)
check_sdpa_backward = register(SDPA_BACKWARD_EXERCISE)


# ---------------------------------------------------------------- ScaledDotProductAttentionFunction
NOT_A_FUNCTION = (
    "the output was not produced by a torch.autograd.Function, so autograd differentiated your "
    "forward by itself and no hand-written backward ran: pass a class that subclasses "
    "torch.autograd.Function, with static forward(ctx, q, k, v, mask=None) and backward(ctx, grad_out)."
)
WRONG_ORDER = (
    "backward returned the gradients in the wrong order: return one per input of forward, in "
    "the same order — (dq, dk, dv, None)."
)
MISSING_MASK_GRAD = (
    "backward must return one value per input of forward, the mask included: return "
    "(dq, dk, dv, None), with None for the bool mask."
)


def _with_backward_tripwire(impl):
    """A subclass of the learner's autograd.Function whose backward may call neither autograd nor
    PyTorch's own softmax backward (the prompt of 3.1-3.3 forbids both in all three exercises)."""
    attr = "vjp" if impl.vjp is not torch.autograd.Function.vjp else "backward"
    user_backward = getattr(impl, attr)

    def backward(ctx, *grads):
        with learner_code((AUTOGRAD, SOFTMAX_BACKWARD)):
            return user_backward(ctx, *grads)

    return type(impl.__name__, (impl,), {attr: staticmethod(backward), "__module__": impl.__module__})


def _apply(impl):
    """What to call: ``Class.apply`` for an autograd.Function, else the callable itself."""
    if isinstance(impl, type) and issubclass(impl, torch.autograd.Function):
        return _with_backward_tripwire(impl).apply
    return impl


def _function_forward_backward(impl, q, k, v, grad_out, mask, label):
    """out and (dq, dk, dv) of the learner's Function, gradients through torch.autograd.grad."""
    name = "ScaledDotProductAttentionFunction"
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    try:
        with torch.enable_grad():
            out = _apply(impl)(q, k, v, mask)  # the mask always passed, None when there is none
            if not isinstance(out, torch.Tensor):
                raise CheckFailure(f"{name}.apply(q, k, v, mask) should return the "
                                   f"output tensor, but returned {describe(out)} on case [{label}].")
            if not isinstance(out.grad_fn, BackwardCFunction):
                raise CheckFailure(f"{name} on case [{label}]: {NOT_A_FUNCTION}")
            if tuple(out.shape) != tuple(grad_out.shape):
                raise CheckFailure(f"on case [{label}]: out has shape {tuple(out.shape)}, "
                                   f"expected {tuple(grad_out.shape)}.")
            grads = torch.autograd.grad(out, (q, k, v), grad_out, allow_unused=True)
    except NotImplementedError:
        raise
    except RuntimeError as err:
        text = str(err)
        if "returned an invalid gradient" in text:
            raise CheckFailure(f"{name} raised RuntimeError on case [{label}]: {text}\n"
                               f"Likely mistake: {WRONG_ORDER}") from err
        if "incorrect number of gradients" in text:
            raise CheckFailure(f"{name} raised RuntimeError on case [{label}]: {text}\n"
                               f"Likely mistake: {MISSING_MASK_GRAD}") from err
        if any(s in text for s in _SHAPE_ERRORS):
            raise CheckFailure(_shape_error_message(name, label, err)) from err
        raise
    return (out.detach(), *grads)


GRADCHECK_PASSED = "gradcheck passed"


def _run_gradcheck(impl, case: Case):
    """torch.autograd.gradcheck in float64: the learner's backward against finite differences of
    the learner's forward. Returns a sentence (the judge reads it): this runs in the check's
    process and in the grader's, and only the sentence crosses between them.

    The learner's backward still runs under the autograd tripwire (_with_backward_tripwire); the
    exercise forbids nothing else, so gradcheck's own autograd calls are allowed here.
    """
    q, k, v, mask = case.args
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    fn = _apply(impl)
    try:
        # fast_mode compares vᵀ J u for random u, v: a few forwards instead of two per input element.
        torch.autograd.gradcheck(lambda q, k, v: fn(q, k, v, mask), (q, k, v), fast_mode=True, raise_exception=True)
    except GradcheckError as err:
        first = str(err).strip().splitlines()[0]
        return (f"your backward disagrees with finite differences of your forward ({first.rstrip(',.')}; "
                "inputs 0, 1, 2 are q, k, v).")
    return GRADCHECK_PASSED


def _judge_gradcheck(got) -> str | None:
    if got == GRADCHECK_PASSED:
        return None
    return got if isinstance(got, str) else f"gradcheck could not run: got {describe(got)}."


def _function_cases(seed: int) -> list:
    cases = [Case(label, (q, k, v, grad_out, mask)) for label, q, k, v, grad_out, mask
             in _attention_cases(seed, n_random=4)]
    g = generator(seed + 808)  # small: finite differences cost a few forwards per case
    for lead, s_q, s_k, d, d_v, masked in [((2,), 2, 3, 3, 2, False), ((1, 2), 3, 4, 2, 2, True)]:
        q = randn(*lead, s_q, d, gen=g, dtype=F64)
        k = randn(*lead, s_k, d, gen=g, dtype=F64)
        v = randn(*lead, s_k, d_v, gen=g, dtype=F64)
        mask = _random_mask(lead, s_q, s_k, g, fully_masked_row=True) if masked else None
        cases.append(Case(f"torch.autograd.gradcheck in float64: {_dims(q=q, k=k, v=v, mask=mask)}",
                          (q, k, v, mask), run=_run_gradcheck, judge=_judge_gradcheck))
    return cases


def _run_function(impl, case: Case):
    return _function_forward_backward(impl, *case.args, case.label)


def _function_with_backward(backward):
    class Mutated(unguarded(ref.ScaledDotProductAttentionFunction)):
        pass

    Mutated.backward = staticmethod(backward)
    return Mutated


def _fn_bw_from(variant):
    def backward(ctx, grad_out):
        q, k, v = ctx.saved_tensors
        return (*variant(q, k, v, grad_out, ctx.mask), None)

    return _function_with_backward(backward)


def _fn_wrong_order(ctx, grad_out):
    q, k, v = ctx.saved_tensors
    dq, dk, dv = ref.sdpa_backward.__wrapped__(q, k, v, grad_out, ctx.mask)
    return dk, dq, dv, None


def _fn_no_mask_grad(ctx, grad_out):
    q, k, v = ctx.saved_tensors
    return ref.sdpa_backward.__wrapped__(q, k, v, grad_out, ctx.mask)


def _fn_plain_autograd(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    return masked_softmax_impl(scores, mask) @ v


class _FunctionScaleByDv(unguarded(ref.ScaledDotProductAttentionFunction)):
    """1/sqrt(D_v) in the forward and in the backward."""

    @staticmethod
    def forward(ctx, q, k, v, mask=None):
        ctx.save_for_backward(q, k, v)
        ctx.mask = mask
        return masked_softmax_impl(q @ k.transpose(-2, -1) / math.sqrt(v.size(-1)), mask) @ v

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v = ctx.saved_tensors
        return (*_bw(scale=lambda q, v: 1.0 / math.sqrt(v.size(-1)))(q, k, v, grad_out, ctx.mask), None)


def _fn_torch_softmax_backward(ctx, grad_out):
    """The right gradients, with dS from PyTorch's own softmax backward (forbidden by the prompt)."""
    q, k, v = ctx.saved_tensors
    c = 1.0 / math.sqrt(q.size(-1))
    a = masked_softmax_impl(q @ k.transpose(-2, -1) * c, ctx.mask)
    ds = torch._softmax_backward_data(grad_out @ v.transpose(-2, -1), a, -1, a.dtype)
    return ds @ k * c, ds.transpose(-2, -1) @ q * c, a.transpose(-2, -1) @ grad_out, None


FUNCTION_MUTANTS = [
    Mutant("grads_in_wrong_order", WRONG_ORDER, _function_with_backward(_fn_wrong_order)),
    Mutant("no_gradient_slot_for_mask", MISSING_MASK_GRAD, _function_with_backward(_fn_no_mask_grad)),
    Mutant("plain_function_not_autograd_function", NOT_A_FUNCTION, _fn_plain_autograd),
    Mutant("backward_ignores_mask", MASK_IGNORED, _fn_bw_from(_bw(use_mask=False))),
    Mutant("backward_ignores_grad_out", IGNORES_GRAD_OUT, _fn_bw_from(_bw(ones_grad_out=True))),
    Mutant("backward_dq_missing_scale", DQ_NO_SCALE, _fn_bw_from(_bw(scale_dq=False))),
    Mutant("backward_dk_missing_scale", DK_NO_SCALE, _fn_bw_from(_bw(scale_dk=False))),
    Mutant("scale_by_d_v", SCALE_BY_D_V, _FunctionScaleByDv),
    Mutant("backward_nan_fully_masked", NAN_ROWS, _fn_bw_from(_bw(weights_fn=_softmax_nan_rows))),
    Mutant("backward_skips_softmax", SKIP_SOFTMAX, _fn_bw_from(_bw(jacobian="identity"))),
    Mutant("backward_calls_pytorch_softmax_backward", "calls torch._softmax_backward_data (PyTorch's own softmax backward)",
           _function_with_backward(_fn_torch_softmax_backward)),
]

# Correct answers written differently: they must pass.
class _VFunctionSavesWeights(torch.autograd.Function):
    """Saves the weights (not q, k, v alone), mask without a default, einsum backward."""

    @staticmethod
    def forward(ctx, q, k, v, mask):
        scores = torch.einsum("...qd,...kd->...qk", q, k) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        a = torch.softmax(scores, dim=-1)
        a = torch.where(torch.isnan(a), torch.zeros_like(a), a)
        ctx.save_for_backward(q, k, v, a)
        return a @ v

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, a = ctx.saved_tensors
        da = grad_out @ v.transpose(-2, -1)
        ds = a * (da - (a * da).sum(-1, keepdim=True))
        c = 1.0 / math.sqrt(q.shape[-1])
        return (torch.einsum("...qk,...kd->...qd", ds, k) * c, torch.einsum("...qk,...qd->...kd", ds, q) * c,
                torch.einsum("...qk,...qe->...ke", a, grad_out), None)


class _VFunctionSetupContext(torch.autograd.Function):
    """The newer style: forward without ctx, setup_context saves the inputs; the mask kept on ctx."""

    @staticmethod
    def forward(q, k, v, mask=None):
        out, _ = _plain_attention(q, k, v, mask)
        return out

    @staticmethod
    def setup_context(ctx, inputs, output):
        q, k, v, mask = inputs
        ctx.save_for_backward(q, k, v)
        ctx.mask = mask

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v = ctx.saved_tensors
        _, a = _plain_attention(q, k, v, ctx.mask)
        dv = a.mT @ grad_out
        da = grad_out @ v.mT
        ds = a * da - a * (a * da).sum(dim=-1, keepdim=True)
        return ds @ k / math.sqrt(q.size(-1)), ds.mT @ q / math.sqrt(q.size(-1)), dv, None


def _plain_attention(q, k, v, mask):
    scores = q @ k.mT / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    m = scores.amax(-1, keepdim=True).nan_to_num(0.0, neginf=0.0)
    e = (scores - m).exp()
    a = e / e.sum(-1, keepdim=True).clamp_min(1e-300)
    return a @ v, a


FUNCTION_EXERCISE = Exercise(
    name="ScaledDotProductAttentionFunction",
    reference=ref.ScaledDotProductAttentionFunction,
    make_cases=_function_cases,
    input_names=("q", "k", "v", "grad_out", "mask"),
    run=_run_function,
    # No `forbidden`: the check calls autograd on the output; the learner's backward runs under
    # the autograd tripwire instead (see _with_backward_tripwire and the module docstring).
    mutants=FUNCTION_MUTANTS,
    atol=ATOL,
    rtol=RTOL,
    output_names=("out", "dq", "dk", "dv"),
    rescale=_scale_rescaler(_run_function, 1),
    scale_names=_scale_names,
    variants=[Variant("saves_weights_einsum", _VFunctionSavesWeights, demo=True),
              Variant("setup_context_style", _VFunctionSetupContext)],
    contract=Contract("""Attention as a torch.autograd.Function whose backward is your hand-derived one.

    ScaledDotProductAttentionFunction.apply(q, k, v, mask) -> out, mask a bool tensor or None:
        out (..., S_q, D_v) = softmax(q kᵀ / sqrt(D), masked) v
        q: (..., S_q, D)   k: (..., S_k, D)   v: (..., S_k, D_v)
        mask: broadcastable to (..., S_q, S_k), True = may attend; a fully masked row gives zeros
    forward(ctx, q, k, v, mask=None) saves what backward needs (ctx.save_for_backward for tensors);
    backward(ctx, grad_out) returns one gradient per input of forward: (dq, dk, dv, None).
    The check compares out, dq, dk, dv in float64 (to 1e-10) and runs torch.autograd.gradcheck.
    backward must not call autograd (backward, torch.autograd.grad) nor PyTorch's own softmax
    backward (torch._softmax_backward_data): write the gradients yourself.
    """, kinds={"q": "query", "k": "key", "v": "value", "grad_out": "tensor", "mask": "mask"},
    shapes={"grad_out": ["...", "S_q", "D_v"]}, off=F64_ALREADY),
)
check_ScaledDotProductAttentionFunction = register(FUNCTION_EXERCISE)
