"""The chapter 08 and 09 references agree with PyTorch, and keep their promises.

08: hand-derived gradients == autograd (float64), gradcheck, fully masked rows give zeros.
09: repeat_kv == repeat_interleave, GroupedQueryAttention == F.scaled_dot_product_attention with
enable_gqa (causal, and bottom-right with a KV cache), prefill + decode == one full forward,
kv_cache_bytes == the bytes a filled cache really holds.
"""
import math

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

from utils import reference as ref
from utils._guard import ForbiddenCall, unguarded
from utils.checks._core import learner_code

F64 = torch.float64


@pytest.fixture(autouse=True)
def one_thread():
    """One intra-op thread while these tests run: torch's float64 softmax over the last dim enters
    an OpenMP parallel region even for tiny tensors, and on a busy 2-core machine each call can
    then wait milliseconds for the second thread. The results do not depend on it."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _randn(*shape, g, dtype=F64, scale=1.0):
    return torch.randn(*shape, generator=g, dtype=dtype) * scale


def _mask(lead, s_q, s_k, g, fully_masked_row=False):
    m = torch.rand(*lead, s_q, s_k, generator=g) > 0.35
    m[..., 0] = True
    if fully_masked_row:
        m.view(-1, s_q, s_k)[0, min(1, s_q - 1)] = False
    return m


def _autograd_sdpa(q, k, v, grad_out, mask=None):
    """dq, dk, dv by autograd through the chapter-03 reference (masks, fully masked rows)."""
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    out, _ = unguarded(ref.scaled_dot_product_attention)(q, k, v, mask)
    return torch.autograd.grad(out, (q, k, v), grad_out)


ATTN_SHAPES = [  # (lead, S_q, S_k, D, D_v)
    ((), 4, 4, 8, 8),
    ((2,), 3, 6, 5, 7),
    ((1,), 1, 1, 4, 3),
    ((2, 3), 5, 7, 4, 6),
    ((2, 2), 6, 2, 3, 1),
]


# ================================================================ chapter 08
@pytest.mark.parametrize("shape,scale", [((7,), 1.0), ((3, 5), 1.0), ((2, 3, 4, 6), 1.0), ((4, 1), 1.0),
                                         ((2, 5, 8), 40.0)])
def test_softmax_backward_matches_autograd(shape, scale):
    g = _gen(len(shape) * 10 + shape[-1])
    s = _randn(*shape, g=g, scale=scale).requires_grad_()
    grad_a = _randn(*shape, g=g)
    a = torch.softmax(s, dim=-1)
    (expected,) = torch.autograd.grad(a, s, grad_a)
    got = ref.softmax_backward(a.detach(), grad_a)
    torch.testing.assert_close(got, expected, atol=1e-12, rtol=1e-10)


def test_softmax_backward_rows_sum_to_zero_and_zero_rows_stay_zero():
    g = _gen(1)
    s = _randn(3, 4, 6, g=g)
    mask = _mask((3,), 4, 6, g, fully_masked_row=True)
    a = unguarded(ref.masked_softmax)(s, mask)
    ds = ref.softmax_backward(a, _randn(3, 4, 6, g=g))
    # Σ_j ds_j = Σ_j a_j g_j − (Σ_j a_j)(Σ_j g_j a_j) = 0 on every row whose weights sum to 1 ...
    torch.testing.assert_close(ds.sum(-1), torch.zeros(3, 4, dtype=F64), atol=1e-12, rtol=0)
    # ... and a fully masked row (all-zero weights) gets an all-zero gradient, not NaN.
    assert torch.equal(ds[0, 1], torch.zeros(6, dtype=F64))
    assert not ds.isnan().any()


@pytest.mark.parametrize("lead,s_q,s_k,d,d_v", ATTN_SHAPES)
@pytest.mark.parametrize("masked", [False, True])
def test_sdpa_backward_matches_autograd_through_pytorch_sdpa(lead, s_q, s_k, d, d_v, masked):
    g = _gen(s_q * 100 + s_k * 10 + d)
    q, k, v = _randn(*lead, s_q, d, g=g), _randn(*lead, s_k, d, g=g), _randn(*lead, s_k, d_v, g=g)
    grad_out = _randn(*lead, s_q, d_v, g=g)
    mask = _mask(lead, s_q, s_k, g) if masked else None  # no fully masked row: PyTorch gives NaN there
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = F.scaled_dot_product_attention(*leaves, attn_mask=mask)
    expected = torch.autograd.grad(out, leaves, grad_out)
    got = ref.sdpa_backward(q, k, v, grad_out, mask=mask)
    for name, e, o in zip(("dq", "dk", "dv"), expected, got):
        assert o.shape == e.shape, name
        torch.testing.assert_close(o, e, atol=1e-12, rtol=1e-10, msg=name)


def test_sdpa_backward_fully_masked_rows_give_zero_gradients():
    g = _gen(7)
    q, k, v = _randn(2, 5, 4, g=g), _randn(2, 6, 4, g=g), _randn(2, 6, 3, g=g)
    grad_out = _randn(2, 5, 3, g=g)
    mask = _mask((2,), 5, 6, g, fully_masked_row=True)
    mask[1] = False  # the whole second batch element is masked out
    dq, dk, dv = ref.sdpa_backward(q, k, v, grad_out, mask)
    for got, expected in zip((dq, dk, dv), _autograd_sdpa(q, k, v, grad_out, mask)):
        assert not got.isnan().any()
        torch.testing.assert_close(got, expected, atol=1e-12, rtol=1e-10)
    assert torch.equal(dq[0, 1], torch.zeros(4, dtype=F64))  # the fully masked query row
    assert torch.equal(dq[1], torch.zeros_like(dq[1]))
    assert torch.equal(dk[1], torch.zeros_like(dk[1])) and torch.equal(dv[1], torch.zeros_like(dv[1]))


@pytest.mark.parametrize("lead,s_q,s_k,d,d_v", ATTN_SHAPES)
def test_function_forward_and_gradients_match_autograd(lead, s_q, s_k, d, d_v):
    g = _gen(s_q * 31 + s_k)
    q, k, v = _randn(*lead, s_q, d, g=g), _randn(*lead, s_k, d, g=g), _randn(*lead, s_k, d_v, g=g)
    grad_out = _randn(*lead, s_q, d_v, g=g)
    mask = _mask(lead, s_q, s_k, g, fully_masked_row=s_q > 1)
    for m in (None, mask):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        out = ref.ScaledDotProductAttentionFunction.apply(*leaves, m)
        expected_out, _ = unguarded(ref.scaled_dot_product_attention)(q, k, v, m)
        torch.testing.assert_close(out.detach(), expected_out, atol=1e-12, rtol=1e-10)
        got = torch.autograd.grad(out, leaves, grad_out)
        for o, e in zip(got, _autograd_sdpa(q, k, v, grad_out, m)):
            torch.testing.assert_close(o, e, atol=1e-12, rtol=1e-10)


def test_function_passes_gradcheck_in_float64():
    g = _gen(3)  # small: the numerical Jacobian costs two forwards per input element
    q, k, v = (_randn(1, 2, 3, 2, g=g), _randn(1, 2, 4, 2, g=g), _randn(1, 2, 4, 3, g=g))
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    mask = _mask((1, 2), 3, 4, g, fully_masked_row=True)
    fn = ref.ScaledDotProductAttentionFunction.apply
    assert torch.autograd.gradcheck(lambda q, k, v: fn(q, k, v), (q, k, v))
    assert torch.autograd.gradcheck(lambda q, k, v: fn(q, k, v, mask=mask), (q, k, v))


def test_function_uses_the_hand_written_backward():
    q, k, v = (torch.randn(3, 4, dtype=F64, requires_grad=True) for _ in range(3))
    out = ref.ScaledDotProductAttentionFunction.apply(q, k, v)
    assert type(out.grad_fn).__name__ == "ScaledDotProductAttentionFunctionBackward"


def test_function_refuses_learner_code_but_its_unguarded_copy_runs():
    q, k, v = (torch.randn(3, 4, dtype=F64) for _ in range(3))
    with learner_code():
        with pytest.raises(ForbiddenCall):
            ref.ScaledDotProductAttentionFunction.apply(q, k, v)

        class Subclass(ref.ScaledDotProductAttentionFunction):
            pass

        with pytest.raises(ForbiddenCall):
            Subclass.apply(q, k, v)
        out = unguarded(ref.ScaledDotProductAttentionFunction).apply(q, k, v)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v))


# ================================================================ chapter 09
@pytest.mark.parametrize("B,H_kv,S,D,n_rep", [(1, 2, 3, 4, 2), (2, 3, 5, 2, 3), (2, 1, 4, 3, 4), (3, 4, 1, 5, 2)])
def test_repeat_kv_is_repeat_interleave(B, H_kv, S, D, n_rep):
    x = torch.randn(B, H_kv, S, D, generator=_gen(B * H_kv * S))
    got = ref.repeat_kv(x, n_rep)
    assert torch.equal(got, x.repeat_interleave(n_rep, dim=1))
    for h in range(H_kv * n_rep):  # query head h reads kv head h // n_rep
        assert torch.equal(got[:, h], x[:, h // n_rep])


def test_repeat_kv_n_rep_1_returns_x():
    x = torch.randn(2, 3, 4, 5)
    assert ref.repeat_kv(x, 1) is x


def test_kv_cache_appends_along_the_sequence():
    g = _gen(9)
    cache = ref.KVCache()
    assert cache.seq_len == 0
    ks, vs = [], []
    for n in (4, 1, 1, 3):
        k_new, v_new = torch.randn(2, 3, n, 5, generator=g), torch.randn(2, 3, n, 2, generator=g)
        ks.append(k_new)
        vs.append(v_new)
        k_all, v_all = cache.update(k_new, v_new)
        assert torch.equal(k_all, torch.cat(ks, dim=-2)) and torch.equal(v_all, torch.cat(vs, dim=-2))
        assert cache.seq_len == sum(t.size(-2) for t in ks)


def _gqa(d_model, H, H_kv, seed):
    torch.manual_seed(seed)
    m = ref.GroupedQueryAttention(d_model, H, H_kv).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0.0, 1.5 / math.sqrt(d_model))
    return m


def _heads(x, n, d_h):
    B, S, _ = x.shape
    return x.view(B, S, n, d_h).transpose(1, 2)  # (B, n, S, d_h)


def _pytorch_gqa(m, x, past=None, attn_mask=None, is_causal=False):
    """The same projections, attention by F.scaled_dot_product_attention(enable_gqa=True)."""
    B, S, d_model = x.shape
    H, H_kv, d_h = m.num_heads, m.num_kv_heads, d_model // m.num_heads
    q, k, v = _heads(m.W_q(x), H, d_h), _heads(m.W_k(x), H_kv, d_h), _heads(m.W_v(x), H_kv, d_h)
    if past is not None:
        k, v = torch.cat([past[0], k], dim=-2), torch.cat([past[1], v], dim=-2)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal, enable_gqa=True)
    return m.W_o(out.transpose(1, 2).reshape(B, S, d_model)), (k, v)


GQA_CONFIGS = [(16, 4, 2), (12, 4, 1), (12, 3, 3), (24, 6, 2), (18, 6, 3)]  # GQA, MQA, MHA, ...


@pytest.mark.parametrize("d_model,H,H_kv", GQA_CONFIGS)
def test_gqa_matches_pytorch_sdpa_without_cache(d_model, H, H_kv):
    m = _gqa(d_model, H, H_kv, seed=d_model + H)
    x = torch.randn(2, 7, d_model, generator=_gen(H_kv))
    with torch.no_grad():
        out, cache = m(x)
        expected, _ = _pytorch_gqa(m, x, is_causal=True)
    assert cache is None
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-4)


SCHEDULES = [(3, 1, 1, 1, 1), (1, 1, 1, 1, 1, 1, 1), (4, 3), (7,), (2, 2, 1, 1, 1)]  # prefill, then decode


@pytest.mark.parametrize("d_model,H,H_kv,steps", [
    (*config, SCHEDULES[(i + j) % len(SCHEDULES)]) for i, config in enumerate(GQA_CONFIGS) for j in (0, 2)])
def test_gqa_with_cache_matches_bottom_right_sdpa_and_the_full_forward(d_model, H, H_kv, steps):
    m = _gqa(d_model, H, H_kv, seed=d_model * 3 + H)
    x = torch.randn(2, sum(steps), d_model, generator=_gen(len(steps)))
    cache, past, pieces, start = ref.KVCache(), None, [], 0
    with torch.no_grad():
        full, _ = m(x)
        for n in steps:
            chunk = x[:, start:start + n]
            out, cache = m(chunk, cache=cache)
            s_k = start + n
            bias = causal_lower_right(n, s_k)  # query i sees keys j <= i + (s_k - n)
            assert torch.equal(bias._materialize(), torch.ones(n, s_k, dtype=torch.bool).tril(s_k - n))
            expected, past = _pytorch_gqa(m, chunk, past, attn_mask=bias._materialize())
            torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-4)
            assert cache.seq_len == s_k
            pieces.append(out)
            start += n
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=1e-5, rtol=1e-4)


def test_gqa_with_num_kv_heads_equal_num_heads_is_multi_head_attention():
    d_model, H = 12, 3
    m = _gqa(d_model, H, H, seed=5)
    mha = unguarded(ref.MultiHeadAttention)(d_model, H, bias=False).eval()
    mha.load_state_dict(m.state_dict())
    x = torch.randn(2, 6, d_model, generator=_gen(5))
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    with torch.no_grad():
        torch.testing.assert_close(m(x)[0], mha(x, x, x, mask=causal)[0], atol=1e-5, rtol=1e-4)


def test_gqa_parameter_shapes_and_validation():
    m = ref.GroupedQueryAttention(24, 6, 2)
    assert {n: tuple(p.shape) for n, p in m.state_dict().items()} == {
        "W_q.weight": (24, 24), "W_k.weight": (8, 24), "W_v.weight": (8, 24), "W_o.weight": (24, 24)}
    with pytest.raises(ValueError):
        ref.GroupedQueryAttention(12, 4, 3)  # 4 query heads do not split into 3 groups
    with pytest.raises(ValueError):
        ref.GroupedQueryAttention(10, 4, 2)  # d_model not divisible by num_heads


def test_kv_cache_bytes_of_real_models():
    assert ref.kv_cache_bytes(32, 32, 128, 4096, 1) == 2 * 2**30  # Llama-2-7B, 4k tokens: 2 GiB
    assert ref.kv_cache_bytes(32, 32, 128, 1, 1) == 512 * 2**10  # 0.5 MiB per token
    assert ref.kv_cache_bytes(32, 8, 128, 8192, 1) == 2**30  # Llama-3-8B (GQA), 8k tokens: 1 GiB
    assert ref.kv_cache_bytes(32, 8, 128, 4096, 1) * 4 == ref.kv_cache_bytes(32, 32, 128, 4096, 1)
    assert isinstance(ref.kv_cache_bytes(80, 8, 128, 4096, 8, bytes_per_elem=1), int)


def test_kv_cache_bytes_equals_what_a_filled_cache_holds():
    num_layers, H_kv, D, S, B = 3, 2, 8, 5, 2
    caches = [ref.KVCache() for _ in range(num_layers)]
    for cache in caches:
        for n in (3, 1, 1):
            cache.update(torch.zeros(B, H_kv, n, D, dtype=torch.float16), torch.zeros(B, H_kv, n, D, dtype=torch.float16))
    held = sum(t.numel() * t.element_size() for c in caches for t in (c.k, c.v))
    assert held == ref.kv_cache_bytes(num_layers, H_kv, D, S, B)
    assert held * 2 == ref.kv_cache_bytes(num_layers, H_kv, D, S, B, bytes_per_elem=4)
