"""Checks for chapter 08 — the backward pass of attention, by hand.

Every case is float64: the point of the chapter is that the hand-derived gradients are *exactly*
the gradients, so the tolerances (atol 1e-10, rtol 1e-8) leave room for a different order of
operations (float64 rounding, ~1e-15) but not for a computation that slipped into float32 (~1e-7)
or for an approximation.

``softmax_backward`` and ``sdpa_backward`` run with autograd forbidden (and SDPA, and PyTorch's
own softmax backward). ``ScaledDotProductAttentionFunction`` cannot run that way as a whole: the
check itself calls ``torch.autograd.grad`` on its output (and ``torch.autograd.gradcheck``). So
the check calls the learner's class through a subclass whose ``backward`` runs inside the
autograd tripwire: a backward that calls autograd (``torch.autograd.grad``, ``.backward()``,
``torch.func.vjp`` ...) is refused and scores zero, while the check's own autograd calls pass.
"""
import math

import torch
from torch.autograd.function import BackwardCFunction
from torch.autograd.gradcheck import GradcheckError

from .. import reference as ref
from .._guard import unguarded
from ..reference._common import masked_softmax_impl
from ._core import Case, CheckFailure, Exercise, Mutant, describe, generator, learner_code, randn, rng
from ._forbid import AUTOGRAD, SDPA, SOFTMAX_BACKWARD
from ._registry import register

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
    add("a single entry per row (N = 1: the gradient is 0)", (4, 1))
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

SOFTMAX_BACKWARD_MUTANTS = [
    Mutant("no_subtraction", SB_NO_SUBTRACTION, _sb_no_subtraction),
    Mutant("wrong_reduction_dim", SB_WRONG_DIM, _sb_wrong_dim),
    Mutant("sum_without_a", SB_SUM_WITHOUT_A, _sb_sum_without_a),
    Mutant("missing_outer_a", SB_MISSING_OUTER_A, _sb_missing_outer_a),
    Mutant("log_softmax_backward", SB_LOG_SOFTMAX, _sb_log_softmax),
]

SOFTMAX_BACKWARD_EXERCISE = Exercise(
    name="softmax_backward",
    reference=ref.softmax_backward,
    make_cases=_softmax_backward_cases,
    forbidden=(AUTOGRAD, SOFTMAX_BACKWARD),
    mutants=SOFTMAX_BACKWARD_MUTANTS,
    atol=ATOL,
    rtol=RTOL,
)
check_softmax_backward = register(SOFTMAX_BACKWARD_EXERCISE)


# ---------------------------------------------------------------- sdpa_backward
def _attention_cases(seed: int, n_random: int) -> list:
    """(label, q, k, v, grad_out, mask) tuples in float64, shared by sdpa_backward and the Function."""
    r, g = rng(seed), generator(seed)
    out = []

    def add(label, lead, s_q, s_k, d, d_v, mask=None, scale=1.0):
        q = randn(*lead, s_q, d, gen=g, scale=scale, dtype=F64)
        k = randn(*lead, s_k, d, gen=g, scale=scale, dtype=F64)
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


def _sdpa_backward_variant(q, k, v, grad_out, mask=None, *, scale_dq=True, jacobian="full",
                           rowsum_dim=-1, dk_transposed=True, dv_transposed=True, use_mask=True,
                           ones_grad_out=False):
    """sdpa_backward with one step done wrong: what the mutants compute."""
    if ones_grad_out:
        grad_out = torch.ones_like(grad_out)
    scale = 1.0 / math.sqrt(q.size(-1))
    weights = masked_softmax_impl(q @ k.transpose(-2, -1) * scale, mask if use_mask else None)
    dv = (weights.transpose(-2, -1) if dv_transposed else weights) @ grad_out
    d_weights = grad_out @ v.transpose(-2, -1)
    if jacobian == "full":
        d_scores = weights * (d_weights - (d_weights * weights).sum(dim=rowsum_dim, keepdim=True))
    elif jacobian == "diagonal":  # a ⊙ dA only
        d_scores = weights * d_weights
    else:  # "identity": the softmax skipped altogether
        d_scores = d_weights
    dq = d_scores @ k * (scale if scale_dq else 1.0)
    dk = (d_scores.transpose(-2, -1) if dk_transposed else d_scores) @ q * scale
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
]

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


SDPA_BACKWARD_EXERCISE = Exercise(
    name="sdpa_backward",
    reference=ref.sdpa_backward,
    make_cases=_sdpa_backward_cases,
    run=_run_sdpa_backward,
    forbidden=(AUTOGRAD, SDPA, SOFTMAX_BACKWARD),
    mutants=SDPA_BACKWARD_MUTANTS,
    atol=ATOL,
    rtol=RTOL,
    output_names=("dq", "dk", "dv"),
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
    """A subclass of the learner's autograd.Function whose backward may not call autograd."""
    attr = "vjp" if impl.vjp is not torch.autograd.Function.vjp else "backward"
    user_backward = getattr(impl, attr)

    def backward(ctx, *grads):
        with learner_code((AUTOGRAD,)):
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
    extra = () if mask is None else (mask,)
    try:
        with torch.enable_grad():
            out = _apply(impl)(q, k, v, *extra)
            if not isinstance(out, torch.Tensor):
                raise CheckFailure(f"{name}.apply(q, k, v{', mask' if extra else ''}) should return the "
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


def _function_cases(seed: int) -> list:
    return [Case(label, (q, k, v, grad_out, mask)) for label, q, k, v, grad_out, mask
            in _attention_cases(seed, n_random=4)]


def _run_function(impl, case: Case):
    return _function_forward_backward(impl, *case.args, case.label)


def _gradcheck(impl) -> None:
    """torch.autograd.gradcheck in float64: backward against finite differences of forward."""
    g = generator(808)  # small: the numerical Jacobian costs two forwards per input element
    for lead, s_q, s_k, d, d_v, masked in [((1, 2), 3, 4, 2, 2, True), ((2,), 2, 3, 3, 2, False)]:
        q = randn(*lead, s_q, d, gen=g, dtype=F64).requires_grad_()
        k = randn(*lead, s_k, d, gen=g, dtype=F64).requires_grad_()
        v = randn(*lead, s_k, d_v, gen=g, dtype=F64).requires_grad_()
        extra = (_random_mask(lead, s_q, s_k, g, fully_masked_row=True),) if masked else ()
        fn = _apply(impl)
        where = f"gradcheck ({_dims(q=q, k=k, v=v, mask=extra[0] if extra else None)}, float64)"
        try:
            # fast_mode compares vᵀ J u for random u, v: a few forwards instead of two per input element.
            torch.autograd.gradcheck(lambda q, k, v: fn(q, k, v, *extra), (q, k, v), fast_mode=True,
                                     raise_exception=True)
        except GradcheckError as err:
            first = str(err).strip().splitlines()[0]
            raise CheckFailure(
                f"{where}: your backward disagrees with finite differences of your forward ({first.rstrip(',.')}; "
                "inputs 0, 1, 2 are q, k, v)."
            ) from None


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


FUNCTION_MUTANTS = [
    Mutant("grads_in_wrong_order", WRONG_ORDER, _function_with_backward(_fn_wrong_order)),
    Mutant("no_gradient_slot_for_mask", MISSING_MASK_GRAD, _function_with_backward(_fn_no_mask_grad)),
    Mutant("plain_function_not_autograd_function", NOT_A_FUNCTION, _fn_plain_autograd),
    Mutant("backward_ignores_mask", MASK_IGNORED, _fn_bw_from(_bw(use_mask=False))),
    Mutant("backward_ignores_grad_out", IGNORES_GRAD_OUT, _fn_bw_from(_bw(ones_grad_out=True))),
    Mutant("backward_dq_missing_scale", DQ_NO_SCALE, _fn_bw_from(_bw(scale_dq=False))),
    Mutant("backward_skips_softmax", SKIP_SOFTMAX, _fn_bw_from(_bw(jacobian="identity"))),
]

FUNCTION_EXERCISE = Exercise(
    name="ScaledDotProductAttentionFunction",
    reference=ref.ScaledDotProductAttentionFunction,
    make_cases=_function_cases,
    run=_run_function,
    # No `forbidden`: the check calls autograd on the output; the learner's backward runs under
    # the autograd tripwire instead (see _with_backward_tripwire and the module docstring).
    mutants=FUNCTION_MUTANTS,
    atol=ATOL,
    rtol=RTOL,
    output_names=("out", "dq", "dk", "dv"),
    extra_checks=(_gradcheck,),
)
check_ScaledDotProductAttentionFunction = register(FUNCTION_EXERCISE)
