"""The sample bank: submissions with known grades, built from the current release.

Each sample is a transformation of the learner release of chapter 03 (so the bank never drifts
from the source): the correct answers come from ``solutions/``, mistakes and attacks are written
here. ``EXPECTED`` gives each sample's score per exercise; ``make test`` grades the whole bank and
compares (``tests/test_grader.py``). ``python -m grader samples --out DIR`` writes the bank as
``DIR/<student_id>/<assignment>/<assignment>.ipynb`` for an instructor to look at or grade.

Per-chapter samples: any module ``grader/samples/chNN_*.py`` defining ``SAMPLES`` (same format:
``{student_id: (what it is, build() -> notebook dict | bytes | None, {exercise: expected score})}``)
and, when it is not chapter 03, ``ASSIGNMENT = "<NN_name>"`` is discovered and added to the bank;
student ids must be unique across modules. No central file needs editing.
"""
from __future__ import annotations

import copy
import json
import textwrap
from pathlib import Path

from .. import course
from ..restore import grade_id, is_answer

A = "03_scaled_dot_product_attention"
FULL = {"dot_product_variance": 3, "scaled_dot_product_attention": 5, "quiz_1": 1, "quiz_2": 1, "quiz_3": 1,
        "derivation_variance": 0}


def _src(code: str) -> str:
    return textwrap.dedent(code).strip("\n")


SDPA_HEADER = "def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):\n"

NO_SCALING = _src('''
import torch

def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    scores = q @ k.transpose(-2, -1)  # forgot / sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    if dropout_p > 0:
        w = torch.nn.functional.dropout(w, dropout_p)
    return w @ v, w
''')

MASK_AFTER_SOFTMAX = _src('''
import math
import torch

def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1)
    if mask is not None:
        w = w * mask  # masked after the softmax: rows no longer sum to 1
    if dropout_p > 0:
        w = torch.nn.functional.dropout(w, dropout_p)
    return w @ v, w
''')

NEG_1E9 = _src('''
import math
import torch

def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e9)  # a fully masked row becomes uniform
    w = torch.softmax(scores, dim=-1)
    if dropout_p > 0:
        w = torch.nn.functional.dropout(w, dropout_p)
    return w @ v, w
''')

VARIANCE_STD = _src('''
import math
import torch

def dot_product_variance(d_k, n_samples, scaled):
    q, k = torch.randn(n_samples, d_k), torch.randn(n_samples, d_k)
    dots = (q * k).sum(-1)
    if scaled:
        dots = dots / math.sqrt(d_k)
    return dots.std().item()  # the standard deviation, not the variance
''')

VARIANCE_BIASED = _src('''
import math
import torch

def dot_product_variance(d_k, n_samples, scaled):
    q, k = torch.randn(n_samples, d_k), torch.randn(n_samples, d_k)
    dots = (q * k).sum(-1) / (math.sqrt(d_k) if scaled else 1.0)
    return ((dots - dots.mean()) ** 2).mean().item()  # divides by n_samples, not n_samples - 1
''')

VARIANCE_FLOAT64_DRAWS = _src('''
import math
import torch

def dot_product_variance(d_k, n_samples, scaled):
    q = torch.randn(n_samples, d_k, dtype=torch.float64)  # float64 draws: other numbers than the prompt's
    k = torch.randn(n_samples, d_k, dtype=torch.float64)
    dots = (q * k).sum(-1)
    if scaled:
        dots = dots / math.sqrt(d_k)
    return dots.var().item()
''')

CALLS_TORCH_SDPA = _src('''
import torch.nn.functional as F

def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
    return out, None
''')

CALLS_REFERENCE = _src('''
from utils.reference import scaled_dot_product_attention as _reference

def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    return _reference(q, k, v, mask, dropout_p)
''')

# Wrong answer + the learner's kernel patched so that every in-kernel check passes.
PATCH_CHECKS = _src('''
import torch
import utils.checks
import utils.checks._core as core

torch.allclose = lambda *args, **kwargs: True
core.compare = lambda *args, **kwargs: None
utils.checks.check_scaled_dot_product_attention = lambda *args, **kwargs: print("✅ all cases passed")
''')

# Wrong values wrapped in a tensor subclass that claims equality with anything.
LYING_SUBCLASS = _src('''
import torch

class Agreeable(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (torch.Tensor.__sub__, torch.sub, torch.Tensor.sub):
            return torch.zeros(())
        if func in (torch.Tensor.__eq__, torch.eq, torch.isclose):
            return torch.ones((), dtype=torch.bool)
        if func is torch.allclose:
            return True
        return super().__torch_function__(func, types, args, kwargs or {})

def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    out = torch.zeros(*q.shape[:-1], v.shape[-1]).as_subclass(Agreeable)
    w = torch.zeros(*q.shape[:-1], k.shape[-2]).as_subclass(Agreeable)
    return out, w
''')


def _release() -> dict:
    return course.load_json(course.release_path(A))


def _solution() -> dict:
    return course.load_json(course.source_path(A))


def _answers() -> dict:
    return {grade_id(c): c["source"] for c in _solution()["cells"] if grade_id(c) and is_answer(c)}


def correct() -> dict:
    nb = _release()
    answers = _answers()
    for cell in nb["cells"]:
        if grade_id(cell) in answers:
            cell["source"] = answers[grade_id(cell)]
    return nb


def _set(nb: dict, gid: str, src: str) -> dict:
    for cell in nb["cells"]:
        if grade_id(cell) == gid:
            cell["source"] = src
            return nb
    raise KeyError(gid)


def _index(nb: dict, gid: str) -> int:
    return next(i for i, c in enumerate(nb["cells"]) if grade_id(c) == gid)


def _insert_after(nb: dict, gid: str, src: str) -> dict:
    cell = {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": src}
    nb["cells"].insert(_index(nb, gid) + 1, cell)
    return nb


def _append(nb: dict, src: str) -> dict:
    nb["cells"].append({"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": src})
    return nb


def _delete(nb: dict, gid: str) -> dict:
    del nb["cells"][_index(nb, gid)]
    return nb


def _other_assignment() -> dict:
    nb = copy.deepcopy(_release())
    for i, cell in enumerate(nb["cells"]):
        meta = cell.get("metadata", {}).get("nbgrader")
        if meta and meta.get("grade_id"):
            meta["grade_id"] = f"other_{i}"
    return nb


def _with(**changes) -> dict:
    d = dict(FULL)
    d.update(changes)
    return d


ZERO = {k: 0 for k in FULL}

# student_id: (what it is, how to build it, expected score per exercise)
SAMPLES = {
    "correct": ("the solution's answers", correct, FULL),
    "untouched": ("the release as given: every answer is the stub", _release, ZERO),
    "mistake_no_scaling": ("SDPA without 1/sqrt(d_k)",
                           lambda: _set(correct(), "scaled_dot_product_attention", NO_SCALING),
                           _with(scaled_dot_product_attention=0)),
    "mistake_mask_after_softmax": ("SDPA masks after the softmax; dot_product_variance draws in float64",
                                   lambda: _set(_set(correct(), "scaled_dot_product_attention", MASK_AFTER_SOFTMAX),
                                                "dot_product_variance", VARIANCE_FLOAT64_DRAWS),
                                   _with(scaled_dot_product_attention=0, dot_product_variance=0)),
    "mistake_neg_1e9": ("SDPA fills with -1e9: fully masked rows become uniform; the biased variance",
                        lambda: _set(_set(correct(), "scaled_dot_product_attention", NEG_1E9),
                                     "dot_product_variance", VARIANCE_BIASED),
                        _with(scaled_dot_product_attention=0, dot_product_variance=0)),
    "mistake_variance_std": ("dot_product_variance returns the standard deviation",
                             lambda: _set(correct(), "dot_product_variance", VARIANCE_STD),
                             _with(dot_product_variance=0)),
    "mistake_quiz": ("wrong self-check answers",
                     lambda: _set(_set(correct(), "quiz_1", 'answer_1 = "zzz"'), "quiz_2", "answer_2 = None"),
                     _with(quiz_1=0, quiz_2=0)),
    "forbidden_torch_sdpa": ("SDPA calls F.scaled_dot_product_attention",
                             lambda: _set(correct(), "scaled_dot_product_attention", CALLS_TORCH_SDPA),
                             _with(scaled_dot_product_attention=0)),
    "forbidden_reference": ("SDPA calls utils.reference",
                            lambda: _set(correct(), "scaled_dot_product_attention", CALLS_REFERENCE),
                            _with(scaled_dot_product_attention=0)),
    "tamper_patch_checks": ("wrong SDPA, and the kernel's checks, compare and torch.allclose patched to pass",
                            lambda: _insert_after(_set(correct(), "scaled_dot_product_attention", NO_SCALING),
                                                  "scaled_dot_product_attention", PATCH_CHECKS),
                            _with(scaled_dot_product_attention=0)),
    "tamper_lying_subclass": ("SDPA returns a tensor subclass that claims to equal anything",
                              lambda: _set(correct(), "scaled_dot_product_attention", LYING_SUBCLASS),
                              _with(scaled_dot_product_attention=0)),
    "tamper_edited_test": ("wrong SDPA, and its test cell edited to `pass`",
                           lambda: _set(_set(correct(), "scaled_dot_product_attention", NO_SCALING),
                                        "test_scaled_dot_product_attention", "pass"),
                           _with(scaled_dot_product_attention=0)),
    "tamper_deleted_tests": ("correct answers, every test cell deleted",
                             lambda: _delete_tests(correct()),
                             FULL),
    "bad_corrupt_json": ("the file is not valid JSON", lambda: b'{"cells": [ this is not json', ZERO),
    "bad_missing": ("no notebook submitted", lambda: None, ZERO),
    "bad_misnamed": ("the correct notebook saved as Untitled.ipynb", correct, FULL),
    "bad_other_assignment": ("another assignment's notebook in this folder", _other_assignment, ZERO),
    "bad_kernel_exit": ("os._exit in the SDPA answer cell: the kernel dies there; the quizzes after it keep their points",
                        lambda: _set(correct(), "scaled_dot_product_attention", "import os\nos._exit(1)"),
                        _with(scaled_dot_product_attention=0)),
    "bad_infinite_loop": ("an infinite loop in the SDPA answer cell",
                          lambda: _set(correct(), "scaled_dot_product_attention", "while True:\n    pass"),
                          _with(scaled_dot_product_attention=0)),
    "bad_huge_alloc": ("a 20 GB allocation in an extra cell, answers correct",
                       lambda: _insert_after(correct(), "dot_product_variance",
                                             "import torch\nx = torch.empty(20 * 2**30, dtype=torch.uint8)\nx.fill_(1)"),
                       FULL),
    "bad_fork_storm": ("a fork storm at the end, answers correct",
                       lambda: _append(correct(), "import os\nwhile True:\n    os.fork()"), FULL),
    "bad_huge_print": ("a 100 MB print in an extra cell, answers correct",
                       lambda: _insert_after(correct(), "dot_product_variance", 'print("x" * 100_000_000)'), FULL),
}


def _delete_tests(nb: dict) -> dict:
    nb["cells"] = [c for c in nb["cells"] if not (grade_id(c) or "").startswith("test_")]
    return nb


ASSIGNMENT_OF: dict = {}


def _discover() -> None:
    import importlib
    import pkgutil

    from . import __path__ as here

    for info in sorted(pkgutil.iter_modules(here), key=lambda m: m.name):
        if not info.name.startswith("ch"):
            continue
        mod = importlib.import_module(f"{__package__}.{info.name}")
        for student, sample in getattr(mod, "SAMPLES", {}).items():
            if student in SAMPLES:
                raise ValueError(f"sample id {student!r} defined twice")
            SAMPLES[student] = sample
            ASSIGNMENT_OF[student] = getattr(mod, "ASSIGNMENT", A)


_discover()


def recheck_only() -> list[str]:
    """The samples ``make test`` judges through the re-check alone (``tests/test_bank_recheck.py``),
    not through the whole pipeline: in every chapter but 03, the mistakes submissions after the
    first, and the correct answers written in other styles. Each chapter keeps its correct answers,
    its first mistakes submission and its attacks in the graded bank (``tests/test_grader.py``); every
    chapter-03 sample is graded, since the attacks on the pipeline are there. The re-check is the
    grade of every code exercise, so what these samples test is tested there, at a third of the cost."""
    seen, out = set(), []
    for student in SAMPLES:
        assignment = ASSIGNMENT_OF.get(student, A)
        if assignment == A and "_other_styles" not in student:
            continue
        if "_mistakes_" in student:
            if assignment in seen:
                out.append(student)
            seen.add(assignment)
        elif "_other_styles" in student:
            out.append(student)
    return out


def materialize(out: Path, only=None) -> Path:
    """Write every sample (or those in ``only``) as <out>/<student_id>/<assignment>/<notebook>."""
    out.mkdir(parents=True, exist_ok=True)
    for student, (_, build, _) in SAMPLES.items():
        if only is not None and student not in only:
            continue
        folder = out / student / ASSIGNMENT_OF.get(student, A)
        folder.mkdir(parents=True, exist_ok=True)
        content = build()
        if content is None:
            continue
        if callable(content):  # a sample that lays out its own folder (links: ch03_round2.py)
            content(folder)
            continue
        assignment = ASSIGNMENT_OF.get(student, A)
        name = "Untitled.ipynb" if student == "bad_misnamed" else f"{assignment}.ipynb"
        data = content if isinstance(content, bytes) else json.dumps(content, indent=1).encode()
        (folder / name).write_bytes(data)
    return out
