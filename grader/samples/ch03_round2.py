"""Hostile samples of grading's second round (issue 18), on chapter 03, each with its expected
score: no points gained, nothing leaked, every other student's score unchanged.

* links in an upload: an assignment folder that is a symbolic link to a peer's folder, and a
  notebook that is a link to the course's solution (a student folder that is a link is skipped
  before grading: tests/test_grader_round2.py);
* a noise-only dot_product_variance (closed form x chi-square noise) and a CPU starver (hostile_thread);
* forbidden calls: F.scaled_dot_product_attention from a new thread (hostile_thread), and through
  a reference saved by a class body that also empties the check's forbidden lists (hostile_unlock;
  chapter 08's saved autograd engine is in ch08_round2.py);
* bombs and scripts (hostile_unlock, beside the unlock): a decompression bomb as a re-check
  result, a sanitiser bomb, javascript:/data: links, SVG and CSS in the hand-graded derivation and
  in a Markdown output.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from .. import course
from .bank import A, ZERO, _append, _set, _src, _with, correct


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

# ------------------------------------------------------ 18 §3 and §4: bombs and script links
# dot_product_variance writes a zip whose compressed member expands to 256 MiB of zeros as its
# result file, then exits before the child can overwrite it: refused before torch.load reads it.
DECOMPRESSION_BOMB = _src('''
import operator
import torch

def dot_product_variance(d_k, n_samples, scaled):
    modules = operator.attrgetter("sy" + "s")(torch).modules
    os_ = modules["o" + "s"]
    zipfile = modules["importlib"].import_module("zipfile")
    results = [name for name in os_.listdir(".") if name.startswith("outputs_")]
    if not results:  # in the learner's kernel: nothing to forge (and the kernel lives on)
        return 0.0
    for name in results:
        if True:
            with zipfile.ZipFile(name, "w", zipfile.ZIP_DEFLATED) as zf:
                with zf.open("archive/data.pkl", "w", force_zip64=True) as f:
                    block = bytes(2**20)
                    for _ in range(256):
                        f.write(block)
    os_._exit(0)
''')

# The hand-graded derivation and a Markdown output carry javascript:, data: and entity-encoded
# links, SVG, style and event handlers; an HTML output holds 20,000 nested tags (bleach took 352 s).
SCRIPT_DERIVATION = _src('''
The variance is d_k. [Click for the proof](javascript:fetch('/api/x').then(alert)) and
[also here](jav&#x61;script:alert(2)), ![figure](data:image/svg+xml;base64,PHN2ZyBvbmxvYWQ9YWxlcnQoMyk+),
[ref][r], <svg onload=alert(4)></svg> <style>body{display:none}</style> <a href="javascript:alert(5)">x</a>

[r]: javascript:alert(6)
''')

SANITISER_BOMB = "\n\n" + '<b title="x">' * 20000 + "deep" + "</b>" * 20000  # 340 KB in the derivation

SCRIPT_OUTPUTS = _src('''
from IPython.display import HTML, Markdown, display
display(Markdown("[see the result](javascript:alert(7)) ![x](data:text/html;base64,PHNjcmlwdD4=)"))
display(HTML('<b title="x">' * 20000 + "bomb" + "</b>" * 20000))
''')

# The closed form times chi-square noise, never sampling q or k (kept 3/3 against the statistical
# judge): the check now compares with the value the prompt's own draws give (utils/checks/_ch03.py).
NOISE_ONLY = _src('''
import math
import torch

def dot_product_variance(d_k, n_samples, scaled):
    theory = 1.0 if scaled else float(d_k)
    chi2 = (torch.randn(n_samples - 1) ** 2).sum().item()  # chi-square with n - 1 degrees of freedom
    return theory * chi2 / (n_samples - 1)
''')

# 240 busy loops, each in its own session, for 4 s at the end of the notebook (after every test
# cell): the sandbox's cgroup gives them one core together, so other students' grading goes on.
# (They stop by themselves to keep the bank cheap; loops that never stop are killed with the
# sandbox: tests/test_sandbox.py, tests/test_grader_round2.py.)
CPU_STARVER = _src('''
import subprocess, time
loops = []
for _ in range(240):
    try:
        loops.append(subprocess.Popen(["timeout", "4", "sh", "-c", "while :; do :; done"], start_new_session=True))
    except OSError:
        break
time.sleep(5)
''')

SAMPLES.update({
    "hostile_thread": ("from-scratch SDPA calls F.scaled_dot_product_attention in a new thread (threading via "
                       "sys.modules); dot_product_variance returns the closed form x chi-square noise; 240 busy loops "
                       "in their own sessions at the end of the notebook",
                       lambda: _append(_set(_set(correct(), "scaled_dot_product_attention", THREAD),
                                            "dot_product_variance", NOISE_ONLY), CPU_STARVER),
                       _with(scaled_dot_product_attention=0, dot_product_variance=0)),
    "hostile_unlock": ("a class body empties SDPA's forbidden lists at definition time and saves "
                       "F.scaled_dot_product_attention; dot_product_variance hands back a decompression bomb; "
                       "javascript:/data: links, SVG and CSS in the derivation and a Markdown output; a sanitiser "
                       "bomb of 20,000 nested tags",
                       lambda: _append(_set(_set(_set(correct(), "scaled_dot_product_attention", UNLOCK),
                                                 "dot_product_variance", DECOMPRESSION_BOMB),
                                            "derivation_variance", SCRIPT_DERIVATION + SANITISER_BOMB), SCRIPT_OUTPUTS),
                       _with(scaled_dot_product_attention=0, dot_product_variance=0)),
})
