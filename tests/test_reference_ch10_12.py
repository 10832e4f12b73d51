"""References of chapters 10–12 against PyTorch and brute force, their invariants, and the checks
accepting other correct ways of writing them (no false alarms on a valid learner solution)."""
import math

import pytest
import torch
import torch.nn.functional as F

import utils.reference as R
from utils._guard import unguarded
from utils.checks import EXERCISES
from utils.checks._core import largest_tensor, run_check

sliding_window_mask = unguarded(R.sliding_window_mask)
sliding_window_attention = unguarded(R.sliding_window_attention)
strided_sparse_mask = unguarded(R.strided_sparse_mask)
elu_feature_map = unguarded(R.elu_feature_map)
linear_attention = unguarded(R.linear_attention)
causal_linear_attention = unguarded(R.causal_linear_attention)
rope_angles = unguarded(R.rope_angles)
apply_rope = unguarded(R.apply_rope)


def gen(seed):
    return torch.Generator().manual_seed(seed)


def randn(*shape, seed=0, dtype=torch.float64):
    return torch.randn(*shape, generator=gen(seed), dtype=dtype)


# ============================================================ chapter 10
@pytest.mark.parametrize("causal", [False, True])
def test_sliding_window_mask_brute_force(causal):
    for s in range(1, 9):
        for window in range(0, s + 2):
            expected = torch.tensor([[(0 <= i - j <= window) if causal else abs(i - j) <= window
                                      for j in range(s)] for i in range(s)])
            got = sliding_window_mask(s, window, causal=causal)
            assert got.dtype == torch.bool and torch.equal(got, expected), (s, window)


def test_sliding_window_mask_edges():
    assert torch.equal(sliding_window_mask(6, 0), torch.eye(6, dtype=torch.bool))
    assert torch.equal(sliding_window_mask(6, 0, causal=True), torch.eye(6, dtype=torch.bool))
    assert sliding_window_mask(6, 5).all() and sliding_window_mask(6, 100).all()
    full_causal = torch.ones(6, 6, dtype=torch.bool).tril()
    assert torch.equal(sliding_window_mask(6, 5, causal=True), full_causal)
    assert torch.equal(sliding_window_mask(6, 9, causal=True), full_causal)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("lead,s,d,d_v", [((), 7, 4, 4), ((2, 3), 9, 8, 5), ((1,), 1, 3, 2), ((2,), 13, 5, 7)])
def test_sliding_window_attention_matches_sdpa(lead, s, d, d_v, causal):
    q, k, v = randn(*lead, s, d, seed=1), randn(*lead, s, d, seed=2), randn(*lead, s, d_v, seed=3)
    for window in sorted({0, 1, 2, s // 2, s - 1, s, s + 3}):
        expected = F.scaled_dot_product_attention(q, k, v, attn_mask=sliding_window_mask(s, window, causal))
        got = sliding_window_attention(q, k, v, window, causal=causal)
        torch.testing.assert_close(got, expected, msg=f"window={window}")


def test_sliding_window_attention_edge_windows():
    q, k, v = randn(2, 3, 8, 4, seed=4), randn(2, 3, 8, 4, seed=5), randn(2, 3, 8, 6, seed=6)
    for causal in (False, True):  # window = 0: every query sees only itself
        torch.testing.assert_close(sliding_window_attention(q, k, v, 0, causal=causal), v)
    full = F.scaled_dot_product_attention(q, k, v)
    full_causal = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    for window in (7, 8, 50):  # window ≥ S − 1: full attention
        torch.testing.assert_close(sliding_window_attention(q, k, v, window), full)
        torch.testing.assert_close(sliding_window_attention(q, k, v, window, causal=True), full_causal)


def test_sliding_window_attention_never_builds_s_by_s():
    S, D, window = 2048, 4, 8
    q = randn(1, S, D, seed=7, dtype=torch.float32)
    for causal in (False, True):
        _, numel, shape, _ = largest_tensor(sliding_window_attention, q, q, q, window, causal=causal)
        assert numel < S * S // 16, shape
    full_mutant = next(m for m in EXERCISES["sliding_window_attention"].mutants if m.name == "quadratic_masked_full")
    _, numel, _, _ = largest_tensor(full_mutant.impl, q, q, q, window)
    assert numel >= S * S  # the memory check really separates the two


def test_sliding_window_attention_gradcheck():
    q, k, v = (randn(1, 6, 3, seed=i).requires_grad_() for i in (8, 9, 10))
    for window, causal in [(1, False), (2, True), (0, False)]:
        assert torch.autograd.gradcheck(lambda q, k, v: sliding_window_attention(q, k, v, window, causal=causal),
                                        (q, k, v))


def test_strided_sparse_mask_brute_force():
    for s in range(1, 14):
        for stride in range(1, s + 3):
            expected = torch.tensor([[j <= i and ((i - j) < stride or (i - j) % stride == 0)
                                      for j in range(s)] for i in range(s)])
            got = strided_sparse_mask(s, stride)
            assert got.dtype == torch.bool and torch.equal(got, expected), (s, stride)


def test_strided_sparse_mask_properties():
    tril = torch.ones(9, 9, dtype=torch.bool).tril()
    assert torch.equal(strided_sparse_mask(9, 1), tril)  # stride 1: every earlier key
    assert torch.equal(strided_sparse_mask(9, 9), tril)  # stride ≥ s: the local part covers all
    m = strided_sparse_mask(64, 8)
    assert m.diagonal().all() and not m.triu(1).any()
    # each query sees at most stride + i / stride keys: O(S·sqrt(S)) in all for stride ≈ sqrt(S)
    i = torch.arange(64)
    assert (m.sum(-1) <= 8 + i // 8).all()
    with pytest.raises(ValueError):
        strided_sparse_mask(4, 0)


# ============================================================ chapter 11
def test_elu_feature_map():
    x = torch.cat([torch.linspace(-20, 20, 401, dtype=torch.float64), torch.tensor([0.0], dtype=torch.float64)])
    phi = elu_feature_map(x)
    torch.testing.assert_close(phi, torch.where(x > 0, x + 1, torch.exp(x)))
    assert (phi > 0).all()
    assert elu_feature_map(randn(2, 3, 4)).shape == (2, 3, 4)


def _quadratic(q, k, v, eps=1e-6, causal=False):
    """Linear attention written the O(S²) way: weights φ(q_i)·φ(k_j), normalised per row."""
    scores = elu_feature_map(q) @ elu_feature_map(k).transpose(-2, -1)
    if causal:
        scores = scores.tril()
    return scores @ v / (scores.sum(-1, keepdim=True) + eps)


@pytest.mark.parametrize("lead,s_q,s_k,d,d_v", [((), 5, 5, 4, 4), ((2, 3), 4, 9, 8, 5), ((1,), 1, 1, 3, 2), ((2,), 7, 3, 5, 6)])
def test_linear_attention_matches_quadratic_form(lead, s_q, s_k, d, d_v):
    q, k, v = randn(*lead, s_q, d, seed=1), randn(*lead, s_k, d, seed=2), randn(*lead, s_k, d_v, seed=3)
    for eps in (1e-6, 0.0, 0.5):
        torch.testing.assert_close(linear_attention(q, k, v, eps=eps), _quadratic(q, k, v, eps))


def test_linear_attention_weights_sum_to_one():
    q, k = randn(2, 6, 4, seed=4), randn(2, 9, 4, seed=5)
    out = linear_attention(q, k, torch.ones(2, 9, 3, dtype=torch.float64), eps=0.0)
    torch.testing.assert_close(out, torch.ones_like(out))


@pytest.mark.parametrize("lead,s,d,d_v", [((), 6, 4, 4), ((2, 3), 9, 8, 5), ((1,), 1, 3, 2), ((2,), 12, 5, 7)])
def test_causal_linear_attention_matches_quadratic_and_rnn(lead, s, d, d_v):
    q, k, v = randn(*lead, s, d, seed=1), randn(*lead, s, d, seed=2), randn(*lead, s, d_v, seed=3)
    got = causal_linear_attention(q, k, v)
    torch.testing.assert_close(got, _quadratic(q, k, v, causal=True))
    # the RNN form: a (D, D_v) state and a (D,) normaliser, updated once per token
    phi_q, phi_k = elu_feature_map(q), elu_feature_map(k)
    state = torch.zeros(*lead, d, d_v, dtype=q.dtype)
    z = torch.zeros(*lead, d, dtype=q.dtype)
    for i in range(s):
        state = state + phi_k[..., i, :, None] * v[..., i, None, :]
        z = z + phi_k[..., i, :]
        out_i = (phi_q[..., i, None, :] @ state).squeeze(-2) / ((phi_q[..., i, :] * z).sum(-1, keepdim=True) + 1e-6)
        torch.testing.assert_close(got[..., i, :], out_i)
    # the last position sees every key: it equals the non-causal version there
    torch.testing.assert_close(got[..., -1:, :], linear_attention(q[..., -1:, :], k, v))


def test_causal_linear_attention_ignores_the_future():
    q, k, v = randn(2, 8, 4, seed=4), randn(2, 8, 4, seed=5), randn(2, 8, 3, seed=6)
    k2, v2 = k.clone(), v.clone()
    k2[:, 5:], v2[:, 5:] = 100.0, -100.0
    torch.testing.assert_close(causal_linear_attention(q, k, v)[:, :5], causal_linear_attention(q, k2, v2)[:, :5])


@pytest.mark.parametrize("name", ["linear_attention", "causal_linear_attention"])
def test_linear_attention_never_builds_s_by_s(name):
    S, D = 2048, 8
    q = randn(1, S, D, seed=7, dtype=torch.float32)
    _, numel, shape, _ = largest_tensor(unguarded(getattr(R, name)), q, q, q)
    assert numel < S * S // 16, shape
    materialised = next(m for m in EXERCISES[name].mutants if m.name == "quadratic_scores")
    _, numel, _, _ = largest_tensor(materialised.impl, q, q, q)
    assert numel >= S * S


def test_linear_attention_gradcheck():
    q, k, v = (randn(2, 5, 3, seed=i).requires_grad_() for i in (8, 9, 10))
    assert torch.autograd.gradcheck(linear_attention, (q, k, v))
    assert torch.autograd.gradcheck(causal_linear_attention, (q, k, v))


# ============================================================ chapter 12
def test_rope_angles_formula():
    for seq_len, dim, base in [(7, 8, 10000.0), (1, 2, 10000.0), (12, 64, 500000.0), (5, 6, 100.0)]:
        a = rope_angles(seq_len, dim, base)
        assert a.shape == (seq_len, dim // 2) and a.dtype == torch.float32
        expected = torch.tensor([[m * base ** (-2 * i / dim) for i in range(dim // 2)] for m in range(seq_len)])
        torch.testing.assert_close(a, expected)
    assert torch.equal(rope_angles(4, 8), rope_angles(4, 8, base=10000.0))


def _rope_complex(x, positions=None, base=10000.0):
    """RoPE as in the paper and Meta's Llama: pairs as complex numbers times e^{i·angle}."""
    S, D = x.shape[-2], x.shape[-1]
    positions = torch.arange(S) if positions is None else positions
    angles = positions.to(torch.float64)[:, None] * base ** (-2.0 * torch.arange(D // 2, dtype=torch.float64) / D)
    rot = torch.polar(torch.ones_like(angles), angles)  # (S, D/2) complex
    z = torch.view_as_complex(x.reshape(*x.shape[:-1], D // 2, 2).contiguous())  # (..., S, D/2)
    return torch.view_as_real(z * rot).flatten(-2)


@pytest.mark.parametrize("shape", [(6, 8), (2, 3, 5, 4), (1, 1, 2), (2, 2, 9, 64)])
def test_apply_rope_matches_complex_formulation(shape):
    x = randn(*shape, seed=1)
    torch.testing.assert_close(apply_rope(x), _rope_complex(x))
    pos = torch.arange(30, 30 + shape[-2])
    torch.testing.assert_close(apply_rope(x, pos, base=500.0), _rope_complex(x, pos, base=500.0))


def test_apply_rope_matches_half_split_convention_after_permutation():
    """Hugging Face's rotate_half pairs (x[i], x[i + D/2]); permuting features maps one onto the other."""
    x = randn(2, 7, 8, seed=2)
    D = 8
    perm = torch.cat([torch.arange(0, D, 2), torch.arange(1, D, 2)])  # interleaved -> halves
    angles = rope_angles(7, D).double()
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    xh = x[..., perm]
    rotate_half = torch.cat([-xh[..., D // 2:], xh[..., : D // 2]], dim=-1)
    torch.testing.assert_close(apply_rope(x)[..., perm], xh * cos + rotate_half * sin, atol=1e-6, rtol=1e-6)


def test_apply_rope_preserves_norms_and_position_zero():
    x = randn(3, 10, 16, seed=3)
    y = apply_rope(x)
    pairs = lambda t: t.unflatten(-1, (8, 2)).norm(dim=-1)  # noqa: E731
    torch.testing.assert_close(pairs(y), pairs(x))  # every pair is rotated, not scaled
    torch.testing.assert_close(y[..., 0, :], x[..., 0, :])  # position 0: no rotation
    torch.testing.assert_close(apply_rope(x, torch.arange(10)), y)
    assert apply_rope(x.float()).dtype == torch.float32


def test_apply_rope_relative_position_identity():
    """⟨R_m q, R_n k⟩ depends on m − n only."""
    q, k = randn(1, 16, seed=4), randn(1, 16, seed=5)

    def score(m, n):
        return (apply_rope(q, torch.tensor([m])) * apply_rope(k, torch.tensor([n]))).sum().item()

    for m, n in [(0, 0), (3, 1), (1, 3), (10, 2), (7, 7)]:
        for shift in (1, 5, 40):
            assert math.isclose(score(m, n), score(m + shift, n + shift), rel_tol=1e-9, abs_tol=1e-9)
    assert not math.isclose(score(3, 1), score(1, 3), rel_tol=1e-6)  # the sign of m − n matters


def test_apply_rope_odd_dim_raises():
    with pytest.raises(ValueError):
        apply_rope(torch.zeros(2, 3, 5))


# ============================================================ the checks accept other correct solutions
def _swa_gather(q, k, v, window, causal=False):
    """Sliding window by gathering each query's neighbours with an index tensor."""
    S = q.size(-2)
    offsets = torch.arange(-window, 1 if causal else window + 1)  # (W,)
    idx = torch.arange(S)[:, None] + offsets  # (S, W)
    valid = (idx >= 0) & (idx < S)
    idx = idx.clamp(0, S - 1)
    k_nb, v_nb = k[..., idx, :], v[..., idx, :]  # (..., S, W, D)
    scores = (q.unsqueeze(-2) * k_nb).sum(-1) / math.sqrt(q.size(-1))
    w = torch.softmax(scores.masked_fill(~valid, float("-inf")), -1)
    return (w.unsqueeze(-1) * v_nb).sum(-2)


def _linear_einsum(q, k, v, eps=1e-6):
    pq, pk = F.elu(q) + 1, F.elu(k) + 1
    kv = torch.einsum("...sd,...se->...de", pk, v)
    return torch.einsum("...sd,...de->...se", pq, kv) / (torch.einsum("...sd,...d->...s", pq, pk.sum(-2))[..., None] + eps)


def _causal_linear_rnn(q, k, v, eps=1e-6):
    pq, pk = F.elu(q) + 1, F.elu(k) + 1
    state = q.new_zeros(*q.shape[:-2], q.size(-1), v.size(-1))
    z = q.new_zeros(*q.shape[:-2], q.size(-1))
    outs = []
    for i in range(q.size(-2)):
        state = state + pk[..., i, :, None] * v[..., i, None, :]
        z = z + pk[..., i, :]
        num = (pq[..., i, None, :] @ state).squeeze(-2)
        outs.append(num / ((pq[..., i, :] * z).sum(-1, keepdim=True) + eps))
    return torch.stack(outs, dim=-2)


def _rope_angles_float32(seq_len, dim, base=10000.0):
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
    return torch.outer(torch.arange(seq_len).float(), inv_freq)


def _rope_float32(x, positions=None, base=10000.0):
    """The usual float32 code: inv_freq, outer product, cos/sin, strided slices."""
    S, D = x.shape[-2], x.shape[-1]
    if D % 2:
        raise ValueError("D must be even")
    positions = torch.arange(S) if positions is None else positions
    inv_freq = 1.0 / (base ** (torch.arange(0, D, 2).float() / D))
    freqs = positions.float()[:, None] * inv_freq
    cos, sin = freqs.cos(), freqs.sin()
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x1 * cos - x2 * sin
    out[..., 1::2] = x1 * sin + x2 * cos
    return out


def _rope_complex_float32(x, positions=None, base=10000.0):
    if x.size(-1) % 2:
        raise ValueError("D must be even")
    S, D = x.shape[-2], x.shape[-1]
    positions = torch.arange(S) if positions is None else positions
    freqs = torch.outer(positions.float(), base ** (-torch.arange(0, D, 2).float() / D))
    z = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2).contiguous())
    return torch.view_as_real(z * torch.polar(torch.ones_like(freqs), freqs)).flatten(-2).to(x.dtype)  # same dtype as x


ALTERNATIVES = [
    ("sliding_window_attention", _swa_gather),
    ("elu_feature_map", lambda x: torch.where(x > 0, x + 1, torch.exp(x.clamp(max=0)))),  # exp(x) alone: NaN gradient past 709
    ("linear_attention", _linear_einsum),
    ("causal_linear_attention", _causal_linear_rnn),
    ("rope_angles", _rope_angles_float32),
    ("apply_rope", _rope_float32),
    ("apply_rope", _rope_complex_float32),
]


@pytest.mark.parametrize("name,impl", ALTERNATIVES, ids=[f"{n}-{f.__name__}" for n, f in ALTERNATIVES])
def test_check_accepts_other_correct_solutions(name, impl, capsys):
    for seed in (0, 1):
        run_check(EXERCISES[name], impl, seed=seed)
    assert "✅" in capsys.readouterr().out
