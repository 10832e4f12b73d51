"""Chapter 06 samples: the correct answers, and three submissions that each carry one realistic
mistake in every exercise (`LayerNorm`, `FeedForward`, `DecoderLayer`; names from the mutant banks
in utils/checks/_ch06.py) and one wrong quiz answer, and one correct submission written in other styles
(eps in a buffer, linears inside an nn.Sequential), so that the chapter adds only five submissions.

Built from the current release (``notebooks/``) with the solution's answers filled in, then wrong
answer code substituted, so the samples never drift from the source.
"""
from __future__ import annotations

import textwrap

from ._chapter import Chapter, src

ASSIGNMENT = "06_cross_attention_and_transformer_block"
FULL = {"LayerNorm": 3, "FeedForward": 2, "DecoderLayer": 5, "quiz_1": 1, "quiz_2": 1, "quiz_3": 1}


_CHAPTER = Chapter(ASSIGNMENT, FULL)
_src = src
correct, _with_answers, _expect = _CHAPTER.correct, _CHAPTER.with_answers, _CHAPTER.expect


def _layernorm(body: str) -> str:
    return _src('''
import torch
import torch.nn as nn


class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
''') + "\n" + textwrap.indent(_src(body), " " * 8) + "\n"


def _ffn(body: str, dropout_init: str = "self.dropout = nn.Dropout(dropout)") -> str:
    return _src(f'''
import torch
import torch.nn as nn
import torch.nn.functional as F


class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        {dropout_init}

    def forward(self, x):
''') + "\n" + textwrap.indent(_src(body), " " * 8) + "\n"


def _decoder(body: str) -> str:
    return _src('''
import torch
import torch.nn as nn


class DecoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.norm3 = LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
''') + "\n" + textwrap.indent(_src(body), " " * 8) + "\n"


# ---------------------------------------------------------------- LayerNorm mistakes
LN_STD_BASED = _layernorm('''
mean = x.mean(-1, keepdim=True)
std = x.std(-1, keepdim=True)  # mutant std_based: unbiased std, eps added to the std
return self.weight * (x - mean) / (std + self.eps) + self.bias
''')
LN_UNBIASED = _layernorm('''
mean = x.mean(-1, keepdim=True)
var = x.var(-1, keepdim=True)  # mutant unbiased_variance: divides by d_model - 1
return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias
''')
LN_ONE_PASS = _layernorm('''
mean = x.mean(-1, keepdim=True)
var = (x * x).mean(-1, keepdim=True) - mean * mean  # mutant one_pass_variance: cancels at mean 1000
return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias
''')

# ---------------------------------------------------------------- FeedForward mistakes
FFN_GELU = _ffn('''
return self.linear2(self.dropout(F.gelu(self.linear1(x))))  # mutant gelu_instead_of_relu
''')
FFN_DROPOUT_AFTER = _ffn('''
return self.dropout(self.linear2(torch.relu(self.linear1(x))))  # mutant dropout_after_linear2
''')
FFN_DROPOUT_ALWAYS = _ffn('''
h = torch.relu(self.linear1(x))
return self.linear2(F.dropout(h, self.p, training=True))  # mutant dropout_in_eval_mode
''', dropout_init="self.p = dropout")

# ---------------------------------------------------------------- DecoderLayer mistakes
DEC_POST_NORM = _decoder('''
x = self.norm1(x + self.self_attn(x, x, x, tgt_mask)[0])  # mutant post_norm
a, cross = self.cross_attn(x, memory, memory, src_mask)
x = self.norm2(x + a)
return self.norm3(x + self.ffn(x)), cross
''')
DEC_CROSS_KV_FROM_X = _decoder('''
h = self.norm1(x)
x = x + self.self_attn(h, h, h, tgt_mask)[0]
h = self.norm2(x)
a, cross = self.cross_attn(h, h, h, src_mask)  # mutant cross_kv_from_x: keys and values from the decoder
x = x + a
return x + self.ffn(self.norm3(x)), cross
''')
DEC_MASKS_SWAPPED = _decoder('''
h = self.norm1(x)
x = x + self.self_attn(h, h, h, src_mask)[0]  # mutant masks_swapped
a, cross = self.cross_attn(self.norm2(x), memory, memory, tgt_mask)
x = x + a
return x + self.ffn(self.norm3(x)), cross
''')

# Correct answers in other styles (issue 16 §2): eps in a registered buffer, and the two linears
# built inside an nn.Sequential that the named attributes point into. Full marks.
LN_EPS_BUFFER = _src('''
import torch
import torch.nn as nn


class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.register_buffer("eps", torch.tensor(eps))  # a buffer, not a parameter
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias
''')

FFN_SEQUENTIAL = _src('''
import torch
import torch.nn as nn


class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Dropout(dropout), nn.Linear(d_ff, d_model))
        self.linear1, self.linear2 = self.net[0], self.net[3]  # the names the exercise gives

    def forward(self, x):
        return self.net(x)
''')

SAMPLES = {
    "ch06_correct": ("chapter 06: the solution's answers", correct, FULL),
    "ch06_other_styles": (
        "chapter 06: LayerNorm with eps in a registered buffer, FeedForward built as an nn.Sequential that "
        "linear1/linear2 point into; the rest as the solution (full marks)",
        lambda: _with_answers(LayerNorm=LN_EPS_BUFFER, FeedForward=FFN_SEQUENTIAL),
        FULL),
    "ch06_mistakes_std_gelu_postnorm": (
        "chapter 06: LayerNorm as a * (x - mean) / (x.std() + eps) + b, FFN with GELU, a post-norm decoder layer, "
        "quiz 1 says queries from the encoder ('c')",
        lambda: _with_answers(LayerNorm=LN_STD_BASED, FeedForward=FFN_GELU, DecoderLayer=DEC_POST_NORM,
                              quiz_1='answer_1 = "c"'),
        _expect(LayerNorm=0, FeedForward=0, DecoderLayer=0, quiz_1=0)),
    "ch06_mistakes_unbiased_dropout_kv": (
        "chapter 06: unbiased variance, dropout after linear2, cross-attention keys and values from x, "
        "quiz 2 says about 0.5 ('b')",
        lambda: _with_answers(LayerNorm=LN_UNBIASED, FeedForward=FFN_DROPOUT_AFTER, DecoderLayer=DEC_CROSS_KV_FROM_X,
                              quiz_2='answer_2 = "b"'),
        _expect(LayerNorm=0, FeedForward=0, DecoderLayer=0, quiz_2=0)),
    "ch06_mistakes_onepass_evaldropout_masks": (
        "chapter 06: one-pass variance E[x²] - E[x]², dropout also in eval mode, masks swapped, "
        "quiz 3 says pre-norm has fewer parameters ('a')",
        lambda: _with_answers(LayerNorm=LN_ONE_PASS, FeedForward=FFN_DROPOUT_ALWAYS, DecoderLayer=DEC_MASKS_SWAPPED,
                              quiz_3='answer_3 = "a"'),
        _expect(LayerNorm=0, FeedForward=0, DecoderLayer=0, quiz_3=0)),
}
