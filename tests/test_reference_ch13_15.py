"""The chapter 13–15 references agree with PyTorch and have the properties the chapters teach.

13: online softmax = torch.softmax; flash attention = F.scaled_dot_product_attention with a
    bottom-right causal mask (torch.nn.attention.bias.causal_lower_right), lse = torch.logsumexp,
    whatever the block size. 14: TinyGPT's attention = SDPA with enable_gqa after
    RoPE; cached = uncached; causal; RoPE only sees relative positions; generate is greedy and
    the cache does not change what it generates. 15: the log-log slope = numpy.polyfit's.
Independent correct implementations (written differently from the references) pass the checks.
"""
import math

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

from utils._guard import unguarded
from utils.checks import CheckFailure, check_fit_loglog_slope, check_flash_attention, check_generate, check_TinyGPT
from utils.checks import check_online_softmax
from utils.reference import _ch14
from utils.reference._common import ConcatKVCache
from utils.reference import fit_loglog_slope as _fit
from utils.reference import flash_attention as _flash
from utils.reference import generate as _generate
from utils.reference import online_softmax as _online

online_softmax = unguarded(_online)
flash_attention = unguarded(_flash)
TinyGPT = unguarded(_ch14.TinyGPT)
generate = unguarded(_generate)
fit_loglog_slope = unguarded(_fit)


def gen(seed):
    return torch.Generator().manual_seed(seed)


# ================================================================ 13: online softmax
@pytest.mark.parametrize("shape,block_size", [((10,), 3), ((2, 8), 4), ((2, 3, 13), 5), ((4, 7), 1),
                                              ((2, 6), 8), ((3, 1), 1), ((2, 64), 64), ((5, 100), 7)])
@pytest.mark.parametrize("scale", [1.0, 100.0])
def test_online_softmax_matches_torch(shape, block_size, scale):
    x = torch.randn(*shape, generator=gen(0), dtype=torch.float64) * scale
    torch.testing.assert_close(online_softmax(x, block_size), torch.softmax(x, dim=-1), rtol=0, atol=1e-12)


def test_online_softmax_minus_inf_entries_and_rows():
    x = torch.randn(3, 9, generator=gen(1))
    x[0, :4] = float("-inf")  # the whole first block of row 0
    x[1, 5] = float("-inf")
    x[2, :] = float("-inf")  # a row with nothing to attend to
    out = online_softmax(x, 4)
    assert not out.isnan().any()
    torch.testing.assert_close(out[:2], torch.softmax(x[:2], dim=-1))
    assert (out[2] == 0).all()


def test_online_softmax_does_not_overflow():
    x = torch.tensor([[1000.0, 0.0, -1000.0, 999.0, 1001.0]])
    torch.testing.assert_close(online_softmax(x, 2), torch.softmax(x, dim=-1))


# ================================================================ 13: flash attention
def naive_attention(q, k, v, causal):
    """Attention and lse through PyTorch: SDPA with causal_lower_right, torch.logsumexp."""
    s_q, s_k = q.size(-2), k.size(-2)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if causal:
        keep = torch.ones(s_q, s_k, dtype=torch.bool).tril(s_k - s_q)
        scores = scores.masked_fill(~keep, float("-inf"))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(s_q, s_k))
        out = torch.where(keep.any(-1)[:, None], out, torch.zeros(()))  # SDPA gives NaN on empty rows
    else:
        out = F.scaled_dot_product_attention(q, k, v)
    return out, torch.logsumexp(scores, dim=-1)


FLASH_SHAPES = [((), 8, 8, 4, 4, 4), ((2,), 10, 10, 8, 8, 4), ((2, 3), 5, 11, 6, 5, 3),
                ((2,), 11, 5, 4, 3, 2), ((1,), 6, 6, 4, 4, 1), ((2,), 7, 7, 4, 4, 16),
                ((3,), 1, 1, 4, 4, 2), ((1, 2), 70, 100, 8, 8, 64), ((2,), 33, 17, 4, 4, 8)]


@pytest.mark.filterwarnings("ignore:Lower right causal bias")  # SDPA's NaN rows are zeroed above
@pytest.mark.parametrize("lead,s_q,s_k,d,d_v,block_size", FLASH_SHAPES)
@pytest.mark.parametrize("causal", [False, True])
def test_flash_matches_sdpa_and_logsumexp(lead, s_q, s_k, d, d_v, block_size, causal):
    g = gen(s_q * 100 + s_k)
    q = torch.randn(*lead, s_q, d, generator=g, dtype=torch.float64)
    k = torch.randn(*lead, s_k, d, generator=g, dtype=torch.float64)
    v = torch.randn(*lead, s_k, d_v, generator=g, dtype=torch.float64)
    out, lse = flash_attention(q, k, v, block_size=block_size, causal=causal)
    exp_out, exp_lse = naive_attention(q, k, v, causal)
    assert out.shape == (*lead, s_q, d_v) and lse.shape == (*lead, s_q)
    assert not out.isnan().any() and not lse.isnan().any()
    torch.testing.assert_close(out, exp_out, rtol=0, atol=1e-12)
    torch.testing.assert_close(lse, exp_lse, rtol=0, atol=1e-12)  # -inf matches -inf


def test_flash_fully_masked_rows_give_zero_and_minus_inf():
    g = gen(3)
    q, k, v = torch.randn(9, 4, generator=g), torch.randn(5, 4, generator=g), torch.randn(5, 3, generator=g)
    out, lse = flash_attention(q, k, v, block_size=2, causal=True)
    # bottom-right: query i sees keys j <= i - 4, so queries 0..3 see nothing
    assert (out[:4] == 0).all() and torch.isneginf(lse[:4]).all()
    assert torch.isfinite(lse[4:]).all()


def test_flash_block_size_does_not_change_the_result():
    g = gen(4)
    q, k, v = (torch.randn(2, 23, 8, generator=g) for _ in range(3))
    base = flash_attention(q, k, v, block_size=64, causal=True)
    for bs in (1, 2, 5, 8, 23):
        for got, exp in zip(flash_attention(q, k, v, block_size=bs, causal=True), base):
            torch.testing.assert_close(got, exp)


def test_flash_is_stable_on_large_scores():
    g = gen(5)
    q, k, v = (torch.randn(12, 8, generator=g) * 30 for _ in range(3))
    out, lse = flash_attention(q, k, v, block_size=3)
    exp_out, exp_lse = naive_attention(q.double(), k.double(), v.double(), False)
    torch.testing.assert_close(out.double(), exp_out, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(lse.double(), exp_lse, atol=1e-3, rtol=1e-5)


def _alt_flash(q, k, v, block_size=64, causal=False, *, rescale_acc=True):
    """Written differently: preallocated outputs, in-place updates, a where-mask, exp2."""
    s_q, s_k, d = q.size(-2), k.size(-2), q.size(-1)
    out = q.new_zeros(*q.shape[:-1], v.size(-1))
    lse = q.new_full(q.shape[:-1], float("-inf"))
    log2e = 1.0 / math.log(2.0)
    for i in range(0, s_q, block_size):
        qi = q[..., i:i + block_size, :] * (log2e / math.sqrt(d))  # base-2 scores
        n = qi.size(-2)
        m = qi.new_full(qi.shape[:-1], float("-inf"))
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
                s = torch.where(kpos <= qpos, s, float("-inf"))
            m_new = torch.maximum(m, s.amax(-1))
            finite = torch.isfinite(m_new)
            shift = torch.where(finite, m_new, 0.0)
            p = torch.exp2(s - shift[..., None])
            corr = torch.exp2(m - shift)
            l.mul_(corr).add_(p.sum(-1))
            (acc.mul_(corr[..., None]) if rescale_acc else acc).add_(p @ v[..., j:j + block_size, :])
            m = m_new
        ok = l > 0
        out[..., i:i + n, :] = torch.where(ok[..., None], acc / l.clamp_min(1e-30)[..., None], 0.0)
        lse[..., i:i + n] = torch.where(ok, (m + torch.log2(l.clamp_min(1e-30))) * math.log(2.0), float("-inf"))
    return out, lse


def _textbook_online_softmax(x, block_size):
    """The textbook loop without a guard: exp(-inf - (-inf)) = NaN on a leading all -inf block."""
    m = torch.full(x.shape[:-1], float("-inf"))
    l = torch.zeros(x.shape[:-1])
    for blk in x.split(block_size, dim=-1):
        m_new = torch.maximum(m, blk.max(-1).values)
        l = l * torch.exp(m - m_new) + torch.exp(blk - m_new.unsqueeze(-1)).sum(-1)
        m = m_new
    return torch.exp(x - m.unsqueeze(-1)) / l.unsqueeze(-1)


def _alt_online_softmax(x, block_size):
    """The same loop with a safe max (0 while nothing finite was seen) and zeros for all -inf rows."""
    m = torch.full(x.shape[:-1], float("-inf"))
    l = torch.zeros(x.shape[:-1])
    for blk in x.split(block_size, dim=-1):
        m_new = torch.maximum(m, blk.max(-1).values)
        safe = torch.where(m_new == float("-inf"), 0.0, m_new)
        l = l * torch.exp(m - safe) + torch.exp(blk - safe.unsqueeze(-1)).sum(-1)
        m = m_new
    safe = torch.where(m == float("-inf"), 0.0, m)
    return torch.exp(x - safe.unsqueeze(-1)) / torch.where(l > 0, l, 1.0).unsqueeze(-1)


def test_independent_implementations_pass_chapter_13_checks(capsys):
    check_online_softmax(_alt_online_softmax)
    check_flash_attention(_alt_flash)
    assert capsys.readouterr().out.count("✅") == 2


def test_online_softmax_nan_on_a_leading_minus_inf_block_is_rejected_and_named():
    with pytest.raises(CheckFailure, match="first block is all -inf gave NaN"):
        check_online_softmax(_textbook_online_softmax)


def test_flash_attention_check_names_a_missing_accumulator_rescale():
    """An independent tiled attention that rescales l but not acc: "no rescale" is named."""
    def no_acc_rescale(q, k, v, block_size=64, causal=False):
        return _alt_flash(q, k, v, block_size, causal, rescale_acc=False)

    with pytest.raises(CheckFailure) as info:
        check_flash_attention(no_acc_rescale)
    assert "no rescale in the tiled attention" in str(info.value)


# ================================================================ 14: tiny GPT
def rope_complex(x, positions, base=10000.0):
    """Interleaved RoPE written with complex numbers: (x_2i + i x_2i+1) · e^{i pos θ_i}."""
    d = x.size(-1)
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    rot = torch.polar(torch.ones(len(positions), d // 2, dtype=torch.float64), positions.double()[:, None] * theta)
    xc = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(xc * rot).flatten(-2).to(x.dtype)


def small_gpt(seed=0, config=(23, 32, 2, 4, 2, 24)):
    torch.manual_seed(seed)
    model = TinyGPT(*config).eval()
    with torch.no_grad():  # larger than GPT-2's init, so that every part of the model matters
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.copy_(torch.randn_like(p) / math.sqrt(p.size(1)) * (2.0 if "W_q" in name or "W_k" in name else 1.0))
        model.tok_emb.weight.normal_()
    return model


def test_parameter_names_and_shapes():
    model = TinyGPT(50, 32, 2, 4, 2, 16)
    shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}
    assert shapes["tok_emb.weight"] == (50, 32)
    assert shapes["blocks.1.attn.W_q.weight"] == (32, 32)
    assert shapes["blocks.1.attn.W_k.weight"] == (16, 32)  # num_kv_heads · head_dim = 2 · 8
    assert shapes["blocks.1.attn.W_v.weight"] == (16, 32)
    assert shapes["blocks.1.attn.W_o.weight"] == (32, 32)
    assert shapes["blocks.0.ffn.linear1.weight"] == (128, 32) and shapes["blocks.0.ffn.linear2.weight"] == (32, 128)
    assert shapes["blocks.0.norm1.weight"] == shapes["blocks.0.norm2.weight"] == shapes["norm_f.weight"] == (32,)
    assert shapes["lm_head.weight"] == (50, 32) and "lm_head.bias" not in shapes
    assert not any("attn" in n and n.endswith("bias") for n in shapes)
    assert isinstance(model.blocks, nn.ModuleList) and isinstance(model.blocks[0].norm1, nn.LayerNorm)
    assert set(model.state_dict()) == set(shapes)  # no persistent buffers


def test_attention_matches_sdpa_with_gqa_and_rope():
    model = small_gpt()
    attn = model.blocks[0].attn
    x = torch.randn(2, 9, 32, generator=gen(7))
    B, S, _ = x.shape
    H, H_kv, D_h = 4, 2, 8
    pos = torch.arange(3, 3 + S)
    q = rope_complex(attn.W_q(x).view(B, S, H, D_h).transpose(1, 2), pos)
    k = rope_complex(attn.W_k(x).view(B, S, H_kv, D_h).transpose(1, 2), pos)
    v = attn.W_v(x).view(B, S, H_kv, D_h).transpose(1, 2)
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    expected = attn.W_o(o.transpose(1, 2).reshape(B, S, H * D_h))
    torch.testing.assert_close(attn(x, None, 3), expected, atol=1e-5, rtol=1e-5)


def test_cached_logits_equal_uncached():
    model = small_gpt()
    idx = torch.randint(0, 23, (2, 11), generator=gen(8))
    with torch.no_grad():
        full, none = model(idx)
        assert none is None and full.shape == (2, 11, 23)
        caches = [ConcatKVCache() for _ in model.blocks]
        pieces, pos = [], 0
        for n in (4, 1, 3, 1, 2):
            logits, returned = model(idx[:, pos:pos + n], caches, start_pos=pos)
            assert returned is caches
            pieces.append(logits)
            pos += n
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=1e-5, rtol=1e-5)
    assert caches[0].seq_len == 11 and caches[0].k.shape == (2, 2, 11, 8)  # kv heads are cached, not repeated


def test_model_is_causal():
    model = small_gpt()
    idx = torch.randint(0, 23, (1, 10), generator=gen(9))
    changed = idx.clone()
    changed[0, 6:] = (changed[0, 6:] + 1) % 23
    with torch.no_grad():
        a, _ = model(idx)
        b, _ = model(changed)
    torch.testing.assert_close(a[:, :6], b[:, :6])
    assert not torch.allclose(a[:, 6:], b[:, 6:])


def test_rope_sees_only_relative_positions():
    model = small_gpt()
    idx = torch.randint(0, 23, (2, 8), generator=gen(10))
    with torch.no_grad():
        a, _ = model(idx, start_pos=0)
        b, _ = model(idx, start_pos=13)  # shifting every position leaves every q·k unchanged
    torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def test_max_len_is_enforced():
    model = small_gpt(config=(11, 16, 1, 2, 1, 8))
    with pytest.raises(ValueError):
        model(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(ValueError):
        model(torch.zeros(1, 2, dtype=torch.long), start_pos=7)


def test_tiny_gpt_learns_a_pattern():
    torch.manual_seed(0)
    model = TinyGPT(8, 32, 2, 4, 2, 16)
    data = torch.arange(16).remainder(8)[None].repeat(4, 1)  # 0 1 2 ... 7 0 1 ...
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(60):
        logits, _ = model(data[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, 8), data[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.1
    out = generate(model.eval(), torch.tensor([[3, 4]]), 6)
    assert out.tolist() == [[3, 4, 5, 6, 7, 0, 1, 2]]


def test_generate_is_greedy_and_the_cache_changes_nothing():
    model = small_gpt()
    idx = torch.randint(0, 23, (2, 4), generator=gen(11))
    cached = generate(model, idx, 12, use_cache=True)
    uncached = generate(model, idx, 12, use_cache=False)
    assert cached.shape == (2, 16) and cached.dtype == torch.long
    assert torch.equal(cached[:, :4], idx) and torch.equal(cached, uncached)
    seq = idx  # by hand: argmax of the last position, one token at a time
    with torch.no_grad():
        for _ in range(12):
            seq = torch.cat([seq, model(seq)[0][:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(seq, cached)
    assert torch.equal(generate(model, idx, 0), idx)


def test_generate_without_cache_crops_to_max_len():
    model = small_gpt(config=(11, 16, 1, 2, 1, 6))
    idx = torch.randint(0, 11, (1, 5), generator=gen(12))
    out = generate(model, idx, 9, use_cache=False)  # runs past max_len = 6 without error
    assert out.shape == (1, 14)
    with torch.no_grad():
        last_window, _ = model(out[:, -7:-1])
    assert out[0, -1] == last_window[0, -1].argmax()


class _AltRoPEGQA(nn.Module):
    def __init__(self, d_model, num_heads, num_kv_heads, max_len):
        super().__init__()
        self.h, self.h_kv, self.d_h = num_heads, num_kv_heads, d_model // num_heads
        self.W_q = nn.Linear(d_model, d_model, bias=False)
        self.W_k = nn.Linear(d_model, num_kv_heads * self.d_h, bias=False)
        self.W_v = nn.Linear(d_model, num_kv_heads * self.d_h, bias=False)
        self.W_o = nn.Linear(d_model, d_model, bias=False)
        theta = 10000.0 ** (-torch.arange(0, self.d_h, 2).float() / self.d_h)
        self.register_buffer("freqs", torch.polar(torch.ones(max_len, self.d_h // 2),
                                                  torch.arange(max_len).float()[:, None] * theta))  # persistent

    def rope(self, x, start):
        xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        # float32 inside, back to x's dtype (LLaMA's `.type_as(xq)`): the check's gradient cases run in float64
        return torch.view_as_real(xc * self.freqs[start:start + x.size(-2)]).flatten(-2).type_as(x)

    def forward(self, x, cache, start_pos):
        B, S, C = x.shape
        q = self.rope(self.W_q(x).view(B, S, self.h, self.d_h).transpose(1, 2), start_pos)
        k = self.rope(self.W_k(x).view(B, S, self.h_kv, self.d_h).transpose(1, 2), start_pos)
        v = self.W_v(x).view(B, S, self.h_kv, self.d_h).transpose(1, 2)
        if cache is not None:
            k, v = cache.update(k, v)
        mask = causal_lower_right(S, k.size(-2))
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        return self.W_o(o.transpose(1, 2).reshape(B, S, C))


class _AltBlock(nn.Module):
    def __init__(self, d_model, num_heads, num_kv_heads, max_len):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = _AltRoPEGQA(d_model, num_heads, num_kv_heads, max_len)
        self.ffn = nn.Module()
        self.ffn.linear1, self.ffn.linear2 = nn.Linear(d_model, 4 * d_model), nn.Linear(4 * d_model, d_model)


class AltTinyGPT(nn.Module):
    """Written differently: complex RoPE from a persistent buffer, SDPA with enable_gqa."""

    def __init__(self, vocab_size, d_model, n_layers, num_heads, num_kv_heads, max_len):
        super().__init__()
        self.max_len = max_len
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.blocks = nn.ModuleList(_AltBlock(d_model, num_heads, num_kv_heads, max_len) for _ in range(n_layers))
        self.norm_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)

    def forward(self, idx, caches=None, start_pos=0):
        x = self.tok_emb(idx)
        for i, b in enumerate(self.blocks):
            x = x + b.attn(b.norm1(x), None if caches is None else caches[i], start_pos)
            x = x + b.ffn.linear2(F.gelu(b.ffn.linear1(b.norm2(x))))
        return self.lm_head(self.norm_f(x)), caches


def _alt_generate(model, idx, max_new_tokens, use_cache=True):
    with torch.no_grad():
        caches = [ConcatKVCache() for _ in range(len(model.blocks))] if use_cache else None
        feed, pos = idx, 0
        for _ in range(max_new_tokens):
            if not use_cache:
                feed, pos = idx[:, -model.max_len:], 0
            logits, caches = model(feed, caches, pos)
            nxt = torch.argmax(logits[:, -1], dim=-1)[:, None]
            if use_cache:
                pos += feed.size(1)
                feed = nxt
            idx = torch.cat((idx, nxt), 1)
    return idx


def test_independent_implementations_pass_chapter_14_checks(capsys):
    check_TinyGPT(AltTinyGPT)
    check_generate(_alt_generate)
    assert capsys.readouterr().out.count("✅") == 2


def test_generate_check_names_a_generate_that_refeeds_everything():
    def refeed(model, idx, max_new_tokens, use_cache=True):
        caches = [ConcatKVCache() for _ in model.blocks] if use_cache else None
        for _ in range(max_new_tokens):
            logits, _ = model(idx[:, -model.max_len:], None if caches is None else [ConcatKVCache() for _ in model.blocks])
            idx = torch.cat([idx, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
        return idx

    with pytest.raises(CheckFailure, match="fresh, empty caches"):  # a new prefill every step
        check_generate(refeed)


# ================================================================ 15: log-log slope
def test_slope_of_an_exact_power_law():
    sizes = [64, 128, 256, 512, 1024]
    assert fit_loglog_slope(sizes, [3e-7 * s**2 for s in sizes]) == pytest.approx(2.0, abs=1e-12)
    assert fit_loglog_slope(torch.tensor(sizes), torch.tensor(sizes, dtype=torch.float32) ** 0.5) == pytest.approx(0.5, abs=1e-6)
    assert isinstance(fit_loglog_slope(sizes, sizes), float)


def test_slope_matches_numpy_polyfit():
    rs = np.random.default_rng(0)
    for _ in range(10):
        sizes = np.sort(rs.uniform(10, 5000, size=rs.integers(2, 12)))
        costs = rs.uniform(0.5, 2.0) * sizes ** rs.uniform(-1, 3) * np.exp(0.2 * rs.standard_normal(len(sizes)))
        expected = np.polyfit(np.log(sizes), np.log(costs), 1)[0]
        assert fit_loglog_slope(sizes.tolist(), costs.tolist()) == pytest.approx(expected, rel=1e-9, abs=1e-12)
        # invariant to units: seconds vs milliseconds, tokens vs thousands of tokens
        assert fit_loglog_slope((sizes / 1000).tolist(), (costs * 1000).tolist()) == pytest.approx(expected, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("sizes,costs", [([], []), ([5], [1.0]), ([0, 1, 2], [1.0, 2.0, 3.0]),
                                         ([1, 2, 3], [1.0, -2.0, 3.0]), ([1, 2], [1.0, 2.0, 3.0]),
                                         ([4, 4, 4], [1.0, 2.0, 3.0])])
def test_slope_rejects_bad_input(sizes, costs):
    with pytest.raises(ValueError):
        fit_loglog_slope(sizes, costs)


def test_independent_implementation_passes_chapter_15_check(capsys):
    def polyfit_slope(sizes, costs):
        s = np.asarray(torch.as_tensor(sizes), dtype=np.float32)
        c = np.asarray(torch.as_tensor(costs), dtype=np.float32)
        if s.size < 2 or (s <= 0).any() or (c <= 0).any():
            raise ValueError("need >= 2 positive points")
        return float(np.polyfit(np.log(s), np.log(c), 1)[0])

    check_fit_loglog_slope(polyfit_slope)
    assert "✅" in capsys.readouterr().out
