"""Checks for chapter 15 — comparing attention variants: fitting a log-log slope."""
import math

import torch

from .. import reference as ref
from ._contract import Contract, raises_somewhere
from ._core import Case, CheckFailure, Exercise, Mutant, Variant, describe, generator, rng
from ._guards import INPLACE
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
    add("linear cost (linear attention), as float32 tensors", powers, 1.0, 0.1, "float32 tensors")
    add("seconds in the milliseconds", [256, 512, 1024, 2048, 4096], 2.0, 0.15, const=3e-9)
    add("sizes as an int64 tensor", [32, 48, 64, 96, 128], 1.0, 0.2, "int64 tensor")
    add("unevenly spaced sizes", [50, 60, 200, 230, 900], 1.3, 0.1, "float32 tensors")
    add("large costs (bytes)", [512, 1024, 2048], 2.0, 0.05, "float64 tensors", const=4.0)
    for i in range(4):  # random sizes, exponents and noise
        n = r.randint(3, 9)
        sizes = sorted(r.sample(range(16, 4097), n))
        add(f"random case {i + 1}", sizes, r.choice([0.5, 1.0, 1.5, 2.0, 3.0]), r.choice([0.05, 0.1, 0.3]),
            r.choice(["list", "float32 tensors", "float64 tensors", "int64 tensor"]))
    add("sizes not in increasing order", [1024, 64, 256, 128, 2048, 512], 1.5, 0.2)
    add("constant cost (slope about 0)", [10, 20, 40, 80, 160], 0.0, 0.1)
    add("decreasing cost", [1, 2, 4, 8, 16, 32], -1.0, 0.1)
    add("decreasing cost, sizes shuffled (the i-th size goes with the i-th cost)", [32, 4, 16, 1, 8, 2], -1.0, 0.1)
    add("exact power law, no noise", [100, 200, 400, 800], 1.5, 0.0, "float64 tensors")
    add("sizes below 1 (fractions)", [0.125, 0.25, 0.5, 1.0, 2.0], 2.0, 0.1)
    add("exactly 2 points", [128, 1024], 2.0, 0.05)
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


def _log_size_only(sizes, costs):
    s, c = _xy(sizes, costs)
    return _ls_slope(torch.log(s), c)


def _consecutive_slopes(sizes, costs):
    s, c = _xy(sizes, costs)
    x, y = torch.log(s), torch.log(c)
    return float(((y[1:] - y[:-1]) / (x[1:] - x[:-1])).mean())


def _correlation(sizes, costs):
    s, c = _xy(sizes, costs)
    x, y = torch.log(s), torch.log(c)
    x_c, y_c = x - x.mean(), y - y.mean()
    return float((x_c * y_c).sum() / torch.sqrt((x_c * x_c).sum() * (y_c * y_c).sum()))


def _sorts_separately(sizes, costs):
    s, c = _xy(sizes, costs)
    return _ls_slope(torch.log(s.sort().values), torch.log(c.sort().values))


def _median_pairwise(sizes, costs):
    s, c = _xy(sizes, costs)
    x, y = torch.log(s), torch.log(c)
    i, j = torch.triu_indices(len(x), len(x), offset=1)
    keep = x[j] != x[i]
    return float(((y[j] - y[i])[keep] / (x[j] - x[i])[keep]).quantile(0.5))  # statistics.median: mean of the middle two


def _uncentred_denominator(sizes, costs):
    s, c = _xy(sizes, costs)
    x, y = torch.log(s), torch.log(c)
    return float(((x - x.mean()) * (y - y.mean())).sum() / (x * x).sum())


def _drops_last_point(sizes, costs):
    s, c = _xy(sizes, costs)
    if s.numel() <= 2:
        return _ls_slope(torch.log(s), torch.log(c))
    return _ls_slope(torch.log(s[:-1]), torch.log(c[:-1]))


def _cov_ddof_mismatch(sizes, costs):
    s, c = _xy(sizes, costs)
    x, y = torch.log(s), torch.log(c)
    n = x.numel()
    cov = ((x - x.mean()) * (y - y.mean())).sum() / (n - 1)  # np.cov: ddof = 1
    var = ((x - x.mean()) ** 2).sum() / n  # np.var: ddof = 0
    return float(cov / var)


def _slope_sorts_in_place(sizes, costs):
    if isinstance(sizes, list):  # sorts the caller's lists: the slope is the same, the caller's data is not
        pairs = sorted(zip(sizes, costs))
        sizes[:], costs[:] = [a for a, _ in pairs], [b for _, b in pairs]
    return ref.fit_loglog_slope.__wrapped__(sizes, costs)


SLOPE_MUTANTS = [
    Mutant("sorts_the_callers_lists", f"fit_loglog_slope {INPLACE.format(name='sizes')}: its items changed or were reordered",
           _slope_sorts_in_place),
    Mutant("linear_not_loglog",
           "the slope of cost against size was fitted; the growth exponent is the slope of log(cost) against log(size).",
           _linear_fit),
    Mutant("log_of_cost_only",
           "only the cost was logged (log(cost) against size); take the log of both axes.",
           _log_cost_only),
    Mutant("log_of_size_only",
           "only the size was logged (cost against log(size)); take the log of both axes.",
           _log_size_only),
    Mutant("axes_swapped",
           "the axes are swapped: you regressed log(size) on log(cost); regress log(cost) on log(size), slope = cov(x, y) / var(x) with x = log(size).",
           _axes_swapped),
    Mutant("endpoints_ratio",
           "the slope came from the first and last points only; fit all points by least squares, slope = Σ(x - x̄)(y - ȳ) / Σ(x - x̄)².",
           _endpoints_ratio),
    Mutant("mean_of_consecutive_slopes",
           "the slopes between consecutive points were averaged; that is not the least-squares slope: slope = Σ(x - x̄)(y - ȳ) / Σ(x - x̄)² over all points.",
           _consecutive_slopes),
    Mutant("returns_intercept",
           "the intercept (log c in cost = c·size^p) was returned; return the slope p.",
           _intercept),
    Mutant("fit_through_origin",
           "the fit was forced through the origin (Σxy / Σx²); centre x and y first: slope = Σ(x - x̄)(y - ȳ) / Σ(x - x̄)².",
           _through_origin),
    Mutant("returns_correlation",
           "the correlation coefficient r = cov(x, y) / (std(x)·std(y)) was returned; the slope is cov(x, y) / var(x).",
           _correlation),
    Mutant("cov_ddof_mismatch",
           "the covariance was divided by N - 1 and the variance by N (np.cov and np.var have different defaults): use the same normaliser for both, or slope = Σ(x - x̄)(y - ȳ) / Σ(x - x̄)².",
           _cov_ddof_mismatch),
    Mutant("drops_last_point",
           "the last point was left out of the fit (an off-by-one, e.g. range(len(sizes) - 1)): use all N points.",
           _drops_last_point),
    Mutant("sorts_sizes_and_costs_separately",
           "sizes and costs were sorted each on its own, which breaks the pairs: the i-th size goes with the i-th cost. Keep the pairs together (sorting is not needed: the least-squares slope does not depend on the order of the points).",
           _sorts_separately),
    Mutant("median_of_pairwise_slopes",
           "the median of the slopes between pairs of points (Theil-Sen) was returned; it is robust, but it is not the least-squares slope Σ(x - x̄)(y - ȳ) / Σ(x - x̄)².",
           _median_pairwise),
    Mutant("uncentred_denominator",
           "the denominator is Σx² instead of Σ(x - x̄)²: centre x in the variance as well as in the covariance.",
           _uncentred_denominator),
]


# ---- variants: correct answers written differently (they must pass)
def _v_polyfit_float32(sizes, costs):
    import numpy as np

    s = np.asarray(torch.as_tensor(sizes), dtype=np.float32)
    c = np.asarray(torch.as_tensor(costs), dtype=np.float32)
    return float(np.polyfit(np.log(s), np.log(c), 1)[0])


def _v_python_loop_log10(sizes, costs):
    sizes = [float(v) for v in sizes]
    costs = [float(v) for v in costs]
    assert len(sizes) == len(costs) >= 2, "need two points or more"  # an assert instead of ValueError
    xs = [math.log10(v) for v in sizes]  # any base: the slope is the same
    ys = [math.log10(v) for v in costs]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    sxx = sum((x - mx) ** 2 for x in xs)
    return sxy / sxx


def _v_lstsq(sizes, costs):
    x = torch.log(torch.as_tensor(sizes).double())
    y = torch.log(torch.as_tensor(costs).double())
    design = torch.stack([x, torch.ones_like(x)], dim=1)  # (N, 2): [log size, 1]
    solution = torch.linalg.lstsq(design, y[:, None]).solution  # (2, 1): slope, intercept
    return float(solution[0, 0])


SLOPE_VARIANTS = [Variant("numpy_polyfit_float32", _v_polyfit_float32),
                  Variant("python_loop_log10_assert", _v_python_loop_log10, demo=True),
                  Variant("torch_lstsq_tensor_result", _v_lstsq)]


def _run_slope(fn, case: Case):
    """The learner's slope; the prompt says it is a Python float (a 0-d tensor or a NumPy scalar
    other than float64 is not)."""
    out = fn(*case.args, **case.kwargs)
    if not isinstance(out, float):
        raise CheckFailure(f"fit_loglog_slope should return a Python float (call float(...) on the result); "
                           f"got {describe(out)}.")
    return out


def _validation_tip(fn) -> str | None:
    """Not graded: a clear error for inputs that have no slope helps when a benchmark goes wrong. The
    tip reads the code (a raise or an assert) and never calls it outside the contract: with fewer
    than 2 points np.linalg.lstsq prints a LAPACK error from C, under a correct answer."""
    if raises_somewhere(fn) is not False:
        return None
    return ("fit_loglog_slope has no raise or assert: raising ValueError (or an assert) when there are fewer "
            "than 2 points or a value is <= 0 would catch a broken benchmark early.")


SLOPE_EXERCISE = Exercise(
    name="fit_loglog_slope",
    reference=ref.fit_loglog_slope,
    make_cases=_slope_cases,
    run=_run_slope,
    mutants=SLOPE_MUTANTS,
    variants=SLOPE_VARIANTS,
    tips=(_validation_tip,),
    contract=Contract("""The least-squares slope p of log(cost) against log(size): cost ≈ c · size^p.

    sizes, costs: lists or 1-D tensors (int or float) of the same length N >= 2, every value > 0,
        in any order, the largest size at least twice the smallest.  Returns a Python float.
    p is the slope of the least-squares line y = p·x + b through all N points
    (x, y) = (log size, log cost).
    p ≈ 2 for full attention's time and memory in S, p ≈ 1 for linear or sliding-window attention.
    """, same_dtype=False),
)
check_fit_loglog_slope = register(SLOPE_EXERCISE)
