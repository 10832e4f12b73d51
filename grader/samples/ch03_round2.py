"""Hostile samples of grading's second round (issue 18), on chapter 03, each with its expected
score: no points gained, nothing leaked, every other student's score unchanged.

* links in an upload: an assignment folder that is a symbolic link to a peer's folder, and a
  notebook that is a link to the course's solution (a student folder that is a link is skipped
  before grading: tests/test_grader_round2.py);
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from .. import course
from .bank import A, ZERO, _set, _src, _with, correct


def _link_folder_to_peer(folder: Path) -> None:
    """<student>/03_.../ -> ../correct/03_... (the peer's work)."""
    shutil.rmtree(folder)
    os.symlink(os.path.join("..", "correct", A), folder)


def _link_notebook_to_solution(folder: Path) -> None:
    """<student>/03_.../03_....ipynb -> the course's own solution notebook."""
    os.symlink(course.source_path(A), folder / f"{A}.ipynb")


SAMPLES = {
    "hostile_link_peer": ("the assignment folder is a symbolic link to a peer's folder",
                          lambda: _link_folder_to_peer, ZERO),
    "hostile_link_solution": ("the notebook is a symbolic link to the course's solution",
                              lambda: _link_notebook_to_solution, ZERO),
}


# ---------------------------------------------------------------- 18 §2: forbidden calls
# Each reaches `sys` through `operator.attrgetter` with a name built from strings: the static scan
# does not see it (a first line only); the re-check child's lock-down is what refuses them.
THREAD = _src('''import math
import operator
import torch

def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    system = operator.attrgetter("sy" + "s")(torch)
    threads = system.modules["thread" + "ing"]
    functional = system.modules["torch.nn.functional"]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    if dropout_p > 0:
        w = torch.nn.functional.dropout(w, dropout_p)
        return w @ v, w
    box = {}

    def work():
        box["out"] = functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    t = threads.Thread(target=work)
    t.start()
    t.join()
    return box["out"].nan_to_num(0.0), w''')

UNLOCK = _src('''import math
import operator
import torch

class Settings:
    modules = operator.attrgetter("sy" + "s")(torch).modules
    checks = modules["utils" + ".checks"]
    checks.EXERCISES["scaled_dot_product_attention"].forbidden = ()
    forbid = modules["utils" + ".checks._forbid"]
    forbid.SDPA.funcs = ()
    forbid.SDPA.aten = ()
    forbid.MHA.funcs = ()
    forbid.MHA.aten = ()
    saved = torch.nn.functional.scaled_dot_product_attention

def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    if dropout_p > 0:
        w = torch.nn.functional.dropout(w, dropout_p)
        return w @ v, w
    out = Settings.saved(q, k, v, attn_mask=mask)
    return out.nan_to_num(0.0), w''')

SAMPLES.update({
    "hostile_thread": ("from-scratch SDPA calls F.scaled_dot_product_attention in a new thread (threading via sys.modules)",
                       lambda: _set(correct(), "scaled_dot_product_attention", THREAD),
                       _with(scaled_dot_product_attention=0)),
    "hostile_unlock": ("a class body empties SDPA's forbidden lists at definition time and saves F.scaled_dot_product_attention",
                       lambda: _set(correct(), "scaled_dot_product_attention", UNLOCK),
                       _with(scaled_dot_product_attention=0)),
})
