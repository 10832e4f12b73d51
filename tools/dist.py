"""What the course ships, without the repository: ``make dist`` writes into ``dist/``

- the course package's wheel, ``attention_course_utils-<version>-py3-none-any.whl`` (``utils`` with its
  bundled data, built from ``pyproject.toml``), and
- the learner bundle ``attention-course-<version>.zip``: one folder ``attention-course-<version>/``
  with the learner releases (``notebooks/``'s chapters, as ``make release`` wrote them), the wheel
  under ``wheels/`` and a short ``README.txt``. A notebook's first cell installs the wheel it finds
  in ``../wheels/`` when the course's package is missing (tools/setup_cell.py).

    python tools/dist.py [--out dist]
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

README = """Attention, from scratch — the course's notebooks (version {version})

How to start:
1. Unzip this folder anywhere and open a chapter's notebook (e.g. 00_foundations/00_foundations.ipynb)
   in Jupyter (JupyterLab, Notebook, VS Code) or upload it to Colab.
2. Run its first cell. When the course's package `utils` is missing it installs it from the wheel in
   wheels/ (in Colab: upload {wheel} next to the notebook first), keeping the torch you already have.
   It prints "✅ the course's package `utils` is ready".
3. Work through the chapter: each exercise has a check right below it.

Needs Python 3.11 or newer and torch {torch}. By hand: pip install wheels/{wheel}
"""


def version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def torch_range() -> str:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return next(d for d in deps if d.startswith("torch"))[len("torch"):]


def build_wheel(out: Path) -> Path:
    """The wheel, built from a copy of the package's sources (no build/ or egg-info left in the checkout)."""
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("attention_course_utils-*.whl"):
        old.unlink()
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        for name in ("pyproject.toml", "README.md"):
            shutil.copy(ROOT / name, src / name)
        shutil.copytree(ROOT / "utils", src / "utils", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                        "-w", str(out), str(src)], check=True)
    return next(out.glob("attention_course_utils-*.whl"))


def build_bundle(wheel: Path, out: Path) -> Path:
    v = version()
    top = f"attention-course-{v}"
    bundle = out / f"{top}.zip"
    chapters = sorted(p for p in (ROOT / "notebooks").iterdir() if p.is_dir() and any(p.glob("*.ipynb")))
    if not chapters:
        raise SystemExit("notebooks/ has no chapters: run `make release` first")
    with zipfile.ZipFile(bundle, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(f"{top}/README.txt", README.format(version=v, wheel=wheel.name, torch=torch_range()))
        z.write(wheel, f"{top}/wheels/{wheel.name}")
        for chapter in chapters:
            for f in sorted(chapter.rglob("*")):
                if f.is_file() and "__pycache__" not in f.parts and ".ipynb_checkpoints" not in f.parts:
                    z.write(f, f"{top}/{f.relative_to(ROOT / 'notebooks')}")
    return bundle


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "dist")
    args = ap.parse_args(argv)
    wheel = build_wheel(args.out)
    bundle = build_bundle(wheel, args.out)
    for p in (wheel, bundle):
        print(f"{p.relative_to(ROOT) if p.is_relative_to(ROOT) else p}  {p.stat().st_size / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
