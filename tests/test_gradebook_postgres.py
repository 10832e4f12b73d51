"""The gradebook at class scale, against a real PostgreSQL server.

The test starts its own server (Debian's `postgresql` package, which `make test` installs when it
is missing and it may) on loopback, in a throw-away data folder, and grades a small batch of the
sample bank through ``GRADEBOOK_URL=postgresql://...``:

1. as two grading machines at once on a fresh gradebook: two processes, each with its own
   workspace and half of the class, both creating the assignment's records;
2. the whole class with 2 parallel workers;
3. again (a regrade) with 1 worker, into the same gradebook and workspace.

Every run must give exactly the bank's expected scores, the same reasons, and a gradebook that
holds every student once with the same totals. Slow: marked `slow`.
"""
from __future__ import annotations

import csv
import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from grader import course
from grader.samples import bank

ROOT = course.ROOT
pytestmark = pytest.mark.slow

# Right and wrong answers to one chapter: the two machines both create its records at once (the
# race), and the batch is small enough for the time budget (each run grades every student).
STUDENTS = ("correct", "mistake_no_scaling")


def _pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if found:
        return Path(found[-1]).parent
    which = shutil.which("pg_ctl")
    return Path(which).parent if which else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def postgres():
    """A PostgreSQL server on 127.0.0.1:<free port>, stopped and deleted afterwards."""
    bindir = _pg_bin()
    if bindir is None:
        if os.environ.get("CI"):
            pytest.fail("PostgreSQL is not installed; `make test` installs Debian's package when run as root")
        pytest.skip("PostgreSQL (pg_ctl) is not installed: `apt-get install postgresql`")
    data = Path(tempfile.mkdtemp(prefix="attention-pg-"))
    run_as: list[str] = []
    if os.geteuid() == 0:  # the server refuses to run as root: run it as Debian's `postgres` user
        shutil.chown(data, "postgres", "postgres")
        run_as = ["runuser", "-u", "postgres", "--"]
    port = _free_port()
    pg = lambda *args, **kw: subprocess.run([*run_as, *args], capture_output=True, text=True, **kw)  # noqa: E731
    proc = pg(str(bindir / "initdb"), "-D", str(data / "db"), "-U", "grader", "--auth=trust", "-E", "UTF8")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    opts = f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={data} -c fsync=off"
    proc = pg(str(bindir / "pg_ctl"), "-D", str(data / "db"), "-l", str(data / "server.log"), "-o", opts,
              "-w", "-t", "60", "start")
    assert proc.returncode == 0, proc.stdout + proc.stderr + (data / "server.log").read_text()
    try:
        proc = pg(str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "grader", "attention")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        yield f"postgresql://grader@127.0.0.1:{port}/attention"
    finally:
        pg(str(bindir / "pg_ctl"), "-D", str(data / "db"), "-m", "immediate", "-w", "stop")
        shutil.rmtree(data, ignore_errors=True)


def _read(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _grade(subs: Path, reports: Path, work: Path, url: str, workers: int) -> subprocess.Popen:
    env = dict(os.environ, GRADEBOOK_URL=url, GRADER_WORKERS=str(workers), GRADER_CELL_TIMEOUT="20",
               JUPYTER_CONFIG_PATH=str(course.GRADER))
    return subprocess.Popen([sys.executable, "-m", "grader", "autograde", "--quiet", "--submissions", str(subs),
                             "--reports", str(reports), "--work", str(work)],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen) -> None:
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, out + err[-5000:]


def _scores(reports: Path) -> dict:
    return {(r["student_id"], r["assignment"], r["exercise"]): (float(r["score"]), r["reason"])
            for r in _read(reports / "exercises.csv")}


def _gradebook(url: str) -> dict:
    from nbgrader.api import Gradebook

    with Gradebook(url, "attention-course") as gb:
        return {(s.student_id, s.assignment.name): s.score for student in STUDENTS
                for s in gb.student_submissions(student)}


def test_postgres_gradebook_two_workers_regrade_and_two_machines(postgres, tmp_path):
    everything = bank.materialize(tmp_path / "all", only=STUDENTS)
    subs = tmp_path / "subs"
    for s in STUDENTS:
        shutil.copytree(everything / s, subs / s)
    expected = {(s, bank.ASSIGNMENT_OF.get(s, bank.A)): bank.SAMPLES[s][2] for s in STUDENTS}
    start = time.monotonic()

    # Two grading machines sharing a fresh gradebook, started together (both create the
    # assignment's records at once): disjoint halves of the class.
    halves = [tmp_path / "m1", tmp_path / "m2"]
    for i, s in enumerate(STUDENTS):
        shutil.copytree(subs / s, halves[i % 2] / s)
    procs = [_grade(h, tmp_path / f"r-{h.name}", tmp_path / f"work-{h.name}", postgres, workers=1) for h in halves]
    for p in procs:
        _finish(p)
    machines = {**_scores(tmp_path / "r-m1"), **_scores(tmp_path / "r-m2")}
    for (student, assignment), exp in expected.items():
        for ex, points in exp.items():
            got = machines[(student, assignment, ex)]
            assert got[0] == points, (student, ex, got)
    book = _gradebook(postgres)
    assert set(book) == set(expected)

    # The whole class on one machine with 2 workers, then a regrade with 1: the same records.
    _finish(_grade(subs, tmp_path / "r1", tmp_path / "work", postgres, workers=2))
    assert _scores(tmp_path / "r1") == machines, "2 workers gave other scores or reasons than two machines"
    assert _gradebook(postgres) == book
    _finish(_grade(subs, tmp_path / "r2", tmp_path / "work", postgres, workers=1))
    assert _scores(tmp_path / "r2") == machines, "a regrade with 1 worker changed a score or a reason"
    assert _gradebook(postgres) == book
    print(f"PostgreSQL gradebook: {len(STUDENTS)} submissions graded 3 ways in {time.monotonic() - start:.0f} s")
