"""Checks for chapter 00 — foundations: stable softmax and log-sum-exp."""
import torch

from .. import reference as ref
from ._core import Case, Exercise, Mutant, generator, randn, rng
from ._forbid import LOGSUMEXP, SOFTMAX
from ._registry import register

__all__ = ["check_softmax", "check_logsumexp"]


# ---------------------------------------------------------------- cases (shared by both)
def _cases(seed: int) -> list:
    """x of 1 to 4 dims and a dim (negative or positive), including inputs that overflow a naive exp."""
    r, g = rng(seed), generator(seed)
    cases = []

    def add(label, x, dim=-1):
        cases.append(Case(f"{label}: x {tuple(x.shape)}, dim={dim}", (x,), {"dim": dim}))

    add("a 1-D vector", randn(7, gen=g))
    add("a 1-D vector, dim=0", randn(5, gen=g), dim=0)
    add("2-D, over the last dim", randn(3, 6, gen=g))
    add("2-D, over the rows (dim=0)", randn(4, 3, gen=g), dim=0)
    add("3-D, a middle dim (dim=1)", randn(2, 5, 3, gen=g), dim=1)
    add("3-D, dim=-2", randn(3, 4, 2, gen=g), dim=-2)
    add("4-D, dim=2", randn(2, 3, 4, 5, gen=g), dim=2)
    add("size 1 along dim", randn(3, 1, gen=g))
    add("large values, about +1000 (a naive exp overflows)", 1000.0 + randn(3, 5, gen=g))
    add("large negative values, about -1000 (a naive exp underflows to 0)", -1000.0 + randn(3, 5, gen=g))
    add("large values, about ±1000, dim=0", randn(6, 4, gen=g, scale=1000.0), dim=0)
    # Rows at very different offsets: one max over the whole tensor leaves the low rows at exp(-300) = 0.
    offsets = torch.tensor([[0.0], [-300.0], [300.0], [-600.0]])
    add("rows on very different scales (0, -300, +300, -600)", offsets + randn(4, 5, gen=g))
    x = randn(4, 6, gen=g)
    x[torch.rand(4, 6, generator=g) < 0.4] = float("-inf")
    x[:, 2] = randn(4, gen=g)  # every row keeps a finite entry
    add("some entries are -inf", x)
    add("float64 input", randn(2, 3, 5, gen=g, dtype=torch.float64), dim=-1)
    for i in range(5):  # random shapes and dims, odd sizes included
        shape = tuple(r.randint(1, 6) for _ in range(r.randint(1, 4)))
        dim = r.randrange(len(shape))
        if r.random() < 0.5:
            dim -= len(shape)
        add(f"random case {i + 1}", randn(*shape, gen=g, scale=r.choice([1.0, 5.0, 50.0])), dim=dim)
    return cases


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


def _softmax_sum_all(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum()


SOFTMAX_MUTANTS = [
    Mutant("no_max_subtraction", "exp(x) overflowed (inf/inf = NaN) or underflowed (0/0) on large inputs: subtract the max along `dim` (keepdim=True) before exp.", _softmax_no_max),
    Mutant("ignores_dim", "the `dim` argument is ignored (the softmax is always over the last dim): use `dim` for the max and the sum.", _softmax_ignores_dim),
    Mutant("max_over_wrong_dim", "the max was taken over the last dim while the sum is over `dim`: subtracting a value that changes along `dim` changes the result; take the max along `dim` too.", _softmax_max_last_dim),
    Mutant("global_max", "the max was taken over the whole tensor instead of along `dim`: rows far below the global max underflow to exp(...) = 0 and give 0/0; take the max along `dim` with keepdim=True.", _softmax_global_max),
    Mutant("sum_over_whole_tensor", "you divided by the sum over the whole tensor instead of the sum along `dim`: each slice along `dim` must sum to 1 (use .sum(dim=dim, keepdim=True)).", _softmax_sum_all),
]

SOFTMAX_EXERCISE = Exercise(
    name="softmax",
    reference=ref.softmax,
    make_cases=_cases,
    forbidden=(SOFTMAX, LOGSUMEXP),  # exp(x - logsumexp(x)) would hand over the softmax
    mutants=SOFTMAX_MUTANTS,
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


LOGSUMEXP_MUTANTS = [
    Mutant("no_max_subtraction", "log(sum(exp(x))) overflowed to inf (or underflowed to log(0) = -inf) on large inputs: compute m + log(sum(exp(x - m))) with m the max along `dim`.", _lse_no_max),
    Mutant("max_not_added_back", "the max was subtracted inside the exp but not added back: logsumexp(x) = m + log(sum(exp(x - m))).", _lse_max_not_added),
    Mutant("keepdim", "the result kept the reduced dim (size 1): like torch.logsumexp(x, dim), return the reduced tensor without `dim` (squeeze it or use keepdim=False).", _lse_keepdim),
    Mutant("ignores_dim", "the `dim` argument is ignored (always the last dim): reduce along `dim`.", _lse_ignores_dim),
    Mutant("global_max", "the max was taken over the whole tensor instead of along `dim`: rows far below the global max underflow to log(0) = -inf; take the max along `dim`.", _lse_global_max),
    Mutant("sum_over_whole_tensor", "the exp was summed over the whole tensor instead of along `dim`: use .sum(dim=dim).", _lse_sum_all),
]

LOGSUMEXP_EXERCISE = Exercise(
    name="logsumexp",
    reference=ref.logsumexp,
    make_cases=_cases,
    forbidden=(LOGSUMEXP, SOFTMAX),  # log_softmax would hand over logsumexp = x - log_softmax(x)
    mutants=LOGSUMEXP_MUTANTS,
)
check_logsumexp = register(LOGSUMEXP_EXERCISE)
