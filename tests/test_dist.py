"""The course without the repository (issue 27 §1): ``make dist``'s bundle in a Python with no course,
and the first cell's diagnoses.

- A fresh venv with no course: ``python -m venv --without-pip`` plus a ``.pth`` listing this venv's
  ``site-packages`` (torch, numpy, ipykernel, pip… without the course: the editable install's own
  ``.pth`` there is not processed from a ``.pth``; checked: ``import utils`` fails in it), and a kernel
  spec for it. Offline: the package index is a closed port and git may not use https, so the index
  steps fail at once.
- Nothing installable (no wheel anywhere, no index): the cell stops with one message naming the
  three ways it tried and what to do.
- The bundle unzipped into a temp folder, chapter 00 with the answers filled in (the release's
  solution cells replaced by the solution notebook's cells of the same id): its first cell installs
  the wheel from the bundle's ``wheels/`` keeping torch, then every check passes.
- In the test venv's own kernel: a ``utils.py`` that raises, a ``utils.py`` of the learner's, the PyPI
  package ``utils`` and the course both claiming ``site-packages/utils/``, the course's package
  failing to import: each named, exactly.

The wheel and bundle are built once (module scope); the whole module costs about 30 s of CPU.
"""
import json
import os
import re
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import dist  # noqa: E402
import setup_cell  # noqa: E402

CHAPTER = "00_foundations"
OFFLINE = {"PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_CONFIG_FILE": os.devnull,
           "PIP_EXTRA_INDEX_URL": "", "PIP_FIND_LINKS": "", "GIT_ALLOW_PROTOCOL": "file"}


def _execute(nb, cwd, kernel="python3"):
    client = NotebookClient(nb, kernel_name=kernel, timeout=300, allow_errors=True,
                            resources={"metadata": {"path": str(cwd)}})
    client.execute()
    return nb


def _text(cell):
    return "".join(o.get("text", "") if o.output_type == "stream" else f"{o.get('ename', '')}: {o.get('evalue', '')}"
                   for o in cell.outputs)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    wheel = dist.build_wheel(out)
    return wheel, dist.build_bundle(wheel, out)


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """A kernel in a venv without the course; the index unreachable."""
    base = tmp_path_factory.mktemp("fresh")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    (Path(purelib) / "test_venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    probe = subprocess.run([str(py), "-c", "import torch, ipykernel\nimport utils"], capture_output=True, text=True,
                           cwd=base, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert "No module named 'utils'" in probe.stderr, probe.stderr  # torch and ipykernel yes, the course no
    spec = base / "share" / "jupyter" / "kernels" / "course-fresh"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [str(py), "-m", "ipykernel_launcher", "-f", "{connection_file}"], "display_name": "fresh",
        "language": "python", "env": OFFLINE}))
    mp = pytest.MonkeyPatch()
    mp.setenv("JUPYTER_PATH", f"{base / 'share' / 'jupyter'}{os.pathsep}{os.environ.get('JUPYTER_PATH', '')}")
    mp.delenv("PYTHONPATH", raising=False)
    yield "course-fresh", Path(purelib)
    mp.undo()


def test_nothing_installable_is_one_message(fresh, tmp_path):
    kernel, _ = fresh
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(setup_cell.render())]
    text = _text(_execute(nb, tmp_path, kernel).cells[0])
    assert text.startswith("ImportError: The course's package `utils` is not installed, and installing it failed:"), text
    assert "ModuleNotFoundError" not in text and "No module named" not in text
    lines = text.splitlines()
    tried = [line for line in lines if line.startswith("  - ")]
    assert len(tried) == 3, text
    assert "attention_course_utils-*.whl" in tried[0] and "none" in tried[0]
    assert tried[1].startswith("  - attention-course-utils: ") and "no connection to the package index" in tried[1]
    assert tried[2].startswith(f"  - attention-course-utils @ git+{setup_cell.repository_url()}: ")
    assert lines[-1].startswith("What to do: upload the course's wheel") and "bundle" in lines[-1]


def test_the_bundle_alone_installs_the_course_and_every_check_passes(built, fresh, tmp_path):
    wheel, bundle = built
    kernel, purelib = fresh
    names = zipfile.ZipFile(bundle).namelist()
    top = f"attention-course-{dist.version()}"
    assert f"{top}/README.txt" in names and f"{top}/wheels/{wheel.name}" in names
    assert {f"{top}/{p.parent.name}/{p.name}" for p in (ROOT / "notebooks").glob("*/*.ipynb")} <= set(names)
    zipfile.ZipFile(bundle).extractall(tmp_path)
    folder = tmp_path / top / CHAPTER
    release = json.loads((folder / f"{CHAPTER}.ipynb").read_text())
    solution = {c.get("id"): c for c in json.loads((ROOT / "solutions" / CHAPTER / f"{CHAPTER}.ipynb").read_text())["cells"]}
    filled = 0
    for i, c in enumerate(release["cells"]):
        if c.get("metadata", {}).get("nbgrader", {}).get("solution"):
            release["cells"][i], filled = solution[c["id"]], filled + 1
    assert filled >= 3
    for c in release["cells"]:
        if c["cell_type"] == "code":
            c["outputs"], c["execution_count"] = [], None
        if c.get("id") == setup_cell.CELL_ID:  # the template as it is now (the same once `--write` and `make release` ran)
            c["source"] = setup_cell.render()
    release["cells"].append(nbformat.v4.new_code_cell("import utils, torch\nprint(utils.__file__, torch.__version__)"))
    nb = nbformat.reads(json.dumps(release), as_version=4)
    _execute(nb, folder, kernel)
    first = next(c for c in nb.cells if c.cell_type == "code")
    out = _text(first)
    print(f"the first cell in a fresh venv with only the bundle:\n{out}")
    import torch

    assert out == (f"installed attention-course-utils from {folder.parent / 'wheels' / wheel.name}, "
                   f"keeping torch {torch.__version__}\n{setup_cell.OUTPUT}"), out
    errors = [(c.get("id"), o.get("ename"), o.get("evalue")) for c in nb.cells if c.cell_type == "code"
              for o in c.outputs if o.output_type == "error"
              # the timing demo's asserts on CPU-time slopes are not a check, and a loaded machine skews them
              and not ("best_time(" in c.source and o.get("ename") == "AssertionError")]
    assert not errors, errors
    assert _text(nb.cells[-1]).startswith(str(purelib / "utils" / "__init__.py"))
    checks = [c for c in nb.cells if c.cell_type == "code" and re.search(r"^check_\w+\(", c.source, re.M)]
    assert len(checks) >= 3 and all("✅" in _text(c) for c in checks), [(c.get("id"), _text(c)[-200:]) for c in checks]


def _fake_site(base: Path, init: str, owners: list) -> Path:
    """A site folder with ``utils/__init__.py`` and distributions whose RECORD claims it."""
    (base / "utils").mkdir(parents=True)
    (base / "utils" / "__init__.py").write_text(init)
    for name in owners:
        info = base / f"{name.replace('-', '_')}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        (info / "RECORD").write_text(f"utils/__init__.py,,\n{info.name}/METADATA,,\n{info.name}/RECORD,,\n")
    return base


def test_the_first_cell_names_what_import_utils_found(tmp_path):
    raising = tmp_path / "raising"
    raising.mkdir()
    (raising / "utils.py").write_text("import numpyy\n")
    own = tmp_path / "own"
    own.mkdir()
    (own / "utils.py").write_text("def helper():\n    return 1\n")
    pypi = _fake_site(tmp_path / "pypi", "import os\n", ["utils", "attention-course-utils"])
    broken = _fake_site(tmp_path / "broken", 'COURSE = "attention-course"\nraise RuntimeError("half installed")\n', [])
    cases = [raising, own, pypi, broken]
    cells = []
    for folder in cases:
        cells += [f"import sys, importlib\nsys.modules.pop('utils', None)\nsys.path.insert(0, {str(folder)!r})\n"
                  "importlib.invalidate_caches()",
                  setup_cell.render(),
                  f"sys.path.remove({str(folder)!r})\nsys.modules.pop('utils', None)"]
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells + [setup_cell.render()]]
    _execute(nb, tmp_path)
    said = [_text(nb.cells[3 * i + 1]) for i in range(len(cases))]
    assert said[0] == (f"ImportError: `import utils` finds {raising / 'utils.py'}, which is not the course's package, and "
                       "its import fails: ModuleNotFoundError: No module named 'numpyy'. Rename it (or open the notebook "
                       "from another folder), restart the kernel."), said[0]
    assert said[1] == (f"ImportError: `import utils` finds {own / 'utils.py'}, which is not the course's package: rename it "
                       "(or open the notebook from another folder), then restart the kernel."), said[1]
    assert said[2].startswith(f"ImportError: `import utils` finds {pypi / 'utils'}, a folder that attention-course-utils "
                              "and utils both wrote into"), said[2]
    assert "pip uninstall -y attention-course-utils utils" in said[2] and "reinstalls the course" in said[2]
    assert said[3] == (f"ImportError: The course's package `utils` at {broken / 'utils'} fails to import: "
                       "RuntimeError: half installed"), said[3]
    assert _text(nb.cells[-1]) == setup_cell.OUTPUT  # and, back to the course's own, the one line
