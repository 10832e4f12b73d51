"""Rules of chapters 06-08 that issues 16 and 17 found broken, each with the verdict and message it must get.

- LayerNorm: `eps` kept in a registered buffer passes (a buffer is not a parameter); a hard-coded
  eps is reported as the eps mistake on a forward case, not first as a gradient error; an extra
  parameter that the exercise does not name is still reported, and called a parameter.
- FeedForward: `linear1`/`linear2` also held in an `nn.Sequential` pass, whichever is built first
  (parameters are loaded and their gradients compared by the names the prompt gives).
- softmax_backward: a float32 tensor made inside, in a float64 case, is named as such.
- The chapters' notebooks: the stub of `ScaledDotProductAttentionFunction` raises in its method
  bodies (the class is defined in the release); self-check questions use the quiz API (qid, salted
  key, a hint that does not hold the answer) with right letters spread; every exercise has a demo
  variant; chapter 08 never runs a learner's sdpa_backward above S = 256.
"""
import ast
import json
import re
from pathlib import Path

import pytest
import torch
import torch.nn as nn

from utils.checks import EXERCISES, CheckFailure
from utils.checks._core import run_check
from utils.checks._quiz import quiz_key
from utils._needs import is_stub

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = ["06_cross_attention_and_transformer_block", "07_visualizing_attention", "08_attention_gradients"]


def _passes(name, impl) -> None:
    run_check(EXERCISES[name], impl, quiet=True)


def _fails(name, impl) -> str:
    with pytest.raises(CheckFailure) as info:
        run_check(EXERCISES[name], impl, quiet=True)
    return str(info.value)


def _ln(x, weight, bias, eps):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return weight * (x - mean) / torch.sqrt(var + eps) + bias


class LayerNormEpsBuffer(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.register_buffer("eps", torch.tensor(eps))
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        return _ln(x, self.weight, self.bias, self.eps)


class LayerNormEps1e6(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = 1e-6  # the constructor's eps is ignored
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        return _ln(x, self.weight, self.bias, self.eps)


class LayerNormExtraParameter(LayerNormEpsBuffer):
    def __init__(self, d_model, eps=1e-5):
        super().__init__(d_model, eps)
        self.gain = nn.Parameter(torch.ones(()))

    def forward(self, x):
        return self.gain * _ln(x, self.weight, self.bias, self.eps)


class FeedForwardSequentialAfter(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.net = nn.Sequential(self.linear1, nn.ReLU(), nn.Dropout(dropout), self.linear2)

    def forward(self, x):
        return self.net(x)


class FeedForwardSequentialFirst(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Dropout(dropout), nn.Linear(d_ff, d_model))
        self.linear1, self.linear2 = self.net[0], self.net[3]

    def forward(self, x):
        return self.net(x)


def test_layernorm_eps_in_a_buffer_passes():
    _passes("LayerNorm", LayerNormEpsBuffer)


@pytest.mark.parametrize("cls", [FeedForwardSequentialAfter, FeedForwardSequentialFirst])
def test_feedforward_linears_also_in_a_sequential_pass(cls):
    _passes("FeedForward", cls)


def test_layernorm_wrong_eps_is_named_on_a_forward_case():
    msg = _fails("LayerNorm", LayerNormEps1e6)
    first = msg.split("First failing case:", 1)[1].splitlines()[0]
    assert "gradients" not in first and "eps" in first, msg
    assert "eps is a fixed 1e-06" in msg, msg


def test_layernorm_extra_parameter_is_called_a_parameter():
    msg = _fails("LayerNorm", LayerNormExtraParameter)
    assert "extra parameters" in msg and "'gain'" in msg and "'eps'" not in msg, msg


def test_softmax_backward_float32_inside_is_named():
    def float32_inside(a, grad_a):
        dot = torch.zeros(a.shape[:-1] + (1,))  # float32
        dot += (grad_a * a).sum(dim=-1, keepdim=True)
        return a * (grad_a - dot)

    msg = _fails("softmax_backward", float32_inside)
    assert "float32" in msg, msg


@pytest.mark.parametrize("name", ["LayerNorm", "FeedForward", "DecoderLayer", "attention_entropy",
                                  "attention_rollout", "softmax_backward", "sdpa_backward",
                                  "ScaledDotProductAttentionFunction"])
def test_every_exercise_has_a_demo_variant(name):
    assert sum(bool(getattr(v, "demo", False)) for v in EXERCISES[name].variants) == 1


def _cells(chapter, release=False):
    base = "notebooks" if release else "solutions"
    nb = json.loads((ROOT / base / chapter / f"{chapter}.ipynb").read_text())
    return nb["cells"]


def _src(cell):
    s = cell["source"]
    return "".join(s) if isinstance(s, list) else s


def test_ch08_function_stub_raises_in_method_bodies():
    cell = next(c for c in _cells("08_attention_gradients") if "class ScaledDotProductAttentionFunction" in _src(c))
    src = _src(cell)
    tree = ast.parse(src)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef))
    body_lines = {n.lineno for n in cls.body}
    lines = src.splitlines()
    for i, line in enumerate(lines, 1):
        if "### BEGIN SOLUTION" in line:
            # every solution block sits inside a method, never directly in the class body
            assert i not in body_lines and line.startswith("        "), line
    # the release's class is defined and recognised as a stub
    stub = re.sub(r"### BEGIN SOLUTION.*?### END SOLUTION", "raise NotImplementedError()", src, flags=re.S)
    ns = {}
    exec(compile(stub, "<release>", "exec"), ns)
    assert is_stub(ns["ScaledDotProductAttentionFunction"])


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_quizzes_salted_with_hints_and_spread(chapter):
    cells = _cells(chapter)
    letters = []
    for c in cells:
        src = _src(c)
        if c["cell_type"] != "code" or "check_choice(" not in src:
            continue
        qid = re.search(r'qid="([^"]+)"', src).group(1)
        key = re.search(r'key="([0-9a-f]+)"', src).group(1)
        letter = re.search(r'assert answer_\d+\.strip\(\)\.lower\(\) == "([a-d])"', src).group(1)
        assert key == quiz_key(letter, qid=qid), (chapter, qid)
        hint = re.search(r"hint=(['\"])(.*?)\1,\n", src, re.S).group(2)
        assert not re.search(rf"\b{letter}\)|['\"]{letter}['\"]|answer is", hint), (qid, hint)
        letters.append(letter)
    assert len(letters) == 3 and len(set(letters)) == 3, (chapter, letters)
    for c in cells:
        if c.get("metadata", {}).get("nbgrader", {}).get("grade_id", "").startswith("quiz_"):
            assert re.match(r'answer_\d+ = None  #', _src(c)), _src(c)


def test_ch08_learner_backward_never_runs_at_large_s():
    cells = [_src(c) for c in _cells("08_attention_gradients")]
    calls = [s for s in cells if "peak_tensor_bytes(sdpa_backward" in s]
    assert calls and all("if S <= 256" in s for s in calls)
    assert any("peak_tensor_bytes(ref.sdpa_backward" in s and "assert 4 <" in s for s in cells)


# ---------------------------------------------------------------- the examiner's mistakes outside the banks
def test_entropy_keeps_the_input_dtype():
    msg = _fails("attention_entropy", lambda w: -torch.special.xlogy(w.double(), w.double()).sum(-1))
    assert "returned float64 for float32 inputs" in msg and "keeps the floating inputs' dtype" in msg, msg


def test_rollout_normalised_before_identity_is_named():
    def rollout(layer_weights):
        out = None
        for A in layer_weights:
            A = A.mean(dim=1)
            A = A / A.sum(dim=-1, keepdim=True)
            A = 0.5 * A + 0.5 * torch.eye(A.size(-1), dtype=A.dtype)
            out = A if out is None else A @ out
        return out

    assert "normalised before adding the identity" in _fails("attention_rollout", rollout)


def test_sdpa_backward_finite_fill_is_named():
    import math

    def backward(q, k, v, grad_out, mask=None):
        scale = 1 / math.sqrt(q.size(-1))
        s = q @ k.transpose(-2, -1) * scale
        if mask is not None:
            s = s.masked_fill(~mask, -1e9)
        A = torch.softmax(s, dim=-1)
        dA = grad_out @ v.transpose(-2, -1)
        dS = A * (dA - (dA * A).sum(-1, keepdim=True))
        return dS @ k * scale, dS.transpose(-2, -1) @ q * scale, A.transpose(-2, -1) @ grad_out

    assert "-1e9" in _fails("sdpa_backward", backward)


class LayerNormDefault1e6(LayerNormEpsBuffer):
    def __init__(self, d_model, eps=1e-6):
        super().__init__(d_model, eps)


def test_layernorm_default_eps_is_named():
    assert "default eps is 1e-6" in _fails("LayerNorm", LayerNormDefault1e6)


def _decoder(fwd):
    from utils.checks._ch06 import _VFeedForwardFunctional, _VLayerNorm, _VMultiHeadAttention

    class Decoder(nn.Module):
        def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
            super().__init__()
            self.self_attn = _VMultiHeadAttention(d_model, num_heads, dropout)
            self.cross_attn = _VMultiHeadAttention(d_model, num_heads, dropout)
            self.ffn = _VFeedForwardFunctional(d_model, d_ff, dropout)
            self.norms = nn.ModuleList([_VLayerNorm(d_model) for _ in range(3)])
            self.norm1, self.norm2, self.norm3 = self.norms  # the same LayerNorms under two names
            self.drop = nn.Dropout(dropout)  # on each sub-layer's output (the contract's dropout)

        forward_ = fwd

        def forward(self, x, memory, src_mask=None, tgt_mask=None):
            return self.forward_(x, memory, src_mask, tgt_mask)

    return Decoder


def _dec_correct(self, x, memory, src_mask, tgt_mask):
    h = self.norm1(x)
    x = x + self.drop(self.self_attn(h, h, h, tgt_mask)[0])
    a, w = self.cross_attn(self.norm2(x), memory, memory, src_mask)
    x = x + self.drop(a)
    return x + self.drop(self.ffn(self.norm3(x))), w


def _dec_residual_from_norm(self, x, memory, src_mask, tgt_mask):
    h = self.norm1(x)
    x = h + self.self_attn(h, h, h, tgt_mask)[0]
    h = self.norm2(x)
    a, w = self.cross_attn(h, memory, memory, src_mask)
    x = h + a
    h = self.norm3(x)
    return h + self.ffn(h), w


def _dec_causal_cross(self, x, memory, src_mask, tgt_mask):
    h = self.norm1(x)
    x = x + self.self_attn(h, h, h, tgt_mask)[0]
    m = src_mask
    if src_mask is not None and tgt_mask is not None:
        m = src_mask & torch.ones(x.size(1), memory.size(1), dtype=torch.bool).tril()
    a, w = self.cross_attn(self.norm2(x), memory, memory, m)
    x = x + a
    return x + self.ffn(self.norm3(x)), w


def test_decoder_norms_in_a_modulelist_pass():
    _passes("DecoderLayer", _decoder(_dec_correct))


@pytest.mark.parametrize("forward, phrase", [(_dec_residual_from_norm, "normalised stream"),
                                             (_dec_causal_cross, "causal mask was also applied to the cross-attention")])
def test_decoder_mistakes_are_named(forward, phrase):
    assert phrase in _fails("DecoderLayer", _decoder(forward))
