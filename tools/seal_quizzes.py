"""Seal the explanation (``why=``) of every self-check question in ``solutions/``: the test cell is
visible in the learner's release, and its ``why`` states the answer. Sealed with the right answer
(``utils.checks.seal_why``), it opens only when the learner's answer is right. The plain text is
kept for authors as a comment in the cell's hidden-tests block (``# why: ...``), which the release
strips. Idempotent: a sealed ``why`` is left alone.

    python tools/seal_quizzes.py [NN_name ...]   # then make release
"""
from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from utils.checks._quiz import SEALED, seal_why  # noqa: E402


def _src(cell) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def _gid(cell) -> str:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")


def _answer(src: str):
    value = None
    for node in ast.parse(src.replace("### BEGIN SOLUTION", "").replace("### END SOLUTION", "")).body:
        if isinstance(node, ast.Assign):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                pass
    return value


def seal_cell(src: str, answer) -> str:
    visible, sep, hidden = src.partition("### BEGIN HIDDEN TESTS")
    tree = ast.parse(visible)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("check_choice", "check_number"):
            kw = {k.arg: k for k in node.keywords}
            if "why" not in kw or not isinstance(kw["why"].value, ast.Constant):
                return src
            text = kw["why"].value.value
            if text.startswith(SEALED):
                return src
            qid = ast.literal_eval(kw["qid"].value)
            decimals = None
            if node.func.id == "check_number":
                decimals = ast.literal_eval(kw["decimals"].value) if "decimals" in kw else 2
            sealed = seal_why(text, answer, decimals, qid=qid)
            segment = ast.get_source_segment(visible, kw["why"].value)
            assert visible.count(segment) == 1, segment
            visible = visible.replace(segment, repr(sealed))
            comment = "# why (sealed above; the release strips this block): " + text.replace("\n", " ")
            hidden = re.sub(r"^\n", "\n" + comment + "\n", hidden, count=1) if hidden.startswith("\n") else "\n" + comment + hidden
            return visible + sep + hidden
    return src


def seal_notebook(path: Path) -> int:
    nb = json.loads(path.read_text())
    answers = {_gid(c): _answer(_src(c)) for c in nb["cells"] if re.fullmatch(r"quiz_\d+", _gid(c))}
    changed = 0
    for c in nb["cells"]:
        gid = _gid(c)
        if re.fullmatch(r"test_quiz_\d+", gid):
            new = seal_cell(_src(c), answers[gid[5:]])
            if new != _src(c):
                c["source"] = new.splitlines(keepends=True)
                changed += 1
    if changed:
        path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    return changed


def main(argv: list) -> int:
    names = argv or sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir())
    for name in names:
        path = ROOT / "solutions" / name / f"{name}.ipynb"
        print(f"{name}: {seal_notebook(path)} question(s) sealed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
