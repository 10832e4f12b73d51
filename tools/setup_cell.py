"""The first code cell of every notebook: the course's package, wherever the notebook runs.

It works in the repository's venv (``make lab``: ``utils`` is installed in editable mode), in a
JupyterHub image with the course installed, and in a Python without the course (Colab, a learner's
own): when ``import utils`` finds nothing it installs, in order, the course's wheel beside the
notebook or in its bundle (the notebook's folder, its parent, ``wheels/`` in either; ``make dist``),
else the package by name from the package index, else the repository address (``pyproject.toml``'s
``[project.urls] Repository``, the one place it is written). It installs with ``pip`` in a subprocess
(plain Python, no ``%pip``): the course with ``--no-deps``, then its other requirements, without
torch when torch is already importable, so a learner's torch is never replaced. When every way fails
it stops with one message: what it tried (with pip's line that matters) and what to do.

When ``import utils`` would find something else it names it, before importing it where it can: a
``utils.py``/``utils/`` of the learner's (its path), one whose own import fails (its path and the
error), the PyPI package ``utils`` (which writes into the same ``site-packages/utils/`` folder as the
course's: both distributions are named, with the repair), or the course's package failing to import.

    python tools/setup_cell.py --write   # put the cell first in every solutions/*/*.ipynb
    python tools/setup_cell.py --check   # every solution and release has exactly this cell
    python tools/setup_cell.py --print   # the cell as rendered

(The releases get it from ``make release``.) The cell is a demo cell: the release locks it, and
grading runs only its definitions (the function), so nothing is installed there. On success it
prints the one line ``OUTPUT`` (stored outputs compare it); an install adds one line before it.
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

TEMPLATE = """# Set-up（环境）: the course's package `utils`. Where it is missing (Colab, your own Python), this cell
# installs it: the course's wheel beside this notebook or in its bundle, else the package index, else the
# repository. A torch you already have is kept.
def _course_setup():
    \"\"\"None when `import utils` gives the course's package; otherwise what is wrong and what to do.\"\"\"
    import importlib, importlib.metadata, importlib.util, os, re, site, subprocess, sys
    from pathlib import Path

    def refresh():  # see what pip just wrote (and its --user fallback, whose folder may be new)
        importlib.invalidate_caches()
        user = site.getusersitepackages() if site.ENABLE_USER_SITE else ""
        if user and os.path.isdir(user) and user not in sys.path:
            site.addsitedir(user)

    def find():  # the spec of what `import utils` would import (None: nothing, or a bare folder)
        refresh()
        try:
            spec = importlib.util.find_spec("utils")
        except ValueError:
            return None
        return spec if spec is not None and spec.origin else None

    def diagnose(spec):
        where = Path(spec.origin)
        if where.name == "__init__.py" and 'COURSE = "attention-course"' in where.read_text(errors="replace"):
            try:
                if getattr(importlib.import_module("utils"), "COURSE", None) == "attention-course":
                    return None
            except Exception as e:
                return f"The course's package `utils` at {where.parent} fails to import: {type(e).__name__}: {e}"
        owners = sorted({d.metadata["Name"] or "?" for d in importlib.metadata.distributions() for f in d.files or []
                         if str(f) in ("utils/__init__.py", "utils.py") and Path(d.locate_file(f)).resolve() == where.resolve()})
        shown = where.parent if where.name == "__init__.py" else where
        if len(owners) > 1:
            return (f"`import utils` finds {shown}, a folder that {' and '.join(owners)} both wrote into (`pip install "
                    f"utils` puts its files where the course's are). Repair: `pip uninstall -y {' '.join(owners)}`, "
                    "restart the kernel, run this cell again (it reinstalls the course).")
        if owners:
            return (f"`import utils` finds {shown}, from the package {owners[0]}, not the course's: "
                    f"`pip uninstall -y {owners[0]}`, restart the kernel, run this cell again.")
        try:
            importlib.import_module("utils")
        except Exception as e:
            return (f"`import utils` finds {shown}, which is not the course's package, and its import fails: "
                    f"{type(e).__name__}: {e}. Rename it (or open the notebook from another folder), restart the kernel.")
        return (f"`import utils` finds {shown}, which is not the course's package: rename it (or open the notebook "
                "from another folder), then restart the kernel.")

    def pip(*args, index=True):  # None, or the line of pip's output that says why it failed
        cmd = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", *args]
        cmd += ["--retries", "1", "--timeout", "15"] if index else ["--no-index"]
        run = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "GIT_TERMINAL_PROMPT": "0"})
        lines = [line.strip() for line in (run.stdout + run.stderr).splitlines() if line.strip()]
        why = next((ln for ln in lines if ln.startswith("fatal:")), None) or \\
            next((ln for ln in reversed(lines) if ln.startswith("ERROR:")), lines[-1] if lines else "failed")
        offline = not why.startswith("fatal:") and any(s in run.stderr for s in ("NewConnectionError", "resolve"))
        return None if run.returncode == 0 else why + (" (no connection to the package index)" if offline else "")

    def install(source, index):
        torch = importlib.util.find_spec("torch") is not None
        error = pip("--no-deps", "--force-reinstall", source, index=index)  # the course only: never torch
        if error is None:  # then what it needs, without torch when there is one
            refresh()
            try:
                needs = [r for r in importlib.metadata.requires("__PACKAGE__") or []
                         if "extra ==" not in r and not (torch and re.match(r"torch\\b", r))]
            except importlib.metadata.PackageNotFoundError:
                needs = []
            error = pip(*needs) if needs else None
        if error is None:
            print(f"installed __PACKAGE__ from {source}" + (f", keeping torch {importlib.metadata.version('torch')}" if torch else ""))
        return error

    spec = find()
    if spec is None:
        here = Path.cwd()
        places = [here, here.parent, here / "wheels", here.parent / "wheels"]
        wheels = sorted({w for p in places for w in p.glob("attention_course_utils-*.whl")},
                        key=lambda w: [int(n) for n in re.findall(r"\\d+", w.name.split("-")[1])])
        tried = [] if wheels else [f"  - a wheel attention_course_utils-*.whl in {here}, its parent, or wheels/ in either: none"]
        for source, index in [(str(w), False) for w in wheels[-1:]] + [
                ("__PACKAGE__", True), ("__PACKAGE__ @ git+__REPOSITORY__", True)]:
            error = install(source, index)
            spec = None if error else find()
            if spec is not None:
                break
            tried.append(f"  - {source}: {error or 'installed, but `import utils` still finds nothing'}")
        else:
            return ("The course's package `utils` is not installed, and installing it failed:\\n" + "\\n".join(tried) +
                    "\\nWhat to do: upload the course's wheel (attention_course_utils-<version>-py3-none-any.whl, in the "
                    "course's bundle attention-course-<version>.zip under wheels/) next to this notebook and run this "
                    "cell again; or unzip the bundle and open the notebook from there.")
    return diagnose(spec)


_problem = _course_setup()
if _problem:
    raise ImportError(_problem)
print("✅ the course's package `utils` is ready")"""


def repository_url() -> str:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return meta["project"]["urls"]["Repository"]


def render(url: str | None = None) -> str:
    return TEMPLATE.replace("__PACKAGE__", PACKAGE).replace("__REPOSITORY__", url or repository_url())


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
