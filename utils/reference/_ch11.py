"""Chapter 11 — linear attention (Katharopoulos et al., 2020)."""
import torch.nn.functional as F

from .._guard import reference

__all__ = ["elu_feature_map", "linear_attention", "causal_linear_attention"]


def _phi(x):
    return F.elu(x) + 1.0  # > 0 everywhere, so the normaliser never vanishes or changes sign


@reference
def elu_feature_map(x):
    """φ(x) = elu(x) + 1, elementwise: x + 1 for x > 0, exp(x) otherwise. Same shape as x."""
    return _phi(x)


@reference
def linear_attention(q, k, v, eps=1e-6):
    """Non-causal linear attention: φ(q) (φ(k)ᵀ v) / (φ(q) · Σ_j φ(k_j) + eps), with φ = elu + 1.

    Shapes:
        q: (..., S_q, D)   k: (..., S_k, D)   v: (..., S_k, D_v)
        returns out (..., S_q, D_v)

    Associativity: (φ(q) φ(k)ᵀ) v = φ(q) (φ(k)ᵀ v), and the right side never builds the
    S_q×S_k matrix: its cost is O(S·D·D_v) time and O(D·D_v) extra memory.
    """
    phi_q, phi_k = _phi(q), _phi(k)  # (..., S_q, D), (..., S_k, D)
    kv = phi_k.transpose(-2, -1) @ v  # (..., D, S_k) x (..., S_k, D_v) -> (..., D, D_v)
    z = phi_k.sum(dim=-2)  # (..., D): Σ_j φ(k_j)
    num = phi_q @ kv  # (..., S_q, D) x (..., D, D_v) -> (..., S_q, D_v)
    den = (phi_q * z.unsqueeze(-2)).sum(dim=-1, keepdim=True)  # (..., S_q, 1): φ(q_i) · Σ_j φ(k_j)
    return num / (den + eps)


@reference
def causal_linear_attention(q, k, v, eps=1e-6):
    """Causal linear attention: position i uses only the keys j ≤ i, through prefix sums.

    Shapes:
        q: (..., S, D)   k: (..., S, D)   v: (..., S, D_v)
        returns out (..., S, D_v)

    out_i = φ(q_i) S_i / (φ(q_i) · z_i + eps) with S_i = Σ_{j≤i} φ(k_j) v_jᵀ and z_i = Σ_{j≤i} φ(k_j):
    the state (S_i, z_i) of an RNN that reads one token at a time. Memory O(S·D·D_v), never S×S.
    """
    phi_q, phi_k = _phi(q), _phi(k)  # (..., S, D)
    kv = phi_k.unsqueeze(-1) * v.unsqueeze(-2)  # (..., S, D, 1) * (..., S, 1, D_v) -> (..., S, D, D_v)
    kv_sum = kv.cumsum(dim=-3)  # (..., S, D, D_v): S_i
    z_sum = phi_k.cumsum(dim=-2)  # (..., S, D): z_i
    num = (phi_q.unsqueeze(-2) @ kv_sum).squeeze(-2)  # (..., S, 1, D) x (..., S, D, D_v) -> (..., S, D_v)
    den = (phi_q * z_sum).sum(dim=-1, keepdim=True)  # (..., S, 1)
    return num / (den + eps)
