"""Checks for chapter 00 — foundations: stable softmax and log-sum-exp."""
import torch

from .. import reference as ref
from ._contract import Contract
from ._core import Case, Exercise, Mutant, Variant, compare, describe, generator, randn, rng
from ._forbid import LOGSUMEXP, SOFTMAX
from ._tripwires import Forbidden
from ._guards import INPLACE
from ._registry import register

__all__ = ["check_softmax", "check_logsumexp"]

F64 = torch.float64
NEG_INF = float("-inf")

# A log-sum-exp under another name: the last entry of the cumulative log-sum-exp along `dim` is the
# log-sum-exp itself, so both exercises forbid it with the library's softmax and log-sum-exp.
CUMULATIVE_LSE = Forbidden(
    "torch.logcumsumexp / Tensor.logcumsumexp",
    (torch.logcumsumexp, torch.Tensor.logcumsumexp),
    (torch.ops.aten.logcumsumexp, torch.ops.aten._logcumsumexp),
)


# ---------------------------------------------------------------- cases (shared by both)
def _judge_lse_all_minus_inf(x: torch.Tensor, dim: int):
    """logsumexp of a slice that is entirely -inf: -inf (log 0, torch's) or NaN (the plain formula)."""
    expected = torch.logsumexp(x.double(), dim=dim)  # -inf on the empty slices, finite elsewhere
    empty = torch.isinf(expected)

    def judge(got) -> str | None:
        if not isinstance(got, torch.Tensor):
            return f"output should be a Tensor of shape {tuple(expected.shape)}, but your code returned {describe(got)}."
        if tuple(got.shape) != tuple(expected.shape):
            return f"output has shape {tuple(got.shape)}, expected {tuple(expected.shape)}."
        if not got.is_floating_point():
            return f"output has dtype {got.dtype}, expected a floating-point tensor."
        g = got.detach().double()
        on_empty = g[empty]
        if not bool((torch.isnan(on_empty) | (on_empty == NEG_INF)).all()):
            return (f"on a slice that is entirely -inf the result should be -inf (log 0) or NaN; got "
                    f"{on_empty[~(torch.isnan(on_empty) | (on_empty == NEG_INF))][0].item():.4g}.")
        return compare(expected[~empty], g[~empty], 1e-5, 1e-4, "output (on the slices with a finite entry)")

    return judge


def _cases(seed: int, exercise: str) -> list:
    """x of 1 to 4 dims and a dim (negative or positive): typical inputs first, then gradients,
    then the edges (overflow, underflow, -inf entries; then -inf entries and +1000 together, in the
    gradients; slices entirely -inf), then random shapes."""
    r, g = rng(seed), generator(seed)
    cases = []

    def add(label, x, dim=-1, grad=False, **extra):
        label = f"{label}: x {tuple(x.shape)}{' float64' if x.dtype == F64 else ''}, dim={dim}"
        cases.append(Case(label, (x,), {"dim": dim}, grad=grad, **extra))

    add("2-D, over the last dim", randn(3, 6, gen=g))
    add("a 1-D vector", randn(7, gen=g))
    add("2-D, over the rows (dim=0)", randn(4, 3, gen=g), dim=0)
    add("3-D, a middle dim (dim=1)", randn(2, 5, 3, gen=g), dim=1)
    add("3-D, dim=-2", randn(3, 4, 2, gen=g), dim=-2)
    add("4-D, dim=2", randn(2, 3, 4, 5, gen=g), dim=2)
    add("a 1-D vector, dim=0", randn(5, gen=g), dim=0)
    add("a square 2-D input, dim=-1", randn(4, 4, gen=g))
    add("float64 input", randn(2, 3, 5, gen=g, dtype=F64))
    add("gradients (float64) of a random loss", randn(3, 5, gen=g, dtype=F64), grad=True)
    add("size 1 along dim", randn(3, 1, gen=g))
    add("a size-1 dim besides dim", randn(2, 1, 5, gen=g))
    add("large values, about +1000 (a naive exp overflows)", 1000.0 + randn(3, 5, gen=g))
    add("large negative values, about -1000 (a naive exp underflows to 0)", -1000.0 + randn(3, 5, gen=g))
    add("large values, about ±1000, dim=0", randn(6, 4, gen=g, scale=1000.0), dim=0)
    # Rows at very different offsets: one max over the whole tensor leaves the low rows at exp(-300) = 0.
    offsets = torch.tensor([[0.0], [-300.0], [300.0], [-600.0]])
    add("rows on very different scales (0, -300, +300, -600)", offsets + randn(4, 5, gen=g))
    x = randn(4, 6, gen=g)
    x[torch.rand(4, 6, generator=g) < 0.4] = NEG_INF
    x[:, 2] = randn(4, gen=g)  # every row keeps a finite entry ...
    x[0, :2] = NEG_INF  # ... after leading -inf entries in the first row
    add("some entries are -inf (the first row starts with -inf)", x)
    # The two edges together, after each alone (so that the first failure names one cause): -inf
    # entries (a row whose leading entries are all -inf, the largest entry of another row hidden)
    # and a row near +1000; the gradient must stay finite and exact.
    x = randn(4, 6, gen=g, dtype=F64, scale=3.0)
    x[0, :3] = NEG_INF
    x[1, x[1].argmax()] = NEG_INF
    x[2] += 1000.0
    x[3, 4] = NEG_INF
    add("gradients (float64), dim=0, with -inf entries and a row near +1000", x.t().contiguous(), dim=0, grad=True)
    x = randn(3, 5, gen=g)
    x[1] = NEG_INF  # no finite entry at all in row 1
    x[2, :4] = NEG_INF
    label = "a row that is entirely -inf (row 1)"
    if exercise == "logsumexp":
        add(label, x, judge=_judge_lse_all_minus_inf(x, -1))
    else:
        add(label, x)
    for i in range(5):  # random shapes and dims, odd sizes included
        shape = tuple(r.randint(1, 6) for _ in range(r.randint(1, 4)))
        dim = r.randrange(len(shape))
        if r.random() < 0.5:
            dim -= len(shape)
        add(f"random case {i + 1}", randn(*shape, gen=g, scale=r.choice([1.0, 5.0, 50.0])), dim=dim)
    return cases


def _softmax_cases(seed: int) -> list:
    return _cases(seed, "softmax")


def _lse_cases(seed: int) -> list:
    return _cases(seed, "logsumexp")


# ---------------------------------------------------------------- softmax
def _softmax_no_max(x, dim=-1):
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=True)


def _softmax_ignores_dim(x, dim=-1):
    return ref.softmax.__wrapped__(x, dim=-1)


def _softmax_max_last_dim(x, dim=-1):
    e = torch.exp(x - x.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)


def _softmax_global_max(x, dim=-1):
    e = torch.exp(x - x.max())
    return e / e.sum(dim=dim, keepdim=True)


def _softmax_wrong_dim_global_max(x, dim=-1):
    e = torch.exp(x - x.max())  # one max over the whole tensor ...
    return e / e.sum(dim=-1, keepdim=True)  # ... and the sum over the last dim, whatever `dim` says


def _softmax_sum_all(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum()


def _softmax_max_no_keepdim(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim))  # (..., ...) without dim: broadcasts against the wrong axis
    return e / e.sum(dim=dim, keepdim=True)


def _softmax_sum_no_keepdim(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim)


def _softmax_denominator_unshifted(x, dim=-1):
    return torch.exp(x - x.amax(dim=dim, keepdim=True)) / torch.exp(x).sum(dim=dim, keepdim=True)


def _softmax_inplace_normalise(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    e /= e.sum(dim=dim, keepdim=True)  # exp saved its output for the backward: this overwrites it
    return e


def _softmax_inplace_input(x, dim=-1):
    x -= x.amax(dim=dim, keepdim=True)  # edits the caller's tensor
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=True)


def _softmax_shift_by_mean(x, dim=-1):
    e = torch.exp(x - x.mean(dim=dim, keepdim=True))  # entries far above the mean overflow
    return e / e.sum(dim=dim, keepdim=True)


def _softmax_shift_by_min(x, dim=-1):
    e = torch.exp(x - x.amin(dim=dim, keepdim=True))  # every exponent >= 0: the largest overflow first
    return e / e.sum(dim=dim, keepdim=True)


def _softmax_float16(x, dim=-1):
    h = x.half()  # "to save memory": float16 keeps about 3 significant digits
    e = torch.exp(h - h.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)


def _softmax_zeros_for_empty(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True).nan_to_num(0.0, neginf=0.0))
    return e / e.sum(dim=dim, keepdim=True).clamp_min(1e-30)  # an all -inf slice gives 0, not NaN


SHIFT_HINT = ("the shift is not the max along `dim` (the mean, or the min?): only m = the max makes every "
              "exponent <= 0, so nothing overflows; with a smaller shift the entries far above it overflow "
              "(inf/inf = NaN), and a -inf entry makes the mean -inf (x - (-inf) = inf).")
INPLACE_EXP_HINT = ("the exponentials were normalised in place (`e /= e.sum(...)`): torch.exp saved its output "
                    "for the backward pass, so the gradient breaks; write `e / e.sum(...)` (a new tensor).")

SOFTMAX_MUTANTS = [
    Mutant("no_max_subtraction", "exp(x) overflowed (inf/inf = NaN) or underflowed (0/0) on large inputs: subtract the max along `dim` (keepdim=True) before exp.", _softmax_no_max),
    Mutant("ignores_dim", "the `dim` argument is ignored (the softmax is always over the last dim): use `dim` for the max and the sum.", _softmax_ignores_dim),
    Mutant("max_over_wrong_dim", "the max was taken over the last dim while the sum is over `dim`: subtracting a value that changes along `dim` changes the result; take the max along `dim` too.", _softmax_max_last_dim),
    Mutant("global_max", "the max was taken over the whole tensor instead of along `dim`: rows far below the global max underflow to exp(...) = 0 and give 0/0; take the max along `dim` with keepdim=True.", _softmax_global_max),
    Mutant("wrong_dim_global_max", "the softmax ignores `dim`: the sum runs over the last dim (and the max over the whole tensor); take the max and the sum along `dim`, with keepdim=True.", _softmax_wrong_dim_global_max),
    Mutant("sum_over_whole_tensor", "you divided by the sum over the whole tensor instead of the sum along `dim`: each slice along `dim` must sum to 1 (use .sum(dim=dim, keepdim=True)).", _softmax_sum_all),
    Mutant("max_without_keepdim", "the max was taken without keepdim=True, so it broadcasts against the wrong axis (x - m fails, or subtracts another slice's max): use x.amax(dim=dim, keepdim=True).", _softmax_max_no_keepdim),
    Mutant("sum_without_keepdim", "the sum was taken without keepdim=True, so e / e.sum(dim) broadcasts against the wrong axis: use e.sum(dim=dim, keepdim=True).", _softmax_sum_no_keepdim),
    Mutant("shift_by_mean", SHIFT_HINT, _softmax_shift_by_mean),
    Mutant("shift_by_min", SHIFT_HINT, _softmax_shift_by_min),
    Mutant("computed_in_float16", "the softmax was computed in float16 (x.half()), which keeps about 3 significant digits: compute in x's dtype (or in float64) and return x's dtype.", _softmax_float16),
    Mutant("denominator_not_shifted", "the numerator is exp(x - m) but the denominator sums exp(x): subtract the same max in both (e = exp(x - m); e / e.sum(...)).", _softmax_denominator_unshifted),
    Mutant("inplace_normalise", INPLACE_EXP_HINT, _softmax_inplace_normalise),
    Mutant("inplace_input", f"softmax {INPLACE.format(name='x')}", _softmax_inplace_input),
    Mutant("zeros_for_all_minus_inf", "a slice that is entirely -inf gave zeros; the exercise asks for NaN there (0/0, as torch.softmax gives): do not clamp the sum or replace NaN.", _softmax_zeros_for_empty),
]


# Correct answers written differently: they must pass.
def _v_softmax_moveaxis_loops(x, dim=-1):
    assert x.dim() >= 1, "x needs a dim"  # an assert instead of ValueError is fine
    rows = x.movedim(dim, -1).reshape(-1, x.size(dim))
    out = []
    for row in rows:  # one slice at a time
        m = row.max()
        e = torch.exp(row - m)
        out.append(e / e.sum())
    y = torch.stack(out) if out else rows
    return y.reshape(x.movedim(dim, -1).shape).movedim(-1, dim)


def _v_softmax_float64_guarded(x, dim=-1):
    m = x.double().max(dim=dim, keepdim=True).values
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)  # an all -inf slice: 0/0 = NaN still
    e = (x.double() - m).exp()
    return (e / torch.sum(e, dim=dim, keepdim=True)).to(x.dtype)


def _v_softmax_detached_max(x, dim=-1):
    m = x.detach().amax(dim=dim, keepdim=True)  # a constant shift: the same values and gradients
    e = torch.exp(x - m)
    return e * e.sum(dim=dim, keepdim=True).reciprocal()


def _v_softmax_log_space(x, dim=-1):
    m = torch.max(x, dim=dim, keepdim=True).values  # division-free: exp(x - lse(x))
    lse = m + torch.log(torch.exp(x - m).sum(dim=dim, keepdim=True))
    return torch.exp(x - lse)


SOFTMAX_EXERCISE = Exercise(
    name="softmax",
    reference=ref.softmax,
    make_cases=_softmax_cases,
    mutants=SOFTMAX_MUTANTS,
    # The demo variant is the log-space softmax: correct, but the least accurate at |x| ~ 1e4 (the
    # rounding of lse goes into every weight), which section 4.1's asserts must allow.
    variants=[Variant("movedim_and_loops", _v_softmax_moveaxis_loops),
              Variant("float64_inside_guarded_max", _v_softmax_float64_guarded),
              Variant("detached_max_reciprocal", _v_softmax_detached_max),
              Variant("log_space", _v_softmax_log_space, demo=True)],
    contract=Contract("""Softmax along `dim`, computed stably: exp(x - m) / sum(exp(x - m)), m the max along `dim`.

    x: a float tensor of any shape;  dim: the dim to normalise over (negative or positive).
    Returns a tensor of x's shape whose entries along `dim` are >= 0 and sum to 1.
    Finite inputs of any magnitude (about ±1000 included) give finite results: no overflow, no 0/0.
    An entry equal to -inf gets weight 0; a slice along `dim` that is entirely -inf gives NaN
    (0/0, as torch.softmax gives).
    """, forbid=(SOFTMAX, LOGSUMEXP, CUMULATIVE_LSE), grad="x", kinds={"x": "scores"}),
)
check_softmax = register(SOFTMAX_EXERCISE)


# ---------------------------------------------------------------- logsumexp
def _lse_no_max(x, dim=-1):
    return torch.log(torch.exp(x).sum(dim=dim))


def _lse_max_not_added(x, dim=-1):
    m = x.amax(dim=dim, keepdim=True)
    return torch.log(torch.exp(x - m).sum(dim=dim))


def _lse_keepdim(x, dim=-1):
    m = x.amax(dim=dim, keepdim=True)
    return m + torch.log(torch.exp(x - m).sum(dim=dim, keepdim=True))


def _lse_ignores_dim(x, dim=-1):
    return ref.logsumexp.__wrapped__(x, dim=-1)


def _lse_global_max(x, dim=-1):
    m = x.max()
    return m + torch.log(torch.exp(x - m).sum(dim=dim))


def _lse_sum_all(x, dim=-1):
    m = x.amax(dim=dim, keepdim=True)
    return (m + torch.log(torch.exp(x - m).sum())).squeeze(dim)


def _lse_max_no_keepdim(x, dim=-1):
    m = x.amax(dim=dim)  # without keepdim: x - m broadcasts against the wrong axis
    return m + torch.log(torch.exp(x - m).sum(dim=dim))


def _lse_squeeze_all(x, dim=-1):
    m = x.amax(dim=dim, keepdim=True)
    return (m + torch.log(torch.exp(x - m).sum(dim=dim, keepdim=True))).squeeze()


def _lse_inplace_input(x, dim=-1):
    m = x.amax(dim=dim, keepdim=True)
    x -= m  # edits the caller's tensor
    return (m + torch.log(torch.exp(x).sum(dim=dim, keepdim=True))).squeeze(dim)


def _lse_log1p(x, dim=-1):
    m = x.amax(dim=dim, keepdim=True)
    return (m + torch.log1p(torch.exp(x - m).sum(dim=dim, keepdim=True))).squeeze(dim)


def _lse_log_of_mean(x, dim=-1):
    m = x.amax(dim=dim, keepdim=True)
    return (m + torch.log(torch.exp(x - m).mean(dim=dim, keepdim=True))).squeeze(dim)


def _lse_shift_by_mean(x, dim=-1):
    m = x.mean(dim=dim, keepdim=True)
    return (m + torch.log(torch.exp(x - m).sum(dim=dim, keepdim=True))).squeeze(dim)


def _lse_shift_by_min(x, dim=-1):
    m = x.amin(dim=dim, keepdim=True)
    return (m + torch.log(torch.exp(x - m).sum(dim=dim, keepdim=True))).squeeze(dim)


def _lse_pairwise_logaddexp(x, dim=-1):
    rows = x.movedim(dim, 0)  # one slice along dim at a time, folded with the library's pairwise lse
    out = rows[0]
    for row in rows[1:]:
        out = torch.logaddexp(out, row)  # logaddexp(-inf, -inf) has a NaN gradient
    return out


LSE_SHIFT_HINT = ("the shift is not the max along `dim` (the mean, or the min?): only m = the max makes every "
                  "exponent <= 0 with one term exactly 1, so the sum is in [1, n]; with a smaller shift the "
                  "entries far above it overflow, and a -inf entry makes the mean -inf.")

LOGSUMEXP_MUTANTS = [
    Mutant("no_max_subtraction", "log(sum(exp(x))) overflowed to inf (or underflowed to log(0) = -inf) on large inputs: compute m + log(sum(exp(x - m))) with m the max along `dim`.", _lse_no_max),
    Mutant("max_not_added_back", "the max was subtracted inside the exp but not added back: logsumexp(x) = m + log(sum(exp(x - m))).", _lse_max_not_added),
    Mutant("keepdim", "the result kept the reduced dim (size 1): like torch.logsumexp(x, dim), return the reduced tensor without `dim` (squeeze it or use keepdim=False).", _lse_keepdim),
    Mutant("ignores_dim", "the `dim` argument is ignored (always the last dim): reduce along `dim`.", _lse_ignores_dim),
    Mutant("global_max", "the max was taken over the whole tensor instead of along `dim`: rows far below the global max underflow to log(0) = -inf; take the max along `dim`.", _lse_global_max),
    Mutant("sum_over_whole_tensor", "the exp was summed over the whole tensor instead of along `dim`: use .sum(dim=dim).", _lse_sum_all),
    Mutant("max_without_keepdim", "the max was taken without keepdim=True, so x - m broadcasts against the wrong axis (it fails, or subtracts another slice's max): take m = x.amax(dim=dim, keepdim=True) for the exp, and squeeze `dim` at the end.", _lse_max_no_keepdim),
    Mutant("squeeze_every_dim", "squeeze() without an argument removed every size-1 dim, not only `dim`: use .squeeze(dim).", _lse_squeeze_all),
    Mutant("inplace_input", f"logsumexp {INPLACE.format(name='x')}", _lse_inplace_input),
    Mutant("log1p_of_sum", "you took log1p of the sum, log(1 + sum(exp(x - m))): the sum already contains the max's own term exp(0) = 1, so log1p adds 1 more; use torch.log of the sum.", _lse_log1p),
    Mutant("shift_by_mean", LSE_SHIFT_HINT, _lse_shift_by_mean),
    Mutant("shift_by_min", LSE_SHIFT_HINT, _lse_shift_by_min),
    Mutant("pairwise_logaddexp", "the gradient is NaN at -inf entries (torch.logaddexp(-inf, -inf) divides 0 by 0 in the backward pass): compute m + log(sum(exp(x - m))) along `dim`, whose gradient at a -inf entry is exactly 0.", _lse_pairwise_logaddexp),
    Mutant("log_of_mean", "you took the log of the mean of the exponentials, not of their sum (off by log n): use .sum(dim=dim).", _lse_log_of_mean),
]


def _v_lse_guarded(x, dim=-1):
    m = x.amax(dim=dim, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)  # an all -inf slice gives log(0) = -inf
    return (m + torch.exp(x - m).sum(dim=dim, keepdim=True).log()).squeeze(dim)


def _v_lse_float64_loops(x, dim=-1):
    assert x.dim() >= 1, "x needs a dim"  # an assert instead of ValueError is fine
    moved = x.double().movedim(dim, -1)
    rows = moved.reshape(-1, moved.size(-1))
    out = [row.max() + torch.log(torch.exp(row - row.max()).sum()) for row in rows]
    y = torch.stack(out) if out else rows.sum(-1)
    return y.reshape(moved.shape[:-1]).to(x.dtype)


def _v_lse_max_values(x, dim=-1):
    m, _ = torch.max(x, dim=dim)  # without keepdim, unsqueezed for the exp
    return m + torch.log(torch.sum(torch.exp(x - m.unsqueeze(dim)), dim=dim))


LOGSUMEXP_EXERCISE = Exercise(
    name="logsumexp",
    reference=ref.logsumexp,
    make_cases=_lse_cases,
    mutants=LOGSUMEXP_MUTANTS,
    variants=[Variant("guarded_max", _v_lse_guarded), Variant("float64_and_loops", _v_lse_float64_loops, demo=True),
              Variant("max_values_unsqueezed", _v_lse_max_values)],
    contract=Contract("""log(sum(exp(x))) along `dim`, computed stably as m + log(sum(exp(x - m))), m the max along `dim`.

    x: a float tensor of any shape;  dim: the dim to reduce (negative or positive).
    Returns x's shape without `dim` (like torch.logsumexp(x, dim), keepdim=False).
    Finite inputs of any magnitude (about ±1000 included) give finite results: no overflow, no log(0).
    An entry equal to -inf adds exp(-inf) = 0; a slice along `dim` that is entirely -inf may give
    -inf (log 0, as torch.logsumexp gives) or NaN (what -inf - (-inf) gives in the formula above).
    """, forbid=(LOGSUMEXP, SOFTMAX, CUMULATIVE_LSE), grad="x", kinds={"x": "scores"}),
)
check_logsumexp = register(LOGSUMEXP_EXERCISE)
