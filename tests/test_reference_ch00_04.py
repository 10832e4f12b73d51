"""The references of chapters 00, 01, 02 and 04 agree with PyTorch and have the promised properties.

Seeded and small: the whole file runs in a few seconds on a CPU.
"""
import itertools
import math
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.nn.attention.bias import causal_lower_right

from utils import reference as ref

# float32 against PyTorch's own float32 kernels: the same math in a different order.
ATOL, RTOL = 1e-6, 1e-5


def gen(seed):
    return torch.Generator().manual_seed(seed)


def randn(*shape, seed=0, scale=1.0, dtype=torch.float32):
    return torch.randn(*shape, generator=gen(seed), dtype=dtype) * scale


# ============================================================================== chapter 00
SHAPES_AND_DIMS = [((7,), -1), ((7,), 0), ((3, 5), -1), ((3, 5), 0), ((3, 5), 1), ((2, 4, 3), 1),
                   ((2, 4, 3), -2), ((2, 3, 4, 5), 2), ((2, 3, 4, 5), -4), ((3, 1), -1), ((1,), 0)]


@pytest.mark.parametrize("shape,dim", SHAPES_AND_DIMS)
def test_softmax_matches_torch(shape, dim):
    x = randn(*shape, seed=len(shape) * 10 + dim, scale=3.0)
    torch.testing.assert_close(ref.softmax(x, dim=dim), torch.softmax(x, dim=dim), atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("shape,dim", SHAPES_AND_DIMS)
def test_logsumexp_matches_torch(shape, dim):
    x = randn(*shape, seed=len(shape) * 10 + dim, scale=3.0)
    out = ref.logsumexp(x, dim=dim)
    expected = torch.logsumexp(x, dim=dim)
    assert out.shape == expected.shape  # the reduced dim is gone (no keepdim)
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=RTOL)


def test_default_dim_is_last():
    x = randn(3, 4, 5, seed=1)
    torch.testing.assert_close(ref.softmax(x), torch.softmax(x, dim=-1))
    torch.testing.assert_close(ref.logsumexp(x), torch.logsumexp(x, dim=-1))


@pytest.mark.parametrize("offset", [1000.0, -1000.0, 0.0])
def test_large_inputs_do_not_overflow(offset):
    x = offset + randn(4, 6, seed=2, scale=1000.0 if offset == 0.0 else 1.0)
    s = ref.softmax(x, dim=-1)
    assert torch.isfinite(s).all()
    torch.testing.assert_close(s, torch.softmax(x.double(), dim=-1).float(), atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(s.sum(-1), torch.ones(4))
    lse = ref.logsumexp(x, dim=-1)
    assert torch.isfinite(lse).all()
    torch.testing.assert_close(lse, torch.logsumexp(x.double(), dim=-1).float(), atol=1e-3, rtol=1e-6)


def test_rows_on_very_different_scales():
    x = torch.tensor([[0.0], [-300.0], [300.0], [-600.0]]) + randn(4, 5, seed=3)
    torch.testing.assert_close(ref.softmax(x, dim=-1), torch.softmax(x, dim=-1))
    torch.testing.assert_close(ref.softmax(x, dim=0), torch.softmax(x, dim=0))
    torch.testing.assert_close(ref.logsumexp(x, dim=-1), torch.logsumexp(x, dim=-1))


def test_minus_inf_entries_get_zero_weight():
    x = randn(3, 5, seed=4)
    x[0, 1] = x[1, 0] = x[1, 4] = x[2, 2] = float("-inf")
    s = ref.softmax(x, dim=-1)
    torch.testing.assert_close(s, torch.softmax(x, dim=-1))
    assert (s[x == float("-inf")] == 0).all()
    torch.testing.assert_close(ref.logsumexp(x, dim=-1), torch.logsumexp(x, dim=-1))


def test_dtype_is_kept():
    x = randn(2, 3, seed=5, dtype=torch.float64)
    assert ref.softmax(x).dtype == torch.float64
    assert ref.logsumexp(x).dtype == torch.float64


@settings(max_examples=30, deadline=None, derandomize=True, database=None)
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=4), data=st.data(),
       seed=st.integers(0, 2**16), scale=st.sampled_from([0.1, 1.0, 30.0, 300.0]))
def test_softmax_and_logsumexp_properties(shape, data, seed, scale):
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = randn(*shape, seed=seed, scale=scale, dtype=torch.float64)
    s = ref.softmax(x, dim=dim)
    assert s.shape == x.shape and (s >= 0).all()
    torch.testing.assert_close(s.sum(dim), torch.ones_like(x.sum(dim)))
    torch.testing.assert_close(ref.softmax(x + 123.0, dim=dim), s)  # shift invariance
    lse = ref.logsumexp(x, dim=dim)
    log_s = x - lse.unsqueeze(dim)  # log softmax = x - logsumexp
    torch.testing.assert_close(s, torch.exp(log_s))
    slack = 1e-12 * (1 + x.abs().amax(dim))
    assert (lse >= x.amax(dim) - slack).all() and (lse <= x.amax(dim) + math.log(x.shape[dim]) + slack).all()


def test_gradcheck_softmax_and_logsumexp():
    x = randn(3, 4, seed=6, dtype=torch.float64).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: ref.softmax(t, dim=0), (x,))
    assert torch.autograd.gradcheck(lambda t: ref.logsumexp(t, dim=-1), (x,))


def test_slice_entirely_minus_inf():
    """The contract: softmax gives NaN there (as torch.softmax); logsumexp may give -inf (torch's)
    or NaN (the reference's m + log(sum(exp(x - m))) with m = -inf)."""
    x = randn(3, 4, seed=7)
    x[1] = float("-inf")
    s = ref.softmax(x, dim=-1)
    assert torch.isnan(s[1]).all() and torch.isnan(torch.softmax(x, dim=-1)[1]).all()
    torch.testing.assert_close(s[[0, 2]], torch.softmax(x[[0, 2]], dim=-1))
    lse = ref.logsumexp(x, dim=-1)
    assert torch.isnan(lse[1]) or lse[1] == float("-inf")
    assert torch.logsumexp(x, dim=-1)[1] == float("-inf")
    torch.testing.assert_close(lse[[0, 2]], torch.logsumexp(x[[0, 2]], dim=-1))


def test_gradients_with_minus_inf_entries_are_finite():
    x = randn(3, 5, seed=8, dtype=torch.float64)
    x[0, :2] = x[2, 4] = float("-inf")
    for f in (ref.softmax, ref.logsumexp):
        t = x.clone().requires_grad_()
        (f(t, dim=-1) * randn(*f(x, dim=-1).shape, seed=9, dtype=torch.float64)).sum().backward()
        assert torch.isfinite(t.grad).all() and (t.grad[x == float("-inf")] == 0).all()


# ============================================================================== chapter 01
QKV_SHAPES = [((), 4, 4, 6, 6), ((2,), 3, 7, 5, 2), ((2, 3), 5, 4, 8, 3), ((1,), 1, 1, 3, 4), ((3,), 1, 6, 2, 5)]


@pytest.mark.parametrize("lead,s_q,s_k,d,d_v", QKV_SHAPES)
def test_dot_product_score_matches_einsum(lead, s_q, s_k, d, d_v):
    q, k = randn(*lead, s_q, d, seed=7), randn(*lead, s_k, d, seed=8)
    scores = ref.dot_product_score(q, k)
    assert scores.shape == (*lead, s_q, s_k)
    torch.testing.assert_close(scores, torch.einsum("...qd,...kd->...qk", q, k), atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("lead,s_q,s_k,d,d_v", QKV_SHAPES)
@pytest.mark.parametrize("masked", [False, True])
def test_attention_pooling_matches_sdpa(lead, s_q, s_k, d, d_v, masked):
    """With the (un)scaled dot product as score_fn, attention pooling is PyTorch's SDPA."""
    q, k, v = randn(*lead, s_q, d, seed=9), randn(*lead, s_k, d, seed=10), randn(*lead, s_k, d_v, seed=11)
    mask = None
    if masked:
        mask = torch.rand(*lead, s_q, s_k, generator=gen(12)) > 0.4
        mask[..., 0] = True  # no fully masked row: SDPA would give NaN there
    ctx, w = ref.attention_pooling(q, k, v, ref.dot_product_score, mask=mask)
    assert ctx.shape == (*lead, s_q, d_v) and w.shape == (*lead, s_q, s_k)
    torch.testing.assert_close(ctx, F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0),
                               atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(w.sum(-1), torch.ones(*lead, s_q))
    scaled = lambda a, b: ref.dot_product_score(a, b) / math.sqrt(d)  # noqa: E731
    ctx, _ = ref.attention_pooling(q, k, v, scaled, mask=mask)
    torch.testing.assert_close(ctx, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), atol=1e-5, rtol=1e-4)


def test_attention_pooling_uses_score_fn():
    q, k, v = randn(2, 3, 4, seed=13), randn(2, 5, 4, seed=14), randn(2, 5, 3, seed=15)
    zeros = lambda a, b: torch.zeros(*a.shape[:-1], b.size(-2))  # noqa: E731
    ctx, w = ref.attention_pooling(q, k, v, zeros)
    torch.testing.assert_close(w, torch.full((2, 3, 5), 0.2))  # equal scores: a plain average
    torch.testing.assert_close(ctx, v.mean(-2, keepdim=True).expand(2, 3, 3))
    W = randn(4, 4, seed=16)
    bilinear = lambda a, b: a @ W @ b.transpose(-2, -1)  # noqa: E731
    ctx, w = ref.attention_pooling(q, k, v, bilinear)
    torch.testing.assert_close(w, torch.softmax(q @ W @ k.transpose(-2, -1), dim=-1))
    torch.testing.assert_close(ctx, w @ v)


def test_attention_pooling_fully_masked_row_is_zero():
    q, k, v = randn(2, 4, 3, seed=17), randn(2, 5, 3, seed=18), randn(2, 5, 2, seed=19)
    mask = torch.ones(2, 4, 5, dtype=torch.bool)
    mask[0, 1] = False
    mask[1, :, 3:] = False
    ctx, w = ref.attention_pooling(q, k, v, ref.dot_product_score, mask=mask)
    assert not torch.isnan(ctx).any() and not torch.isnan(w).any()
    assert (w[0, 1] == 0).all() and (ctx[0, 1] == 0).all()
    assert (w[1, :, 3:] == 0).all()
    torch.testing.assert_close(w[1].sum(-1), torch.ones(4))


def test_attention_pooling_gradcheck():
    q, k, v = (randn(1, s, 2, seed=20 + s, dtype=torch.float64).requires_grad_() for s in (2, 4, 4))
    mask = torch.tensor([[True, True, False, True]])  # (1, S_k), broadcast over queries
    assert torch.autograd.gradcheck(
        lambda a, b, c: ref.attention_pooling(a, b, c, ref.dot_product_score, mask=mask), (q, k, v))


def test_attention_pooling_fully_masked_row_gradient_is_zero():
    """The check compares gradients with a fully masked row: the reference sends none through it."""
    q, k, v = (randn(2, s, 3, seed=40 + i, dtype=torch.float64).requires_grad_() for i, s in enumerate((4, 5, 5)))
    mask = torch.ones(2, 4, 5, dtype=torch.bool)
    mask[0, 1] = False
    ctx, w = ref.attention_pooling(q, k, v, ref.dot_product_score, mask=mask)
    (ctx.sum() + (w * randn(2, 4, 5, seed=45, dtype=torch.float64)).sum()).backward()
    assert torch.isfinite(q.grad).all() and (q.grad[0, 1] == 0).all()
    assert torch.isfinite(k.grad).all() and torch.isfinite(v.grad).all()


# ============================================================================== chapter 02
def additive_module(dq, dk, attn_dim, seed=0):
    torch.manual_seed(seed)
    m = ref.AdditiveAttention(dq, dk, attn_dim)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=gen(seed + p.numel())))
    return m


def test_additive_parameters():
    m = ref.AdditiveAttention(3, 5, 7)
    assert isinstance(m.W_q, nn.Linear) and isinstance(m.W_k, nn.Linear) and isinstance(m.w_v, nn.Linear)
    shapes = {name: tuple(p.shape) for name, p in m.state_dict().items()}
    assert shapes == {"W_q.weight": (7, 3), "W_k.weight": (7, 5), "w_v.weight": (1, 7)}  # no biases


def additive_by_loops(m, query, keys, values, mask=None):
    """The textbook formula, one (i, j) pair at a time."""
    B, S_q, _ = query.shape
    S_k = keys.size(1)
    scores = torch.empty(B, S_q, S_k, dtype=query.dtype)
    for b, i, j in itertools.product(range(B), range(S_q), range(S_k)):
        h = torch.tanh(m.W_q.weight @ query[b, i] + m.W_k.weight @ keys[b, j])  # (A,)
        scores[b, i, j] = m.w_v.weight[0] @ h
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return w @ values, w


@pytest.mark.parametrize("B,S_q,S_k,dq,dk,A,dv", [(2, 3, 5, 4, 6, 8, 3), (2, 4, 4, 3, 3, 5, 2),
                                                  (1, 1, 1, 2, 3, 4, 5), (3, 1, 6, 5, 2, 1, 4)])
@pytest.mark.parametrize("masked", [False, True])
def test_additive_matches_loops(B, S_q, S_k, dq, dk, A, dv, masked):
    m = additive_module(dq, dk, A, seed=B * 100 + S_q)
    q, k, v = randn(B, S_q, dq, seed=30), randn(B, S_k, dk, seed=31), randn(B, S_k, dv, seed=32)
    mask = None
    if masked:
        mask = torch.rand(B, S_q, S_k, generator=gen(33)) > 0.4
        mask[0, 0] = False  # one fully masked row
    with torch.no_grad():
        ctx, w = m(q, k, v, mask=mask)
        ctx_loop, w_loop = additive_by_loops(m, q, k, v, mask)
    assert ctx.shape == (B, S_q, dv) and w.shape == (B, S_q, S_k)
    torch.testing.assert_close(w, w_loop, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(ctx, ctx_loop, atol=1e-5, rtol=1e-4)
    if masked:
        assert (w[0, 0] == 0).all() and (ctx[0, 0] == 0).all()


def test_additive_is_attention_pooling_with_an_additive_score():
    m = additive_module(4, 3, 6, seed=1)
    q, k, v = randn(2, 3, 4, seed=34), randn(2, 5, 3, seed=35), randn(2, 5, 2, seed=36)
    mask = ref.padding_mask(torch.tensor([5, 2]), 5)  # (B, 1, S_k)

    def additive_score(query, keys):
        feats = torch.tanh(m.W_q(query).unsqueeze(2) + m.W_k(keys).unsqueeze(1))
        return m.w_v(feats).squeeze(-1)

    with torch.no_grad():
        got = m(q, k, v, mask=mask)
        expected = ref.attention_pooling(q, k, v, additive_score, mask=mask)
    torch.testing.assert_close(got, expected)


def test_additive_gradients():
    m = additive_module(3, 4, 5, seed=2).double()
    q, k, v = (randn(1, s, d, seed=37 + s, dtype=torch.float64).requires_grad_() for s, d in ((2, 3), (3, 4), (3, 2)))
    assert torch.autograd.gradcheck(lambda a, b, c: m(a, b, c), (q, k, v))
    ctx, _ = m(q, k, v)
    ctx.sum().backward()
    for name, p in m.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_additive_gradients_with_a_fully_masked_row_are_finite():
    m = additive_module(3, 4, 5, seed=3).double()
    q, k, v = randn(2, 3, 3, seed=46, dtype=torch.float64), randn(2, 4, 4, seed=47, dtype=torch.float64), \
        randn(2, 4, 2, seed=48, dtype=torch.float64)
    q.requires_grad_()
    mask = torch.ones(2, 3, 4, dtype=torch.bool)
    mask[1, 0] = False
    mask[0, 2, :3] = False  # leading keys masked
    ctx, w = m(q, k, v, mask=mask)
    (ctx.sum() + (w * randn(2, 3, 4, seed=49, dtype=torch.float64)).sum()).backward()
    assert torch.isfinite(q.grad).all() and (q.grad[1, 0] == 0).all()
    for name, p in m.named_parameters():
        assert torch.isfinite(p.grad).all(), name


# ============================================================================== chapter 04
@pytest.mark.parametrize("s_q,s_k", list(itertools.product(range(1, 9), range(1, 9))))
def test_causal_mask_matches_causal_lower_right(s_q, s_k):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch warns that s_q > s_k gives fully masked rows
        expected = causal_lower_right(s_q, s_k)._materialize()
    mask = ref.causal_mask(s_q, s_k)
    assert mask.dtype == torch.bool and mask.shape == (s_q, s_k)
    assert torch.equal(mask, expected)


def test_causal_mask_square_and_rule():
    for s in (1, 2, 5):
        assert torch.equal(ref.causal_mask(s), torch.ones(s, s, dtype=torch.bool).tril())
        assert torch.equal(ref.causal_mask(s, None), ref.causal_mask(s, s))
    s_q, s_k = 3, 7
    mask = ref.causal_mask(s_q, s_k)
    for i, j in itertools.product(range(s_q), range(s_k)):
        assert bool(mask[i, j]) == (j <= i + (s_k - s_q))
    assert mask[-1].all()  # the last query sees every key
    assert not ref.causal_mask(5, 3)[:2].any()  # s_q > s_k: the first s_q - s_k rows see nothing


def test_causal_mask_bad_sizes():
    assert ref.causal_mask(0, 4).shape == (0, 4)
    with pytest.raises(ValueError):
        ref.causal_mask(-1)
    with pytest.raises(ValueError):
        ref.causal_mask(3, -2)


def test_causal_attention_matches_sdpa():
    """masked_softmax(q kᵀ / sqrt(d), causal_mask) @ v is SDPA with PyTorch's lower-right causal bias."""
    for s_q, s_k in ((5, 5), (3, 7), (1, 6)):
        q, k, v = randn(2, 3, s_q, 4, seed=40), randn(2, 3, s_k, 4, seed=41), randn(2, 3, s_k, 5, seed=42)
        w = ref.masked_softmax(q @ k.transpose(-2, -1) / 2.0, ref.causal_mask(s_q, s_k))
        expected = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(s_q, s_k))
        torch.testing.assert_close(w @ v, expected, atol=1e-5, rtol=1e-4)
        if s_q == s_k:
            torch.testing.assert_close(w @ v, F.scaled_dot_product_attention(q, k, v, is_causal=True),
                                       atol=1e-5, rtol=1e-4)


def test_padding_mask():
    lengths = torch.tensor([3, 0, 5, 1])
    mask = ref.padding_mask(lengths, 5)
    assert mask.dtype == torch.bool and mask.shape == (4, 1, 5)
    for b, length in enumerate(lengths.tolist()):
        assert mask[b, 0].tolist() == [p < length for p in range(5)]
    assert not mask[1].any()  # length 0: all padding
    assert ref.padding_mask(torch.tensor([2, 2]), 2).all()


def test_padding_mask_with_sdpa():
    """A (B, 1, S_k) padding mask, given a head dim, is what SDPA's boolean attn_mask expects."""
    q, k, v = randn(3, 2, 4, 8, seed=43), randn(3, 2, 6, 8, seed=44), randn(3, 2, 6, 3, seed=45)
    mask = ref.padding_mask(torch.tensor([6, 2, 4]), 6).unsqueeze(1)  # (B, 1, 1, S_k)
    w = ref.masked_softmax(q @ k.transpose(-2, -1) / math.sqrt(8), mask)
    torch.testing.assert_close(w @ v, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), atol=1e-5, rtol=1e-4)
    assert (w[1, ..., 2:] == 0).all()


def test_padding_mask_bad_arguments():
    with pytest.raises(ValueError):
        ref.padding_mask(torch.tensor([1, 2]), -1)
    with pytest.raises(ValueError):
        ref.padding_mask(torch.tensor([1, -1]), 3)
    with pytest.raises(ValueError):
        ref.padding_mask(torch.tensor([1, 4]), 3)
    with pytest.raises(ValueError):
        ref.padding_mask(torch.tensor([[1, 2]]), 3)


def test_masked_softmax():
    scores = randn(2, 4, 5, seed=46, scale=3.0)
    torch.testing.assert_close(ref.masked_softmax(scores, None), torch.softmax(scores, dim=-1))
    mask = torch.rand(2, 4, 5, generator=gen(47)) > 0.5
    mask[0, 2] = False  # a fully masked row
    mask[1, 1] = True
    w = ref.masked_softmax(scores, mask)
    assert not torch.isnan(w).any()
    assert (w[~mask] == 0).all() and (w[0, 2] == 0).all()
    rows = mask.any(-1)
    torch.testing.assert_close(w.sum(-1)[rows], torch.ones(int(rows.sum())))
    torch.testing.assert_close(w[rows], torch.softmax(scores.masked_fill(~mask, float("-inf")), -1)[rows])
    assert (ref.masked_softmax(scores, torch.zeros(5, dtype=torch.bool)) == 0).all()  # broadcast, all masked


def test_masked_softmax_gradients_are_finite():
    scores = randn(2, 3, 4, seed=48, dtype=torch.float64).requires_grad_()
    mask = torch.ones(2, 3, 4, dtype=torch.bool)
    mask[0, 1] = False
    mask[1, :, 2:] = False
    w = ref.masked_softmax(scores, mask)
    (w * randn(2, 3, 4, seed=49, dtype=torch.float64)).sum().backward()
    assert torch.isfinite(scores.grad).all()
    assert (scores.grad[~mask] == 0).all()
    partial = randn(2, 3, 4, seed=50, dtype=torch.float64).requires_grad_()
    assert torch.autograd.gradcheck(lambda s: ref.masked_softmax(s, mask[1]), (partial,))
