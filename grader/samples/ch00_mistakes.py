"""Chapter 00 samples: the correct answers, and three submissions that each carry one realistic
mistake per exercise (names from the mutant banks in utils/checks/_ch00.py) and one wrong quiz
answer, so that the chapter adds only four submissions to the bank.

Built from the current release (``notebooks/``) with the solution's answers filled in, then wrong
answer code substituted, so the samples never drift from the source.
"""
from __future__ import annotations

from ._chapter import Chapter, src

ASSIGNMENT = "00_foundations"
FULL = {"softmax": 4, "logsumexp": 3, "quiz_1": 1, "quiz_2": 1, "quiz_3": 1, "derivation_stable_shift": 0}


_CHAPTER = Chapter(ASSIGNMENT, FULL)
_src = src
correct, _with_answers, _expect = _CHAPTER.correct, _CHAPTER.with_answers, _CHAPTER.expect


# ---------------------------------------------------------------- softmax mistakes
SOFTMAX_NO_MAX = _src('''
import torch


def softmax(x, dim=-1):
    e = torch.exp(x)  # the textbook formula: exp overflows for x > 88.7 (mutant no_max_subtraction)
    return e / e.sum(dim=dim, keepdim=True)
''')

SOFTMAX_IGNORES_DIM = _src('''
import torch


def softmax(x, dim=-1):
    m = x.max(dim=-1, keepdim=True).values  # always the last dim (mutant ignores_dim)
    e = torch.exp(x - m)
    return e / e.sum(dim=-1, keepdim=True)
''')

SOFTMAX_INPLACE = _src('''
import torch


def softmax(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    e /= e.sum(dim=dim, keepdim=True)  # in place: exp saved e for the backward (mutant inplace_normalise)
    return e
''')

# ---------------------------------------------------------------- logsumexp mistakes
LSE_KEEPDIM = _src('''
import torch


def logsumexp(x, dim=-1):
    m = x.amax(dim=dim, keepdim=True)
    return m + torch.log(torch.exp(x - m).sum(dim=dim, keepdim=True))  # keeps dim (mutant keepdim)
''')

LSE_SQUEEZE_ALL = _src('''
import torch


def logsumexp(x, dim=-1):
    m = x.amax(dim=dim, keepdim=True)
    out = m + torch.log(torch.exp(x - m).sum(dim=dim, keepdim=True))
    return out.squeeze()  # removes every size-1 dim (mutant squeeze_every_dim)
''')

LSE_MAX_NOT_ADDED = _src('''
import torch


def logsumexp(x, dim=-1):
    m = x.amax(dim=dim, keepdim=True)
    return torch.log(torch.exp(x - m).sum(dim=dim))  # forgot "+ m" (mutant max_not_added_back)
''')

SAMPLES = {
    "ch00_correct": ("chapter 00: the solution's answers", correct, FULL),
    "ch00_mistakes_overflow": (
        "chapter 00: softmax without the max (overflow), logsumexp keeps dim, quiz 1 wrong ('a'), "
        "quiz 2 right as an expression (math.log(2): the prompt accepts an expression, issue 16 §3)",
        lambda: _with_answers(softmax=SOFTMAX_NO_MAX, logsumexp=LSE_KEEPDIM, quiz_1='answer_1 = "a"',
                              quiz_2="import math\n\nanswer_2 = math.log(2)"),
        _expect(softmax=0, logsumexp=0, quiz_1=0)),
    "ch00_mistakes_dims": (
        "chapter 00: softmax ignores dim, logsumexp squeezes every size-1 dim, quiz 2 answers c = 0 (lse taken for the max)",
        lambda: _with_answers(softmax=SOFTMAX_IGNORES_DIM, logsumexp=LSE_SQUEEZE_ALL, quiz_2="answer_2 = 0.0"),
        _expect(softmax=0, logsumexp=0, quiz_2=0)),
    "ch00_mistakes_inplace": (
        "chapter 00: softmax normalises in place (gradient breaks), logsumexp forgets to add the max back, quiz 3 wrong ('d')",
        lambda: _with_answers(softmax=SOFTMAX_INPLACE, logsumexp=LSE_MAX_NOT_ADDED, quiz_3='answer_3 = "d"'),
        _expect(softmax=0, logsumexp=0, quiz_3=0)),
}
