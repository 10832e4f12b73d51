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


class ConcatKVCache:
    """A KV cache for one layer: keys and values (B, H_kv, T, D_h), grown along dim -2.

    Not an exercise (chapter 09's ``KVCache`` is), so not guarded: the checks hand it to learner
    models, and the chapter 14 reference uses it.
    """

    def __init__(self):
        self.k = None
        self.v = None

    @property
    def seq_len(self) -> int:
        return 0 if self.k is None else self.k.size(-2)

    def update(self, k_new, v_new):
        self.k = k_new if self.k is None else torch.cat([self.k, k_new], dim=-2)
        self.v = v_new if self.v is None else torch.cat([self.v, v_new], dim=-2)
        return self.k, self.v
