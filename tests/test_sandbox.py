"""The grading sandbox, directly: what learner code can and cannot do inside it."""
import subprocess
import sys
import warnings

import pytest

from grader import course, sandbox

PY = sys.executable


def _run(tmp_path, code, **limits):
    (tmp_path / "t.py").write_text(code)
    return sandbox.run([PY, "t.py"], tmp_path, sandbox.Limits(wall_seconds=limits.pop("wall", 60), **limits))


needs_bwrap = pytest.mark.skipif(not sandbox.bwrap_available(), reason="bubblewrap is not available here")


@needs_bwrap
def test_no_network(tmp_path):
    code = ("import socket\ns = socket.socket(); s.settimeout(3)\n"
            "try:\n    s.connect(('1.1.1.1', 53)); print('CONNECTED')\nexcept OSError as e:\n    print('refused')")
    res = _run(tmp_path, code)
    assert "refused" in res.stdout and "CONNECTED" not in res.stdout and res.isolated


@needs_bwrap
def test_solutions_grader_and_git_are_hidden_and_the_course_is_read_only(tmp_path):
    code = (f"import os\nprint(sorted(os.listdir({str(course.SOLUTIONS)!r})), sorted(os.listdir({str(course.GRADER)!r})))\n"
            f"try:\n    open({str(course.ROOT / 'utils' / 'x.py')!r}, 'w'); print('WROTE')\nexcept OSError:\n    print('read-only')\n"
            "open('scratch.txt', 'w').write('ok'); print('scratch ok')")
    res = _run(tmp_path, code)
    assert res.stdout.splitlines()[0] == "[] []", res.stdout + res.stderr
    assert "read-only" in res.stdout and "scratch ok" in res.stdout
    assert (tmp_path / "scratch.txt").read_text() == "ok"


def test_a_huge_allocation_fails_cleanly(tmp_path):
    code = "try:\n    b = bytearray(20 * 2**30); print('ALLOCATED')\nexcept MemoryError:\n    print('refused')"
    assert "refused" in _run(tmp_path, code).stdout


def test_a_fork_storm_is_capped(tmp_path):
    code = ("import os, time\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n            time.sleep(20); os._exit(0)\n"
            "        n += 1\nexcept OSError:\n    print('capped at', n)")
    res = _run(tmp_path, code, max_processes=64)
    assert "capped at" in res.stdout
    assert int(res.stdout.split()[-1]) < 200


def test_the_wall_clock_limit_kills_everything(tmp_path):
    code = "import os, time\nif os.fork() == 0:\n    time.sleep(600)\ntime.sleep(600)"
    res = _run(tmp_path, code, wall=3)
    assert res.timed_out and res.seconds < 30
    leftover = subprocess.run(["pgrep", "-f", "time.sleep(600)"], capture_output=True, text=True).stdout.strip()
    assert not leftover


def test_without_bubblewrap_the_limits_stay_and_a_warning_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    monkeypatch.setattr(sandbox, "_BWRAP", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = _run(tmp_path, "try:\n    b = bytearray(20 * 2**30)\nexcept MemoryError:\n    print('refused')")
    assert not res.isolated and "refused" in res.stdout
    assert any("without filesystem and network isolation" in str(w.message) for w in caught)


def test_self_test_passes(tmp_path):
    sandbox.self_test(tmp_path / "self")
