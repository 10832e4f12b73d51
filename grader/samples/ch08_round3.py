"""Hostile sample of grading's third round (issue 25 §1) on chapter 08: the attack that got
``sdpa_backward`` 5/5 with a stub. A class body, which runs in every exercise's re-check process,
computes gradients with autograd where autograd is allowed (ScaledDotProductAttentionFunction's
process) and tries to hand them in as sdpa_backward's result through every channel it can find
(files by every name the old design used, every descriptor of its process, the fork server's);
sdpa_backward itself exits before writing anything. Each process now has one channel, opened by
the grader for that exercise alone: sdpa_backward has no result and scores 0; the Function, which
calls this sdpa_backward in its backward, too; softmax_backward (correct) keeps its points, its
process having written nothing on its own channel but its own result."""
from __future__ import annotations

from ._chapter import src
from .ch08_mistakes import ASSIGNMENT, _expect, _with_answers  # noqa: F401 (ASSIGNMENT: discovery)

FORGE = src(r'''import operator
import torch


class Forge:
    system = operator.attrgetter("s" + "ys")(torch)
    os_ = system.modules["o" + "s"]
    q = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    grads = None
    try:  # autograd works only where it is allowed (the Function's process)
        out = torch.softmax(q @ q.transpose(-2, -1), dim=-1) @ q
        grads = torch.autograd.grad(out.sum(), (q,))
    except Exception:
        pass
    if grads is not None:
        forged = b"GRW1" + (64).to_bytes(8, "little") + b'{"value":{"d":{"outputs":[]}},"tensors":[]}'
        for folder in (".", "/tmp", "/dev/shm"):
            for name in ("outputs_1.pt", "notes.json"):
                try:
                    with open(os_.path.join(folder, name), "wb") as f:
                        f.write(forged)
                except OSError:
                    pass
        try:
            pids = [os_.getppid()] + [int(p) for p in os_.listdir("/proc") if p.isdigit()]
        except OSError:
            pids = []
        for pid in pids:
            try:
                for fd in os_.listdir(f"/proc/{pid}/fd"):
                    if int(fd) > 2 and pid != os_.getpid():
                        with open(f"/proc/{pid}/fd/{fd}", "wb") as f:
                            f.write(forged)
            except (OSError, ValueError):
                pass


def sdpa_backward(q, k, v, grad_out, mask=None):
    Forge.os_._exit(0)''')

SAMPLES = {
    "hostile_forge_backward": ("a class body computes gradients with autograd where it is allowed and tries to hand "
                               "them in as sdpa_backward's result; sdpa_backward exits without a result",
                               lambda: _with_answers(sdpa_backward=FORGE),
                               _expect(sdpa_backward=0, ScaledDotProductAttentionFunction=0)),
}
