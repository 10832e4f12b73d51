"""The course where its users already are (issue 19 §1-2).

- ``pip install`` of a built wheel (not the editable checkout) gives a working ``utils`` with its
  bundled data, and one chapter executes from a folder outside the repository with only that wheel
  on the path: every check passes and the sonnets load.
- The set-up cell that starts every notebook imports the course's package and stops with a clear
  message when another ``utils`` shadows it. Its installs (the bundle's wheel, the index, the
  repository address) and its other diagnoses are tested in tests/test_dist.py.
"""
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import setup_cell  # noqa: E402


def _run(cells, cwd, env=None, monkeypatch=None):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    client = NotebookClient(nb, kernel_name="python3", timeout=300, allow_errors=True,
                            resources={"metadata": {"path": str(cwd)}})
    client.execute()
    return nb


def _text(cell):
    out = []
    for o in cell.outputs:
        out.append(o.get("text", "") if o.output_type == "stream" else f"{o.get('ename', '')}: {o.get('evalue', '')}")
    return "".join(out)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """The course's wheel, built from a copy of the package sources (the repository stays clean)."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "utils", src / "utils", ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(src)],
                   check=True, timeout=300)
    return next(out.glob("*.whl"))


def test_wheel_holds_the_package_data_and_states_its_dependencies(wheel):
    z = zipfile.ZipFile(wheel)
    names = z.namelist()
    assert "utils/data/shakespeare_sonnets.txt" in names
    assert {"utils/checks/_core.py", "utils/reference/_common.py", "utils/plotting/curves.py", "utils/_needs.py"} <= set(names)
    meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    requires = [line.split(":", 1)[1].strip() for line in meta.splitlines() if line.startswith("Requires-Dist:")]
    torch = next(r for r in requires if r.startswith("torch"))
    assert "==" not in torch and ">=2.11" in torch  # a tested range, never a pin
    assert any(r.startswith("nbgrader") and 'extra == "grader"' in r for r in requires)  # instructors' extra
    assert not any(r.startswith(("nbgrader", "pytest", "psycopg")) and "extra ==" not in r for r in requires)
    assert "Project-URL: Repository, " + setup_cell.repository_url() in meta


def test_a_chapter_runs_from_the_installed_wheel_outside_the_repository(wheel, tmp_path, monkeypatch):
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                   check=True, timeout=300)
    work = tmp_path / "learner"
    work.mkdir()
    # chapter 00 with its answers filled in (the solution notebook), outputs cleared
    nb = json.loads((ROOT / "solutions" / "00_foundations" / "00_foundations.ipynb").read_text())
    for c in nb["cells"]:
        if c["cell_type"] == "code":
            c["outputs"], c["execution_count"] = [], None
    nb["cells"].append({"cell_type": "code", "id": "proof", "metadata": {}, "outputs": [], "execution_count": None, "source":
        "from pathlib import Path\nimport utils, utils.checks\n"
        f"assert Path(utils.__file__).resolve().is_relative_to({str(site.resolve())!r}), utils.__file__\n"
        "text = (Path(utils.__file__).parent / 'data' / 'shakespeare_sonnets.txt').read_text(encoding='utf-8')\n"
        "print('installed at', utils.__file__, '| sonnets:', len(text), 'characters')"})
    (work / "00_foundations.ipynb").write_text(json.dumps(nb))
    # only the wheel's site on the path: the repository and its editable install come after it
    monkeypatch.setenv("PYTHONPATH", str(site))
    node = nbformat.reads(json.dumps(nb), as_version=4)
    NotebookClient(node, kernel_name="python3", timeout=300, allow_errors=True,
                   resources={"metadata": {"path": str(work)}}).execute()
    errors = [(i, o.get("ename"), o.get("evalue")) for i, c in enumerate(node.cells) if c.cell_type == "code"
              for o in c.outputs if o.output_type == "error"]
    assert not errors, errors
    checks = [_text(c) for c in node.cells if c.cell_type == "code" and "check_" in c.source and "✅" in _text(c)]
    assert len(checks) >= 2  # every check of the chapter passed (softmax, logsumexp, the quizzes)
    assert "sonnets:" in _text(node.cells[-1]) and str(site) in _text(node.cells[-1])


def test_setup_cell_imports_the_course_package(tmp_path):
    nb = _run([setup_cell.render()], tmp_path)
    assert _text(nb.cells[0]).strip() == setup_cell.OUTPUT.strip()


def test_setup_cell_names_a_utils_that_shadows_the_course(tmp_path):
    (tmp_path / "utils.py").write_text("def helper():\n    return 1\n")
    nb = _run([setup_cell.render()], tmp_path)
    text = _text(nb.cells[0])
    assert "ImportError" in text and "utils.py" in text and "not the course's package" in text


def test_every_notebook_starts_with_the_setup_cell():
    found = [m for p in setup_cell.notebooks() for m in setup_cell.problems(p)]
    assert not found, "\n".join(found)
