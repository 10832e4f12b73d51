"""Chapters 11-13: the rules their prompts state (issue 16 §1, §5), with the verdict and message
each answer must get.

- elu_feature_map and apply_rope: "same dtype as x" is held (the comparison alone ignores floating
  dtypes); elu_feature_map has |x| beyond float32's and float64's exp range;
- causal_linear_attention: an in-place state update in the RNN loop is named;
- online_softmax and flash_attention: rows whose scores are all far below 0 (a running max that
  starts at 0 fails there);
- flash_attention: only one tile of scores may exist, causal and non-causal: a query block
  against all keys (a strip) and a full causal mask fail; a tile (and the FA1 loop order) passes.
"""
import math

import pytest
import torch
import torch.nn.functional as F

from utils._guard import unguarded
from utils.checks import EXERCISES, CheckFailure
from utils.checks._ch11 import EXP_EVERYWHERE, INPLACE_GRAD
from utils.checks._ch13 import FULL_SCORES, MAX_FROM_ZERO
from utils.checks._core import run_check

OTHER_DTYPE = "the output keeps the floating inputs' dtype"


def _verdict(name, impl):
    try:
        run_check(EXERCISES[name], impl, quiet=True)
    except CheckFailure as err:
        return str(err)
    return None


# ---------------------------------------------------------------- 11: elu_feature_map
def test_elu_exp_everywhere_is_rejected_and_named():
    msg = _verdict("elu_feature_map", lambda x: torch.exp(x) * (x <= 0) + (x + 1) * (x > 0))
    assert msg and "exp range" in msg and EXP_EVERYWHERE in msg


@pytest.mark.parametrize("cast", [torch.float64, torch.float32])
def test_elu_other_dtype_is_rejected(cast):
    msg = _verdict("elu_feature_map", lambda x: (F.elu(x) + 1).to(cast))
    assert msg and OTHER_DTYPE in msg


def test_elu_where_with_clamp_passes():
    assert _verdict("elu_feature_map", lambda x: torch.where(x > 0, x + 1, torch.exp(x.clamp(max=0)))) is None


# ---------------------------------------------------------------- 12: apply_rope
@pytest.mark.parametrize("cast", [torch.float64, torch.float32])
def test_rope_other_dtype_is_rejected(cast):
    ref = unguarded(EXERCISES["apply_rope"].reference)
    msg = _verdict("apply_rope", lambda x, positions=None, base=10000.0: ref(x, positions, base).to(cast))
    assert msg and OTHER_DTYPE in msg


# ---------------------------------------------------------------- 11: causal_linear_attention
def _rnn_in_place(q, k, v, eps=1e-6):
    fq, fk = F.elu(q) + 1, F.elu(k) + 1
    state = torch.zeros(*q.shape[:-2], q.shape[-1], v.shape[-1], dtype=q.dtype)
    z = torch.zeros(*q.shape[:-2], q.shape[-1], dtype=q.dtype)
    out = []
    for i in range(q.shape[-2]):
        state += torch.einsum("...d,...e->...de", fk[..., i, :], v[..., i, :])
        z += fk[..., i, :]
        out.append(torch.einsum("...d,...de->...e", fq[..., i, :], state) / ((fq[..., i, :] * z).sum(-1, keepdim=True) + eps))
    return torch.stack(out, -2)


def test_in_place_state_update_is_named():
    msg = _verdict("causal_linear_attention", _rnn_in_place)
    assert msg and "gradients (float64)" in msg and INPLACE_GRAD in msg


# ---------------------------------------------------------------- 13: online_softmax, flash_attention
def _online_softmax_from_zero(x, block_size):
    m = torch.zeros(x.shape[:-1], dtype=x.dtype)  # the mistake: 0, not -inf
    l = torch.zeros(x.shape[:-1], dtype=x.dtype)
    for s in range(0, x.size(-1), block_size):
        blk = x[..., s:s + block_size]
        m_new = torch.maximum(m, blk.amax(-1))
        shift = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        l = l * torch.exp(m - shift) + torch.exp(blk - shift[..., None]).sum(-1)
        m = m_new
    out = torch.exp(x - m[..., None]) / torch.where(l > 0, l, torch.ones_like(l))[..., None]
    return torch.where(l[..., None] > 0, out, torch.zeros_like(out))


def test_online_softmax_max_from_zero_is_rejected_and_named():
    x = torch.tensor([[-200.0, -201.0, -199.0, -202.0]])
    expected = torch.softmax(x, -1)
    assert torch.allclose(expected, torch.tensor([[0.2369, 0.0871, 0.6439, 0.0321]]), atol=1e-4)
    assert _online_softmax_from_zero(x, 2).abs().max() == 0  # all zeros: the case the check now has
    msg = _verdict("online_softmax", _online_softmax_from_zero)
    assert msg and "far below 0" in msg and MAX_FROM_ZERO in msg


def _strips(q, k, v, block_size=64, causal=False):
    """A query block against all visible keys, a plain softmax written by hand."""
    s_q, s_k = q.size(-2), k.size(-2)
    outs, lses = [], []
    for i in range(0, s_q, block_size):
        qb = q[..., i:i + block_size, :]
        s = qb @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (..., b, S_k): a strip
        if causal:
            hidden = torch.arange(s_k)[None, :] > torch.arange(i, i + qb.size(-2))[:, None] + s_k - s_q
            s = s.masked_fill(hidden, float("-inf"))
        m = s.amax(-1, keepdim=True)
        m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
        e = torch.exp(s - m)
        l = e.sum(-1, keepdim=True)
        ok = l > 0
        outs.append(torch.where(ok, e @ v / torch.where(ok, l, 1.0), 0.0))
        lses.append(torch.where(ok, m + torch.log(torch.where(ok, l, 1.0)), float("-inf")).squeeze(-1))
    return torch.cat(outs, -2), torch.cat(lses, -1)


def _full_mask_once(q, k, v, block_size=64, causal=False):
    """The reference's tiles, with a full (S_q, S_k) causal mask built once and sliced."""
    s_q, s_k = q.size(-2), k.size(-2)
    full = torch.ones(s_q, s_k, dtype=torch.bool).tril(s_k - s_q) if causal else None
    outs, lses = [], []
    for i in range(0, s_q, block_size):
        qb = q[..., i:i + block_size, :] / math.sqrt(q.size(-1))
        m = torch.full(qb.shape[:-1], float("-inf"), dtype=q.dtype)
        l = torch.zeros_like(m)
        acc = torch.zeros(*qb.shape[:-1], v.size(-1), dtype=q.dtype)
        for j in range(0, s_k, block_size):
            s = qb @ k[..., j:j + block_size, :].transpose(-2, -1)
            if causal:
                s = s.masked_fill(~full[i:i + block_size, j:j + block_size], float("-inf"))
            m_new = torch.maximum(m, s.amax(-1))
            sh = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
            a, p = torch.exp(m - sh), torch.exp(s - sh[..., None])
            l, acc, m = a * l + p.sum(-1), a[..., None] * acc + p @ v[..., j:j + block_size, :], m_new
        ok = l > 0
        outs.append(torch.where(ok[..., None], acc / torch.where(ok, l, 1.0)[..., None], 0.0))
        lses.append(torch.where(ok, m + torch.log(torch.where(ok, l, 1.0)), float("-inf")))
    return torch.cat(outs, -2), torch.cat(lses, -1)


def test_flash_budget_admits_a_tile_and_rejects_strips_and_full_masks():
    ex = EXERCISES["flash_attention"]
    budgeted = [c for c in ex.make_cases(ex.default_seed) if c.budget is not None and c.budget.numel]
    assert sorted(c.kwargs.get("causal", False) for c in budgeted) == [False, False, True, True, True]  # + the probe
    for c in budgeted:  # a tile is a quarter of the limit, a strip at least 4 times it: far apart
        block, s_k = c.kwargs["block_size"], c.args[1].size(-2)
        assert c.budget.numel == 4 * block * block and block * s_k >= 4 * c.budget.numel
    msg = _verdict("flash_attention", _strips)
    assert msg and "over its budget" in msg and "65,536 elements" in msg and FULL_SCORES in msg
    msg = _verdict("flash_attention", _full_mask_once)
    assert msg and "causal=True" in msg and "(1024, 1024)" in msg and FULL_SCORES in msg
    for v in ex.variants:  # every accepted loop order and precision fits the budget
        assert _verdict("flash_attention", v.impl) is None, v.name


def test_flash_max_from_zero_is_named():
    m = next(m for m in EXERCISES["flash_attention"].mutants if m.name == "running_max_starts_at_zero")
    msg = _verdict("flash_attention", m.impl)
    assert msg and "far below 0" in msg and m.hint in msg


def test_every_exercise_has_one_demo_variant():
    for name in ("elu_feature_map", "linear_attention", "causal_linear_attention", "rope_angles", "apply_rope",
                 "online_softmax", "flash_attention"):
        assert sum(v.demo for v in EXERCISES[name].variants) == 1, name


# ---------------------------------------------------------------- 13: what issue 24 added
def test_online_softmax_reads_block_by_block():
    """The order of the reads is followed through every op: a global max first, or a max pass then a
    sum pass over the blocks, fails with its sentence; correct answers written other ways pass."""
    from utils.checks._ch13 import TWO_PASSES, WHOLE_ROW

    ex = EXERCISES["online_softmax"]
    for name, hint in (("global_max_then_one_pass", WHOLE_ROW), ("max_pass_then_sum_pass", TWO_PASSES)):
        msg = _verdict("online_softmax", next(m.impl for m in ex.mutants if m.name == name))
        assert msg and "1 of" in msg and "the output is right" in msg and hint in msg, msg

    def padded_blocks(x, block_size):  # F.pad, a reshape into blocks, one block per step: in order
        n = x.size(-1)
        nb = -(-n // block_size)
        xb = F.pad(x, (0, nb * block_size - n), value=float("-inf")).reshape(*x.shape[:-1], nb, block_size)
        m, l = x.new_full(x.shape[:-1], float("-inf")), x.new_zeros(x.shape[:-1])
        for t in range(nb):
            m_new = torch.maximum(m, xb[..., t, :].max(dim=-1).values)
            shift = torch.where(torch.isinf(m_new), 0.0, m_new)
            l = l * torch.exp(m - shift) + (xb[..., t, :] - shift[..., None]).exp().sum(-1)
            m = m_new
        shift = torch.where(torch.isinf(m), 0.0, m)
        return torch.where(l[..., None] > 0, torch.exp(x - shift[..., None]) / torch.where(l > 0, l, 1.0)[..., None],
                           0.0)

    def lse_float64(x, block_size):  # float64 inside, torch.split, pass 2 as exp(x - lse)
        xd = x.double()
        m = torch.full(x.shape[:-1], float("-inf"), dtype=torch.float64)
        l = torch.zeros_like(m)
        for blk in torch.split(xd, block_size, dim=-1):
            m_new = torch.maximum(m, blk.amax(-1))
            safe = torch.nan_to_num(m_new, neginf=0.0)
            l = l * torch.exp(m - safe) + torch.exp(blk - safe[..., None]).sum(-1)
            m = m_new
        out = torch.exp(xd - (torch.nan_to_num(m, neginf=0.0) + torch.log(l))[..., None])
        return torch.nan_to_num(out, nan=0.0).to(x.dtype)

    assert _verdict("online_softmax", padded_blocks) is None
    assert _verdict("online_softmax", lse_float64) is None


def test_online_softmax_and_flash_take_scores_far_below_minus_1e9():
    for name, mutant in (("online_softmax", "running_max_starts_finite"),):
        m = next(m for m in EXERCISES[name].mutants if m.name == mutant)
        assert _verdict(name, m.impl)

    def starts_at_minus_1e9(x, block_size):
        n = x.size(-1)
        m = torch.full(x.shape[:-1], -1e9, dtype=x.dtype)
        l = torch.zeros(x.shape[:-1], dtype=x.dtype)
        for s in range(0, n, block_size):
            blk = x[..., s:s + block_size]
            m_new = torch.maximum(m, blk.amax(-1))
            l = l * torch.exp(m - m_new) + torch.exp(blk - m_new[..., None]).sum(-1)
            m = m_new
        out = torch.exp(x - m[..., None]) / l[..., None]
        return torch.where(l[..., None] > 0, out, 0.0)

    msg = _verdict("online_softmax", starts_at_minus_1e9)
    assert msg and "far below -1e9" in msg


def test_flash_live_budget_rejects_tiles_kept_in_a_list():
    """Tiles kept in a list are no tensor above one tile, but a strip alive at once: the live budget
    (8·b² + 2·(S_q + S_k)·(D + D_v) elements) rejects them, at both sizes and causal or not; every
    accepted answer stays well below it."""
    from utils.checks._ch13 import _live_limit

    ex = EXERCISES["flash_attention"]
    live = [c for c in ex.make_cases(ex.default_seed) if c.label.startswith("budget at") and c.run is not None]
    assert len({(c.args[0].size(-2), c.args[1].size(-2)) for c in live}) >= 2
    for name in ("tiles_of_a_query_block_kept_then_plain_softmax", "every_tile_scored_first_hidden_ones_skipped_after"):
        msg = _verdict("flash_attention", next(m.impl for m in ex.mutants if m.name == name))
        assert msg and "alive at once" not in msg.splitlines()[0] and "the tensors it holds at once" in msg, msg
        assert FULL_SCORES in msg
    for c in live:
        s_q, s_k, b = c.args[0].size(-2), c.args[1].size(-2), c.kwargs["block_size"]
        assert b * s_k >= 1.3 * _live_limit(s_q, s_k, b, c.args[0].size(-1), c.args[2].size(-1))


def test_flash_gradients_of_queries_that_see_no_key_are_zero():
    """The `_safe` clamp of the reference and its `l = 1` for unseen rows matter only in the backward
    pass: a float64 gradient case with a query block that straddles the causal horizon holds them,
    and names the mistake (a torch.where guard alone leaves NaN in the branch it does not pick)."""
    from utils.checks._ch13 import NAN_GRAD_NO_KEY

    ex = EXERCISES["flash_attention"]
    grads = [c for c in ex.make_cases(ex.default_seed) if c.grad]
    assert any(c.kwargs.get("causal") and c.args[0].size(-2) > c.args[1].size(-2) for c in grads)
    m = next(m for m in ex.mutants if m.name == "nan_gradients_for_queries_that_see_no_key")
    msg = _verdict("flash_attention", m.impl)
    assert msg and "gradients (float64), causal, S_q > S_k" in msg and "NaN" in msg and NAN_GRAD_NO_KEY in msg


# ---------------------------------------------------------------- 11: what issue 24 added
def test_elu_gradient_past_exps_range_is_compared():
    """φ = torch.where(x > 0, x + 1, torch.exp(x)) has the right values everywhere but a NaN gradient
    past exp's range (0 · inf in the branch where does not pick): a float64 gradient case at
    |x| ≥ 100 and beyond 709 rejects it and names it; exp(x.clamp(max=0)) passes."""
    from utils.checks._ch11 import WHERE_EXP_EVERYWHERE

    msg = _verdict("elu_feature_map", lambda x: torch.where(x > 0, x + 1, torch.exp(x)))
    assert msg and "past exp's range" in msg and "NaN" in msg and WHERE_EXP_EVERYWHERE in msg
    assert _verdict("elu_feature_map", lambda x: torch.where(x > 0, x + 1, torch.exp(x.clamp(max=0)))) is None


def test_linear_attention_work_is_counted_at_two_sizes():
    """Row blocks of φ(q)φ(k)ᵀ hold no tensor above the memory budget, and a quadratic path taken only
    for short inputs never meets the S = 512 and 2048 memory cases: the work budget at S = 16, 64 and 512
    (4·S·D·(D_v + 1) multiply-adds) rejects both."""
    from utils.checks._ch11 import QUADRATIC_WORK, _linear, _quadratic

    ex = EXERCISES["linear_attention"]
    work = [c for c in ex.make_cases(ex.default_seed) if c.budget is not None and c.budget.work]
    assert sorted({c.args[0].size(-2) for c in work}) == [16, 64, 512]

    def short_inputs_quadratic(q, k, v, eps=1e-6):
        return _quadratic(q, k, v, eps) if q.size(-2) <= 256 else _linear(q, k, v, eps)

    for impl in (next(m.impl for m in ex.mutants if m.name == "quadratic_in_row_blocks_of_16"), short_inputs_quadratic):
        msg = _verdict("linear_attention", impl)
        assert msg and "multiply-adds" in msg and QUADRATIC_WORK in msg, msg
