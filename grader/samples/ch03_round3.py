"""Hostile samples of grading's third round (issue 25), on chapter 03, each with its expected score.
They are written against the new design (grader/verify.py, _verify_child.py), by kind:

* hostile_forge_channel (§1, the judge): a class body, which runs in every exercise's re-check
  process, tries to forge the other exercise's result: result files by every old name, every
  descriptor its process holds, the fork server's descriptors and memory; SDPA's own process exits
  before it writes anything (the attack of round 3, when SDPA got 5/5 with a stub); and
  dot_product_variance hands back a result bomb (a header of deeply nested lists and tensors that
  claim more bytes than the message holds) instead of its result;
* hostile_guard_and_plant (§1, the guard): a class body swaps the checks' tripwire and limits
  classes for no-ops, takes the original F.scaled_dot_product_attention back from the forbidden
  group's own list and from torch._C._nn, plants resource.py / threading.py / sitecustomize.py
  wherever it can write (the working folder was first on sys.path), reads the environment and
  /proc; SDPA then calls the original every way it knows (the saved references, torch.ops.aten,
  with torch-function handling disabled) and falls back to nothing;
* hostile_script_refs (§2, scripts): Markdown reference definitions to javascript: inside a block
  quote, a list item and under an escaped label, a MathJax \\href, a raw cell of 26,000 nested
  tags, the same in a Markdown output; a cell that prints the environment (the grader's secrets
  must not be there); answers correct;
* hostile_metadata (§2, work outside every sandbox; invalid metadata): 5,000 distinct dicts in a
  cell's tags (nbformat's validation was quadratic: 516 s), schema-invalid nbgrader metadata, cell
  ids and notebook metadata; answers correct: full marks, and nobody else's grading slowed.
"""
from __future__ import annotations

import json

from .bank import FULL, _append, _set, _src, _with, correct

# ------------------------------------------------------------------------ §1: forge a result
FORGE_CLASS = _src(r'''
import operator
import torch


class Forge:
    system = operator.attrgetter("s" + "ys")(torch)
    os_ = system.modules["o" + "s"]
    tried = []
    for folder in (".", "/tmp", "/tmp/sandbox", "/dev/shm", os_.environ.get("HOME", ".")):
        for name in ("outputs_0.pt", "outputs_1.pt", "notes.json", "cases.pt", "result.bin"):
            try:
                with open(os_.path.join(folder, name), "wb") as f:
                    f.write(b"GRW1forged")
                tried.append("wrote " + name)
            except OSError:
                pass
    try:
        mine = [int(n) for n in os_.listdir("/proc/self/fd")]
    except OSError:
        mine = []
    for fd in mine:  # every channel this process can write: forged "outputs" for SDPA
        if fd > 2:
            try:
                os_.write(fd, b"GRW1" + (64).to_bytes(8, "little") + b'{"value":{"d":{"outputs":[]}},"tensors":[]}')
            except OSError:
                pass
    for pid in (os_.getppid(), 1, 2, 3):  # the fork server's descriptors and memory
        for what in ("fd", "mem", "environ"):
            try:
                if what == "fd":
                    tried.append(str(os_.listdir(f"/proc/{pid}/fd")))
                else:
                    with open(f"/proc/{pid}/{what}", "rb") as f:
                        tried.append(str(f.read(16)))
            except OSError:
                pass
''')

SDPA_EXITS = _src('''
def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    Forge.os_._exit(0)  # no result of its own: whatever was forged elsewhere would be read
''')

RESULT_BOMB = _src(r'''
def dot_product_variance(d_k, n_samples, scaled):
    header = b'{"value":' + b"[" * 100_000 + b"]" * 100_000 + b',"tensors":[{"dtype":"float32","shape":[1000000000],' \
        b'"stride":[1],"at":0,"nbytes":4000000000}]}'
    message = b"GRW1" + len(header).to_bytes(8, "little") + header + bytes(2**20)
    for fd in range(3, 64):
        try:
            Forge.os_.write(fd, message)
        except OSError:
            pass
    Forge.os_._exit(0)
''')

# ----------------------------------------------------------------------- §1: the guard itself
GUARD_CLASS = _src(r'''
import operator
import torch


class Settings:
    system = operator.attrgetter("s" + "ys")(torch)
    os_ = system.modules["o" + "s"]
    core = system.modules.get("utils" + ".checks._core")
    forbid = system.modules.get("utils" + ".checks._forbid")

    class Nop:
        def __init__(self, *args, **kwargs):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *args):
            return False

    if core is not None:  # the re-check's copy of the checks
        core._Tripwire = Nop
        core._Limits = Nop
        core.learner_code = lambda *args, **kwargs: Nop()
    saved = [forbid.SDPA.funcs[0]] if forbid is not None else []
    saved.append(torch._C._nn.scaled_dot_product_attention)
    planted = []
    for folder in [".", "/tmp", os_.environ.get("HOME", "."), *system.path]:
        for name in ("resource.py", "threading.py", "sitecustomize.py", "_grader_wire.py"):
            try:
                with open(os_.path.join(folder, name), "w") as f:
                    f.write("def setrlimit(*args):\n    pass\n")
                planted.append(os_.path.join(folder, name))
            except OSError:
                pass
''')

SDPA_ORIGINAL = _src(r'''
import math


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    e = (scores - scores.amax(dim=-1, keepdim=True).clamp_min(-1e30)).exp()
    w = e / e.sum(dim=-1, keepdim=True).clamp_min(1e-30)
    if dropout_p > 0:
        w = torch.nn.functional.dropout(w, dropout_p)
        return w @ v, w
    attempts = [lambda f=f: f(q, k, v, attn_mask=mask) for f in Settings.saved]
    attempts += [lambda: torch.ops.aten.scaled_dot_product_attention(q, k, v, attn_mask=mask),
                 lambda: torch.ops.aten._scaled_dot_product_attention_math(q, k, v, attn_mask=mask)[0],
                 lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)]
    for attempt in attempts:
        try:
            with torch._C.DisableTorchFunction():
                return attempt().nan_to_num(0.0), w
        except Exception:
            pass
    return torch.zeros(*q.shape[:-1], v.shape[-1]), w
''')

# ----------------------------------------------------------------- §2: scripts in the browser
SCRIPT_REFS = _src(r'''
The variance is $d_k$: see [the proof][p] and [this][q], [and this][r\]], and $\href{javascript:alert(1)}{here}$.

> A quoted remark, [with a link][bq].
>
> [bq]: javascript:alert(2)

- a list item [with a link][li]

  [li]: javascript:alert(3)

[p]: javascript:alert(4)
[q]: <javascript:alert(5)>
[r\]]: javascript:alert(6)
''')

RAW_BOMB = "<div>" * 26000 + "raw" + "</div>" * 26000  # 286 KB: 366 s in make feedback, before

SCRIPT_OUTPUTS = _src(r'''
import os
from IPython.display import HTML, Markdown, display
display(Markdown("> [quoted][m]\n>\n> [m]: javascript:alert(7)\n\n- [item][n]\n\n  [n]: javascript:alert(8)\n"))
display(HTML("<div>" * 26000 + "x" + "</div>" * 26000))
print(dict(os.environ))  # the grader's secrets must not be there
''')


def _raw_cell(nb: dict, text: str) -> dict:
    nb["cells"].append({"cell_type": "raw", "metadata": {"format": "text/html"}, "source": text})
    return nb


# ----------------------------------------------------------------- §2: metadata outside sandboxes
def _metadata_attack() -> dict:
    nb = correct()
    tags = [{"k": i, "pad": "x" * 4} for i in range(5000)]  # 5,000 distinct dicts: ~63 KB
    nb["cells"].insert(1, {"cell_type": "markdown", "metadata": {"tags": tags}, "source": "tagged", "id": "dup"})
    nb["cells"].insert(2, {"cell_type": "code", "metadata": {"nbgrader": {"grade": "yes", "grade_id": 7, "points": "x"},
                                                              "collapsed": "maybe", "jupyter": 5},
                           "outputs": "none", "execution_count": "one", "source": "x_extra = 1", "id": "dup"})
    for cell in nb["cells"]:
        if isinstance(cell.get("metadata"), dict) and "nbgrader" in cell["metadata"] and cell is not nb["cells"][2]:
            cell["metadata"].update({"collapsed": "maybe", "scrolled": {"a": 1}, "execution": [1, 2], "tags": [None, 5]})
            cell["id"] = "not a valid id!!"
    nb["metadata"] = {"kernelspec": 5, "language_info": "python", "widgets": [json.dumps(tags[:10])]}
    return nb


SAMPLES = {
    "hostile_forge_channel": (
        "a class body (in every re-check process) forges results by file, descriptor and the fork server's "
        "/proc; SDPA's own process exits without a result; dot_product_variance hands back a result bomb",
        lambda: _set(_set(correct(), "scaled_dot_product_attention", FORGE_CLASS + "\n\n\n" + SDPA_EXITS),
                     "dot_product_variance", FORGE_CLASS + "\n\n\n" + RESULT_BOMB),
        _with(scaled_dot_product_attention=0, dot_product_variance=0)),
    "hostile_guard_and_plant": (
        "a class body swaps the tripwire and limits classes for no-ops, takes the original SDPA from the "
        "forbidden group's list and torch._C._nn, plants resource.py and others wherever it can write; SDPA "
        "calls the original every way (aten, torch-function handling off); dot_product_variance correct",
        lambda: _set(correct(), "scaled_dot_product_attention", GUARD_CLASS + "\n\n\n" + SDPA_ORIGINAL),
        _with(scaled_dot_product_attention=0)),
    "hostile_script_refs": (
        "Markdown reference definitions to javascript: in a block quote, a list item, under an escaped label, "
        "a MathJax \\href, a raw cell and an HTML output of 26,000 nested tags, a cell printing the environment; "
        "answers correct",
        lambda: _append(_raw_cell(_set(correct(), "derivation_variance", SCRIPT_REFS), RAW_BOMB), SCRIPT_OUTPUTS),
        FULL),
    "hostile_metadata": (
        "5,000 distinct dicts in a cell's tags, schema-invalid nbgrader metadata, outputs and ids, invalid "
        "notebook metadata; answers correct",
        _metadata_attack, FULL),
}

