"""Checks for chapter 15 — comparing attention variants: fitting a log-log slope."""
import math

import torch

from .. import reference as ref
from ._core import Case, CheckFailure, Exercise, Mutant, generator, rng
from ._registry import register

__all__ = ["check_fit_loglog_slope"]


def _slope_cases(seed: int) -> list:
    r, g = rng(seed), generator(seed)
    cases = []

    def add(label, sizes, exponent, noise, as_type="list", const=1e-6):
        s = torch.tensor(sizes, dtype=torch.float64)
        c = const * s**exponent * torch.exp(noise * torch.randn(len(sizes), generator=g, dtype=torch.float64))
        if as_type == "list":
            sizes_in, costs_in = list(sizes), c.tolist()
        elif as_type == "float32 tensors":
            sizes_in, costs_in = torch.tensor(sizes, dtype=torch.float32), c.float()
        elif as_type == "float64 tensors":
            sizes_in, costs_in = torch.tensor(sizes, dtype=torch.float64), c
        else:  # int64 sizes, float costs
            sizes_in, costs_in = torch.tensor(sizes, dtype=torch.int64), c.float()
        cases.append(Case(f"{label}: {len(sizes)} points, sizes {list(sizes)}, cost ≈ size^{exponent} "
                          f"with {noise:.0%} noise, as {as_type}", (sizes_in, costs_in)))

    powers = [2**i for i in range(6, 12)]  # 64 .. 2048
    add("quadratic cost (full attention)", powers, 2.0, 0.1)
    add("linear cost (linear attention)", powers, 1.0, 0.1, "float32 tensors")
    add("exact power law, no noise", [100, 200, 400, 800], 1.5, 0.0, "float64 tensors")
    add("exactly 2 points", [128, 1024], 2.0, 0.05)
    add("sizes as an int64 tensor", [32, 48, 64, 96, 128], 1.0, 0.2, "int64 tensor")
    add("constant cost (slope about 0)", [10, 20, 40, 80, 160], 0.0, 0.1)
    add("seconds in the milliseconds", [256, 512, 1024, 2048, 4096], 2.0, 0.15, const=3e-9)
    add("large costs (bytes)", [512, 1024, 2048], 2.0, 0.05, "float64 tensors", const=4.0)
    add("decreasing cost", [1, 2, 4, 8, 16, 32], -1.0, 0.1)
    add("unevenly spaced sizes", [50, 60, 200, 230, 900], 1.3, 0.1, "float32 tensors")
    for i in range(5):  # random sizes, exponents and noise
        n = r.randint(3, 9)
        sizes = sorted(r.sample(range(16, 4097), n))
        add(f"random case {i + 1}", sizes, r.choice([0.5, 1.0, 1.5, 2.0, 3.0]), r.choice([0.05, 0.1, 0.3]),
            r.choice(["list", "float32 tensors", "float64 tensors", "int64 tensor"]))
    return cases


def _xy(sizes, costs):
    return torch.as_tensor(sizes, dtype=torch.float64), torch.as_tensor(costs, dtype=torch.float64)


def _ls_slope(x, y):
    x_c = x - x.mean()
    return float((x_c * (y - y.mean())).sum() / (x_c * x_c).sum())


def _linear_fit(sizes, costs):
    s, c = _xy(sizes, costs)
    return _ls_slope(s, c)


def _log_cost_only(sizes, costs):
    s, c = _xy(sizes, costs)
    return _ls_slope(s, torch.log(c))


def _axes_swapped(sizes, costs):
    s, c = _xy(sizes, costs)
    return _ls_slope(torch.log(c), torch.log(s))


def _endpoints_ratio(sizes, costs):
    s, c = _xy(sizes, costs)
    return math.log(c[-1] / c[0]) / math.log(s[-1] / s[0])


def _intercept(sizes, costs):
    s, c = _xy(sizes, costs)
    x, y = torch.log(s), torch.log(c)
    return float(y.mean() - _ls_slope(x, y) * x.mean())


def _through_origin(sizes, costs):
    s, c = _xy(sizes, costs)
    x, y = torch.log(s), torch.log(c)
    return float((x * y).sum() / (x * x).sum())


def _no_validation(sizes, costs):
    s, c = _xy(sizes, costs)
    x, y = torch.log(s), torch.log(c)
    x_c = x - x.mean()
    return float((x_c * (y - y.mean())).sum() / (x_c * x_c).sum())  # nan for one point or log(0)


NO_VALIDATION = ("fewer than 2 points, or a size or cost <= 0, must raise ValueError (a slope needs two "
                 "points, and log is undefined at 0 and below).")

SLOPE_MUTANTS = [
    Mutant("linear_not_loglog",
           "the slope of cost against size was fitted; the growth exponent is the slope of log(cost) against log(size).",
           _linear_fit),
    Mutant("log_of_cost_only",
           "only the cost was logged (log(cost) against size); take the log of both axes.",
           _log_cost_only),
    Mutant("axes_swapped",
           "the axes are swapped: you regressed log(size) on log(cost); regress log(cost) on log(size), slope = cov(x, y) / var(x) with x = log(size).",
           _axes_swapped),
    Mutant("endpoints_ratio",
           "the slope came from the first and last points only; fit all points by least squares, slope = Σ(x - x̄)(y - ȳ) / Σ(x - x̄)².",
           _endpoints_ratio),
    Mutant("returns_intercept",
           "the intercept (log c in cost = c·size^p) was returned; return the slope p.",
           _intercept),
    Mutant("fit_through_origin",
           "the fit was forced through the origin (Σxy / Σx²); centre x and y first: slope = Σ(x - x̄)(y - ȳ) / Σ(x - x̄)².",
           _through_origin),
    Mutant("no_input_validation", NO_VALIDATION, _no_validation),
]


def _check_rejects_bad_input(fn) -> None:
    bad = [
        ("no points", [], []),
        ("one point", [128], [0.5]),
        ("a size of 0", [0, 64, 128], [0.1, 0.2, 0.4]),
        ("a negative cost", [32, 64, 128], [0.1, -0.2, 0.4]),
        ("a cost of 0 (as tensors)", torch.tensor([32.0, 64.0]), torch.tensor([0.0, 1.0])),
    ]
    for what, sizes, costs in bad:
        call = f"fit_loglog_slope({sizes!r}, {costs!r})"
        try:
            got = fn(sizes, costs)
        except ValueError:
            continue
        except Exception as err:
            raise CheckFailure(f"{call} ({what}) raised {type(err).__name__}: {err}. Likely mistake: {NO_VALIDATION}") from None
        raise CheckFailure(f"{call} ({what}) returned {got!r} instead of raising ValueError. Likely mistake: {NO_VALIDATION}")


SLOPE_EXERCISE = Exercise(
    name="fit_loglog_slope",
    reference=ref.fit_loglog_slope,
    make_cases=_slope_cases,
    mutants=SLOPE_MUTANTS,
    extra_checks=(_check_rejects_bad_input,),
)
check_fit_loglog_slope = register(SLOPE_EXERCISE)
