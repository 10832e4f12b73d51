"""Chapter 12 — rotary position embedding (RoPE, Su et al., 2021)."""
import torch

from .._guard import reference

__all__ = ["rope_angles", "apply_rope"]


def _angles(positions, dim, base):
    """angle[m, i] = positions[m] · base^(−2i/dim), in float64: (len(positions), dim // 2)."""
    i = torch.arange(dim // 2, dtype=torch.float64)  # pair index
    inv_freq = base ** (-2.0 * i / dim)  # (dim // 2,): θ_i, from 1 down towards 1/base
    return positions.to(torch.float64).unsqueeze(-1) * inv_freq  # (S, 1) * (dim // 2,) -> (S, dim // 2)


@reference
def rope_angles(seq_len, dim, base=10000.0):
    """RoPE rotation angles: angle[m, i] = m · base^(−2i/dim), shape (seq_len, dim // 2), float32."""
    return _angles(torch.arange(seq_len), dim, base).float()


@reference
def apply_rope(x, positions=None, base=10000.0):
    """Rotate each interleaved pair (x[..., 2i], x[..., 2i+1]) by angle[pos, i].

    Shapes:
        x: (..., S, D), D even       positions: long (S,), default arange(S)
        returns (..., S, D), same dtype as x

    For a pair (a, b) and angle t: (a cos t − b sin t, a sin t + b cos t), a rotation by +t,
    so that ⟨apply_rope(q)_m, apply_rope(k)_n⟩ depends on m − n only.
    """
    S, D = x.shape[-2], x.shape[-1]
    if D % 2:
        raise ValueError(f"RoPE rotates pairs of features, so the last dim must be even; got D = {D}")
    if positions is None:
        positions = torch.arange(S)
    angles = _angles(positions, D, base)  # (S, D/2), float64 for accuracy
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)  # (S, D/2)
    pairs = x.unflatten(-1, (D // 2, 2))  # (..., S, D/2, 2)
    a, b = pairs[..., 0], pairs[..., 1]  # (..., S, D/2) each: x[..., 0::2], x[..., 1::2]
    rotated = torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1)  # (..., S, D/2, 2)
    return rotated.flatten(-2)  # (..., S, D)
