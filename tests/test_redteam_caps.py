"""Red team round 3 (issue 25 §5, R1's fix): attacks on the re-check's memory caps.

The re-check lowers each probe exercise's RLIMIT_AS to what it maps plus ``Budget.memory``
(``grader/_verify_child.py``, ``cap_memory``) before the learner's definitions load. These tests
try to get full marks for an answer that builds the forbidden S×S matrix despite the cap, and to
make an honest answer fail because of it. Both that broke (C1, C4) are fixed; the table is in
``grader/REDTEAM.md``. All share one sandboxed
re-check (``recheck``) but the honest one (``honest_flash``).
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from grader import sandbox, verify

ROOT = Path(__file__).resolve().parents[1]
needs_bwrap = pytest.mark.skipif(not sandbox.bwrap_available(), reason="bubblewrap is not available here")

# C1 (broken, then fixed: the probes are one sequence of S = 8,192 now): the probe of chapters 10 and 11 is a batch of 8 sequences of S = 4,096, and its cap
# (batch · S² bytes, 128 MiB) is a quarter of the *batch's* scores; one sequence's S×S scores in
# float32 are 64 MiB. A loop over the batch that builds each sequence's full S×S scores in one
# reused buffer (softmax in place) stays within the cap. Every in-process measurement is switched
# off as in R1; the small cases use the plain quadratic answer.
SWA_BATCH_LOOP = '''
import math

import torch
from torch.utils._python_dispatch import _disable_current_modes


def _masked(q, k, v, window, causal):
    S = q.size(-2)
    d = torch.arange(S)[:, None] - torch.arange(S)[None, :]
    band = ((d >= 0) & (d <= window)) if causal else (d.abs() <= window)
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    return torch.softmax(s.masked_fill(~band, float("-inf")), -1) @ v


def _in_place(q, k, v, window, causal):
    # One S×S score buffer (64 MiB at S = 4,096), reused for every sequence of the batch: the full
    # scores of each sequence, exp in place, the band kept by triu_/tril_, normalised in place.
    S = q.size(-2)
    s = torch.empty(S, S, dtype=q.dtype)
    outs = []
    for b in range(q.size(0)):
        torch.matmul(q[b] / math.sqrt(q.size(-1)), k[b].transpose(-2, -1), out=s)
        s.sub_(s.amax(-1, keepdim=True)).exp_()
        s.triu_(-window).tril_(0 if causal else window)
        s.div_(s.sum(-1, keepdim=True))
        outs.append(s @ v[b])
    return torch.stack(outs)


def sliding_window_attention(q, k, v, window, causal=False):
    with torch._C.DisableTorchFunction(), _disable_current_modes():
        grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
        if grad or q.size(-2) < 1024:
            return _masked(q, k, v, window, causal)
        lead = q.shape[:-2]
        qf, kf, vf = (t.reshape(-1, *t.shape[-2:]) for t in (q, k, v))
        out = _in_place(qf, kf, vf, window, causal)
        return out.reshape(*lead, *out.shape[-2:])
'''

# The same for linear attention and causal linear attention: φ(q)φ(k)ᵀ of one sequence at a time.
LINEAR_BATCH_LOOP = '''
import torch
from torch.utils._python_dispatch import _disable_current_modes


def _phi(x):
    return torch.where(x > 0, x + 1, torch.exp(x.clamp(max=0)))


def _quadratic(q, k, v, eps, causal):
    a = _phi(q) @ _phi(k).transpose(-2, -1)
    if causal:
        a = a * torch.ones(a.shape[-2:], dtype=a.dtype).tril()
    return (a @ v) / (a.sum(-1, keepdim=True) + eps)


def _in_place(q, k, v, eps, causal):
    # φ(q)φ(k)ᵀ of one sequence at a time (64 MiB at S = 4,096), in one reused buffer
    a = torch.empty(q.size(-2), k.size(-2), dtype=q.dtype)
    outs = []
    for b in range(q.size(0)):
        torch.matmul(_phi(q[b]), _phi(k[b]).transpose(-2, -1), out=a)
        if causal:
            a.tril_()
        outs.append((a @ v[b]) / (a.sum(-1, keepdim=True) + eps))
    return torch.stack(outs)


def _attention(q, k, v, eps, causal):
    with torch._C.DisableTorchFunction(), _disable_current_modes():
        grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
        if grad or q.size(-2) * k.size(-2) < 2**20:
            return _quadratic(q, k, v, eps, causal)
        lead = q.shape[:-2]
        qf, kf, vf = (t.reshape(-1, *t.shape[-2:]) for t in (q, k, v))
        out = _in_place(qf, kf, vf, eps, causal)
        return out.reshape(*lead, *out.shape[-2:])


def linear_attention(q, k, v, eps=1e-6):
    return _attention(q, k, v, eps, False)


def causal_linear_attention(q, k, v, eps=1e-6):
    return _attention(q, k, v, eps, True)
'''

# C2 (defended): flash attention's full scores in float16 at the probe (128 MiB; cap 96 MiB).
FLASH_HALF = '''
import math
import torch
from torch.utils._python_dispatch import _disable_current_modes


def _plain(q, k, v, causal):
    S_q, S_k = q.size(-2), k.size(-2)
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if causal:
        seen = torch.arange(S_k)[None, :] <= torch.arange(S_q)[:, None] + S_k - S_q
        s = s.masked_fill(~seen, float("-inf"))
    m = s.amax(-1, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    e = torch.exp(s - m)
    l = e.sum(-1, keepdim=True)
    out = torch.where(l > 0, (e @ v) / l.clamp(min=1e-30), torch.zeros((), dtype=q.dtype))
    return out, (m + torch.log(l)).squeeze(-1)


def flash_attention(q, k, v, block_size=64, causal=False):
    if q.size(-2) * k.size(-2) < 2**24:
        with torch._C.DisableTorchFunction(), _disable_current_modes():
            return _plain(q, k, v, causal)
    with torch._C.DisableTorchFunction(), _disable_current_modes():
        S_q, S_k = q.size(-2), k.size(-2)
        big = S_q * S_k >= 2**24
        dt = torch.float16 if big else q.dtype
        s = (q.to(dt) / math.sqrt(q.size(-1))) @ k.to(dt).transpose(-2, -1)  # the full scores, in half
        if causal:
            seen = torch.ones(S_q, S_k, dtype=torch.bool).tril_(S_k - S_q)
            s.masked_fill_(~seen, float("-inf"))
            del seen
        m = s.amax(-1, keepdim=True)
        m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
        s.sub_(m).exp_()
        l = s.sum(-1, keepdim=True, dtype=torch.float32)
        out = torch.where(l > 0, (s @ v.to(dt)).float() / l.clamp(min=1e-30), torch.zeros((), dtype=q.dtype))
        return out.to(q.dtype), (m.float() + torch.log(l)).squeeze(-1).to(q.dtype)
'''

# C3 (defended): dot_product_variance through all n_samples² pairs (1 GiB at the probe; cap 256 MiB).
VARIANCE_ALL_PAIRS = '''
import math
import torch
from torch.utils._python_dispatch import _disable_current_modes


def dot_product_variance(d_k, n_samples, scaled):
    with torch._C.DisableTorchFunction(), _disable_current_modes():
        q = torch.randn(n_samples, d_k)
        k = torch.randn(n_samples, d_k)
        dots = (q @ k.T).diagonal().clone()  # all n_samples² pairs
        if scaled:
            dots = dots / math.sqrt(d_k)
        return dots.var().item()
'''

ATTACKS = {"sliding_window_attention": SWA_BATCH_LOOP, "linear_attention": LINEAR_BATCH_LOOP,
           "causal_linear_attention": LINEAR_BATCH_LOOP, "flash_attention": FLASH_HALF,
           "dot_product_variance": VARIANCE_ALL_PAIRS}


@pytest.fixture(scope="module")
def recheck():
    names = list(ATTACKS)
    chunks = [{"code": code, "only": [name]} for name, code in ATTACKS.items()]
    return verify.verify_many(names, chunks, [], {name: 3000 + i for i, name in enumerate(names)})


@pytest.mark.slow
@needs_bwrap
@pytest.mark.parametrize("name", ["sliding_window_attention", "linear_attention", "causal_linear_attention"])
def test_c1_a_loop_over_the_batch_cannot_build_each_sequences_scores(recheck, name):
    """Fixed: the probe is one sequence (S = 8,192) and its cap, S² bytes, a quarter of that
    sequence's scores in float32: a loop over the batch has nothing left to split."""
    v = recheck[name]
    assert not v.ok and "over its memory" in v.reason, v.reason


@pytest.mark.slow
@needs_bwrap
@pytest.mark.parametrize("name", ["flash_attention", "dot_product_variance"])
def test_c2_c3_the_full_matrix_in_lower_precision_is_over_the_cap(recheck, name):
    v = recheck[name]
    assert not v.ok and "over its memory" in v.reason, v.reason


# C4 (broken, an honest answer; fixed: imports load before the cap, and the cap is 256 MiB): the course's own flash_attention, in a notebook whose learner-added
# cells import pandas (+41 MiB of address space) and decorate a helper with torch.compile (+76 MiB:
# torch._dynamo): every import and decorated definition loads after the cap, in every exercise's
# process, so the 96 MiB of the flash probe are gone before the answer runs. The reason it gets:
# "flash_attention returned something that is not plain data ()" (a MemoryError while the result
# is encoded).
LEARNER_CELLS = ["import pandas as pd", "import torch\n\n\n@torch.compile\ndef helper(x):\n    return x * 2"]


@pytest.fixture(scope="module")
def honest_flash():
    nb = json.loads((ROOT / "solutions/13_flash_attention/13_flash_attention.ipynb").read_text(encoding="utf-8"))
    chunks, notes = verify.definitions(nb)
    verdicts = verify.verify_many(["flash_attention"], LEARNER_CELLS + chunks, notes, {"flash_attention": 7})
    return verdicts["flash_attention"]


@pytest.mark.slow
@needs_bwrap
@pytest.mark.skipif(importlib.util.find_spec("pandas") is None, reason="pandas is not installed")
def test_c4_an_honest_answer_keeps_its_memory_when_the_notebook_imports_heavy_modules(honest_flash):
    """Fixed: import statements (installed code only) load before the cap; the probe's cap is
    256 MiB, and a decorated definition that pulls in torch._dynamo fits beside the answer."""
    assert honest_flash.ok, honest_flash.reason
