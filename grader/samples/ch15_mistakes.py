"""Chapter 15 samples: the correct answers, and three submissions that each carry one realistic
mistake in the chapter's one exercise (`fit_loglog_slope`; mutant names from the bank in
utils/checks/_ch15.py) and one wrong quiz answer, so that `fit_loglog_slope` meets three distinct
mistakes while the chapter adds only four submissions to the bank (the check's own tests cover
the rest of its mutant bank).

The chapter has no derivation; every grade cell is graded automatically.

Built from the current release (``notebooks/``) with the solution's answers filled in, then wrong
answer code substituted, so the samples never drift from the source.
"""
from __future__ import annotations

from ._chapter import Chapter, src

ASSIGNMENT = "15_comparing_attention_variants"
FULL = {"fit_loglog_slope": 4, "quiz_1": 1, "quiz_2": 1, "quiz_3": 1}


_CHAPTER = Chapter(ASSIGNMENT, FULL)
_src = src
correct, _with_answers, _expect = _CHAPTER.correct, _CHAPTER.with_answers, _CHAPTER.expect


# ---------------------------------------------------------------- fit_loglog_slope mistakes
SLOPE_NO_LOGS = _src('''
import torch


def fit_loglog_slope(sizes, costs):
    x = torch.as_tensor(sizes, dtype=torch.float64)  # forgot the logs (mutant linear_not_loglog)
    y = torch.as_tensor(costs, dtype=torch.float64)
    x_c, y_c = x - x.mean(), y - y.mean()
    return float((x_c * y_c).sum() / (x_c * x_c).sum())
''')

SLOPE_END_POINTS = _src('''
import math


def fit_loglog_slope(sizes, costs):
    sizes, costs = [float(s) for s in sizes], [float(c) for c in costs]
    # the first and last points only (mutant endpoints_ratio)
    return math.log(costs[-1] / costs[0]) / math.log(sizes[-1] / sizes[0])
''')

SLOPE_COV_DDOF = _src('''
import numpy as np


def fit_loglog_slope(sizes, costs):
    x = np.log(np.asarray(sizes, dtype=np.float64))
    y = np.log(np.asarray(costs, dtype=np.float64))
    # np.cov divides by N - 1, np.var by N (mutant cov_ddof_mismatch)
    return float(np.cov(x, y)[0, 1] / np.var(x))
''')

SAMPLES = {
    "ch15_correct": ("chapter 15: the solution's answers", correct, FULL),
    "ch15_mistakes_no_logs": (
        "chapter 15: slope of cost against size without logs, quiz 1 'c'",
        lambda: _with_answers(fit_loglog_slope=SLOPE_NO_LOGS, quiz_1='answer_1 = "c"'),
        _expect(fit_loglog_slope=0, quiz_1=0)),
    "ch15_mistakes_end_points": (
        "chapter 15: slope through the first and last points only, quiz 2 'a'",
        lambda: _with_answers(fit_loglog_slope=SLOPE_END_POINTS, quiz_2='answer_2 = "a"'),
        _expect(fit_loglog_slope=0, quiz_2=0)),
    "ch15_mistakes_ddof": (
        "chapter 15: np.cov (N - 1) over np.var (N), quiz 3 says 8 key/value heads (4 query heads per key/value head)",
        lambda: _with_answers(fit_loglog_slope=SLOPE_COV_DDOF, quiz_3='answer_3 = 8'),
        _expect(fit_loglog_slope=0, quiz_3=0)),
}
