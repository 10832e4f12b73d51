"""Grading, round two (issue 18): faults that cost honest students, links in uploads, forbidden
calls the re-check did not see, bombs in the grading process, scripts in the instructor's browser."""
import concurrent.futures as futures
import os
import sys
import time
from pathlib import Path

import nbformat
import pytest

from grader import course, sandbox

PY = sys.executable
needs_bwrap = pytest.mark.skipif(not sandbox.bwrap_available(), reason="bubblewrap is not available here")


# ------------------------------------------------------------------- 18 §5: honest students
def test_a_fresh_salt_is_made_once_by_many_threads(tmp_path, monkeypatch):
    """Two grading threads on a fresh installation made the salt's temporary file under one name
    (the process id): FileExistsError, a correct submission scored 0. Now 16 threads agree."""
    monkeypatch.setenv("GRADER_SECRET_FILE", str(tmp_path / "secret" / "salt"))
    for attempt in range(5):
        (tmp_path / "secret" / "salt").unlink(missing_ok=True)
        with futures.ThreadPoolExecutor(16) as pool:
            salts = list(pool.map(lambda _: course.secret_salt(), range(16)))
        assert len(set(salts)) == 1 and len(salts[0]) >= 32
        assert sorted(p.name for p in (tmp_path / "secret").iterdir()) == ["salt"]  # no temporary left
        assert (tmp_path / "secret" / "salt").stat().st_mode & 0o777 == 0o600


def test_the_warm_up_does_not_replace_the_first_cell(tmp_path):
    """_execute.py's warm-up ran as cell index 0 and nbclient stored it there: a notebook whose
    first cell is code lost that cell."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("first = 41\nprint('first cell ran')"),
                nbformat.v4.new_markdown_cell("text"),
                nbformat.v4.new_code_cell("print(first + 1)")]
    res = sandbox.run([PY, "_execute.py", "in.ipynb", "out.ipynb", "60"],
                      files={"in.ipynb": nbformat.writes(nb).encode(),
                             "_execute.py": course.GRADER / "_execute.py"},
                      outputs={"out.ipynb": 2**20}, limits=sandbox.Limits(wall_seconds=120))
    out = nbformat.reads(res.outputs["out.ipynb"].decode(), as_version=4)
    assert len(out.cells) == 3, res.stderr
    assert out.cells[0].source.startswith("first = 41")
    assert "first cell ran" in out.cells[0].outputs[0]["text"]
    assert "42" in out.cells[2].outputs[0]["text"]


STARVER = r'''
import os, subprocess, time
t0 = time.monotonic()
procs = [subprocess.Popen(["sh", "-c", "while :; do :; done"], start_new_session=True) for _ in range(24)]
time.sleep(4)
total = 0.0
for p in procs:
    with open(f"/proc/{p.pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
print("CPU", total, time.monotonic() - t0)
'''


def _cpu_cgroup_available() -> bool:
    cg = sandbox._Cgroup(sandbox.Limits(cpu_cores=0.5))
    try:
        return cg.cpu_limited
    finally:
        cg.remove()


@needs_bwrap
def test_busy_loops_in_many_sessions_share_one_capped_cpu():
    """240 busy `sh` loops, each in its own session, slowed the whole machine: a sandbox's CPU is
    now capped as a whole (a cpu cgroup). 24 loops get at most 0.25 core together."""
    if not _cpu_cgroup_available():
        pytest.skip("no writable cpu cgroup here: the fallback is nice 19 (see sandbox._Cgroup)")
    res = sandbox.run([PY, "t.py"], files={"t.py": STARVER.encode()},
                      limits=sandbox.Limits(wall_seconds=60, cpu_cores=0.25))
    assert res.cpu_capped
    used, wall = map(float, res.stdout.split("CPU")[1].split())
    # Uncapped, 24 loops on 2 cores for 4 s use up to 8 CPU-seconds (7.4 measured).
    assert used <= 0.25 * wall + 0.5, (used, wall, res.stderr)


@needs_bwrap
def test_no_cgroup_is_left_behind_and_orphans_are_swept():
    roots = sandbox._cgroup_roots()
    if not any(os.access(r, os.W_OK) for r in roots):
        pytest.skip("no writable cgroup here")

    def ours():
        return {p.name for r in roots if r.is_dir() for p in r.iterdir() if p.name.startswith(sandbox.CGROUP_PREFIX)}

    before = ours()
    sandbox.run([PY, "-c", "import subprocess; subprocess.Popen(['sleep', '30'], start_new_session=True)"],
                limits=sandbox.Limits(wall_seconds=30))
    assert ours() == before
    # An orphan of a grading process that died (pid 2**22 - 1 does not exist): swept.
    orphan = [r / f"{sandbox.CGROUP_PREFIX}{2**22 - 1}-deadbeef" for r in roots if os.access(r, os.W_OK)]
    for d in orphan:
        d.mkdir()
    removed = sandbox.sweep_cgroups()
    assert all(str(d) in removed and not d.exists() for d in orphan)
