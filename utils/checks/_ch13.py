"""Checks for chapter 13 — flash attention: online softmax and tiled attention."""
import math

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .. import reference as ref
from ._core import Case, CheckFailure, Exercise, Mutant, generator, largest_tensor, randn, rng
from ._forbid import LOGSUMEXP, MHA, SDPA, SOFTMAX
from ._registry import register

__all__ = ["check_online_softmax", "check_flash_attention"]

NEG_INF = float("-inf")


def _safe(m):
    return torch.where(m == NEG_INF, torch.zeros_like(m), m)


# ---------------------------------------------------------------- online_softmax
def _online_softmax_cases(seed: int) -> list:
    r, g = rng(seed), generator(seed)
    cases = []

    def add(label, shape, block_size, scale=1.0):
        x = randn(*shape, gen=g, scale=scale)
        cases.append(Case(f"{label}: x {tuple(x.shape)}, block_size={block_size}", (x, block_size)))

    add("one row, N not divisible by block_size", (10,), 3)
    add("N divisible by block_size", (2, 8), 4)
    add("batch and heads, a short last block", (2, 3, 13), 5)
    add("block_size = 1", (3, 7), 1)
    add("block_size > N (one block)", (2, 6), 8)
    add("block_size = N", (2, 5), 5)
    add("N = 1", (4, 1), 1)
    add("N = 1, block_size > N", (2, 1), 4)
    add("large-magnitude inputs (|x| ~ 100)", (4, 12), 4, scale=100.0)
    add("large-magnitude inputs, a short last block", (2, 3, 11), 3, scale=60.0)
    for i in range(6):  # random shapes, odd sizes included
        lead = tuple(r.randint(1, 3) for _ in range(r.randint(0, 2)))
        n = r.randint(2, 17)
        bs = r.choice([1, 2, 3, 4, 5, 7, 16])
        add(f"random case {i + 1}", (*lead, n), bs, scale=r.choice([1.0, 3.0, 10.0]))
    return cases


def _online_variant(x, block_size, *, rescale=True, running_max=True, floor_blocks=False,
                    subtract_max=True, inverted=False):
    n = x.size(-1)
    n_blocks = n // block_size if floor_blocks else math.ceil(n / block_size)
    m = torch.full(x.shape[:-1], NEG_INF)
    l = torch.zeros(x.shape[:-1])
    for b in range(n_blocks):
        block = x[..., b * block_size:(b + 1) * block_size]
        if not subtract_max:
            l = l + torch.exp(block).sum(-1)
            continue
        m_new = torch.maximum(m, block.amax(-1)) if running_max else block.amax(-1)
        factor = torch.exp(_safe(m_new) - m) if inverted else torch.exp(m - _safe(m_new))
        l = (l * factor if rescale else l) + torch.exp(block - m_new[..., None]).sum(-1)
        m = m_new
    if not subtract_max:
        return torch.exp(x) / l[..., None]
    return torch.exp(x - m[..., None]) / l[..., None]


def _os_no_rescale(x, block_size):
    return _online_variant(x, block_size, rescale=False)


def _os_last_block_max(x, block_size):
    return _online_variant(x, block_size, running_max=False)


def _os_drops_tail(x, block_size):
    return _online_variant(x, block_size, floor_blocks=True)


def _os_no_max(x, block_size):
    return _online_variant(x, block_size, subtract_max=False)


def _os_inverted_rescale(x, block_size):
    return _online_variant(x, block_size, inverted=True)


def _os_softmax_per_block(x, block_size):
    outs = []
    for start in range(0, x.size(-1), block_size):
        block = x[..., start:start + block_size]
        e = torch.exp(block - block.amax(-1, keepdim=True))
        outs.append(e / e.sum(-1, keepdim=True))
    return torch.cat(outs, dim=-1)


ONLINE_SOFTMAX_MUTANTS = [
    Mutant("no_rescale_of_running_sum",
           "the running sum l was not rescaled when the max grew: multiply the old l by exp(m_old - m_new) before adding the new block's exp(x - m_new).",
           _os_no_rescale),
    Mutant("last_block_max_only",
           "the max was taken over the current block only (m = block max) instead of the running max m = max(m_old, block max), so earlier large values overflow exp(x - m).",
           _os_last_block_max),
    Mutant("drops_tail_block",
           "the last, shorter block was skipped (N // block_size blocks): loop over ceil(N / block_size) blocks so the tail columns are counted in m and l.",
           _os_drops_tail),
    Mutant("no_max_subtraction",
           "the max was not subtracted before exp, so exp overflows to inf on large inputs: keep a running max m and use exp(x - m).",
           _os_no_max),
    Mutant("inverted_rescale",
           "the running sum was rescaled by exp(m_new - m_old), the inverse of the right factor exp(m_old - m_new).",
           _os_inverted_rescale),
    Mutant("softmax_per_block",
           "each block was normalised on its own: the softmax must be over the whole row, so combine the blocks' maxima and sums before dividing.",
           _os_softmax_per_block),
]

ONLINE_SOFTMAX_EXERCISE = Exercise(
    name="online_softmax",
    reference=ref.online_softmax,
    make_cases=_online_softmax_cases,
    forbidden=(SOFTMAX, LOGSUMEXP),
    mutants=ONLINE_SOFTMAX_MUTANTS,
)
check_online_softmax = register(ONLINE_SOFTMAX_EXERCISE)


# ---------------------------------------------------------------- flash_attention
def _flash_cases(seed: int) -> list:
    r, g = rng(seed), generator(seed)
    cases = []

    def add(label, lead, s_q, s_k, d, d_v, block_size=None, causal=False, scale=1.0):
        q = randn(*lead, s_q, d, gen=g, scale=scale)
        k = randn(*lead, s_k, d, gen=g, scale=scale)
        v = randn(*lead, s_k, d_v, gen=g)
        kwargs = {} if block_size is None else {"block_size": block_size}
        if causal:
            kwargs["causal"] = True
        opts = f"block_size={block_size if block_size is not None else '64 (default)'}, causal={causal}"
        cases.append(Case(f"{label}: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}, {opts}",
                          (q, k, v), kwargs))

    add("no batch dims, S divisible by block_size", (), 8, 8, 4, 4, 4)
    add("S not divisible by block_size", (2,), 10, 10, 8, 8, 4)
    add("S_q ≠ S_k, D ≠ D_v, batch and heads", (2, 3), 5, 11, 6, 5, 3)
    add("causal, S_q = S_k, several blocks", (2,), 9, 9, 4, 4, 4, causal=True)
    add("causal, S_q < S_k (bottom-right)", (2,), 4, 10, 4, 3, 3, causal=True)
    add("causal, S_q > S_k: fully masked query rows", (2, 2), 9, 5, 4, 4, 2, causal=True)
    add("block_size = 1, causal", (1,), 6, 6, 4, 4, 1, causal=True)
    add("block_size = 1, S_q ≠ S_k", (2,), 3, 5, 4, 2, 1)
    add("block_size ≥ S (one tile)", (2,), 7, 7, 4, 4, 16, causal=True)
    add("S = 1", (3,), 1, 1, 4, 4, 2)
    add("large-magnitude inputs", (2,), 10, 10, 8, 4, 3, scale=8.0)
    add("large-magnitude inputs, causal", (2,), 10, 13, 8, 4, 4, causal=True, scale=8.0)
    add("default block_size, causal, S_q ≠ S_k", (1,), 70, 100, 4, 4, causal=True)
    for i in range(5):  # random shapes, odd sizes included
        lead = tuple(r.randint(1, 3) for _ in range(r.randint(0, 2)))
        s_q, s_k = r.randint(1, 13), r.randint(1, 13)
        add(f"random case {i + 1}", lead, s_q, s_k, r.choice([2, 4, 5, 8]), r.randint(1, 6),
            r.choice([1, 2, 3, 4, 5, 8]), causal=bool(i % 2))
    return cases


def _flash_variant(q, k, v, block_size=64, causal=False, *, rescale_acc=True, divide_by_l=True,
                   lse_adds_max=True, top_left=False, floor_key_blocks=False, skip_off_by_one=False,
                   mask_inside=True, skip_blocks=True):
    """A tiled attention with one switch per known mistake (all off = correct)."""
    s_q, s_k = q.size(-2), k.size(-2)
    scale = 1.0 / math.sqrt(q.size(-1))
    offset = 0 if top_left else s_k - s_q
    n_key_blocks = s_k // block_size if floor_key_blocks else math.ceil(s_k / block_size)
    outs, lses = [], []
    for q_start in range(0, s_q, block_size):
        q_blk = q[..., q_start:q_start + block_size, :]
        br = q_blk.size(-2)
        rows = torch.arange(q_start, q_start + br)
        m = torch.full(q_blk.shape[:-1], NEG_INF)
        l = torch.zeros(q_blk.shape[:-1])
        acc = torch.zeros(*q_blk.shape[:-1], v.size(-1))
        for b in range(n_key_blocks):
            k_start = b * block_size
            last_visible = q_start + br - 1 + offset  # the last key the block's last query sees
            if causal and skip_blocks and (k_start >= last_visible if skip_off_by_one else k_start > last_visible):
                break
            k_blk = k[..., k_start:k_start + block_size, :]
            v_blk = v[..., k_start:k_start + block_size, :]
            s = q_blk @ k_blk.transpose(-2, -1) * scale
            if causal and mask_inside:
                cols = torch.arange(k_start, k_start + k_blk.size(-2))
                s = s.masked_fill(cols[None, :] > rows[:, None] + offset, NEG_INF)
            m_new = torch.maximum(m, s.amax(-1))
            alpha = torch.exp(m - _safe(m_new))
            p = torch.exp(s - _safe(m_new)[..., None])
            l = alpha * l + p.sum(-1)
            acc = (alpha[..., None] * acc if rescale_acc else acc) + p @ v_blk
            m = m_new
        seen = l > 0
        out = acc / torch.where(seen, l, 1.0)[..., None] if divide_by_l else acc
        outs.append(torch.where(seen[..., None], out, torch.zeros_like(out)))
        lse = m + torch.log(l) if lse_adds_max else torch.log(l)
        lses.append(torch.where(seen, lse, torch.full_like(m, NEG_INF)))
    return torch.cat(outs, dim=-2), torch.cat(lses, dim=-1)


def _fa_no_acc_rescale(q, k, v, block_size=64, causal=False):
    return _flash_variant(q, k, v, block_size, causal, rescale_acc=False)


def _fa_no_division(q, k, v, block_size=64, causal=False):
    return _flash_variant(q, k, v, block_size, causal, divide_by_l=False)


def _fa_lse_without_max(q, k, v, block_size=64, causal=False):
    return _flash_variant(q, k, v, block_size, causal, lse_adds_max=False)


def _fa_top_left(q, k, v, block_size=64, causal=False):
    return _flash_variant(q, k, v, block_size, causal, top_left=True)


def _fa_drops_tail_keys(q, k, v, block_size=64, causal=False):
    return _flash_variant(q, k, v, block_size, causal, floor_key_blocks=True)


def _fa_skip_off_by_one(q, k, v, block_size=64, causal=False):
    return _flash_variant(q, k, v, block_size, causal, skip_off_by_one=True)


def _fa_no_mask_inside(q, k, v, block_size=64, causal=False):
    return _flash_variant(q, k, v, block_size, causal, mask_inside=False)


def _fa_no_skip(q, k, v, block_size=64, causal=False):
    return _flash_variant(q, k, v, block_size, causal, skip_blocks=False)


def _fa_full_scores(q, k, v, block_size=64, causal=False):
    """Right answer, wrong memory: the whole (S_q, S_k) score matrix at once."""
    s_q, s_k = q.size(-2), k.size(-2)
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (..., S_q, S_k)
    if causal:
        s = s.masked_fill(torch.ones(s_q, s_k, dtype=torch.bool).tril(s_k - s_q).logical_not(), NEG_INF)
    m = _safe(s.amax(-1, keepdim=True))
    e = torch.exp(s - m)
    l = e.sum(-1, keepdim=True)
    seen = l > 0
    out = torch.where(seen, e @ v / torch.where(seen, l, 1.0), torch.zeros(()))
    lse = torch.where(seen, m + torch.log(l), torch.full_like(l, NEG_INF)).squeeze(-1)
    return out, lse


NO_ACC_RESCALE = ("the output accumulator was not rescaled when the running max grew: multiply acc "
                  "by exp(m_old - m_new) (like l) before adding the new block's p @ v.")
FULL_SCORES = ("the full S_q × S_k score matrix was built: flash attention computes the scores one "
               "(query block, key block) tile at a time and never holds more than a tile.")
NO_SKIP = ("with causal=True the key blocks that lie entirely above the causal diagonal were still "
           "computed: stop the key loop at the last key the block's last query may see (i + S_k - S_q).")

FLASH_MUTANTS = [
    Mutant("no_accumulator_rescale", NO_ACC_RESCALE, _fa_no_acc_rescale),
    Mutant("no_final_division",
           "the output was not divided by the running sum l at the end: out = acc / l.",
           _fa_no_division),
    Mutant("lse_without_max",
           "lse was returned as log(l) without adding the running max back: lse = m + log(l).",
           _fa_lse_without_max),
    Mutant("top_left_causal",
           "the causal mask is top-left aligned (key j <= query i); with S_q ≠ S_k it must be bottom-right aligned: j <= i + S_k - S_q.",
           _fa_top_left),
    Mutant("drops_tail_key_block",
           "the last, shorter key block was skipped (S_k // block_size blocks): loop over ceil(S_k / block_size) key blocks.",
           _fa_drops_tail_keys),
    Mutant("causal_skip_off_by_one",
           "the causal block skipping is off by one: a key block starting exactly at the last visible key (i + S_k - S_q for the block's last query i) was skipped; skip only blocks that start after it.",
           _fa_skip_off_by_one),
    Mutant("no_mask_inside_diagonal_block",
           "fully masked key blocks were skipped but the blocks on the diagonal were not masked: inside a block, set the scores of keys j > i + S_k - S_q to -inf.",
           _fa_no_mask_inside),
    Mutant("causal_without_block_skipping", NO_SKIP, _fa_no_skip),
    Mutant("full_score_matrix", FULL_SCORES, _fa_full_scores),
]


MEM_S, MEM_D, MEM_BLOCK = 2048, 8, 64


def _check_memory(fn) -> None:
    """At S = 2048 no tensor may have S²/4 elements or more (a 64 × 64 tile has S²/1024)."""
    g = generator(2048)
    q, k, v = (randn(MEM_S, MEM_D, gen=g) for _ in range(3))
    label = f"memory check (q, k, v ({MEM_S}, {MEM_D}), block_size={MEM_BLOCK})"
    result, numel, shape, op = largest_tensor(fn, q, k, v, block_size=MEM_BLOCK)
    limit = MEM_S * MEM_S // 4
    if numel >= limit:
        raise CheckFailure(
            f"{label}: your code created a tensor of shape {shape} ({numel:,} elements, by {op}); "
            f"the limit is {limit:,} (S²/4). Likely mistake: {FULL_SCORES}"
        )
    if not (isinstance(result, tuple) and len(result) == 2):
        raise CheckFailure(f"{label}: flash_attention should return (out, lse).")


class _Work(TorchDispatchMode):
    """Counts the elements produced by matmuls and exps: proportional to the tiles visited."""

    OPS = ("aten.mm", "aten.bmm", "aten.addmm", "aten.baddbmm", "aten.exp", "aten.exp_", "aten.exp2")

    def __init__(self):
        super().__init__()
        self.work = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if str(func.overloadpacket) in self.OPS:
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, torch.Tensor):
                    self.work += t.numel()
        return out


def _check_causal_skips_blocks(fn) -> None:
    """With causal=True, about half the tiles are fully masked: their work must be skipped."""
    s, d, bs = 512, 8, 64
    g = generator(512)
    q, k, v = (randn(s, d, gen=g) for _ in range(3))
    counts = []
    for causal in (False, True):
        mode = _Work()
        with mode:
            fn(q, k, v, block_size=bs, causal=causal)
        counts.append(mode.work)
    full, causal_work = counts
    if full > 0 and causal_work > 0.8 * full:  # skipping: 36 of 64 tiles, about 0.56
        raise CheckFailure(
            f"block-skipping check (q, k, v ({s}, {d}), block_size={bs}): causal=True did "
            f"{causal_work / full:.0%} of the matmul/exp work of causal=False, expected about 56%. "
            f"Likely mistake: {NO_SKIP}"
        )


FLASH_EXERCISE = Exercise(
    name="flash_attention",
    reference=ref.flash_attention,
    make_cases=_flash_cases,
    forbidden=(SOFTMAX, SDPA, MHA),
    mutants=FLASH_MUTANTS,
    output_names=("out", "lse"),
    extra_checks=(_check_memory, _check_causal_skips_blocks),
)
check_flash_attention = register(FLASH_EXERCISE)
