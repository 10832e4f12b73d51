"""The chapter 05–07 references agree with PyTorch and have the properties the chapters claim.

05: MultiHeadAttention == nn.MultiheadAttention(batch_first=True) with copied weights (masks
    converted from PyTorch's True = "ignore" to the course's True = "may attend"); SelfAttention
    == F.scaled_dot_product_attention on its projections; split/merge are inverse.
06: LayerNorm == nn.LayerNorm; DecoderLayer == nn.TransformerDecoderLayer(norm_first=True) with
    copied weights; causality; parameter names.
07: entropy == torch.distributions.Categorical(...).entropy(); rollout's convention and invariants.
"""
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from utils._guard import unguarded
from utils import reference as ref

SelfAttention = unguarded(ref.SelfAttention)
MultiHeadAttention = unguarded(ref.MultiHeadAttention)
LayerNorm = unguarded(ref.LayerNorm)
FeedForward = unguarded(ref.FeedForward)
DecoderLayer = unguarded(ref.DecoderLayer)
attention_entropy = unguarded(ref.attention_entropy)
attention_rollout = unguarded(ref.attention_rollout)

ATOL, RTOL = 1e-5, 1e-4  # float32, two implementations summing in different orders


def gen(seed):
    return torch.Generator().manual_seed(seed)


def copy_into_torch_mha(mine: nn.Module, theirs: nn.MultiheadAttention) -> None:
    """in_proj_weight = [W_q; W_k; W_v], out_proj = W_o (and the biases when there are any)."""
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([mine.W_q.weight, mine.W_k.weight, mine.W_v.weight]))
        theirs.out_proj.weight.copy_(mine.W_o.weight)
        if mine.W_q.bias is not None:
            theirs.in_proj_bias.copy_(torch.cat([mine.W_q.bias, mine.W_k.bias, mine.W_v.bias]))
            theirs.out_proj.bias.copy_(mine.W_o.bias)


def randomise(module: nn.Module, g: torch.Generator, scale: float = 0.3) -> nn.Module:
    """Every parameter N(0, scale²), LayerNorm weights 1 + N(0, scale²): nothing left at its init."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            base = 1.0 if name.startswith("norm") and name.endswith("weight") else 0.0
            p.copy_(base + scale * torch.randn(p.shape, generator=g))
    return module


# ================================================================ chapter 05
MHA_SHAPES = [  # (B, S_q, S_k, d_model, H)
    (2, 5, 5, 8, 2),
    (3, 3, 7, 12, 3),
    (1, 1, 4, 6, 6),
    (2, 6, 1, 16, 4),
    (2, 4, 9, 15, 5),
]


@pytest.mark.parametrize("B,s_q,s_k,d,H", MHA_SHAPES)
@pytest.mark.parametrize("bias", [True, False])
def test_mha_matches_nn_multihead_attention(B, s_q, s_k, d, H, bias):
    torch.manual_seed(0)
    mine = MultiHeadAttention(d, H, bias=bias).eval()
    theirs = nn.MultiheadAttention(d, H, bias=bias, batch_first=True).eval()
    copy_into_torch_mha(mine, theirs)
    g = gen(B * 100 + s_q * 10 + s_k)
    q, k, v = (torch.randn(B, s, d, generator=g) for s in (s_q, s_k, s_k))
    out, w = mine(q, k, v)
    out_t, w_t = theirs(q, k, v, need_weights=True, average_attn_weights=False)
    assert out.shape == (B, s_q, d) and w.shape == (B, H, s_q, s_k)
    torch.testing.assert_close(out, out_t, atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(w, w_t, atol=ATOL, rtol=RTOL)
    _, w_avg = theirs(q, k, v, need_weights=True)  # PyTorch's default averages the heads
    torch.testing.assert_close(w.mean(dim=1), w_avg, atol=ATOL, rtol=RTOL)


def test_mha_masks_match_nn_multihead_attention():
    """key_padding_mask and attn_mask (PyTorch: True = ignore) become one mask with True = may attend."""
    B, s_q, s_k, d, H = 3, 4, 6, 12, 3
    torch.manual_seed(1)
    mine = MultiHeadAttention(d, H).eval()
    theirs = nn.MultiheadAttention(d, H, batch_first=True).eval()
    copy_into_torch_mha(mine, theirs)
    g = gen(7)
    q, k, v = torch.randn(B, s_q, d, generator=g), torch.randn(B, s_k, d, generator=g), torch.randn(B, s_k, d, generator=g)
    lengths = torch.tensor([6, 4, 2])
    key_padding_mask = torch.arange(s_k)[None, :] >= lengths[:, None]  # (B, S_k), True = padding
    attn_mask = torch.ones(s_q, s_k, dtype=torch.bool).tril(diagonal=s_k - s_q).logical_not()  # True = blocked
    attn_mask[:, 0] = False  # every query may see key 0, so no row is fully masked (PyTorch gives NaN there)

    out_t, w_t = theirs(q, k, v, key_padding_mask=key_padding_mask, attn_mask=attn_mask,
                        average_attn_weights=False)
    mask = ~key_padding_mask[:, None, None, :] & ~attn_mask  # (B, 1, 1, S_k) & (S_q, S_k) -> (B, 1, S_q, S_k)
    out, w = mine(q, k, v, mask=mask)
    torch.testing.assert_close(out, out_t, atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(w, w_t, atol=ATOL, rtol=RTOL)

    # a per-head attn_mask (B·H, S_q, S_k) is a (B, H, S_q, S_k) mask here
    per_head = torch.rand(B * H, s_q, s_k, generator=g) > 0.6
    per_head[..., 0] = False
    out_t, w_t = theirs(q, k, v, attn_mask=per_head, average_attn_weights=False)
    out, w = mine(q, k, v, mask=~per_head.view(B, H, s_q, s_k))
    torch.testing.assert_close(out, out_t, atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(w, w_t, atol=ATOL, rtol=RTOL)


def test_mha_fully_masked_row_gives_zeros_not_nan():
    torch.manual_seed(2)
    mha = MultiHeadAttention(8, 2).eval()
    x, mem = torch.randn(2, 3, 8), torch.randn(2, 5, 8)
    mask = torch.ones(2, 1, 3, 5, dtype=torch.bool)
    mask[0, :, 1] = False  # query 1 of batch 0 sees nothing
    out, w = mha(x, mem, mem, mask=mask)
    assert not torch.isnan(out).any() and not torch.isnan(w).any()
    assert torch.all(w[0, :, 1] == 0)
    torch.testing.assert_close(out[0, 1], mha.W_o.bias)  # W_o applied to a zero vector
    torch.testing.assert_close(w.sum(-1)[1], torch.ones(2, 3))


def test_mha_rejects_indivisible_d_model():
    with pytest.raises(ValueError):
        MultiHeadAttention(10, 3)


def test_mha_parameter_names():
    assert set(MultiHeadAttention(8, 2).state_dict()) == {
        f"W_{n}.{p}" for n in "qkvo" for p in ("weight", "bias")}
    assert set(MultiHeadAttention(8, 2, bias=False).state_dict()) == {f"W_{n}.weight" for n in "qkvo"}


def test_split_and_merge_heads():
    mha = MultiHeadAttention(12, 3)
    x = torch.randn(2, 5, 12)
    heads = mha.split_heads(x)
    assert heads.shape == (2, 3, 5, 4)
    for h in range(3):  # head h is the contiguous feature block h·D_h ... (h+1)·D_h - 1
        torch.testing.assert_close(heads[:, h], x[..., 4 * h: 4 * (h + 1)], rtol=0, atol=0)
    torch.testing.assert_close(mha.merge_heads(heads), x, rtol=0, atol=0)
    y = torch.randn(2, 3, 5, 4)
    torch.testing.assert_close(mha.split_heads(mha.merge_heads(y)), y, rtol=0, atol=0)


def test_mha_with_one_head_is_self_attention_plus_W_o():
    torch.manual_seed(3)
    d = 6
    mha = MultiHeadAttention(d, 1, bias=False)
    sa = SelfAttention(d)
    sa.load_state_dict({k: v for k, v in mha.state_dict().items() if k != "W_o.weight"})
    x = torch.randn(2, 4, d)
    causal = torch.ones(4, 4, dtype=torch.bool).tril()
    out_sa, w_sa = sa(x, causal)
    out_mha, w_mha = mha(x, x, x, causal)
    torch.testing.assert_close(w_mha[:, 0], w_sa, atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(out_mha, mha.W_o(out_sa), atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("d_model,d_k,d_v", [(8, None, None), (8, 4, None), (6, 4, 5), (5, None, 3)])
def test_self_attention_matches_sdpa(d_model, d_k, d_v):
    torch.manual_seed(4)
    sa = SelfAttention(d_model, d_k, d_v)
    dk = d_model if d_k is None else d_k
    dv = dk if d_v is None else d_v
    assert (sa.W_q.weight.shape, sa.W_k.weight.shape, sa.W_v.weight.shape) == (
        (dk, d_model), (dk, d_model), (dv, d_model))
    assert set(sa.state_dict()) == {"W_q.weight", "W_k.weight", "W_v.weight"}  # no bias, no W_o
    x = torch.randn(3, 7, d_model)
    mask = torch.rand(3, 7, 7) > 0.4
    mask[..., 0] = True
    out, w = sa(x, mask)
    q, k, v = sa.W_q(x), sa.W_k(x), sa.W_v(x)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # also scales by 1/sqrt(d_k)
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=RTOL)
    assert w.shape == (3, 7, 7) and out.shape == (3, 7, dv)
    torch.testing.assert_close(w.sum(-1), torch.ones(3, 7))


def test_mha_gradcheck_float64():
    torch.manual_seed(5)
    mha = MultiHeadAttention(4, 2).double()
    q, k, v = (torch.randn(1, s, 4, dtype=torch.float64, requires_grad=True) for s in (2, 3, 3))
    mask = torch.tensor([True, True, False])  # the last key is padding: no gradient flows to it
    assert torch.autograd.gradcheck(lambda q, k, v: mha(q, k, v, mask=mask), (q, k, v))


def test_mha_dropout_only_in_training():
    torch.manual_seed(6)
    mha = MultiHeadAttention(8, 2, dropout=0.5)
    x = torch.randn(2, 16, 8)
    mha.train()
    out, w = mha(x, x, x)
    assert (w == 0).float().mean() > 0.2  # dropped weights
    torch.testing.assert_close(out, mha.W_o(mha.merge_heads(w @ mha.split_heads(mha.W_v(x)))),
                               atol=ATOL, rtol=RTOL)  # out is what the returned weights produce
    mha.eval()
    out1, w1 = mha(x, x, x)
    out2, _ = mha(x, x, x)
    torch.testing.assert_close(out1, out2, rtol=0, atol=0)
    torch.testing.assert_close(w1.sum(-1), torch.ones(2, 2, 16))


# ================================================================ chapter 06
@pytest.mark.parametrize("shape", [(2, 5, 8), (7, 3), (2, 3, 4, 17), (1, 1, 2)])
@pytest.mark.parametrize("eps", [1e-5, 1e-2])
def test_layernorm_matches_nn_layernorm(shape, eps):
    g = gen(sum(shape))
    d = shape[-1]
    mine, theirs = LayerNorm(d, eps=eps), nn.LayerNorm(d, eps=eps)
    assert torch.equal(mine.weight, torch.ones(d)) and torch.equal(mine.bias, torch.zeros(d))
    with torch.no_grad():
        w, b = 1 + 0.5 * torch.randn(d, generator=g), 0.5 * torch.randn(d, generator=g)
        for m in (mine, theirs):
            m.weight.copy_(w)
            m.bias.copy_(b)
    # (x, atol): at a mean of 1000 float32 resolves 6e-5, and nn.LayerNorm's one-pass (Welford)
    # statistics differ from our two-pass ones by a few of those, times weight / std.
    for x, atol in ((torch.randn(*shape, generator=g), ATOL), (1e-3 * torch.randn(*shape, generator=g), ATOL),
                    (1000 + torch.randn(*shape, generator=g), 1e-3)):
        torch.testing.assert_close(mine(x), theirs(x), atol=atol, rtol=RTOL)
    x = torch.full(shape, 2.5)  # constant rows: variance 0, output = bias, no NaN
    torch.testing.assert_close(mine(x), theirs(x))
    torch.testing.assert_close(mine(x), b.expand(shape))


def test_layernorm_float64_and_gradients():
    g = gen(11)
    mine, theirs = LayerNorm(6).double(), nn.LayerNorm(6).double()
    x = torch.randn(3, 4, 6, generator=g, dtype=torch.float64, requires_grad=True)
    torch.testing.assert_close(mine(x), theirs(x), atol=1e-12, rtol=1e-12)
    assert torch.autograd.gradcheck(mine, (x,))


def test_std_based_layernorm_is_a_different_function():
    """a·(x - mean)/(x.std() + eps) + b uses the unbiased std: off by sqrt(d/(d-1)), ≈ 3.3% at d = 16."""
    x = torch.randn(4, 16)
    ln = LayerNorm(16)
    std_based = (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + 1e-5)
    ratio = (ln(x) / std_based).median().item()
    assert abs(ratio - math.sqrt(16 / 15)) < 1e-3


def test_feedforward_matches_sequential():
    torch.manual_seed(12)
    ffn = FeedForward(8, 32, dropout=0.1).eval()
    assert set(ffn.state_dict()) == {"linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias"}
    seq = nn.Sequential(ffn.linear1, nn.ReLU(), ffn.linear2)
    x = torch.randn(2, 5, 8)
    torch.testing.assert_close(ffn(x), seq(x), rtol=0, atol=0)


def _torch_decoder_layer(mine: nn.Module, d, H, d_ff) -> nn.TransformerDecoderLayer:
    theirs = nn.TransformerDecoderLayer(d, H, d_ff, dropout=0.0, activation="relu",
                                        batch_first=True, norm_first=True).eval()
    copy_into_torch_mha(mine.self_attn, theirs.self_attn)
    copy_into_torch_mha(mine.cross_attn, theirs.multihead_attn)
    with torch.no_grad():
        for name in ("linear1", "linear2"):
            getattr(theirs, name).weight.copy_(getattr(mine.ffn, name).weight)
            getattr(theirs, name).bias.copy_(getattr(mine.ffn, name).bias)
        for name in ("norm1", "norm2", "norm3"):
            getattr(theirs, name).weight.copy_(getattr(mine, name).weight)
            getattr(theirs, name).bias.copy_(getattr(mine, name).bias)
    return theirs


@pytest.mark.parametrize("B,s_t,s_s,d,H,d_ff", [(2, 4, 6, 8, 2, 16), (3, 5, 5, 12, 3, 24), (1, 1, 3, 6, 1, 8)])
def test_decoder_layer_matches_nn_transformer_decoder_layer(B, s_t, s_s, d, H, d_ff):
    g = gen(B + s_t + s_s + d)
    mine = randomise(DecoderLayer(d, H, d_ff).eval(), g)
    theirs = _torch_decoder_layer(mine, d, H, d_ff)
    x, memory = torch.randn(B, s_t, d, generator=g), torch.randn(B, s_s, d, generator=g)
    causal_blocked = torch.ones(s_t, s_t, dtype=torch.bool).triu(1)  # PyTorch: True = blocked
    lengths = torch.randint(1, s_s + 1, (B,), generator=g)
    memory_key_padding_mask = torch.arange(s_s)[None, :] >= lengths[:, None]  # True = padding

    expected = theirs(x, memory, tgt_mask=causal_blocked, memory_key_padding_mask=memory_key_padding_mask)
    out, cross_w = mine(x, memory, src_mask=~memory_key_padding_mask[:, None, None, :], tgt_mask=~causal_blocked)
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=RTOL)

    # the cross-attention weights are those of PyTorch's multihead_attn on the same inputs
    h = x + theirs.self_attn(theirs.norm1(x), theirs.norm1(x), theirs.norm1(x), attn_mask=causal_blocked)[0]
    _, w_t = theirs.multihead_attn(theirs.norm2(h), memory, memory, key_padding_mask=memory_key_padding_mask,
                                   average_attn_weights=False)
    assert cross_w.shape == (B, H, s_t, s_s)
    torch.testing.assert_close(cross_w, w_t, atol=ATOL, rtol=RTOL)


def test_decoder_layer_parameter_names_are_the_contract():
    names = set(DecoderLayer(8, 2, 16).state_dict())
    expected = (
        {f"{a}.W_{n}.{p}" for a in ("self_attn", "cross_attn") for n in "qkvo" for p in ("weight", "bias")}
        | {f"ffn.linear{i}.{p}" for i in (1, 2) for p in ("weight", "bias")}
        | {f"norm{i}.{p}" for i in (1, 2, 3) for p in ("weight", "bias")}
    )
    assert names == expected


def test_decoder_layer_is_causal_and_masks_padding():
    torch.manual_seed(13)
    layer = randomise(DecoderLayer(8, 2, 16).eval(), gen(13))
    x, memory = torch.randn(2, 5, 8), torch.randn(2, 6, 8)
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    src = torch.ones(2, 1, 1, 6, dtype=torch.bool)
    src[1, ..., 4:] = False
    out, w = layer(x, memory, src_mask=src, tgt_mask=causal)
    x2 = x.clone()
    x2[:, 3:] = torch.randn(2, 2, 8)  # change the future: positions 0..2 must not move
    out2, _ = layer(x2, memory, src_mask=src, tgt_mask=causal)
    torch.testing.assert_close(out2[:, :3], out[:, :3], rtol=0, atol=1e-6)
    assert not torch.allclose(out2[:, 3:], out[:, 3:])
    memory2 = memory.clone()
    memory2[1, 4:] = 100.0  # change padded source tokens: nothing may move
    out2, _ = layer(x, memory2, src_mask=src, tgt_mask=causal)
    torch.testing.assert_close(out2, out, rtol=0, atol=1e-6)
    assert torch.all(w[1, ..., 4:] == 0)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 2, 5))
    src_none = torch.zeros(2, 1, 1, 6, dtype=torch.bool)  # a source that is all padding: no NaN
    out3, w3 = layer(x, memory, src_mask=src_none, tgt_mask=causal)
    assert not torch.isnan(out3).any() and torch.all(w3 == 0)


# ================================================================ chapter 07
def test_entropy_matches_categorical():
    g = gen(21)
    w = torch.softmax(torch.randn(2, 3, 4, 6, generator=g) * 2, dim=-1)
    expected = torch.distributions.Categorical(probs=w).entropy()  # (2, 3, 4)
    torch.testing.assert_close(attention_entropy(w), expected, atol=ATOL, rtol=RTOL)


def test_entropy_properties():
    S_k = 7
    uniform = torch.full((3, S_k), 1 / S_k)
    torch.testing.assert_close(attention_entropy(uniform), torch.full((3,), math.log(S_k)))
    one_hot = torch.eye(S_k)
    assert torch.equal(attention_entropy(one_hot), torch.zeros(S_k))
    zeros = torch.zeros(2, 4, S_k)  # fully masked queries
    e = attention_entropy(zeros)
    assert e.shape == (2, 4) and torch.equal(e, torch.zeros(2, 4))
    w = torch.softmax(torch.randn(5, 4, S_k), dim=-1)
    w[0, 1] = 0.0
    e = attention_entropy(w)
    assert not torch.isnan(e).any()
    assert torch.all(e >= 0) and torch.all(e <= math.log(S_k) + 1e-6)
    assert attention_entropy(torch.softmax(torch.randn(2, 3, 5), -1).double()).dtype == torch.float64
    # nats: Categorical over 2 equal outcomes has ln 2 nats = 1 bit
    torch.testing.assert_close(attention_entropy(torch.tensor([[0.5, 0.5]])), torch.tensor([math.log(2.0)]))


def _rolled(A):
    """One layer's residual-adjusted, row-normalised, head-averaged attention."""
    A = A.mean(dim=1)
    A = 0.5 * A + 0.5 * torch.eye(A.shape[-1], dtype=A.dtype)
    return A / A.sum(-1, keepdim=True)


def test_rollout_convention_last_layer_on_the_left():
    g = gen(31)
    layers = [torch.softmax(torch.randn(2, 3, 5, 5, generator=g) * 2, dim=-1) for _ in range(3)]
    A1, A2, A3 = (_rolled(A) for A in layers)
    r = attention_rollout(layers)
    torch.testing.assert_close(r, A3 @ A2 @ A1, atol=ATOL, rtol=RTOL)
    assert not torch.allclose(r, A1 @ A2 @ A3, atol=1e-3)  # the order matters on these inputs
    torch.testing.assert_close(attention_rollout(layers[:1]), A1)


def test_rollout_by_hand_two_tokens():
    """One head; layer 1 sends everything to token 0, layer 2 is uniform."""
    A1 = torch.tensor([[[[1.0, 0.0], [1.0, 0.0]]]])
    A2 = torch.tensor([[[[0.5, 0.5], [0.5, 0.5]]]])
    # Ã1 = 0.5·A1 + 0.5·I = [[1, 0], [0.5, 0.5]]; Ã2 = [[0.75, 0.25], [0.25, 0.75]]
    expected = torch.tensor([[[0.75 + 0.125, 0.125], [0.25 + 0.375, 0.375]]])
    torch.testing.assert_close(attention_rollout([A1, A2]), expected)


def test_rollout_invariants():
    g = gen(32)
    B, H, S = 2, 4, 6
    causal = torch.ones(S, S, dtype=torch.bool).tril()
    layers = [torch.softmax(torch.randn(B, H, S, S, generator=g).masked_fill(~causal, float("-inf")), -1)
              for _ in range(4)]
    r = attention_rollout(layers)
    assert r.shape == (B, S, S)
    torch.testing.assert_close(r.sum(-1), torch.ones(B, S))  # rows are distributions over input tokens
    assert torch.all(r >= 0)
    assert torch.all(r.triu(1) == 0)  # causal attention: no token draws on a later one
    eye = torch.eye(S).expand(B, H, S, S)  # attention to oneself only: Ã = I, changes nothing
    torch.testing.assert_close(attention_rollout(layers[:2] + [eye] + layers[2:]), r, atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(attention_rollout([eye, eye]), torch.eye(S).expand(B, S, S))
    # fully masked query rows (all-zero weights) are renormalised to the identity row, not NaN
    zero_rows = layers[0].clone()
    zero_rows[:, :, 2] = 0.0
    r = attention_rollout([zero_rows])
    assert not torch.isnan(r).any()
    torch.testing.assert_close(r[:, 2], torch.eye(S)[2].expand(B, S))
