"""Issue 25 §5: the internal red team's attacks, each a test (the table: grader/REDTEAM.md).

Written by someone who did not write the defences, against the design (grader/verify.py,
_verify_child.py, restore.py, pipeline.py, export.py), with new instances and kinds beside those
of the three rounds. R1-R5 (§1, the judge) run in one sandboxed re-check (``recheck``, slow); the
others need no sandbox. An attack that still works is ``xfail(strict=True)`` with the reason, so
that the day it stops working the test says so.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import nbformat
import pytest

from grader import course, pipeline, sandbox, verify
from grader.samples import bank

needs_bwrap = pytest.mark.skipif(not sandbox.bwrap_available(), reason="bubblewrap is not available here")


# ------------------------------------------------------------------- §1: the judge (one re-check)
# R1: sliding_window_attention (chapter 10) that builds the S×S scores (the rule: never), wrapped in
# torch's own switches for torch-function and dispatch modes: the budget's tripwire (a
# TorchFunctionMode) and work counter (a dispatch mode) no longer see it.
SWA_BYPASS = '''
import math

import torch
from torch.utils._python_dispatch import _disable_current_modes


def _quadratic(q, k, v, window, causal):
    S = q.size(-2)
    dist = torch.arange(S)[:, None] - torch.arange(S)[None, :]
    mask = ((dist >= 0) & (dist <= window)) if causal else (dist.abs() <= window)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1) @ v


def sliding_window_attention(q, k, v, window, causal=False):
    with torch._C.DisableTorchFunction(), _disable_current_modes():
        return _quadratic(q, k, v, window, causal)
'''

# R1, the same kind in two more chapters: causal linear attention (chapter 11) through φ(q)φ(k)ᵀ, the
# S×S matrix its rule forbids, after trying to lift the re-check's memory limit; and flash attention
# (chapter 13) through the full S_q×S_k scores, both wrapped in the same switches.
CAUSAL_LINEAR_BYPASS = '''
import resource

import torch
from torch.utils._python_dispatch import _disable_current_modes

try:  # the hard limit cannot be raised in the sandbox; the attack goes on either way
    resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
except (ValueError, OSError):
    pass


def _phi(x):
    return torch.where(x > 0, x + 1, torch.exp(x.clamp(max=0)))


def causal_linear_attention(q, k, v, eps=1e-6):
    with torch._C.DisableTorchFunction(), _disable_current_modes():
        S = q.size(-2)
        a = (_phi(q) @ _phi(k).transpose(-2, -1)) * torch.ones(S, S, dtype=q.dtype).tril()
        return (a @ v) / (a.sum(-1, keepdim=True) + eps)
'''

FLASH_BYPASS = '''
import math

import torch
from torch.utils._python_dispatch import _disable_current_modes


def flash_attention(q, k, v, block_size=64, causal=False):
    with torch._C.DisableTorchFunction(), _disable_current_modes():
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
'''

# R1, what is left: linear attention (chapter 11) that computes φ(q)φ(k)ᵀ, the quadratic work its rule
# forbids, 64 query rows at a time (so its memory stays linear and under the cap), with the
# work counter switched off. Work is counted only inside the learner's process.
LINEAR_CHUNKED_BYPASS = '''
import torch
from torch.utils._python_dispatch import _disable_current_modes


def _phi(x):
    return torch.where(x > 0, x + 1, torch.exp(x.clamp(max=0)))


def linear_attention(q, k, v, eps=1e-6):
    with torch._C.DisableTorchFunction(), _disable_current_modes():
        pk = _phi(k)
        rows = []
        for i in range(0, q.size(-2), 64):
            a = _phi(q[..., i:i + 64, :]) @ pk.transpose(-2, -1)
            rows.append((a @ v) / (a.sum(-1, keepdim=True) + eps))
        return torch.cat(rows, dim=-2)
'''

# R2: softmax (chapter 00, softmax forbidden) through a softmax kernel the forbidden group does not list.
SOFTMAX_MASKED = '''
import torch


def softmax(x, dim=-1):
    return torch._masked_softmax(x.contiguous(), torch.zeros(x.shape, dtype=torch.bool), dim, None)
'''

# R3: softmax_backward (chapter 08, autograd forbidden: "written by hand") by forward-mode autograd:
# the softmax's JVP at log(a) is the answer, and no backward pass runs.
SOFTMAX_BACKWARD_FORWARD_AD = '''
import torch
import torch.autograd.forward_ad as fwAD


def softmax_backward(a, grad_a):
    with fwAD.dual_level():
        out = fwAD.unpack_dual(torch.softmax(fwAD.make_dual(torch.log(a), grad_a), dim=-1)).tangent
    return torch.where(a.sum(-1, keepdim=True) > 0, out, torch.zeros((), dtype=a.dtype)).nan_to_num(0.0)
'''

# R4: SDPA (chapter 03) that scales the caller's q in place (the rule: inputs are never modified),
# beside a class body that rebinds the re-check's own `plain` so that every result leaves out what
# the guards observed (the inputs after the call, a second call's output).
SDPA_INPLACE = '''
import math
import sys

import torch


class _Strip:
    main = sys.modules["__main__"]
    if hasattr(main, "plain"):
        def _stripped(x, depth=0, _plain=main.plain):
            if isinstance(x, dict) and "__output__" in x:
                x = x["__output__"]
            return _plain(x, depth)
        main.plain = _stripped


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    if not q.requires_grad and q.is_contiguous():
        q.div_(math.sqrt(q.size(-1)))  # the caller's q, changed
    else:
        q = q / math.sqrt(q.size(-1))
    scores = q @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    if dropout_p > 0:
        w = torch.nn.functional.dropout(w, dropout_p)
    return w @ v, w
'''

# R5: a stub dot_product_variance whose process writes a well-formed result for itself to every
# descriptor it still holds but its own channel (stdin, stdout, stderr), then exits without a word.
VARIANCE_OTHER_CHANNELS = r'''
import os
import sys


class _Forge:
    wire = sys.modules.get("_grader_wire")
    if wire is not None:
        message = wire.encode({"outputs": [0.0, 1.0]})
        for fd in (0, 1, 2):
            try:
                os.write(fd, message)
            except OSError:
                pass


def dot_product_variance(d_k, n_samples, scaled):
    os._exit(0)
'''

ATTACKS = {"sliding_window_attention": SWA_BYPASS, "causal_linear_attention": CAUSAL_LINEAR_BYPASS,
           "flash_attention": FLASH_BYPASS, "linear_attention": LINEAR_CHUNKED_BYPASS, "softmax": SOFTMAX_MASKED,
           "softmax_backward": SOFTMAX_BACKWARD_FORWARD_AD, "scaled_dot_product_attention": SDPA_INPLACE,
           "dot_product_variance": VARIANCE_OTHER_CHANNELS}


@pytest.fixture(scope="module")
def recheck():
    """Every §1 attack in one sandboxed re-check: each attack's cell loads only in its own
    exercise's process (a chunk with ``only``), as one exercise cell's statements do."""
    names = list(ATTACKS)
    chunks = [{"code": code, "only": [name]} for name, code in ATTACKS.items()]
    start = time.monotonic()
    verdicts = verify.verify_many(names, chunks, [], {name: 1000 + i for i, name in enumerate(names)})
    print(f"\nred team re-check of {len(names)} attacks: {time.monotonic() - start:.1f} s")
    return verdicts


@pytest.mark.slow
@needs_bwrap
@pytest.mark.parametrize("name", ["sliding_window_attention", "causal_linear_attention", "flash_attention"])
def test_r1_a_memory_rule_cannot_be_switched_off(recheck, name):
    """The three answers are right on every case (the S×S scores give the right numbers) and switch
    off every measurement made in their own process; the operating system still refuses them the
    memory at the probe, so they fail there, and on nothing else."""
    v = recheck[name]
    assert not v.ok and "over its memory" in v.reason, v.reason


@pytest.mark.slow
@needs_bwrap
@pytest.mark.xfail(strict=True, reason="R1, left: work (multiply-adds) is counted by a dispatch mode in the learner's "
                   "own process; quadratic work in linear memory, with the counter switched off, is not seen from "
                   "outside (a per-query loop costs as much CPU time as the quadratic work at any size a check can "
                   "afford); see grader/REDTEAM.md")
def test_r1_quadratic_work_in_linear_memory_with_the_counter_off(recheck):
    assert not recheck["linear_attention"].ok


@pytest.mark.slow
@needs_bwrap
def test_r2_softmax_cannot_come_from_an_unlisted_kernel(recheck):
    assert not recheck["softmax"].ok


@pytest.mark.slow
@needs_bwrap
def test_r3_autograd_cannot_come_in_forward_mode(recheck):
    assert not recheck["softmax_backward"].ok


@pytest.mark.slow
@needs_bwrap
def test_r4_a_result_without_the_guards_observations_is_refused(recheck):
    v = recheck["scaled_dot_product_attention"]
    assert not v.ok and "lacks what the guards observed" in v.reason, v.reason


@pytest.mark.slow
@needs_bwrap
def test_r5_nothing_but_the_exercises_own_channel_is_read(recheck):
    v = recheck["dot_product_variance"]
    assert not v.ok and "no result" in v.reason, v.reason


# ------------------------------------------------------------- §2: learner data, before any tool
def _executed(cells: int, per_cell: int) -> bytes:
    """What learner code can make the executed notebook say (it may write the file): ``per_cell``
    empty outputs in each cell (an empty output cost nothing of the old byte budget)."""
    outs = [{"output_type": "display_data", "data": {"text/plain": ""}, "metadata": {}} if j % 2 else
            {"output_type": "stream", "name": "stdout", "text": ""} for j in range(per_cell)]
    return json.dumps({"cells": [{"cell_type": "code", "execution_count": 1, "outputs": outs, "source": "",
                                  "metadata": {}} for _ in range(cells)]}).encode()


def test_r6_many_empty_outputs_cost_no_one_minutes():
    """R6: 100 empty outputs in each of 1,000 cells (100,000 outputs, 6.8 MB) took the grading
    process 39 s to keep, nbformat 15 s to write and nbconvert 200 s to render (formgrader's page,
    the feedback): the notebook's outputs are now bounded in number as well as in bytes, one
    budget for all its cells."""
    n = 1000
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("display()") for _ in range(n)])
    start = time.monotonic()
    executed, why = pipeline._read_executed(_executed(n, pipeline.MAX_OUTPUTS), n)
    assert why is None
    pipeline.take_outputs(nb, executed, "")
    pipeline.neutralise(nb, {})
    text = nbformat.writes(nb)
    took = time.monotonic() - start
    kept = sum(len(c.outputs) for c in nb.cells)
    assert kept <= pipeline.NOTEBOOK_OUTPUTS + 1, kept
    assert sum(o.get("text") == pipeline.DROPPED for c in nb.cells for o in c.outputs) == 1  # said once, not per cell
    assert len(text) < 2 * 2**20 and took < 5, (len(text), took)
    # the byte budget is the notebook's, not each cell's: 1,000 cells of 20 kB texts keep at most 8 MiB
    big = [{"cell_type": "code", "execution_count": 1, "metadata": {}, "source": "",
            "outputs": [{"output_type": "stream", "name": "stdout", "text": "x" * 20_000}]} for _ in range(n)]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("") for _ in range(n)])
    pipeline.take_outputs(nb, pipeline._read_executed(json.dumps({"cells": big}).encode(), n)[0], "")
    assert sum(len(o.get("text", "")) for c in nb.cells for o in c.outputs) <= pipeline.NOTEBOOK_OUTPUT_BYTES


def test_r6_test_cells_keep_their_outputs_when_the_learners_cells_spent_the_budget():
    release = course.load_json(course.release_path(bank.A))
    nb = nbformat.from_dict(release)
    test = next(i for i, c in enumerate(nb.cells) if verify.is_test(c) and c.cell_type == "code")
    flood = [{"output_type": "stream", "name": "stdout" if j % 2 else "stderr", "text": "y"} for j in range(100)]
    executed = [([{"output_type": "stream", "name": "stdout", "text": "✅ passed\n"}], 3) if i == test else
                (flood, 1) if c.cell_type == "code" else None for i, c in enumerate(nb.cells)]
    pipeline.take_outputs(nb, executed, "")
    assert nb.cells[test].outputs[0]["text"] == "✅ passed\n"


def test_r7_a_hidden_tests_marker_assembled_by_the_sanitiser_is_defused():
    """R7: "BEGIN <x>HIDDEN TESTS" in a learner's Markdown: the marker was defused in the Markdown
    and in its rendering, and then the sanitiser dropped the unknown tag and joined the words: the
    stored cell held "BEGIN HIDDEN TESTS", and nbgrader's feedback (ClearHiddenTests) failed on that
    notebook ("Hidden test region detected in a non-grade cell"): the batch's feedback run failed,
    and this student got none. Markers are now defused in the text as it is stored."""
    from nbgrader.preprocessors import ClearHiddenTests

    from grader._execute import render_markdown

    sources = ["Why: BEGIN <x>HIDDEN TESTS and END <y>HIDDEN TESTS",
               "BEGIN <img src=x>HIDDEN TESTS", "BEGIN <script>1</script>HIDDEN TESTS",
               "BEGIN BEGIN <b></b>HIDDEN TESTS HIDDEN TESTS"]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(s) for s in sources]
                                  + [nbformat.v4.new_code_cell("# BEGIN HIDDEN TESTS\nx = 1")])
    rendered = {i: render_markdown(s) for i, s in enumerate(sources)}
    pipeline.neutralise(nb, rendered)
    for cell in nb.cells:
        assert not any(m in cell.source for m in pipeline.HIDDEN_MARKERS), cell.source
    ClearHiddenTests(begin_test_delimeter="BEGIN HIDDEN TESTS", end_test_delimeter="END HIDDEN TESTS").preprocess(nb, {})


def test_r8_a_notebook_with_a_byte_order_mark_gets_a_clear_reason(tmp_path):
    """R8, defended: a UTF-8 BOM before the JSON. Jupyter cannot open it either (nbformat:
    NotJSONError); the grader says why instead of failing, and grades nothing of it."""
    from grader.restore import load_submission

    path = tmp_path / "nb.ipynb"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(bank.correct()).encode())
    nb, why = load_submission(path)
    assert nb is None and "BOM" in why
    with pytest.raises(Exception):
        nbformat.read(path, as_version=4)


def test_r9_odd_but_valid_notebooks_load_the_same_answers(tmp_path):
    """R9, defended: nbformat 4.0 without cell ids, sources as lists of lines, CRLF and lone CR
    line ends: the re-check loads the same definitions as from the
    notebook as released."""
    from grader.restore import grade_id, load_submission, restore

    release = course.load_json(course.release_path(bank.A))
    sub = bank.correct()
    sub["nbformat_minor"] = 0
    for cell in sub["cells"]:
        cell.pop("id", None)
        src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if grade_id(cell) == "scaled_dot_product_attention":
            src = src.replace("\n", "\r\n")
        elif grade_id(cell) == "dot_product_variance":
            src = src.replace("\n", "\r")
        cell["source"] = src.splitlines(keepends=True)
    path = tmp_path / "odd.ipynb"
    path.write_text(json.dumps(sub))
    nb, why = load_submission(path)
    assert why is None
    odd = verify.definitions(restore(release, nb).notebook)[0]
    plain = verify.definitions(restore(release, bank.correct()).notebook)[0]
    assert odd == plain


def test_r10_ansi_escapes_in_an_output_make_no_link():
    """R10, defended: an OSC 8 hyperlink to javascript: and 24-bit colours in a stream output, as
    formgrader and the feedback render it (nbconvert's HTML)."""
    from nbconvert import HTMLExporter

    text = "\x1b]8;;javascript:alert(1)\x1b\\click\x1b]8;;\x1b\\ \x1b[38;2;1;2;3mred\x1b[0m <script>alert(2)</script>"
    cell = nbformat.v4.new_code_cell("print()")
    cell.outputs = pipeline._safe_outputs([{"output_type": "stream", "name": "stdout", "text": text},
                                           {"output_type": "error", "ename": "E\x1b]8;;javascript:x\x1b\\",
                                            "evalue": text, "traceback": [text]}])
    nb = nbformat.v4.new_notebook(cells=[cell])
    pipeline.neutralise(nb, {})
    html, _ = HTMLExporter().from_notebook_node(nb)
    body = html.split("<body", 1)[1]
    assert 'href="javascript' not in body and "<script>alert" not in body


def test_r11_links_that_hide_their_scheme_are_dropped():
    """R11, defended: javascript: behind character references, a tab, an upper-case scheme, a
    data: URL, in Markdown and in an HTML output."""
    from grader._execute import render_markdown

    md = ("[a](&#106;avascript:alert(1)) <a href='java&#09;script:alert(1)'>b</a> [c](JAVASCRIPT:alert(1)) "
          "[d](data:text/html,<script>alert(1)</script>) <a href=' javascript:alert(1)'>e</a> "
          "<a href='vbscript:x'>f</a> [g](https://example.org)")
    for html_text, want in ((pipeline.sanitise_html(render_markdown(md)), ["https://example.org"]),
                            (pipeline.sanitise_html(md), [])):  # as an HTML output: no Markdown link
        hrefs = [h.split('"')[1] for h in html_text.split("href=")[1:]]
        assert hrefs == want, html_text


def test_r12_a_student_folder_name_is_never_markup_or_a_path(tmp_path):
    """R12, defended: student folders named as markup, a path, a formula or in another script are
    skipped with the reason; nothing is read from them."""
    subs = tmp_path / "submitted"
    names = ["<img src=x onerror=alert(1)>", "a b", "=HYPERLINK(1)", "ada\nbob", "José", "-rf"]
    for name in names + ["ada"]:
        (subs / name / bank.A).mkdir(parents=True)
        (subs / name / bank.A / f"{bank.A}.ipynb").write_text(json.dumps(bank.correct()))
    jobs, skipped = pipeline.find_jobs(subs, None)
    assert [j.student for j in jobs] == ["ada"]
    assert len(skipped) == len(names)


# -------------------------------------------------------------------------- §3: nothing lost
def test_r13_the_work_is_found_when_the_notebook_is_not_named_as_expected(tmp_path):
    """R13: a folder with "Untitled.ipynb" and "03_...-Copy1.ipynb" (the answers) but no
    "03_....ipynb" scored 0 with "no notebook was submitted for this assignment". The notebook that
    holds the assignment's graded cells is graded now, and the reason says which and why."""
    subs = tmp_path / "submitted"
    folder = subs / "ada" / bank.A
    folder.mkdir(parents=True)
    (folder / "Untitled.ipynb").write_text(json.dumps(nbformat.v4.new_notebook()))
    (folder / f"{bank.A}-Copy1.ipynb").write_text(json.dumps(bank.correct()))
    (folder / "timestamp.txt").write_text("2024-05-01 10:00:00.000000 UTC")
    (job,), _ = pipeline.find_jobs(subs, None)
    assert job.path == folder / f"{bank.A}-Copy1.ipynb", job
    assert any("Copy1" in n and "it was graded" in n for n in job.notes), job.notes
    # several that hold it: the newest; none: the reason names them all
    later = folder / "notes.ipynb"
    later.write_text(json.dumps(bank.correct()))
    os.utime(later, (time.time() + 60, time.time() + 60))
    (job,), _ = pipeline.find_jobs(subs, None)
    assert job.path == later and any("newest" in n for n in job.notes), job.notes
    for p in (later, folder / f"{bank.A}-Copy1.ipynb"):
        p.unlink()
    (folder / "other.ipynb").write_text(json.dumps(nbformat.v4.new_notebook()))
    (job,), _ = pipeline.find_jobs(subs, None)
    assert not job.path.exists() and any("none of the 2" in n for n in job.notes), job.notes


def test_r14_an_input_folder_reached_through_a_link_to_the_workspace_is_refused(tmp_path):
    """R14, defended: SUBMISSIONS a symbolic link to the workspace's restored notebooks (or to
    the workspace): refused before anything is written or removed."""
    work = tmp_path / "work"
    (work / "restored" / "ada" / bank.A).mkdir(parents=True)
    (work / "scratch").mkdir()
    kept = work / "restored" / "ada" / bank.A / f"{bank.A}.ipynb"
    kept.write_text("{}")
    for target in (work / "restored", work):
        link = tmp_path / f"link-{target.name}"
        link.symlink_to(target)
        with pytest.raises(SystemExit, match="grading writes"):
            pipeline.autograde(link, tmp_path / "reports", work=work, progress=False)
    assert kept.read_text() == "{}" and (work / "scratch").is_dir() and not (tmp_path / "reports").exists()


def test_r_the_table_names_every_test():
    table = (Path(course.GRADER) / "REDTEAM.md").read_text()
    names = [n for n in globals() if n.startswith("test_r") and n != "test_r_the_table_names_every_test"]
    missing = [n for n in names if n not in table]
    assert not missing, missing
