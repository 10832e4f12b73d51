"""Small helpers shared by the reference kernels (not exercises themselves, so not guarded)."""
import torch


def masked_softmax_impl(scores: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax over the last dim where ``mask`` is True; a fully masked row gives all zeros.

    scores: (..., S_q, S_k); mask: bool, broadcastable to scores, True = may attend.
    """
    if mask is None:
        return torch.softmax(scores, dim=-1)
    scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)  # a fully masked row is all NaN here ...
    return weights.nan_to_num(0.0)  # ... and all zeros here


from .._gpt_model import ConcatKVCache  # noqa: E402,F401 (re-exported; not an exercise, so not guarded)
