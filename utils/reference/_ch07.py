"""Chapter 07 — visualising attention: entropy per query, attention rollout."""
import torch

from .._guard import reference

__all__ = ["attention_entropy", "attention_rollout"]


@reference
def attention_entropy(weights):
    """Shannon entropy (in nats) of each query's attention distribution.

    Shapes:
        weights: (..., S_q, S_k), rows sum to 1 (or are all zero for a fully masked query)
        returns (..., S_q): -sum_j w_j · ln w_j over the key dim

    0 · ln 0 counts as 0, so an all-zero row (a fully masked query) gives 0, never NaN.
    Ranges from 0 (all weight on one key) to ln S_k (uniform).
    """
    plogp = torch.special.xlogy(weights, weights)  # w · ln w, and exactly 0 where w == 0
    return -plogp.sum(dim=-1)  # (..., S_q)


@reference
def attention_rollout(layer_weights):
    """Attention rollout (Abnar & Zuidema, 2020): how much each output position draws on each input token.

    Shapes:
        layer_weights: a list with one (B, H, S, S) tensor per layer, first layer first
        returns (B, S, S): row i = position i after the last layer, column j = input token j

    For each layer l: average over heads, add the residual path and renormalise the rows,
        Ã_l = rownorm(0.5 · mean_h A_l + 0.5 · I)
    then compose through the layers, the last layer on the left:
        rollout = Ã_L · Ã_{L-1} ··· Ã_1
    (x_L = Ã_L x_{L-1}, so the first layer's mixing is applied first, on the right).
    """
    rollout = None
    for A in layer_weights:
        B, H, S, _ = A.shape
        A = A.mean(dim=1)  # (B, S, S), average over heads
        A = 0.5 * A + 0.5 * torch.eye(S, dtype=A.dtype, device=A.device)  # residual path
        A = A / A.sum(dim=-1, keepdim=True)  # rows sum to 1
        rollout = A if rollout is None else A @ rollout  # (B, S, S) x (B, S, S) -> (B, S, S)
    return rollout
