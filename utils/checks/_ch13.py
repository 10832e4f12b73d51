"""Checks for chapter 13 — flash attention: online softmax and tiled attention.

Besides comparing values, two rules of the prompts are measured:

* ``online_softmax`` reads the row block by block: a judged case runs the answer under a dispatch
  mode that follows which columns of x every reduction (max, sum, ...) reads, through the views,
  copies and elementwise ops in between (``_ReadOrder``); each block is reduced once, in order, and
  never more than one block at once.
* ``flash_attention`` holds one tile of scores at a time: besides the largest tensor (4 · b²), the
  elements of everything it creates and keeps alive at once are counted by the learner guard's own
  tripwire (``_tripwires.live_budget``), at two sizes, so tiles kept in a list fail like a strip.
"""
import math
from dataclasses import dataclass, replace
from typing import Callable

import torch
from torch.utils.weak import WeakIdKeyDictionary

from .. import reference as ref
from .._clock import DispatchMode
from .._guard import unguarded
from ._contract import Contract, Cost
from ._core import Case, Exercise, Mutant, Variant, compare, generator, randn, rng
from ._forbid import LOGSUMEXP, MHA, SDPA, SOFTMAX
from ._registry import register
from ._tripwires import live_budget

__all__ = ["check_online_softmax", "check_flash_attention"]

NEG_INF = float("-inf")
F64 = torch.float64


def _safe(m):
    return torch.where(m == NEG_INF, torch.zeros_like(m), m)


# ---------------------------------------------------------------- online_softmax
def _online_softmax_cases(seed: int) -> list:
    r, g = rng(seed), generator(seed)
    cases = []

    def add(label, shape, block_size, scale=1.0, x=None):
        x = randn(*shape, gen=g, scale=scale) if x is None else x
        cases.append(Case(f"{label}: x {tuple(x.shape)}, block_size={block_size}", (x, block_size)))

    add("one row, N not divisible by block_size", (10,), 3)
    add("N divisible by block_size", (2, 8), 4)
    add("batch and heads, a short last block", (2, 3, 13), 5)
    # the max grows in every block: the running sum must be rescaled each time
    add("a rising row (the max grows in every block)", None, 3,
        x=torch.linspace(-4.0, 6.0, 12).repeat(2, 1) + 0.1 * randn(2, 12, gen=g))
    add("block_size = 1", (3, 7), 1)
    add("block_size > N (one block)", (2, 6), 8)
    add("block_size = N", (2, 5), 5)
    x = randn(3, 10, gen=g)
    x[0, :4] = NEG_INF  # the whole first block of row 0
    x[1, :8] = NEG_INF  # the first two blocks of row 1
    x[2, 5] = NEG_INF  # one -inf entry
    add("leading blocks that are all -inf", None, 4, x=x)
    x = randn(3, 7, gen=g)
    x[1] = NEG_INF
    add("a row that is all -inf (gives zeros)", None, 3, x=x)
    add("large-magnitude inputs (|x| ~ 100)", (4, 12), 4, scale=100.0)
    add("|x| ~ 1000, the max in the last block", None, 2,
        x=torch.tensor([[1000.0, 0.0, -1000.0, 999.0, 1001.0], [-1000.0, -999.0, -998.0, 0.0, 1000.0]]))
    add("large-magnitude inputs, a short last block", (2, 3, 11), 3, scale=60.0)
    add("N = 1", (4, 1), 1)
    add("N = 1, block_size > N", (2, 1), 4)
    add("float64 input", None, 3, x=randn(2, 8, gen=g, dtype=torch.float64))
    # every score far below 0 (softmax 0.24 / 0.09 / 0.64 / 0.03 in row 0): a running max that starts
    # at 0 instead of -inf stays 0, and exp(x - 0) underflows to 0 in every column
    add("rows whose scores are all far below 0 (around -200)", None, 2,
        x=torch.tensor([[-200.0, -201.0, -199.0, -202.0], [-150.0, -151.5, -149.0, -150.2]]))
    add("all far below 0, several blocks, float64 (around -800)", None, 3,
        x=-800.0 + randn(2, 7, gen=g, dtype=torch.float64))
    # chapter 04's fill value: a row of -1e9 everywhere is ordinary (its softmax is uniform), and a
    # running max that starts at a finite "very negative" number (-1e4) stays above it: zeros
    x = randn(2, 9, gen=g)
    x[0] = -1e9
    x[1, :5] = -1e9
    add("masked with -1e9 (chapter 04's fill value): one row entirely, one row's first blocks", None, 3, x=x)
    # scores far below -1e9 (any finite score is allowed): a running max that starts at -1e9, or a
    # safe max clamped at -1e9, stays above every score, and every exp(x - m) underflows to 0
    add("every score far below -1e9 (around -3·10¹⁰), float64", None, 4,
        x=-3e10 + randn(2, 9, gen=g, dtype=torch.float64))
    for i in range(4):  # random shapes, odd sizes included
        lead = tuple(r.randint(1, 3) for _ in range(r.randint(0, 2)))
        n = r.randint(2, 17)
        bs = r.choice([1, 2, 3, 4, 5, 7, 16])
        add(f"random case {i + 1}", (*lead, n), bs, scale=r.choice([1.0, 3.0, 10.0]))
    # the order of the reads (rule 1: block by block): judged, values included
    x = randn(3, 20, gen=g, scale=3.0)
    cases.append(Case(f"the order of the reads, followed through every op: x {tuple(x.shape)}, block_size=4 "
                      "(5 blocks; each reduced once, in order, one block at a time)", (x, 4), run=_run_reads,
                      judge=_judge_reads(x, 4)))
    return cases


# ---------------------------------------------------------------- the order of online_softmax's reads
_A = torch.ops.aten
# ops that make a fresh tensor from an input's shape only: they read no value
_FRESH = {_A.zeros_like, _A.ones_like, _A.empty_like, _A.full_like, _A.rand_like, _A.randn_like, _A.randint_like,
          _A.new_zeros, _A.new_ones, _A.new_empty, _A.new_full, _A.new_empty_strided, _A._local_scalar_dense,
          _A.bernoulli, _A.empty_strided}
# ops that move values without combining columns: applied to the column map the same way
_MOVES = {_A.cat, _A.stack, _A.index, _A.index_select, _A.gather, _A.flip, _A.roll, _A.repeat, _A.narrow_copy,
          _A.slice_copy, _A._unsafe_view, _A.expand_copy, _A.view_copy, _A.permute_copy, _A.unsqueeze_copy,
          _A.squeeze_copy, _A.transpose_copy, _A.t_copy, _A.unfold_copy, _A.select_copy, _A.split_copy,
          _A.unbind_copy, _A.take_along_dim}
_COPIES = {_A.clone, _A._to_copy, _A.lift_fresh_copy, _A.alias_copy, _A.detach_copy, _A.contiguous}
_ELEMENTWISE = {_A.masked_fill, _A.where, _A.clamp, _A.clamp_min, _A.clamp_max, _A.nan_to_num}


class _ReadOrder(DispatchMode):
    """Follows which columns of ``x`` each tensor holds (a "column map" of the same shape, -1 where a
    value is not one of x's), through views, copies, moves and elementwise ops; every other op that
    reads a floating tensor holding x's columns (a max, a sum, a matmul, ...) is a read, recorded as
    (first block, last block, op). Its output holds no column any more (a running max or sum)."""

    def __init__(self, x: torch.Tensor, block_size: int):
        super().__init__()
        self.block_size = block_size
        self.maps = WeakIdKeyDictionary()
        cols = torch.arange(x.shape[-1]).expand(x.shape) if x.dim() else torch.zeros((), dtype=torch.long)
        self.maps[x] = cols.clone()
        self.reads = []

    def _map(self, t):
        return self.maps.get(t) if isinstance(t, torch.Tensor) else None

    def _set(self, out, cmap):
        try:
            if isinstance(out, torch.Tensor) and cmap is not None:
                if tuple(cmap.shape) != tuple(out.shape):
                    cmap = cmap.expand(out.shape)
                self.maps[out] = cmap.clone()
        except RuntimeError:  # a map that does not fit: the output holds no column we can name
            pass

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        packet = func.overloadpacket
        if func._schema.is_mutable or packet in _FRESH:
            return out
        flat = [a for a in args if isinstance(a, torch.Tensor)]
        for a in args:
            if isinstance(a, (list, tuple)):
                flat += [t for t in a if isinstance(t, torch.Tensor)]
        tracked = [t for t in flat if t in self.maps]
        if not tracked:
            return out
        try:
            if func.is_view or packet in _MOVES:
                def sub(a):
                    if isinstance(a, torch.Tensor):
                        m = self._map(a)
                        return m if m is not None else torch.full(a.shape, -1, dtype=torch.long)
                    if isinstance(a, (list, tuple)):
                        return type(a)(sub(t) for t in a)
                    return a
                if packet in (_A.index, _A.index_select, _A.gather, _A.take_along_dim):
                    new_args = (sub(args[0]), *args[1:])  # the indices stay indices
                else:
                    new_args = tuple(sub(a) for a in args)
                maps = func(*new_args, **kwargs)
                for o, m in zip(out if isinstance(out, (list, tuple)) else (out,),
                                maps if isinstance(maps, (list, tuple)) else (maps,)):
                    self._set(o, m)
                return out
            if packet in _COPIES:
                self._set(out, self._map(args[0]))
                return out
            if packet == _A.constant_pad_nd:
                self._set(out, _A.constant_pad_nd(self._map(args[0]), args[1], -1))
                return out
            if torch.Tag.pointwise in func.tags or packet in _ELEMENTWISE:
                shape = tuple(out.shape) if isinstance(out, torch.Tensor) else None
                best = next((t for t in tracked if tuple(t.shape) == shape), tracked[0])
                self._set(out, self._map(best))
                return out
        except Exception:  # noqa: BLE001 - an op the map cannot follow: its output holds no column
            return out
        outs = out if isinstance(out, (list, tuple)) else (out,)
        if any(t.is_floating_point() for t in tracked) and any(
                isinstance(o, torch.Tensor) and o.dtype != torch.bool for o in outs):
            cols = torch.cat([self.maps[t].reshape(-1) for t in tracked])
            cols = cols[cols >= 0]
            if cols.numel():
                blocks = cols // self.block_size
                self.reads.append([int(blocks.min()), int(blocks.max()), str(packet).split(".")[-1]])
        return out


def _run_reads(fn, case: Case):
    """Call online_softmax under ``_ReadOrder``: (its output, the reads [first block, last block, op])."""
    x, block_size = case.args
    mode = _ReadOrder(x, block_size)
    with mode:
        out = fn(x, block_size)
    return out, mode.reads


WHOLE_ROW = ("pass 1 reads one block at a time: a max (or a sum) over the whole row, or over several blocks at "
             "once, is the extra pass of the safe softmax that the online softmax exists to avoid; update m and l "
             "from each block x[..., start:start + block_size] alone, in order.")
TWO_PASSES = ("pass 1 goes over the blocks once, updating the running max m and the running sum l together "
              "(l rescaled by exp(m_old - m_new) when the max grows): one pass over the blocks for the max, then "
              "another for the sum, is the three-pass softmax in blocks.")


def _judge_reads(x, block_size):
    expected = unguarded(ref.online_softmax)(x, block_size)

    def judge(got) -> str | None:
        out, reads = got
        msg = compare(expected, out, 1e-5, 1e-4)
        if msg:
            return msg
        seen = -1
        for first, last, op in reads:
            if last > first:
                return (f"the output is right, but one {op} read blocks {first} to {last} of x at once (columns "
                        f"{first * block_size} to {min((last + 1) * block_size, x.shape[-1]) - 1}). Likely mistake: "
                        f"{WHOLE_ROW}")
            if first < seen:
                return (f"the output is right, but {op} read block {first} of x again after block {seen}. "
                        f"Likely mistake: {TWO_PASSES}")
            seen = max(seen, first)
        return None

    return judge


def _online_variant(x, block_size, *, rescale=True, running_max=True, floor_blocks=False,
                    subtract_max=True, inverted=False, safe=True, zero_rows=False, m0=NEG_INF):
    n = x.size(-1)
    sf = _safe if safe else (lambda t: t)
    n_blocks = n // block_size if floor_blocks else math.ceil(n / block_size)
    m = torch.full(x.shape[:-1], m0, dtype=x.dtype)
    l = torch.zeros(x.shape[:-1], dtype=x.dtype)
    for b in range(n_blocks):
        block = x[..., b * block_size:(b + 1) * block_size]
        if not subtract_max:
            l = l + torch.exp(block).sum(-1)
            continue
        m_new = torch.maximum(m, block.amax(-1)) if running_max else block.amax(-1)
        factor = torch.exp(sf(m_new) - m) if inverted else torch.exp(m - sf(m_new))
        l = (l * factor if rescale else l) + torch.exp(block - sf(m_new)[..., None]).sum(-1)
        m = m_new
    if not subtract_max:
        return torch.exp(x) / l[..., None]
    out = torch.exp(x - sf(m)[..., None]) / l[..., None]
    return torch.where(l[..., None] > 0, out, torch.zeros_like(out)) if zero_rows else out


def _os_no_rescale(x, block_size):
    return _online_variant(x, block_size, rescale=False, zero_rows=True)


def _os_last_block_max(x, block_size):
    return _online_variant(x, block_size, running_max=False, zero_rows=True)


def _os_drops_tail(x, block_size):
    return _online_variant(x, block_size, floor_blocks=True, zero_rows=True)


def _os_max_starts_at_zero(x, block_size):
    return _online_variant(x, block_size, zero_rows=True, m0=0.0)


def _os_max_starts_finite(x, block_size):
    return _online_variant(x, block_size, zero_rows=True, m0=-1e4)


def _os_no_max(x, block_size):
    return _online_variant(x, block_size, subtract_max=False)


def _os_inverted_rescale(x, block_size):
    return _online_variant(x, block_size, inverted=True, zero_rows=True)


def _os_nan_leading_block(x, block_size):
    """exp(m_old − m_new) with both -inf is exp(nan): the textbook loop without a guard."""
    return _online_variant(x, block_size, safe=False)


def _os_nan_empty_row(x, block_size):
    """Right everywhere except a row of all -inf: 0 / 0."""
    return _online_variant(x, block_size)


def _os_ratio_of_exps(x, block_size):
    """The rescale as exp(m_old) / exp(m_new): inf / inf = NaN once a max passes exp's range."""
    n = x.size(-1)
    m = torch.full(x.shape[:-1], NEG_INF, dtype=x.dtype)
    l = torch.zeros(x.shape[:-1], dtype=x.dtype)
    for start in range(0, n, block_size):
        block = x[..., start:start + block_size]
        m_new = torch.maximum(m, block.amax(-1))
        l = l * (torch.exp(m) / torch.exp(_safe(m_new))) + torch.exp(block - _safe(m_new)[..., None]).sum(-1)
        m = m_new
    out = torch.exp(x - _safe(m)[..., None]) / l[..., None]
    return torch.where(l[..., None] > 0, out, torch.zeros_like(out))


def _os_global_max(x, block_size):
    """The max over the whole row first, then one pass for the sum: right values, not online."""
    m = _safe(x.amax(-1))
    l = torch.zeros(x.shape[:-1], dtype=x.dtype)
    for start in range(0, x.size(-1), block_size):
        l = l + torch.exp(x[..., start:start + block_size] - m[..., None]).sum(-1)
    out = torch.exp(x - m[..., None]) / l[..., None]
    return torch.where(l[..., None] > 0, out, torch.zeros_like(out))


def _os_two_passes(x, block_size):
    """A pass over the blocks for the max, then another for the sum: right values, not online."""
    m = torch.full(x.shape[:-1], NEG_INF, dtype=x.dtype)
    for start in range(0, x.size(-1), block_size):
        m = torch.maximum(m, x[..., start:start + block_size].amax(-1))
    l = torch.zeros(x.shape[:-1], dtype=x.dtype)
    for start in range(0, x.size(-1), block_size):
        l = l + torch.exp(x[..., start:start + block_size] - _safe(m)[..., None]).sum(-1)
    out = torch.exp(x - _safe(m)[..., None]) / l[..., None]
    return torch.where(l[..., None] > 0, out, torch.zeros_like(out))


def _os_softmax_per_block(x, block_size):
    outs = []
    for start in range(0, x.size(-1), block_size):
        block = x[..., start:start + block_size]
        e = torch.exp(block - _safe(block.amax(-1, keepdim=True)))
        s = e.sum(-1, keepdim=True)
        outs.append(torch.where(s > 0, e / s, torch.zeros_like(e)))
    return torch.cat(outs, dim=-1)


NAN_LEADING = ("a row whose first block is all -inf gave NaN: while the running max is still -inf, "
               "exp(m_old - m_new) and exp(x - m_new) are exp(-inf + inf) = NaN; subtract a safe max "
               "(torch.where(m_new == -inf, 0, m_new)) so those terms are exp(-inf) = 0.")
NAN_EMPTY_ROW = ("a row that is all -inf gave NaN (0 / 0): the exercise defines it as all zeros; "
                 "return zeros where the running sum l is 0 (torch.where).")

MAX_FROM_ZERO = ("the running max started at 0 instead of -inf: for a row whose scores are all far below 0 "
                 "(around -200) m stays 0, every exp(x - m) underflows to 0 and the row comes out as zeros (or NaN); "
                 "start from m = -inf, so that m is the largest score actually seen.")

MAX_FROM_FINITE = ("the running max started at a finite number instead of -inf: a row whose scores are all below "
                   "it (chapter 04 fills masked scores with -1e9) keeps m at that number, every exp(x - m) underflows "
                   "to 0 and the row comes out as zeros; start from m = -inf.")
RATIO_OF_EXPS = ("the rescale factor was computed as exp(m_old) / exp(m_new): each exp overflows to inf once a max "
                 "passes 88 (float32; 709 in float64), and inf / inf is NaN (below -103, 0 / 0); compute it as one "
                 "exp of the difference, exp(m_old - m_new), which is at most 1.")

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
    Mutant("nan_on_leading_minus_inf_block", NAN_LEADING, _os_nan_leading_block),
    Mutant("running_max_starts_at_zero", MAX_FROM_ZERO, _os_max_starts_at_zero),
    Mutant("running_max_starts_finite", MAX_FROM_FINITE, _os_max_starts_finite),
    Mutant("nan_on_all_minus_inf_row", NAN_EMPTY_ROW, _os_nan_empty_row),
    Mutant("rescale_as_ratio_of_exps", RATIO_OF_EXPS, _os_ratio_of_exps),
    Mutant("global_max_then_one_pass", WHOLE_ROW, _os_global_max),
    Mutant("max_pass_then_sum_pass", TWO_PASSES, _os_two_passes),
]


def _v_os_split_where(x, block_size):
    m = torch.full(x.shape[:-1], NEG_INF, dtype=x.dtype)
    l = torch.zeros(x.shape[:-1], dtype=x.dtype)
    for blk in x.split(block_size, dim=-1):
        m_new = torch.maximum(m, blk.max(-1).values)
        shift = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        l = l * torch.exp(m - shift) + torch.exp(blk - shift.unsqueeze(-1)).sum(-1)
        m = m_new
    shift = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    return torch.exp(x - shift.unsqueeze(-1)) / torch.where(l > 0, l, 1.0).unsqueeze(-1)  # empty row: 0 / 1


def _v_os_float64_exp2_loops(x, block_size):
    """float64 inside, base-2 exponentials, a Python loop over the blocks by index."""
    x2 = x.double() / math.log(2.0)
    n = x.size(-1)
    m = torch.full(x.shape[:-1], NEG_INF, dtype=torch.float64)
    l = torch.zeros(x.shape[:-1], dtype=torch.float64)
    start = 0
    while start < n:
        blk = x2[..., start:start + block_size]
        m_new = torch.maximum(m, blk.amax(-1))
        ok = torch.isfinite(m_new)
        corr = torch.where(ok, torch.exp2(m - torch.where(ok, m_new, 0.0)), 0.0)
        p = torch.where(ok[..., None], torch.exp2(blk - torch.where(ok, m_new, 0.0)[..., None]), 0.0)
        l = l * corr + p.sum(-1)
        m = m_new
        start += block_size
    ok = l > 0
    out = torch.exp2(x2 - torch.where(ok, m, 0.0)[..., None]) / torch.where(ok, l, 1.0)[..., None]
    return torch.where(ok[..., None], out, 0.0).to(x.dtype)


ONLINE_SOFTMAX_EXERCISE = Exercise(
    name="online_softmax",
    reference=ref.online_softmax,
    make_cases=_online_softmax_cases,
    mutants=ONLINE_SOFTMAX_MUTANTS,
    variants=[Variant("split_and_where", _v_os_split_where),
              Variant("float64_exp2_loops", _v_os_float64_exp2_loops, demo=True)],
    contract=Contract("""Softmax over the last dim, reading the columns one block of block_size at a time.

    x: (..., N)   block_size: int ≥ 1 (the last block may be shorter)
    Returns (..., N), each row summing to 1.
    Pass 1 keeps a running max m and a running sum l = Σ exp(x_j − m) over the columns seen so
    far; when a block raises the max from m_old to m_new, l is rescaled by exp(m_old − m_new).
    Pass 2 writes exp(x − m) / l.
    Pass 1 reads each block once, in order, and one block at a time: no max or sum over the whole
    row (or several blocks) first, and no second pass over the blocks (the check follows which
    columns every max, sum or product reads).
    -inf entries are allowed, also in whole leading blocks; a row of all -inf gives zeros. Any
    finite score is allowed, however far below 0 (the running max starts at -inf).
    """, fills=True, forbid=(SOFTMAX, LOGSUMEXP), kinds={"x": "scores"}),
)
check_online_softmax = register(ONLINE_SOFTMAX_EXERCISE)


# ---------------------------------------------------------------- flash_attention
FULL_SCORES = ("flash attention holds one (block_size × block_size) tile of scores at a time: no strip of a query "
               "block against all keys, whole or as tiles kept in a list (no plain softmax over a whole row, no tiles "
               "computed ahead and the hidden ones skipped afterwards), no full S_q × S_k score matrix, and no "
               "full S_q × S_k causal mask (build each tile's mask from torch.arange of its rows and columns)")
NO_SKIP = ("with causal=True, the key blocks that lie entirely above the causal diagonal are skipped, not computed: "
           "stop the key loop at the last key the block's last query may see (i + S_k - S_q)")
LIVE_TEXT = "8 · block_size² + 2 · (S_q + S_k) · (D + D_v)"


def _live_limit(s_q: int, s_k: int, block_size: int, d: int, d_v: int) -> int:
    """Elements that flash attention's own tensors may hold at once: a few tiles (the scores, their
    exp, a mask) and a few copies of what grows with S (float64 copies of q, k, v; m, l, acc, out,
    lse). A strip of one query block against all keys is block_size · S_k."""
    return 8 * block_size ** 2 + 2 * (s_q + s_k) * (d + d_v)


@dataclass
class _TileCost(Cost):
    """A ``Cost`` that also limits everything the call keeps alive at once (``live_text`` elements),
    not only its largest tensor; enforced by the budget cases' runner (``_run_within_live_budget``)."""

    live: Callable | None = None
    live_text: str = ""

    def limits(self) -> str:
        return (super().limits() + f"; the tensors it creates hold at most {self.live_text} elements alive at "
                "once (the inputs not counted; views of one tensor count once); each call within 3 s of CPU time")


def _run_within_live_budget(fn, case: Case):
    """The budget case's runner: the call, with the learner guard's tripwire counting the elements of
    what it creates and keeps alive (the grader's re-run counts them the same way)."""
    q, k, v = case.args[:3]
    limit = _live_limit(q.size(-2), k.size(-2), case.kwargs["block_size"], q.size(-1), v.size(-1))
    with live_budget(limit, FULL_SCORES, exclude=(q, k, v), text=LIVE_TEXT):
        return fn(*case.args, **case.kwargs)


def _budget_case(block_size: int, causal: bool, S: int | None = None, S_q: int | None = None, S_k: int | None = None,
                 D: int = 2, D_v: int = 2, live: bool = True) -> Case:
    s_q, s_k = (S, S) if S is not None else (S_q, S_k)
    g = generator(s_q + 7 * s_k + block_size)
    q, k, v = randn(s_q, D, gen=g), randn(s_k, D, gen=g), randn(s_k, D_v, gen=g)
    return Case("", (q, k, v), {"block_size": block_size} | ({"causal": True} if causal else {}),
                run=_run_within_live_budget if live else None)


FLASH_MEMORY = _TileCost(
    sizes=({"S": 1024, "block_size": 64}, {"S_q": 128, "S_k": 4096, "block_size": 64}),
    variants=({"causal": False}, {"causal": True}), build=_budget_case,
    numel=lambda block_size, **_: 4 * block_size ** 2, numel_text="4 · block_size²",
    live=lambda block_size, S=None, S_q=None, S_k=None: _live_limit(S_q or S, S_k or S, block_size, 2, 2),
    live_text=LIVE_TEXT,
    setting="D = D_v = 2; a tile has block_size² scores, a strip of one query block against all keys "
            "block_size · S_k (65,536, 262,144 and 8,388,608 here), the full scores or mask S_q · S_k", why=FULL_SCORES,
    tol=(1e-5, 1e-3), probe={"S": 16384, "block_size": 512}, probe_variants=({"causal": True},),
    probe_bytes=lambda S, block_size: S * S,
    probe_text="S_q · S_k bytes (a quarter of the full scores in float32, half of them in float16)")
FLASH_WORK = Cost(sizes=({"S": 256, "block_size": 32}, {"S": 512, "block_size": 64}), variants=({"causal": True},),
                  build=lambda **kw: _budget_case(**kw, D=8, D_v=2, live=False),
                  work=lambda S, block_size: 4 * S * S * 10 // 5,
                  work_text="0.8 · S²·(D + D_v) (every tile would be S²·(D + D_v); the visible ones about 0.6 of it)",
                  setting="D = 8, D_v = 2, causal=True", why=NO_SKIP)


def _flash_cases(seed: int) -> list:
    r, g = rng(seed), generator(seed)
    cases = []

    def add(label, lead, s_q, s_k, d, d_v, block_size=None, causal=False, scale=1.0, dtype=torch.float32, **extra):
        q = randn(*lead, s_q, d, gen=g, scale=scale, dtype=dtype)
        k = randn(*lead, s_k, d, gen=g, scale=scale, dtype=dtype)
        v = randn(*lead, s_k, d_v, gen=g, dtype=dtype)
        kwargs = {} if block_size is None else {"block_size": block_size}
        if causal:
            kwargs["causal"] = True
        opts = f"block_size={block_size if block_size is not None else '64 (default)'}, causal={causal}"
        cases.append(Case(f"{label}: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}, {opts}",
                          (q, k, v), kwargs, **extra))

    add("no batch dims, S divisible by block_size", (), 8, 8, 4, 4, 4)
    add("S not divisible by block_size", (2,), 10, 10, 8, 8, 4)
    add("S_q ≠ S_k, D ≠ D_v, batch and heads", (2, 3), 5, 11, 6, 5, 3)
    add("causal, S_q = S_k, several blocks", (2,), 9, 9, 4, 4, 4, causal=True)
    add("causal, S_q < S_k (bottom-right)", (2,), 4, 10, 4, 3, 3, causal=True)
    add("default block_size, causal, S_q ≠ S_k", (1,), 70, 100, 4, 4, causal=True)
    add("block_size = 1, causal", (1,), 6, 6, 4, 4, 1, causal=True)
    add("block_size = 1, S_q ≠ S_k", (2,), 3, 5, 4, 2, 1)
    add("block_size ≥ S (one tile)", (2,), 7, 7, 4, 4, 16, causal=True)
    add("large-magnitude inputs (|scores| ~ 100)", (2,), 10, 10, 8, 4, 3, scale=8.0)
    add("large-magnitude inputs, causal", (2,), 10, 13, 8, 4, 4, causal=True, scale=8.0)
    # a future key holds by far the largest score: the max must be taken after the causal mask
    u = torch.nn.functional.normalize(randn(4, gen=g), dim=0)
    q = randn(2, 8, 4, gen=g) + 5.0 * u
    k = randn(2, 8, 4, gen=g)
    k[:, 7] = 200.0 * u  # q_i · k_7 / sqrt(D) ≈ 500 for every query, but only the last one may see key 7
    v = randn(2, 8, 3, gen=g)
    cases.append(Case("causal: a masked (future) key holds the largest score, |score| ~ 500: "
                      "q (2, 8, 4), k (2, 8, 4), v (2, 8, 3), block_size=4, causal=True",
                      (q, k, v), {"block_size": 4, "causal": True}))
    add("causal, S_q > S_k: queries that see no key (zero output, lse = -inf)", (2, 2), 9, 5, 4, 4, 2, causal=True)
    # every score around -200: a running max that starts at 0 instead of -inf underflows every exp
    u = torch.nn.functional.normalize(randn(4, gen=g), dim=0)
    q = 20.0 * u + 0.1 * randn(2, 9, 4, gen=g)
    k = -20.0 * u + 0.1 * randn(2, 9, 4, gen=g)
    v = randn(2, 9, 3, gen=g)
    cases.append(Case("every score far below 0 (around -200): q (2, 9, 4), k (2, 9, 4), v (2, 9, 3), block_size=4, "
                      "causal=False", (q, k, v), {"block_size": 4}))
    cases.append(Case("every score far below 0 (around -200), causal: q (2, 9, 4), k (2, 9, 4), v (2, 9, 3), "
                      "block_size=4, causal=True", (q, k, v), {"block_size": 4, "causal": True}))
    add("S = 1", (3,), 1, 1, 4, 4, 2)
    # S_q > S_k with causal: queries 4, 5 of the block 4..7 see no key, 6 and 7 do (a block that straddles)
    add("causal, S_q > S_k, block_size = 4: one query block holds queries that see no key and queries that do",
        (2,), 10, 4, 4, 3, 4, causal=True)
    # every score around -10¹⁰ (any finite score is allowed): a running max that starts at -1e9, a
    # safe max clamped at -1e9, or masked scores filled with -1e9 stay above it and exp underflows
    u = torch.nn.functional.normalize(randn(4, gen=g, dtype=F64), dim=0)
    a = (1e10 * 2.0) ** 0.5  # q·k / sqrt(4) ≈ -a² / 2 = -10¹⁰
    q = a * u + randn(2, 7, 4, gen=g, dtype=F64) / a
    k = -a * u + randn(2, 9, 4, gen=g, dtype=F64) / a
    v = randn(2, 9, 3, gen=g, dtype=F64)
    for causal in (False, True):
        cases.append(Case(f"every score far below -1e9 (around -10¹⁰), float64, causal={causal}: q (2, 7, 4), "
                          "k (2, 9, 4), v (2, 9, 3), block_size=4", (q, k, v), {"block_size": 4} | (
                              {"causal": True} if causal else {})))
    # gradients in float64: queries that see no key must give zero gradients, not NaN (the unused
    # branch of a torch.where still carries its NaN into the backward pass)
    add("gradients (float64) of a random loss of out and lse", (2,), 5, 7, 4, 3, 3, grad=True, dtype=F64)
    add("gradients (float64), causal, S_q > S_k: a query block with queries that see no key", (2,), 10, 4, 4, 3, 4,
        causal=True, grad=True, dtype=F64)
    for i in range(4):  # random shapes, odd sizes included
        lead = tuple(r.randint(1, 3) for _ in range(r.randint(0, 2)))
        s_q, s_k = r.randint(1, 13), r.randint(1, 13)
        add(f"random case {i + 1}", lead, s_q, s_k, r.choice([2, 4, 5, 8]), r.randint(1, 6),
            r.choice([1, 2, 3, 4, 5, 8]), causal=bool(i % 2))
    return cases


def _flash_variant(q, k, v, block_size=64, causal=False, *, rescale_acc=True, rescale_l=True, divide_by_l=True,
                   lse_adds_max=True, top_left=False, floor_key_blocks=False, skip_off_by_one=False,
                   mask_inside=True, skip_blocks=True, scale=None, safe=True, max_before_mask=False, m0=NEG_INF,
                   hide_diagonal=False, score_hidden=False, skip_first_query=False, ratio_of_exps=False,
                   guarded_end=False):
    """A tiled attention with one switch per known mistake (all off = correct)."""
    s_q, s_k = q.size(-2), k.size(-2)
    scale = 1.0 / math.sqrt(q.size(-1)) if scale is None else scale
    sf = _safe if safe else (lambda t: t)
    offset = 0 if top_left else s_k - s_q
    n_key_blocks = s_k // block_size if floor_key_blocks else math.ceil(s_k / block_size)
    outs, lses = [], []
    for q_start in range(0, s_q, block_size):
        q_blk = q[..., q_start:q_start + block_size, :]
        br = q_blk.size(-2)
        rows = torch.arange(q_start, q_start + br)
        m = torch.full(q_blk.shape[:-1], m0, dtype=q.dtype)
        l = torch.zeros(q_blk.shape[:-1], dtype=q.dtype)
        acc = torch.zeros(*q_blk.shape[:-1], v.size(-1), dtype=q.dtype)
        for b in range(n_key_blocks):
            k_start = b * block_size
            last_visible = q_start + (0 if skip_first_query else br - 1) + offset  # the last key the block's last query sees
            if causal and skip_blocks and (k_start >= last_visible if skip_off_by_one else k_start > last_visible):
                if score_hidden:  # the hidden tiles' scores computed anyway, then thrown away
                    for kb in range(b, n_key_blocks):
                        _ = q_blk @ k[..., kb * block_size:(kb + 1) * block_size, :].transpose(-2, -1) * scale
                break
            k_blk = k[..., k_start:k_start + block_size, :]
            v_blk = v[..., k_start:k_start + block_size, :]
            s = raw = q_blk @ k_blk.transpose(-2, -1) * scale
            if causal and mask_inside:
                cols = torch.arange(k_start, k_start + k_blk.size(-2))
                s = s.masked_fill(cols[None, :] > rows[:, None] + offset - int(hide_diagonal), NEG_INF)
            m_new = torch.maximum(m, (raw if max_before_mask else s).amax(-1))
            alpha = torch.exp(m) / torch.exp(sf(m_new)) if ratio_of_exps else torch.exp(m - sf(m_new))
            p = torch.exp(s - sf(m_new)[..., None])
            l = (alpha * l if rescale_l else l) + p.sum(-1)
            acc = (alpha[..., None] * acc if rescale_acc else acc) + p @ v_blk
            m = m_new
        if not safe and not guarded_end:  # the textbook ending, no guard for queries that see no key
            outs.append(acc / l[..., None])
            lses.append(m + torch.log(l))
            continue
        seen = l > 0
        out = acc / torch.where(seen, l, 1.0)[..., None] if divide_by_l else acc
        outs.append(torch.where(seen[..., None], out, torch.zeros_like(out)))
        lse = m + torch.log(l) if lse_adds_max else torch.log(l)
        lses.append(torch.where(seen, lse, torch.full_like(m, NEG_INF)))
    return torch.cat(outs, dim=-2), torch.cat(lses, dim=-1)


def _switch(**flags):
    def impl(q, k, v, block_size=64, causal=False):
        return _flash_variant(q, k, v, block_size, causal, **flags)

    return impl


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


def _fa_query_strips(q, k, v, block_size=64, causal=False):
    """Query blocks against all visible keys at once, a plain (hand-written) softmax: no online softmax."""
    s_q, s_k = q.size(-2), k.size(-2)
    outs, lses = [], []
    for i in range(0, s_q, block_size):
        q_blk = q[..., i:i + block_size, :]
        br = q_blk.size(-2)
        end = max(min(s_k, i + br + s_k - s_q), 0) if causal else s_k
        s = q_blk @ k[..., :end, :].transpose(-2, -1) / math.sqrt(q.size(-1))  # (..., b, visible keys): a strip
        if causal:
            hidden = torch.arange(end)[None, :] > torch.arange(i, i + br)[:, None] + s_k - s_q
            s = s.masked_fill(hidden, NEG_INF)
        m = _safe(s.amax(-1, keepdim=True)) if end else torch.zeros(*s.shape[:-1], 1)
        e = torch.exp(s - m)
        l = e.sum(-1, keepdim=True)
        seen = l > 0
        outs.append(torch.where(seen, e @ v[..., :end, :] / torch.where(seen, l, 1.0), torch.zeros(())))
        lses.append(torch.where(seen, m + torch.log(l), torch.full_like(l, NEG_INF)).squeeze(-1))
    return torch.cat(outs, dim=-2), torch.cat(lses, dim=-1)


def _fa_full_mask_once(q, k, v, block_size=64, causal=False):
    """Tiles and an online softmax, but the causal mask built once for all (S_q, S_k) and sliced per tile."""
    s_q, s_k = q.size(-2), k.size(-2)
    visible = torch.ones(s_q, s_k, dtype=torch.bool).tril(s_k - s_q)  # (S_q, S_k): the full mask
    outs, lses = [], []
    for i in range(0, s_q, block_size):
        q_blk = q[..., i:i + block_size, :]
        m = torch.full(q_blk.shape[:-1], NEG_INF)
        l = torch.zeros(q_blk.shape[:-1])
        acc = torch.zeros(*q_blk.shape[:-1], v.size(-1))
        for j in range(0, s_k, block_size):
            s = q_blk @ k[..., j:j + block_size, :].transpose(-2, -1) / math.sqrt(q.size(-1))
            if causal:
                s = s.masked_fill(~visible[i:i + block_size, j:j + block_size], NEG_INF)
            m_new = torch.maximum(m, s.amax(-1))
            alpha, p = torch.exp(m - _safe(m_new)), torch.exp(s - _safe(m_new)[..., None])
            l = alpha * l + p.sum(-1)
            acc = alpha[..., None] * acc + p @ v[..., j:j + block_size, :]
            m = m_new
        seen = l > 0
        outs.append(torch.where(seen[..., None], acc / torch.where(seen, l, 1.0)[..., None], torch.zeros(())))
        lses.append(torch.where(seen, m + torch.log(l), torch.full_like(m, NEG_INF)))
    return torch.cat(outs, dim=-2), torch.cat(lses, dim=-1)


def _fa_tiles_kept(q, k, v, block_size=64, causal=False):
    """Right values, one tile at a time in size, but every (visible) tile of a query block is kept in a
    list and a plain two-pass softmax runs over the list: a strip, in pieces."""
    s_q, s_k = q.size(-2), k.size(-2)
    off = s_k - s_q
    outs, lses = [], []
    for i in range(0, s_q, block_size):
        qb = q[..., i:i + block_size, :]
        n = qb.size(-2)
        end = max(min(s_k, i + n + off), 0) if causal else s_k
        tiles = []
        for j in range(0, end, block_size):
            s = qb @ k[..., j:j + block_size, :].transpose(-2, -1) / math.sqrt(q.size(-1))
            if causal:
                s = s.masked_fill(torch.arange(j, j + s.size(-1))[None, :] > torch.arange(i, i + n)[:, None] + off,
                                  NEG_INF)
            tiles.append(s)
        m = torch.full(qb.shape[:-1], NEG_INF, dtype=q.dtype)
        for t in tiles:
            m = torch.maximum(m, t.amax(-1))
        ms = _safe(m)
        l = torch.zeros_like(m)
        acc = torch.zeros(*qb.shape[:-1], v.size(-1), dtype=q.dtype)
        for j, t in zip(range(0, end, block_size), tiles):
            p = torch.exp(t - ms[..., None])
            l, acc = l + p.sum(-1), acc + p @ v[..., j:j + block_size, :]
        seen = l > 0
        outs.append(torch.where(seen[..., None], acc / torch.where(seen, l, 1.0)[..., None], torch.zeros_like(acc)))
        lses.append(torch.where(seen, m + torch.log(torch.where(seen, l, 1.0)), torch.full_like(m, NEG_INF)))
    return torch.cat(outs, dim=-2), torch.cat(lses, dim=-1)


def _fa_all_tiles_then_skip(q, k, v, block_size=64, causal=False):
    """Every score tile of a query block computed first (the hidden ones too), then the online loop
    over the visible ones only."""
    s_q, s_k = q.size(-2), k.size(-2)
    off = s_k - s_q
    outs, lses = [], []
    for i in range(0, s_q, block_size):
        qb = q[..., i:i + block_size, :]
        n = qb.size(-2)
        tiles = [qb @ k[..., j:j + block_size, :].transpose(-2, -1) / math.sqrt(q.size(-1))
                 for j in range(0, s_k, block_size)]
        m = torch.full(qb.shape[:-1], NEG_INF, dtype=q.dtype)
        l = torch.zeros_like(m)
        acc = torch.zeros(*qb.shape[:-1], v.size(-1), dtype=q.dtype)
        for j, s in zip(range(0, s_k, block_size), tiles):
            if causal and j > i + n - 1 + off:
                break
            if causal:
                s = s.masked_fill(torch.arange(j, j + s.size(-1))[None, :] > torch.arange(i, i + n)[:, None] + off,
                                  NEG_INF)
            m_new = torch.maximum(m, s.amax(-1))
            alpha, p = torch.exp(m - _safe(m_new)), torch.exp(s - _safe(m_new)[..., None])
            l, acc, m = alpha * l + p.sum(-1), alpha[..., None] * acc + p @ v[..., j:j + block_size, :], m_new
        seen = l > 0
        outs.append(torch.where(seen[..., None], acc / torch.where(seen, l, 1.0)[..., None], torch.zeros_like(acc)))
        lses.append(torch.where(seen, m + torch.log(torch.where(seen, l, 1.0)), torch.full_like(m, NEG_INF)))
    return torch.cat(outs, dim=-2), torch.cat(lses, dim=-1)


def _fa_scale_by_d(q, k, v, block_size=64, causal=False):
    return _flash_variant(q, k, v, block_size, causal, scale=1.0 / q.size(-1))


NO_ACC_RESCALE = ("no rescale in the tiled attention: the output accumulator acc was not rescaled when the "
                  "running max grew; multiply acc by exp(m_old - m_new) (like l) before adding the new "
                  "block's p @ v.")
NO_L_RESCALE = ("the running sum l was not rescaled when the running max grew: multiply l by "
                "exp(m_old - m_new) (like acc) before adding the new block's row sums.")
FIRST_QUERY_SKIP = ("the causal block skipping tested the block's first query: a key block may be skipped only when "
                    "it starts after the last key that the block's *last* query sees, i + b_q - 1 + S_k - S_q (later "
                    "queries of the block see further); skipping after the first query's last key drops keys the "
                    "others need.")
RATIO_OF_EXPS_FLASH = ("the rescale factor was computed as exp(m_old) / exp(m_new): each exp overflows to inf once a "
                       "running max passes 88 (float32; 709 in float64) and inf / inf is NaN; compute it as one exp of "
                       "the difference, exp(m_old - m_new), which is at most 1.")
NAN_GRAD_NO_KEY = ("queries that see no key got NaN gradients (their output and lse are right): while a query's "
                   "running max is -inf, exp(s - m) and exp(m_old - m_new) are exp(-inf + inf) = NaN, and a NaN in "
                   "the branch a torch.where does not pick still reaches the backward pass (0 · NaN = NaN); subtract "
                   "a safe max (0 while m is -inf) and divide by a safe l (1 where l = 0).")
NAN_NO_KEY = ("a query that sees no key (causal with S_q > S_k) gave NaN: while its running max is -inf, "
              "exp(m_old - m_new) is exp(-inf + inf) = NaN and acc / l is 0 / 0; subtract a safe max and "
              "give such a query a zero output and lse = -inf.")

FLASH_MUTANTS = [
    Mutant("no_accumulator_rescale", NO_ACC_RESCALE, _switch(rescale_acc=False)),
    Mutant("no_running_sum_rescale", NO_L_RESCALE, _switch(rescale_l=False)),
    Mutant("no_rescale_at_all", NO_ACC_RESCALE, _switch(rescale_acc=False, rescale_l=False)),
    Mutant("no_final_division",
           "the output was not divided by the running sum l at the end: out = acc / l.",
           _switch(divide_by_l=False)),
    Mutant("lse_without_max",
           "lse was returned as log(l) without adding the running max back: lse = m + log(l).",
           _switch(lse_adds_max=False)),
    Mutant("top_left_causal",
           "the causal mask is top-left aligned (key j <= query i); with S_q ≠ S_k it must be bottom-right aligned: j <= i + S_k - S_q.",
           _switch(top_left=True)),
    Mutant("drops_tail_key_block",
           "the last, shorter key block was skipped (S_k // block_size blocks): loop over ceil(S_k / block_size) key blocks.",
           _switch(floor_key_blocks=True)),
    Mutant("causal_skip_off_by_one",
           "the causal block skipping is off by one: a key block starting exactly at the last visible key (i + S_k - S_q for the block's last query i) was skipped; skip only blocks that start after it.",
           _switch(skip_off_by_one=True)),
    Mutant("no_mask_inside_diagonal_block",
           "fully masked key blocks were skipped but the blocks on the diagonal were not masked: inside a block, set the scores of keys j > i + S_k - S_q to -inf.",
           _switch(mask_inside=False)),
    Mutant("nan_for_queries_that_see_no_key", NAN_NO_KEY, _switch(safe=False)),
    Mutant("nan_gradients_for_queries_that_see_no_key", NAN_GRAD_NO_KEY, _switch(safe=False, guarded_end=True)),
    Mutant("max_before_causal_mask",
           "the running max was taken over the scores before the causal mask: a masked (future) key with a "
           "large score then sets m, and exp(s - m) underflows to 0 for every visible key; mask first "
           "(scores of keys j > i + S_k - S_q set to -inf), then take the max.",
           _switch(max_before_mask=True)),
    Mutant("no_scaling", "the scores were not divided by sqrt(D): s = q_blk @ k_blkᵀ / sqrt(D).", _switch(scale=1.0)),
    Mutant("scale_by_d", "the scores were divided by D instead of sqrt(D).", _fa_scale_by_d),
    Mutant("causal_skip_tests_the_first_query", FIRST_QUERY_SKIP, _switch(skip_first_query=True)),
    Mutant("rescale_as_ratio_of_exps", RATIO_OF_EXPS_FLASH, _switch(ratio_of_exps=True)),
    Mutant("causal_without_block_skipping", NO_SKIP, _switch(skip_blocks=False)),
    Mutant("hidden_tiles_scored_then_skipped", NO_SKIP, _switch(score_hidden=True)),
    Mutant("quadratic_full_scores", FULL_SCORES, _fa_full_scores),
    Mutant("tiles_of_a_query_block_kept_then_plain_softmax", FULL_SCORES, _fa_tiles_kept),
    Mutant("every_tile_scored_first_hidden_ones_skipped_after", FULL_SCORES, _fa_all_tiles_then_skip),
    Mutant("query_strips_plain_softmax", FULL_SCORES, _fa_query_strips),
    Mutant("full_causal_mask_built_once", FULL_SCORES, _fa_full_mask_once),
    Mutant("causal_mask_hides_the_diagonal",
           "the causal mask is off by one: it hides key j = i + S_k - S_q, the query's own position; query i sees "
           "key j iff j <= i + S_k - S_q (mask with >, not >=).", _switch(hide_diagonal=True)),
    Mutant("running_max_starts_at_zero",
           "the running max m started at 0 instead of -inf: when every score of a query is far below 0 (around -200), "
           "m stays 0, every exp(s - m) underflows to 0 and the output is zeros (or NaN); start from m = -inf.",
           _switch(m0=0.0)),
]


def _flash_rescale(case: Case, c: float) -> Case:
    q, *rest = case.args
    return replace(case, args=(q * c, *rest))


def _flash_scale_names(case: Case) -> dict:
    q, k, v = case.args[:3]
    d = q.size(-1)
    return {"1/sqrt(D)": 1 / math.sqrt(d), "1 (no scaling)": 1.0, "1/D": 1 / d, "sqrt(D)": math.sqrt(d),
            "1/sqrt(D_v) (the size of v)": 1 / math.sqrt(v.size(-1)),
            "1/sqrt(block_size)": 1 / math.sqrt(case.kwargs.get("block_size", 64))}


def _v_flash_exp2_inplace(q, k, v, block_size=64, causal=False):
    """Written differently: preallocated outputs, in-place updates, a where-mask, exp2."""
    s_q, s_k, d = q.size(-2), k.size(-2), q.size(-1)
    out = q.new_zeros(*q.shape[:-1], v.size(-1))
    lse = q.new_full(q.shape[:-1], NEG_INF)
    log2e = 1.0 / math.log(2.0)
    for i in range(0, s_q, block_size):
        qi = q[..., i:i + block_size, :] * (log2e / math.sqrt(d))  # base-2 scores
        n = qi.size(-2)
        m = qi.new_full(qi.shape[:-1], NEG_INF)
        l = qi.new_zeros(qi.shape[:-1])
        acc = qi.new_zeros(*qi.shape[:-1], v.size(-1))
        last = i + n - 1 + s_k - s_q
        for j in range(0, s_k, block_size):
            if causal and j > last:
                break
            s = qi @ k[..., j:j + block_size, :].mT
            if causal:
                qpos = torch.arange(i, i + n)[:, None] + s_k - s_q
                kpos = torch.arange(j, j + s.size(-1))[None, :]
                s = torch.where(kpos <= qpos, s, NEG_INF)
            m_new = torch.maximum(m, s.amax(-1))
            shift = torch.where(torch.isfinite(m_new), m_new, 0.0)
            p = torch.exp2(s - shift[..., None])
            corr = torch.exp2(m - shift)
            l.mul_(corr).add_(p.sum(-1))
            acc.mul_(corr[..., None]).add_(p @ v[..., j:j + block_size, :])
            m = m_new
        ok = l > 0
        out[..., i:i + n, :] = torch.where(ok[..., None], acc / l.clamp_min(1e-30)[..., None], 0.0)
        lse[..., i:i + n] = torch.where(ok, (m + torch.log2(l.clamp_min(1e-30))) * math.log(2.0), NEG_INF)
    return out, lse


def _v_flash_float64_einsum(q, k, v, block_size=64, causal=False):
    """float64 inside, einsum tiles, the causal horizon computed per query block, lists of outputs."""
    dtype = q.dtype
    q, k, v = q.double(), k.double(), v.double()
    s_q, s_k = q.size(-2), k.size(-2)
    outs, lses = [], []
    for i in range(0, s_q, block_size):
        qi = q[..., i:i + block_size, :] / q.size(-1) ** 0.5
        n = qi.size(-2)
        horizon = min(s_k, i + n + s_k - s_q) if causal else s_k  # keys past it are masked for every row
        m = torch.full(qi.shape[:-1], NEG_INF, dtype=torch.float64)
        l = torch.zeros_like(m)
        acc = torch.zeros(*qi.shape[:-1], v.size(-1), dtype=torch.float64)
        for j in range(0, max(horizon, 0), block_size):
            s = torch.einsum("...qd,...kd->...qk", qi, k[..., j:j + block_size, :])
            if causal:
                allowed = torch.arange(j, j + s.size(-1))[None, :] <= torch.arange(i, i + n)[:, None] + s_k - s_q
                s = s.masked_fill(~allowed, NEG_INF)
            m_new = torch.maximum(m, s.amax(-1))
            ref_m = torch.nan_to_num(m_new, neginf=0.0)
            p = torch.exp(s - ref_m[..., None])
            a = torch.exp(m - ref_m)
            l = a * l + p.sum(-1)
            acc = a[..., None] * acc + torch.einsum("...qk,...kd->...qd", p, v[..., j:j + block_size, :])
            m = m_new
        empty = l == 0
        outs.append(torch.where(empty[..., None], 0.0, acc / torch.where(empty, 1.0, l)[..., None]))
        lses.append(torch.where(empty, NEG_INF, m + torch.log(torch.where(empty, 1.0, l))))
    return torch.cat(outs, -2).to(dtype), torch.cat(lses, -1).to(dtype)


def _v_flash_key_blocks_outer(q, k, v, block_size=64, causal=False):
    """FlashAttention-1's loop order: key blocks outside, query blocks inside, state for every query."""
    s_q, s_k = q.size(-2), k.size(-2)
    off = s_k - s_q
    m = torch.full(q.shape[:-1], NEG_INF, dtype=q.dtype)  # (..., S_q)
    l = torch.zeros_like(m)
    acc = torch.zeros(*q.shape[:-1], v.size(-1), dtype=q.dtype)  # (..., S_q, D_v)
    for j in range(0, s_k, block_size):
        kj, vj = k[..., j:j + block_size, :], v[..., j:j + block_size, :]
        for i in range(0, s_q, block_size):
            n = min(block_size, s_q - i)
            if causal and j > i + n - 1 + off:  # no query of this block sees key j or later
                continue
            s = q[..., i:i + n, :] @ kj.transpose(-2, -1) / math.sqrt(q.size(-1))
            if causal:
                hidden = torch.arange(j, j + kj.size(-2))[None, :] > torch.arange(i, i + n)[:, None] + off
                s = s.masked_fill(hidden, NEG_INF)
            m_old = m[..., i:i + n]
            m_new = torch.maximum(m_old, s.amax(-1))
            safe = torch.where(m_new == NEG_INF, torch.zeros_like(m_new), m_new)
            alpha = torch.exp(m_old - safe)
            p = torch.exp(s - safe[..., None])
            l = torch.cat([l[..., :i], alpha * l[..., i:i + n] + p.sum(-1), l[..., i + n:]], dim=-1)
            acc = torch.cat([acc[..., :i, :], alpha[..., None] * acc[..., i:i + n, :] + p @ vj,
                             acc[..., i + n:, :]], dim=-2)
            m = torch.cat([m[..., :i], m_new, m[..., i + n:]], dim=-1)
    seen = l > 0
    out = torch.where(seen[..., None], acc / torch.where(seen, l, 1.0)[..., None], torch.zeros_like(acc))
    return out, torch.where(seen, m + torch.log(torch.where(seen, l, 1.0)), NEG_INF)


FLASH_EXERCISE = Exercise(
    name="flash_attention",
    reference=ref.flash_attention,
    make_cases=_flash_cases,
    mutants=FLASH_MUTANTS,
    variants=[Variant("exp2_inplace_preallocated", _v_flash_exp2_inplace),
              Variant("float64_einsum", _v_flash_float64_einsum),
              Variant("key_blocks_outer_fa1_order", _v_flash_key_blocks_outer, demo=True)],
    output_names=("out", "lse"),
    rescale=_flash_rescale,
    scale_names=_flash_scale_names,
    contract=Contract("""Attention computed tile by tile with an online softmax, never building the S_q × S_k scores.

    q: (..., S_q, D)   k: (..., S_k, D)   v: (..., S_k, D_v)   block_size: int   causal: bool
    Returns out (..., S_q, D_v) = softmax(q kᵀ / sqrt(D)) v and
            lse (..., S_q) = logsumexp over the keys of the scaled (masked) scores.
    For each block of block_size queries, visit the blocks of block_size keys in order, keeping
    per query a running max m, a running sum l and an unnormalised output acc; when m grows,
    rescale l and acc by exp(m_old − m_new); at the end out = acc / l, lse = m + log(l).
    causal=True is bottom-right aligned (query i sees key j iff j ≤ i + S_k − S_q), and the key
    blocks that no query of the block can see are skipped.
    A query that sees no key (S_q > S_k with causal) gets a zero output, lse = -inf and zero
    gradients (no NaN, in the forward pass or the backward one). Any finite score is allowed.
    """, forbid=(SOFTMAX, SDPA, MHA), budgets=(FLASH_MEMORY, FLASH_WORK), grad="q, k and v, through out and lse"),
)
check_flash_attention = register(FLASH_EXERCISE)
