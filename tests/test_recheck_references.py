"""The grader's independent re-check passes correct answers of every kind of exercise.

Each reference, written out as a learner's definitions (plain imports, functions and classes, no
``utils``), goes through ``grader.verify.verify_one``: a fresh sandboxed child without
``utils.reference`` runs it on secret cases and the parent judges the outputs. This covers what the
chapter-03 sample bank does not: custom runners (caches, generation), gradient cases, judged cases,
budgets, and forbidden groups whose aten-level tripwire imports part of torch inside the sandbox.
Marked slow (a sandboxed child per exercise).
"""
import ast
import inspect

import pytest

from utils.reference import _ch02, _ch03, _ch05, _ch06, _ch08, _ch09, _ch10, _ch11, _ch13, _common

pytestmark = pytest.mark.slow


def _definitions(*modules) -> list:
    chunks, seen = [], set()
    for module in modules:
        for node in ast.parse(inspect.getsource(module)).body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                text = ast.unparse(node)
                if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("utils")):
                    continue
                if text not in seen:
                    seen.add(text)
                    chunks.append(text)
            elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                node.decorator_list = []  # no guard, and so no `.__wrapped__` to reach through
                chunks.append(ast.unparse(node).replace(".__wrapped__", ""))
            elif isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets) \
                    and not any(t.id == "__all__" for t in node.targets):
                chunks.append(ast.unparse(node))
    return chunks


CASES = [
    ("AdditiveAttention", (_common, _ch02)),
    ("MultiHeadAttention", (_common, _ch05)),
    ("split_heads", (_common, _ch05)),  # a method exercise: the re-check finds the class that holds it
    ("GroupedQueryAttention", (_common, _ch09)),
    ("KVCache", (_common, _ch09)),
    ("sliding_window_attention", (_common, _ch10)),
    ("causal_linear_attention", (_common, _ch11)),
    ("flash_attention", (_common, _ch13)),
    # Every forbidden group, with the re-check's lock-down (entry points replaced everywhere, no
    # threads) in place: a correct answer still passes.
    ("scaled_dot_product_attention", (_common, _ch03)),
    ("LayerNorm", (_common, _ch06)),
    ("softmax_backward", (_common, _ch08)),
    ("sdpa_backward", (_common, _ch08)),
    ("online_softmax", (_common, _ch13)),
]


@pytest.mark.parametrize("name,modules", CASES, ids=[c[0] for c in CASES])
def test_recheck_passes_the_reference(name, modules):
    from grader import verify

    notes = []
    verdict = verify.verify_one(name, _definitions(*modules), notes, seed=424242)
    assert verdict.ok, f"{name}: {verdict.reason} {notes}"


def test_recheck_counts_work_as_the_visible_check_does():
    """A work budget (multiply-adds, ``Budget.work``) holds in grading too: a causal
    ``flash_attention`` that computes the key blocks above the diagonal (masked, never skipped)
    gives right values, fails the visible check on the budget, and fails the re-check the same way."""
    from grader import verify
    from utils.checks import EXERCISES
    from utils.checks._ch13 import NO_SKIP
    from utils.checks._core import run_check

    source = _definitions(_common, _ch13)
    skip = "k_end = min(s_k, q_start + br + offset) if causal else s_k"
    assert sum(skip in chunk for chunk in source) == 1
    no_skip = [chunk.replace(skip, "k_end = s_k") for chunk in source]
    namespace = {}
    exec("\n\n".join(no_skip), namespace)
    with pytest.raises(Exception, match="multiply-adds") as visible:
        run_check(EXERCISES["flash_attention"], namespace["flash_attention"], quiet=True)
    assert NO_SKIP[:40] in str(visible.value)
    verdict = verify.verify_one("flash_attention", no_skip, [], seed=424242)
    assert not verdict.ok and "multiply-adds" in verdict.reason, verdict.reason


def test_recheck_enforces_the_live_budget_and_the_order_of_reads():
    """Two rules measured by a case's own runner hold in grading too: flash attention's tiles kept in
    a list (the live-elements budget, counted by the child's own tripwire) and an online softmax
    that takes the whole row's max first (the order of the reads, judged by the parent)."""
    import inspect as _inspect
    import textwrap

    from grader import verify
    from utils.checks._ch13 import FULL_SCORES, WHOLE_ROW, _fa_tiles_kept, _os_global_max

    header = ["import math", "import torch", "NEG_INF = float('-inf')",
              "def _safe(m):\n    return torch.where(m == NEG_INF, torch.zeros_like(m), m)"]
    tiles = textwrap.dedent(_inspect.getsource(_fa_tiles_kept)).replace("_fa_tiles_kept", "flash_attention")
    verdict = verify.verify_one("flash_attention", header + [tiles], [], seed=424242)
    assert not verdict.ok and "the tensors it holds at once" in verdict.reason, verdict.reason
    assert FULL_SCORES[:60] in verdict.reason
    whole = textwrap.dedent(_inspect.getsource(_os_global_max)).replace("_os_global_max", "online_softmax")
    verdict = verify.verify_one("online_softmax", header + [whole], [], seed=424242)
    assert not verdict.ok and "the output is right" in verdict.reason and WHOLE_ROW[:60] in verdict.reason, \
        verdict.reason
