"""Chapter 15 — comparing attention variants: the growth exponent of a measured cost."""
import torch

from .._guard import reference

__all__ = ["fit_loglog_slope"]


@reference
def fit_loglog_slope(sizes, costs):
    """The least-squares slope p of log(cost) against log(size): cost ≈ c · size^p.

    Shapes:
        sizes, costs: lists or 1-D tensors of N >= 2 positive numbers   returns a Python float

    p ≈ 2 for full attention's time and memory in S, p ≈ 1 for linear or sliding-window
    attention. Raises ValueError for fewer than 2 points, different lengths, a non-positive
    value, or sizes that are all equal (no slope to fit).
    """
    s = torch.as_tensor(sizes, dtype=torch.float64)
    c = torch.as_tensor(costs, dtype=torch.float64)
    if s.dim() != 1 or c.dim() != 1 or s.numel() != c.numel():
        raise ValueError(f"sizes and costs must be 1-D and of the same length, got {tuple(s.shape)} and {tuple(c.shape)}")
    if s.numel() < 2:
        raise ValueError(f"a slope needs at least 2 points, got {s.numel()}")
    if bool((s <= 0).any()) or bool((c <= 0).any()):
        raise ValueError("sizes and costs must be positive to take their logarithms")
    x, y = torch.log(s), torch.log(c)  # (N,), (N,)
    x_c = x - x.mean()  # centred
    denom = (x_c * x_c).sum()
    if denom == 0:
        raise ValueError("all sizes are equal: the slope is undefined")
    return float((x_c * (y - y.mean())).sum() / denom)  # cov(x, y) / var(x)
