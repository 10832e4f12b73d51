"""Hostile sample of grading's second round (issue 18 §2) on chapter 08: a class body saves
``Variable._execution_engine`` at definition time, before the check would swap it out, and
``sdpa_backward`` takes its gradients from autograd through the saved engine. The re-check child
replaces the engine before any learner code runs, so what the class body saves is the
replacement: 0 points. Expected scores: the other exercises keep theirs."""
from __future__ import annotations

from ._chapter import src
from .ch08_mistakes import ASSIGNMENT, FULL, _expect, _with_answers  # noqa: F401 (ASSIGNMENT: discovery)

ENGINE = src('''import operator
import torch

class Saved:
    engine = operator.attrgetter("autograd.variable.Variable._execution" + "_engine")(torch)

def sdpa_backward(q, k, v, grad_out, mask=None):
    q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
    scores = q @ k.transpose(-2, -1) / q.size(-1) ** 0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    e = (scores - scores.amax(dim=-1, keepdim=True).clamp_min(-1e30)).exp()
    out = (e / e.sum(dim=-1, keepdim=True).clamp_min(1e-30)) @ v
    grads = Saved.engine.run_backward((out,), (grad_out,), False, False, (q, k, v), False, False)
    return tuple(g if g is not None else torch.zeros_like(t) for g, t in zip(grads, (q, k, v)))''')

SAMPLES = {
    "hostile_saved_engine": ("sdpa_backward takes autograd's gradients through an engine saved by a class body",
                             lambda: _with_answers(sdpa_backward=ENGINE),
                             # the Function calls this sdpa_backward in its backward: it fails too
                             _expect(sdpa_backward=0, ScaledDotProductAttentionFunction=0)),
}
