"""The set-up: one list of requirements, torch pinned exactly, the same list for conda users."""
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def test_torch_is_pinned_exactly():
    lines = [line.split("#")[0].strip() for line in (ROOT / "requirements.txt").read_text().splitlines()]
    assert "torch==2.13.0" in lines


def test_conda_environment_reads_the_same_requirements():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert "python=3.11" in env["dependencies"]
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    assert "-r requirements.txt" in pip and "-e ." in pip


def test_makefile_installs_the_same_requirements_and_ci_runs_make_test():
    makefile = (ROOT / "Makefile").read_text()
    assert "-r requirements.txt" in makefile
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    assert "make test" in (ROOT / "README.md").read_text() and "make lab" in (ROOT / "README.md").read_text()
