"""Grading that holds by design (issue 25): the parts that need no sandbox, each a kind of attack
of round three made impossible by construction rather than patched. The sandboxed re-check's own
guarantees are tests/test_grading_recheck.py; the whole pipeline, tests/test_grader.py.

* §1 results: the wire format (grader/_wire.py) is not pickle, and decoding it costs time and
  memory linear in its size, whatever it holds (round 3: a 22 MiB pickle of EMPTY_SET opcodes took
  the grading process to 5.4 GiB);
* §2 learner data: restore keeps none of the learner's metadata, raw cells become escaped text,
  the executed notebook is read as plain JSON, and all learner HTML passes one allow-list
  sanitiser within bounds (round 3: reference definitions to javascript:, 63 KB of tags metadata
  that took nbformat 516 s, a raw cell of 26,000 nested tags);
* §3 nothing lost: an input folder grading writes is refused;
* §4 what the re-check loads is what the exercise cell defines at its top level;
* issue 26 §1: the rubric goes in formgrader's copy and out of every feedback.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time

import nbformat
import pytest
import torch

from grader import _wire, course
from grader.samples import bank

PY = sys.executable


# --------------------------------------------------------------------------- §1: the wire format
def test_the_wire_format_carries_plain_values_and_tensors_as_they_are():
    x = torch.randn(3, 4, dtype=torch.float64)
    value = {"cases": [{"args": (x, x.t(), x[:, :1].expand(3, 5), torch.tensor([True, False])), "tol": None,
                        "kwargs": {"mask": torch.ones(2, 2, dtype=torch.bool)}, "label": "é", "n": 3, "f": float("inf")}],
             "rope": torch.randn(2, dtype=torch.complex64), "empty": torch.zeros(0, 3)}
    got = _wire.decode(_wire.encode(value), strided=True)
    a = got["cases"][0]["args"]
    assert isinstance(a, tuple) and torch.equal(a[0], x) and a[1].stride() == x.t().stride()
    assert a[2].stride() == (4, 0) and torch.equal(a[2], x[:, :1].expand(3, 5))  # an expanded input stays one
    assert a[3].dtype == torch.bool and got["rope"].dtype == torch.complex64 and got["empty"].shape == (0, 3)
    assert got["cases"][0]["label"] == "é" and got["cases"][0]["f"] == float("inf")
    dense = _wire.decode(_wire.encode(value, contiguous=True))  # what a result must be
    assert dense["cases"][0]["args"][2].is_contiguous()
    with pytest.raises(_wire.WireError):  # a subclass of tuple (a check's own cache type) is not plain data
        _wire.encode({"x": type("Cache", (tuple,), {})((1, 2))})


def _message(header: bytes, data: bytes = b"") -> bytes:
    return b"GRW1" + len(header).to_bytes(8, "little") + header + data


def test_anything_but_a_wire_message_is_refused_at_once():
    """Pickles (torch.save's zip; round 3's bare pickle of EMPTY_SET opcodes), two messages one
    after the other, a tensor that is not dense, bytes that do not add up, claims beyond the data."""
    import io

    saved = io.BytesIO()
    torch.save({"outputs": [torch.zeros(3)]}, saved)
    empty_sets = b"\x80\x04" + b"\x8f" * (8 * 2**20) + b"."  # EMPTY_SET x 8 Mi: 237 bytes of memory per byte
    ok = _wire.encode({"outputs": [torch.zeros(3)]}, contiguous=True)
    t = '{"value":{"T":0},"tensors":[{"dtype":"float32","shape":%s,"stride":%s,"at":0,"nbytes":%d}]}'
    bad = {
        "torch.save": saved.getvalue(), "a pickle of EMPTY_SET": empty_sets, "two messages": ok + ok,
        "not dense": _message((t % ("[2,2]", "[1,2]", 16)).encode(), bytes(16)),
        "fewer bytes than claimed": _message((t % ("[1000000000]", "[1]", 4 * 10**9)).encode(), bytes(16)),
        "bytes not its shape's": _message((t % ("[4]", "[1]", 8)).encode(), bytes(8)),
        "expanded result": _message((t % ("[1000000,1000000]", "[0,0]", 4)).encode(), bytes(4)),
        "two tensors on one byte range": _message(
            b'{"value":[{"T":0},{"T":1}],"tensors":[{"dtype":"uint8","shape":[4],"stride":[1],"at":0,"nbytes":4},'
            b'{"dtype":"uint8","shape":[4],"stride":[1],"at":0,"nbytes":4}]}', bytes(4)),
        "a header nested 100,000 deep": _message(b'{"value":' + b"[" * 100_000 + b"]" * 100_000 + b',"tensors":[]}'),
        "an unknown tag": _message(b'{"value":{"pickle":"x"},"tensors":[]}'),
        "a header longer than allowed": _message(b" " * (_wire.MAX_HEADER + 1)),
    }
    for what, data in bad.items():
        start = time.monotonic()
        with pytest.raises(_wire.WireError):
            _wire.decode(data)
        assert time.monotonic() - start < 2, what


DECODE_MEMORY = r'''
import resource, sys, torch
sys.path.insert(0, sys.argv[1])
from grader import _wire
n = int(sys.argv[2])
# a valid result of many small tensors, and one of one large tensor: 48 MiB each
many = _wire.encode({"outputs": [torch.zeros(n // 4 // 2000) for _ in range(2000)]}, contiguous=True)
one = _wire.encode({"outputs": [torch.zeros(n // 4)]}, contiguous=True)
for message in (many, one):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    value = _wire.decode(message)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print((after - before) * 1024 / len(message))
    del value
'''


def test_decoding_costs_memory_linear_in_the_message():
    """Decoding a 48 MiB result holds at most about twice its size (its bytes and its tensors),
    whether it is 2,000 small tensors or one large one."""
    n = 48 * 2**20
    out = subprocess.run([PY, "-c", DECODE_MEMORY, str(course.ROOT), str(n)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    ratios = [float(x) for x in out.stdout.split()]
    assert len(ratios) == 2 and all(r < 2.5 for r in ratios), ratios


# ----------------------------------------------------------------------- §2: the learner's data
REFERENCE_LINKS = """The proof: [here][p], [there][q], [and here][r\\]].

> [quoted][bq]
>
> [bq]: javascript:alert(2)

- [item][li]

  [li]: javascript:alert(3)

[p]: javascript:alert(4)
[q]: <javascript:alert(5)>
[r\\]]: javascript:alert(6)
[ok](https://example.org/a#b) [rel](../x) [frag](#top)
"""


def _hrefs(html_text: str) -> list:
    from html.parser import HTMLParser

    found = []

    class P(HTMLParser):
        def handle_starttag(self, tag, attrs):
            found.extend((tag, k, v or "") for k, v in attrs)

    P().feed(html_text)
    return found


def test_markdown_is_rendered_first_and_its_html_sanitised_by_an_allow_list():
    """Round 3's reference definitions (in a block quote, a list item, under an escaped label) make
    live javascript: links when rendered: a rewrite of the Markdown source cannot know them all.
    Rendered first, by the renderer formgrader uses, the HTML has no such link after the sanitiser,
    and stored as one HTML block it renders to exactly that HTML again."""
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    from grader.pipeline import sanitise_html
    from grader.restore import html_block

    raw = markdown2html_mistune(REFERENCE_LINKS)
    assert sum(v.startswith("javascript:") for _, k, v in _hrefs(raw) if k == "href") >= 4, raw  # the attack is real
    stored = html_block(sanitise_html(raw))
    shown = markdown2html_mistune(stored)  # what formgrader and the feedback render from the stored cell
    links = [v for _, k, v in _hrefs(shown) if k in ("href", "src")]
    assert links and all(v.startswith(("http://", "https://", "#", "../")) for v in links), links
    assert {"https://example.org/a#b", "../x", "#top"} <= set(links)
    assert not [a for a in _hrefs(shown) if a[1].startswith("on") or a[1] in ("style", "class") and a[0] != "div"]
    # text that looks like Markdown inside the stored HTML stays text: nothing is parsed twice
    trap = html_block(sanitise_html("<pre>[a]: javascript:alert(1)\n\n[a]\n\n<b>x</b></pre>"))
    assert "href" not in markdown2html_mistune(trap)


def test_the_sanitiser_is_bounded_by_the_size_of_its_input():
    """26,000 nested tags: html5ever's cost grows with the depth of nested blocks (8 s in nh3, 352 s
    in bleach); a field over HTML_MAX_TAGS, or over what the notebook has left, is shown as escaped
    text (linear). A whole notebook of bombs costs seconds."""
    from grader import pipeline

    bombs = ["<div>" * 26000 + "x" + "</div>" * 26000, '<b title="x">' * 20000 + "x" + "</b>" * 20000,
             "<blockquote>" * (pipeline.HTML_MAX_TAGS // 2 - 1) + "x" + "</blockquote>" * (pipeline.HTML_MAX_TAGS // 2 - 1)]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x") for _ in range(40)])
    for cell in nb.cells:
        cell.outputs = [nbformat.v4.new_output("display_data", data={"text/html": b}) for b in bombs]
    start = time.monotonic()
    pipeline.neutralise(nb)
    took = time.monotonic() - start
    print(f"\nsanitising 40 cells of 3 bombs each: {took:.1f} s")
    assert took < 20, took
    assert nb.cells[0].outputs[0]["data"]["text/html"].startswith("<pre>&lt;div&gt;")


def _cell(cell_type, src, **extra):
    return dict({"cell_type": cell_type, "source": src, "metadata": {}}, **extra)


def test_restore_keeps_only_what_grading_needs():
    """Learner metadata dropped (the release's restored on its answer cells), a raw cell turned into
    escaped text, attachments and outputs gone, schema-invalid metadata costing nothing, and 5,000
    distinct dicts in a cell's tags (63 KB: nbformat's validation took 516 s) costing nothing."""
    from grader.pipeline import for_execution
    from grader.restore import grade_id, load_submission, restore

    release = course.load_json(course.release_path(bank.A))
    sub = bank.correct()
    tags = [{"k": i, "pad": "xxxx"} for i in range(5000)]
    sub["cells"][0]["metadata"] = {"tags": tags, "nbgrader": {"grade": "yes"}, "collapsed": "maybe"}
    sub["cells"].insert(1, _cell("raw", "<div>" * 3000 + "<script>alert(1)</script>", attachments={"a.png": {}}))
    sub["cells"].insert(2, _cell("code", "x = 1", outputs="none", execution_count="one", id="bad id!!"))
    sub["cells"].insert(3, {"cell_type": "heading", "source": 5})  # not a cell: left out, said so
    for cell in sub["cells"]:
        if grade_id(cell) == "scaled_dot_product_attention":
            cell["metadata"]["nbgrader"]["points"] = 500  # the learner's copy of the answer cell's metadata
            cell["metadata"]["jupyter"] = 5
    path = course.ROOT / "build" / "test-restore.ipynb"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(sub))
    try:
        start = time.monotonic()
        nb, why = load_submission(path)
        assert why is None
        r = restore(release, nb)
        text = nbformat.writes(for_execution(r.notebook))  # nbformat validates here: no learner metadata left
        assert time.monotonic() - start < 5
    finally:
        path.unlink()
    cells = r.notebook.cells
    assert "tags" not in text and "maybe" not in text and "<script>" not in text
    assert any("malformed" in n for n in r.notes)
    answer = next(c for c in cells if grade_id(c) == "scaled_dot_product_attention")
    release_meta = next(c for c in release["cells"] if grade_id(c) == "scaled_dot_product_attention")["metadata"]
    assert answer.metadata == release_meta  # the release's, not the learner's 500 points
    raw = [c for c in cells if "alert(1)" in c.source]
    assert len(raw) == 1 and raw[0].cell_type == "markdown" and raw[0].source.startswith('<div class="learner-text"><pre>&lt;div')
    assert all(c.metadata == {} for c in cells if not grade_id(c) and c.cell_type != "markdown" or c.source == "x = 1")


def test_the_executed_notebook_is_read_as_plain_json():
    """The sandbox's executed notebook is learner-writable: read with json (linear), never
    validated, only outputs and execution counts taken; anything else is no notebook."""
    from grader.pipeline import _read_executed, _safe_outputs

    cells = [{"cell_type": "code", "execution_count": 3, "metadata": {"tags": [{"a": i} for i in range(5000)]},
              "outputs": [{"output_type": "display_data", "data": {"image/svg+xml": "<svg onload=alert(1)>",
                                                                   "application/javascript": "alert(1)",
                                                                   "text/plain": "ok", "image/png": "not base64 <"}},
                          {"output_type": "stream", "name": "stdout", "text": ["a", 5, "b"]},
                          {"output_type": "unknown"}]},
             {"cell_type": "markdown", "source": "x"}]
    got, why = _read_executed(json.dumps({"cells": cells, "metadata": 5}).encode(), 2)
    assert why is None and got[1] is None and got[0][1] == 3
    outs = _safe_outputs(got[0][0])
    assert [o["output_type"] for o in outs] == ["display_data", "stream"]
    assert set(outs[0]["data"]) == {"text/plain"} and outs[1]["text"] == "ab"
    for data in (b"[" * 100000, b"{}", b'{"cells": 5}', b"\xff"):
        assert _read_executed(data, 2)[1] is not None
    assert _read_executed(json.dumps({"cells": cells[:1]}).encode(), 2)[1] is not None  # not the submission's cells


def test_the_kernel_and_the_recheck_get_an_allow_listed_environment(monkeypatch):
    from grader import sandbox

    secrets = {"PGPASSWORD": "s1", "AWS_SECRET_ACCESS_KEY": "s2", "AWS_ACCESS_KEY_ID": "s3", "CANVAS_API_TOKEN": "s4",
               "GRADEBOOK_URL": "postgresql://grader:s5@db/x", "MY_OWN_TOKEN": "s6", "PYTHONPATH": "/x"}
    for k, v in secrets.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("LANG", "C.UTF-8")
    env = sandbox.sandbox_env("/tmp/sandbox", {"EXTRA": "1"})
    assert not set(secrets) & set(env) and env["LANG"] == "C.UTF-8" and env["EXTRA"] == "1"
    assert not any(v in json.dumps(env) for v in secrets.values())


# -------------------------------------------------------------------------- §3: nothing lost
def test_an_input_folder_that_grading_writes_is_refused(tmp_path):
    from grader.pipeline import input_overlap

    work = tmp_path / "work"
    reports = tmp_path / "reports"
    assert input_overlap(work / "submitted", reports, work) is None  # where nbgrader collect puts them
    assert input_overlap(tmp_path / "uploads", reports, work) is None
    for bad in (work / "restored", work / "restored" / "ada", work / "autograded", work / "feedback", work,
                tmp_path):
        assert "grading writes" in input_overlap(bad, reports, work), bad
    assert "inside the submissions" in input_overlap(tmp_path / "uploads", tmp_path / "uploads" / "r", work)


# -------------------------------------------- §4: what the re-check loads, one rule with the ✅
def _nb(*cells):
    return {"cells": list(cells), "metadata": {}}


def _answer(src, gid="x"):
    return _cell("code", src, metadata={"nbgrader": {"solution": True, "grade": False, "grade_id": gid, "locked": False}})


def test_the_recheck_loads_what_an_exercise_cell_defines_at_its_top_level():
    from grader.verify import chunk_applies, chunk_code, definitions

    exercise = _answer('import math\nNEG_INF = float("-inf")\nSCALE: float = 1 / math.sqrt(64)\n'
                       'def helper(x):\n    return x\nclass M:\n    pass\nfor name in ("a",):\n    globals()[name] = 1\n'
                       'if True:\n    FLAG = 1\nprint("demo")\nhelper(3)\n')
    learner = _cell("code", 'EPS = float("1e-9")\nW = torch.randn(4, 4)\ndef f():\n    return 1\nprint(1)\n')
    demo = _cell("code", "from utils.plotting import plot_lines\nimport matplotlib.pyplot as plt\nimport math\n"
                         "curve = train_for_a_minute()\nLIMIT = 3",
                 metadata={"nbgrader": {"locked": True, "grade": False, "solution": False, "grade_id": "demo-1"}})
    chunks, notes = definitions(_nb(demo, learner, exercise))
    assert notes == []
    text = "\n".join(chunk_code(c) for c in chunks)
    for loaded in ("NEG_INF = float('-inf')", "SCALE: float = 1 / math.sqrt(64)", "def helper", "class M",
                   "for name in", "if True", "EPS = float('1e-9')", "def f", "import math", "LIMIT = 3"):
        assert loaded in text, loaded
    # what may compute or hang loads only for the exercise the cell answers (grade id x, or a name it defines)
    for c in chunks:
        code = chunk_code(c)
        everywhere = isinstance(c, str)
        assert everywhere == (not code.startswith(("for name", "if True"))), code
        assert chunk_applies(c, "x") and chunk_applies(c, "helper") and chunk_applies(c, "M")
        assert everywhere or not chunk_applies(c, "other_exercise")
    for left in ("print", "helper(3)", "torch.randn", "train_for_a_minute", "plot_lines", "matplotlib"):
        assert left not in text, left


def _variant_source(ex, variant):
    """The variant as a notebook cell, when it is one: its own source with the imports a notebook
    has, defining the exercise's name; None when it leans on its module (helpers, closures)."""
    import ast
    import inspect
    import textwrap

    impl = variant.impl
    if not (inspect.isfunction(impl) or inspect.isclass(impl)) or "<locals>" in impl.__qualname__:
        return None
    try:
        src = textwrap.dedent(inspect.getsource(impl))
    except (OSError, TypeError):
        return None
    tree = ast.parse(src)
    node = tree.body[0]
    node.decorator_list = []
    module = vars(inspect.getmodule(impl))
    own = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    own |= {a.arg for n in ast.walk(tree) if isinstance(n, ast.arguments) for a in n.args + n.kwonlyargs}
    own |= {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - own
    if any(u in module and u not in ("torch", "math", "nn", "F") for u in used if not hasattr(__builtins__, u)
           and u not in dir(__builtins__)):
        return None
    if ex.kind == "class" and ex.name not in ("split_heads", "merge_heads") and not inspect.isclass(impl):
        return None
    target = ex.name if ex.kind != "class" or ex.name not in ("split_heads", "merge_heads") else ex.reference.__name__
    return ("import math\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"
            + ast.unparse(node) + f"\n\n{target} = {node.name}\n")


def test_every_notebook_shaped_variant_of_the_checks_loads_as_the_visible_check_sees_it():
    """Issue 25 §4 on every correct answer the checks hold that is written as a notebook cell (a
    variant that does not lean on its module's helpers): what the re-check loads from that cell
    (``definitions``) is a definition the visible check passes, exactly as the cell run whole in a
    kernel is. (The sandboxed re-check of such answers: tests/test_bank_recheck.py and
    tests/test_recheck_references.py.)"""
    import contextlib
    import io

    from grader.verify import chunk_applies, chunk_code, definitions
    from utils.checks import EXERCISES, CheckFailure
    from utils.checks._core import run_check

    tried, disagree = 0, []
    for name, ex in EXERCISES.items():
        for variant in ex.variants:
            src = _variant_source(ex, variant)
            if src is None:
                continue
            target = name if name not in ("split_heads", "merge_heads") else ex.reference.__name__
            verdicts = []
            for namespace_of in ("kernel", "re-check"):
                ns = {"__name__": "__learner__"}
                chunks = [src] if namespace_of == "kernel" else [
                    chunk_code(c) for c in definitions(_nb(_answer(src, gid=target)))[0] if chunk_applies(c, name, target)]
                for chunk in chunks:
                    try:
                        exec(compile(chunk, "<cell>", "exec"), ns)  # noqa: S102 - the course's own variants
                    except Exception:  # noqa: BLE001 - as in the re-check: a statement that cannot stand alone
                        pass
                try:
                    with contextlib.redirect_stdout(io.StringIO()):
                        run_check(ex, ns[target], quiet=True)
                    verdicts.append(True)
                except (CheckFailure, KeyError) as err:
                    verdicts.append(f"{type(err).__name__}: {str(err)[:200]}")
            tried += 1
            if verdicts[1] is not True or verdicts[0] is not True:
                disagree.append(f"{name} / {variant.name}: kernel {verdicts[0]}, re-check's definitions {verdicts[1]}")
    print(f"\n{tried} notebook-shaped variants")
    assert tried >= 40, tried
    assert not disagree, "\n".join(disagree)


# ------------------------------------------------------------------------ issue 26 §1: the rubric
def test_the_rubric_goes_after_its_answer_and_out_of_every_feedback():
    import importlib.util

    from grader import rubric
    from grader.restore import grade_id

    solution = course.load_json(course.source_path(bank.A))
    model = rubric.rubrics(solution)
    assert set(model) == {"derivation_variance"} and len(model["derivation_variance"]) > 200
    assert "BEGIN SOLUTION" not in model["derivation_variance"]
    nb = bank.correct()
    assert rubric.insert_rubrics(nb, model) == 1 and rubric.insert_rubrics(nb, model) == 1  # not twice
    i = next(i for i, c in enumerate(nb["cells"]) if grade_id(c) == "derivation_variance")
    assert rubric.is_rubric(nb["cells"][i + 1]) and sum(map(rubric.is_rubric, nb["cells"])) == 1
    node = nbformat.from_dict(nb)
    out, _ = rubric.RemoveRubric().preprocess(node, {})
    assert not any(map(rubric.is_rubric, out.cells))
    # formgrader's own "Generate feedback" uses the course's configuration: the same mark
    spec = importlib.util.spec_from_file_location("course_config", course.GRADER / "nbgrader_config.py")
    text = (course.GRADER / "nbgrader_config.py").read_text()
    assert f'RUBRIC_MARK = "{rubric.MARK}"' in text and "c.GenerateFeedback.preprocessors = [RemoveRubric" in text
    assert spec is not None


def test_mathjax_makes_no_link_or_style_from_a_learners_formula():
    template = (course.GRADER / "jupyter" / "nbconvert" / "templates" / "base" / "mathjax.html.j2").read_text()
    assert 'allow: {URLs: "none", classes: "none", cssIDs: "none", styles: "none"}' in template
    assert template.count(",Safe") == 2  # the Safe extension is loaded from the server and from the CDN


def test_learner_code_is_shown_within_bounds():
    """pygments highlights the learner's code in formgrader and the feedback at up to ~40 µs a
    character of hostile text ("@" * 100,000: 4 s): the stored notebook shows at most
    CODE_SHOWN_PER_CELL characters a cell and CODE_SHOWN_PER_NOTEBOOK a notebook (it ran whole)."""
    from grader import pipeline

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("@" * 1_000_000) for _ in range(20)])
    pipeline.neutralise(nb, {})
    shown = [len(c.source) for c in nb.cells]
    assert max(shown) < pipeline.CODE_SHOWN_PER_CELL + 100
    assert sum(shown) < pipeline.CODE_SHOWN_PER_NOTEBOOK + 20 * 100
    assert "not shown: the grade used the whole cell" in nb.cells[0].source


def test_a_long_raw_cell_is_shown_as_its_text_escaped_once():
    """A learner's raw cell becomes escaped text (restore.escaped_block) that the sandbox renders
    and sanitise_html keeps as HTML: the reader sees ``<div>``, not ``&lt;div&gt;`` (escaped twice,
    as happened when the escaped text passed sanitise_html's size bound), and the size is bounded."""
    from grader._execute import render_markdown
    from grader.pipeline import sanitise_html
    from grader.restore import escaped_block
    from grader.samples.ch03_round3 import RAW_BOMB

    shown = sanitise_html(render_markdown(escaped_block(RAW_BOMB)))
    assert "&lt;div&gt;&lt;div&gt;" in shown and "&amp;lt;" not in shown
    assert "[truncated]" in shown and len(shown) < 60_000
    assert shown.count("<div>") < 5
