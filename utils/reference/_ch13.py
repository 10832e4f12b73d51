"""Chapter 13 — flash attention: online softmax and tiled attention."""
import math

import torch

from .._guard import reference

__all__ = ["online_softmax", "flash_attention"]


def _safe(m: torch.Tensor) -> torch.Tensor:
    """A running max with -inf (nothing seen yet, or only -inf seen) raised to the lowest finite float.

    Subtracting it keeps exp(x - m) = 0 for x = -inf instead of exp(-inf + inf) = NaN.
    """
    return m.clamp_min(torch.finfo(m.dtype).min)


@reference
def online_softmax(x, block_size):
    """Softmax over the last dim, reading the columns one block of ``block_size`` at a time.

    Shapes:
        x: (..., N)   returns (..., N), each row sums to 1

    Pass 1 keeps a running max m and a running sum l = Σ exp(x_j - m) over the columns seen so
    far; when a block raises the max from m_old to m_new, the sum is rescaled by exp(m_old - m_new).
    Pass 2 writes exp(x - m) / l. A row of all -inf gives zeros.
    """
    n = x.size(-1)
    m = torch.full(x.shape[:-1], float("-inf"), dtype=x.dtype)  # (...,) running max
    l = torch.zeros(x.shape[:-1], dtype=x.dtype)  # (...,) running sum of exp(x - m)
    for start in range(0, n, block_size):
        block = x[..., start:start + block_size]  # (..., b), the last block may be shorter
        m_new = torch.maximum(m, block.amax(dim=-1))  # (...,)
        m_ref = _safe(m_new)  # (...,)
        l = l * torch.exp(m - m_ref) + torch.exp(block - m_ref[..., None]).sum(dim=-1)
        m = m_new
    out = torch.exp(x - _safe(m)[..., None]) / l[..., None]  # (..., N)
    return torch.where(l[..., None] > 0, out, torch.zeros_like(out))  # all -inf row -> zeros


@reference
def flash_attention(q, k, v, block_size=64, causal=False):
    """Attention computed tile by tile with an online softmax, never building the S_q × S_k scores.

    Shapes:
        q: (..., S_q, D)   k: (..., S_k, D)   v: (..., S_k, D_v)
        returns out (..., S_q, D_v) and lse (..., S_q) = logsumexp_j of the scaled (masked) scores

    For each block of ``block_size`` queries, the key/value blocks are visited in order, keeping
    per query a running max m, a running sum l and an unnormalised output acc; when m grows, l
    and acc are rescaled by exp(m_old - m_new). ``causal`` is bottom-right aligned (query i sees
    key j iff j <= i + S_k - S_q) and key blocks that are fully masked are skipped. A query that
    sees no key (S_q > S_k with causal) gets a zero output and lse = -inf.
    """
    s_q, s_k, d = q.size(-2), k.size(-2), q.size(-1)
    scale = 1.0 / math.sqrt(d)
    offset = s_k - s_q  # bottom-right alignment: query i sees keys j <= i + offset
    outs, lses = [], []
    for q_start in range(0, s_q, block_size):
        q_blk = q[..., q_start:q_start + block_size, :]  # (..., Br, D)
        br = q_blk.size(-2)
        rows = torch.arange(q_start, q_start + br)  # (Br,) query indices of this block
        # keys past the last query's horizon are masked for the whole block: skip them
        k_end = min(s_k, q_start + br + offset) if causal else s_k
        m = torch.full((*q_blk.shape[:-1],), float("-inf"), dtype=q.dtype)  # (..., Br)
        l = torch.zeros_like(m)  # (..., Br)
        acc = torch.zeros(*q_blk.shape[:-1], v.size(-1), dtype=v.dtype)  # (..., Br, D_v)
        for k_start in range(0, max(k_end, 0), block_size):
            k_blk = k[..., k_start:k_start + block_size, :]  # (..., Bc, D)
            v_blk = v[..., k_start:k_start + block_size, :]  # (..., Bc, D_v)
            s = q_blk @ k_blk.transpose(-2, -1) * scale  # (..., Br, D) x (..., D, Bc) -> (..., Br, Bc)
            if causal and k_start + k_blk.size(-2) - 1 > q_start + offset:  # a tile on the diagonal
                cols = torch.arange(k_start, k_start + k_blk.size(-2))  # (Bc,)
                s = s.masked_fill(cols[None, :] > rows[:, None] + offset, float("-inf"))
            m_new = torch.maximum(m, s.amax(dim=-1))  # (..., Br)
            m_ref = _safe(m_new)  # (..., Br)
            alpha = torch.exp(m - m_ref)  # (..., Br) rescales what was accumulated so far
            p = torch.exp(s - m_ref[..., None])  # (..., Br, Bc)
            l = alpha * l + p.sum(dim=-1)
            acc = alpha[..., None] * acc + p @ v_blk  # (..., Br, Bc) x (..., Bc, D_v) -> (..., Br, D_v)
            m = m_new
        seen = l > 0  # (..., Br) False for a query that sees no key
        outs.append(torch.where(seen[..., None], acc / torch.where(seen, l, 1.0)[..., None], torch.zeros_like(acc)))
        lses.append(torch.where(seen, m + torch.log(l), torch.full_like(m, float("-inf"))))
    return torch.cat(outs, dim=-2), torch.cat(lses, dim=-1)  # (..., S_q, D_v), (..., S_q)
