"""The first code cell of every notebook: the course's package, wherever the notebook runs.

It works in three places: the repository's venv (``make lab``: ``utils`` is installed in editable
mode), a JupyterHub image with the course installed (``pip install``), and a fresh Colab runtime,
where it installs the course with one ``%pip`` line when it is missing (the repository's address
comes from ``pyproject.toml``'s ``[project.urls]``, the one place it is written). When ``import
utils`` finds another module of that name (a ``utils.py`` in the working folder, another package),
it stops there with a clear message instead of failing three cells later.

    python tools/setup_cell.py --write   # put the cell first in every solutions/*/*.ipynb
    python tools/setup_cell.py --check   # every solution and release has exactly this cell

(The releases get it from ``make release``.) The cell is a demo cell: the release locks it, and
grading runs only its definitions (its imports), so its ``%pip`` line never runs there.
"""
from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CELL_ID = "setup"
PACKAGE = "attention-course-utils"
OUTPUT = "✅ the course's package `utils` is ready\n"

TEMPLATE = '''# Set-up（环境）: the course's package `utils`. In a fresh Colab runtime the first run installs it.
import sys

try:
    import utils
    if getattr(utils, "COURSE", None) != "attention-course":
        raise ImportError(
            f"`import utils` found {{getattr(utils, '__file__', None) or utils!r}}, which is not the course's package: "
            "rename that file or folder (or open the notebook from another folder), then restart the kernel."
        )
except ModuleNotFoundError:
    if "google.colab" not in sys.modules:
        raise ModuleNotFoundError(
            "The course's package `utils` is not installed: run `make lab` in the repository, or "
            "`pip install \\"{package} @ git+{url}\\"`."
        ) from None
    %pip install --quiet "{package} @ git+{url}"
    import utils
print("✅ the course's package `utils` is ready")'''


def repository_url() -> str:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return meta["project"]["urls"]["Repository"]


def render() -> str:
    return TEMPLATE.format(package=PACKAGE, url=repository_url())


def cell() -> dict:
    return {"cell_type": "code", "execution_count": 1, "id": CELL_ID, "metadata": {},
            "outputs": [{"name": "stdout", "output_type": "stream", "text": [OUTPUT]}],
            "source": render().splitlines(keepends=True)}


def _source(c) -> str:
    s = c.get("source", "")
    return "".join(s) if isinstance(s, list) else s


def _first_code(nb: dict) -> int | None:
    return next((i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"), None)


def write(path: Path) -> bool:
    """Put the set-up cell first among the code cells of ``path`` (after the title); True if changed."""
    nb = json.loads(path.read_text())
    new = cell()
    existing = next((i for i, c in enumerate(nb["cells"]) if c.get("id") == CELL_ID), None)
    if existing is not None:
        old = nb["cells"][existing]
        if _source(old) == _source(new) and existing == _first_code(nb) and old.get("execution_count"):
            return False
        new["execution_count"] = old.get("execution_count") or 1
        nb["cells"][existing] = new
        if existing != _first_code(nb):
            nb["cells"].insert(_first_code(nb), nb["cells"].pop(existing))
    else:
        first = _first_code(nb)
        nb["cells"].insert(first if first is not None else len(nb["cells"]), new)
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    return True


def problems(path: Path) -> list:
    nb = json.loads(path.read_text())
    i = _first_code(nb)
    if i is None:
        return [f"{path}: no code cell"]
    c = nb["cells"][i]
    if _source(c).strip() != render().strip():
        return [f"{path}: the first code cell is not the set-up cell (run `python tools/setup_cell.py --write`, then `make release`)"]
    return []


def notebooks(release: bool = True) -> list:
    paths = sorted(ROOT.glob("solutions/*/*.ipynb"))
    if release:
        paths += sorted(ROOT.glob("notebooks/*/*.ipynb"))
    return paths


def main(argv: list) -> int:
    if argv == ["--write"]:
        changed = [p for p in notebooks(release=False) if write(p)]
        print(f"set-up cell written into {len(changed)} notebook(s)")
        return 0
    if argv == ["--check"]:
        found = [m for p in notebooks() for m in problems(p)]
        print("\n".join(found) or "every notebook starts with the set-up cell")
        return 1 if found else 0
    if argv == ["--print"]:
        print(render())
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
