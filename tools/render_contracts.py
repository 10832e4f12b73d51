"""Write each exercise's declaration into its solution notebook: the stub's docstring and the
prompt's rules block are rendered from ``utils.checks`` (``Exercise.contract``), never edited by hand.

    python tools/render_contracts.py --write [NN_name ...]   # rewrite the docstrings and rules blocks
    python tools/render_contracts.py --check [NN_name ...]   # list what differs (exit 1 if anything)

For every registered exercise, in ``solutions/NN_name/NN_name.ipynb``:

* the docstring of the ``def``/``class`` of that name in the solution cell whose ``grade_id`` is the
  exercise (or, for a method exercise such as ``split_heads``, the cell that defines it) becomes
  ``Contract.docstring()``;
* the prompt — the last markdown cell before that solution cell — gets ``Contract.rules_block(name)``
  between the markers ``<!-- rules: NAME ... -->`` and ``<!-- /rules -->``: replaced where they
  are, appended at the end of the cell the first time.

``make release`` runs ``--write`` before nbgrader generates the release; ``tests/test_contracts.py``
fails when a notebook's text differs from what its declaration renders.
"""
from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _source(cell) -> str:
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else s


def _set_source(cell, text: str) -> None:
    cell["source"] = text.splitlines(keepends=True)


def _solution_cells(nb: dict, names: set):
    """(index, cell, {exercise name: def/class node}) for each solution cell defining an exercise."""
    for i, cell in enumerate(nb["cells"]):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell["cell_type"] != "code" or not meta.get("solution"):
            continue
        try:
            tree = ast.parse(_source(cell))
        except SyntaxError:
            continue
        found = {n.name: n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name in names}
        if found:
            yield i, cell, found


def format_docstring(text: str, indent: str) -> list:
    """The docstring as source lines: the summary on the opening quotes' line, the rest indented."""
    lines = text.split("\n")
    if len(lines) == 1:
        return [f'{indent}"""{lines[0]}"""']
    body = [f"{indent}{ln}" if ln else "" for ln in lines[1:]]
    return [f'{indent}"""{lines[0]}', *body, f'{indent}"""']


def replace_docstring(src: str, node, text: str) -> str:
    """``src`` with the docstring of ``node`` (a def or class) replaced by ``text`` (or inserted)."""
    lines = src.split("\n")
    first = node.body[0]
    indent = " " * first.col_offset
    new = format_docstring(text, indent)
    if isinstance(first, ast.Expr) and isinstance(getattr(first, "value", None), ast.Constant) \
            and isinstance(first.value.value, str):
        lines[first.lineno - 1:first.end_lineno] = new
    else:
        lines[first.lineno - 1:first.lineno - 1] = new
    return "\n".join(lines)


def replace_rules(md: str, name: str, block: str) -> str:
    from utils.checks._contract import END

    pattern = re.compile(re.escape(f"<!-- rules: {name} ") + r".*?" + re.escape(END), re.S)
    if pattern.search(md):
        return pattern.sub(lambda m: block, md, count=1)
    return md.rstrip("\n") + "\n\n" + block


def render(nb: dict) -> tuple[dict, list]:
    """The notebook with every exercise's docstring and rules block rendered; and the names changed."""
    from utils.checks import EXERCISES

    changed = []
    names = set(EXERCISES)
    for i, cell, found in list(_solution_cells(nb, names)):
        src = _source(cell)
        prompt = next((j for j in range(i - 1, -1, -1) if nb["cells"][j]["cell_type"] == "markdown"), None)
        # the docstrings, last node first (line numbers stay valid above it)
        for name, node in sorted(found.items(), key=lambda kv: -kv[1].lineno):
            contract = EXERCISES[name].contract
            new_src = replace_docstring(src, node, contract.docstring())
            if new_src != src:
                changed.append(f"{name}: docstring")
                src = new_src
        _set_source(cell, src) if src != _source(cell) else None
        if prompt is None:
            continue
        md = _source(nb["cells"][prompt])
        for name in sorted(found, key=lambda n: found[n].lineno):
            new_md = replace_rules(md, name, EXERCISES[name].contract.rules_block(name))
            if new_md != md:
                changed.append(f"{name}: rules block")
                md = new_md
        if md != _source(nb["cells"][prompt]):
            _set_source(nb["cells"][prompt], md)
    return nb, changed


def notebooks(chapters=()) -> list:
    paths = sorted(ROOT.glob("solutions/*/*.ipynb"))
    return [p for p in paths if not chapters or p.parent.name in chapters or p.stem in chapters]


def main(argv: list) -> int:
    write = "--write" in argv
    chapters = [a for a in argv if not a.startswith("--")]
    differs = 0
    for path in notebooks(chapters):
        nb = json.loads(path.read_text(encoding="utf-8"))
        nb, changed = render(nb)
        if not changed:
            continue
        differs += 1
        print(f"{path.relative_to(ROOT)}: {', '.join(changed)}")
        if write:
            path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    if not write and differs:
        print("run `python tools/render_contracts.py --write`, then `make release`")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
