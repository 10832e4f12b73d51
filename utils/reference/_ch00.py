"""Chapter 00 — foundations: a numerically stable softmax and log-sum-exp."""
import torch

from .._guard import reference

__all__ = ["softmax", "logsumexp"]


@reference
def softmax(x, dim=-1):
    """exp(x) / sum(exp(x)) along ``dim``, computed stably by subtracting the max first.

    Shapes:
        x: any shape   returns: the same shape; entries along ``dim`` sum to 1

    softmax(x) == softmax(x - c) for any c constant along ``dim``; with c = max the largest
    exponent is exp(0) = 1, so nothing overflows, and the sum is at least 1, so nothing is 0/0.
    Entries equal to -inf get weight 0 (as long as the row has a finite entry).
    """
    x_max = x.amax(dim=dim, keepdim=True)  # (..., 1, ...): the max along dim
    e = torch.exp(x - x_max)  # same shape as x, every entry in [0, 1]
    return e / e.sum(dim=dim, keepdim=True)


@reference
def logsumexp(x, dim=-1):
    """log(sum(exp(x))) along ``dim``, computed stably as m + log(sum(exp(x - m))) with m = max.

    Shapes:
        x: any shape   returns: x's shape without ``dim`` (like torch.logsumexp(x, dim))
    """
    m = x.amax(dim=dim, keepdim=True)  # (..., 1, ...): the max along dim
    out = m + torch.log(torch.exp(x - m).sum(dim=dim, keepdim=True))  # (..., 1, ...)
    return out.squeeze(dim)
