"""The grading sandbox, directly: what learner code can and cannot do inside it."""
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import pytest

from grader import course, sandbox

PY = sys.executable


def _run(code, **limits):
    outputs = limits.pop("outputs", None)
    return sandbox.run([PY, "t.py"], files={"t.py": code.encode()}, outputs=outputs,
                       limits=sandbox.Limits(wall_seconds=limits.pop("wall", 60), **limits),
                       expose=[course.ROOT / "utils"])


needs_bwrap = pytest.mark.skipif(not sandbox.bwrap_available(), reason="bubblewrap is not available here")


@needs_bwrap
def test_no_network():
    code = ("import socket\ns = socket.socket(); s.settimeout(3)\n"
            "try:\n    s.connect(('1.1.1.1', 53)); print('CONNECTED')\nexcept OSError as e:\n    print('refused')")
    res = _run(code)
    assert "refused" in res.stdout and "CONNECTED" not in res.stdout and res.isolated


@needs_bwrap
def test_hidden_paths_do_not_exist_and_the_system_is_read_only():
    hidden = [course.SOLUTIONS, course.GRADER, course.ROOT / ".git", course.ROOT / "tests", course.secret_path()]
    code = (f"import os\nfor p in {[str(p) for p in hidden]!r}:\n    print(p, os.path.exists(p))\n"
            f"try:\n    open({str(course.ROOT / 'utils' / 'x.py')!r}, 'w'); print('WROTE')\nexcept OSError:\n    print('read-only')\n"
            "open('scratch.txt', 'w').write('ok'); print('scratch ok')")
    res = _run(code)
    assert all(line.endswith("False") for line in res.stdout.splitlines()[:len(hidden)]), res.stdout + res.stderr
    assert "read-only" in res.stdout and "scratch ok" in res.stdout


@needs_bwrap
def test_no_capability_no_mount_and_not_root():
    code = ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "print('uid', os.getuid())\n"
            "print('caps', [l.split()[1] for l in open('/proc/self/status') if l.startswith('Cap')])\n"
            "print('umount', libc.umount2(b'/tmp', 2), 'mount', libc.mount(b'none', b'/usr', b'tmpfs', 0, None))")
    res = _run(code)
    assert "umount -1 mount -1" in res.stdout, res.stdout + res.stderr
    caps = res.stdout.split("caps ")[1].splitlines()[0]
    assert set(caps.replace("'", "").strip("[]").replace(" ", "").split(",")) == {"0000000000000000"}
    if os.geteuid() == 0:
        assert "uid 0" not in res.stdout


@needs_bwrap
def test_scratch_is_capped_and_outputs_are_read_safely():
    code = ("import os\n"
            "try:\n    open('/tmp/big', 'wb').write(b'x' * (64 * 2**20)); print('WROTE BIG')\nexcept OSError:\n    print('scratch full')\n"
            "try:\n    os.unlink('out.txt'); os.symlink('/etc/passwd', 'out.txt'); print('REPLACED')\nexcept OSError:\n    print('cannot replace')\n"
            "open('out.txt', 'w').write('mine')\n"
            "try:\n    os.mkfifo('fifo'); print('fifo made in private scratch')\nexcept OSError:\n    pass\n")
    res = _run(code, scratch_bytes=16 * 2**20, outputs={"out.txt": 1000, "missing.txt": 10})
    assert "scratch full" in res.stdout and "cannot replace" in res.stdout, res.stdout + res.stderr
    assert res.outputs["out.txt"] == b"mine"
    assert res.outputs["missing.txt"] is None and res.output_problems["missing.txt"]


def test_read_regular_refuses_links_fifos_and_large_files(tmp_path):
    (tmp_path / "big").write_bytes(b"x" * 100)
    os.symlink("/etc/hostname", tmp_path / "link")
    os.mkfifo(tmp_path / "fifo")
    assert sandbox.read_regular(tmp_path / "big", 10)[0] is None
    assert sandbox.read_regular(tmp_path / "big", 100)[0] == b"x" * 100
    assert sandbox.read_regular(tmp_path / "link", 1000)[0] is None
    assert sandbox.read_regular(tmp_path / "fifo", 1000) == (None, "it is not a regular file")


def test_a_huge_allocation_fails_cleanly():
    code = "try:\n    b = bytearray(20 * 2**30); print('ALLOCATED')\nexcept MemoryError:\n    print('refused')"
    assert "refused" in _run(code).stdout


def test_a_fork_storm_is_capped():
    code = ("import os, time\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n            time.sleep(20); os._exit(0)\n"
            "        n += 1\nexcept OSError:\n    print('capped at', n)")
    res = _run(code, max_processes=64)
    assert "capped at" in res.stdout
    assert int(res.stdout.split()[-1]) < 200


def test_the_wall_clock_limit_kills_everything():
    code = "import os, time\nif os.fork() == 0:\n    time.sleep(600)\ntime.sleep(600)"
    res = _run(code, wall=3)
    assert res.timed_out and res.seconds < 30
    leftover = subprocess.run(["pgrep", "-f", "time.sleep(600)"], capture_output=True, text=True).stdout.strip()
    assert not leftover


def test_without_bubblewrap_the_limits_stay_and_a_warning_says_so(monkeypatch):
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    monkeypatch.setattr(sandbox, "_BWRAP", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = _run("try:\n    b = bytearray(20 * 2**30)\nexcept MemoryError:\n    print('refused')")
    assert not res.isolated and "refused" in res.stdout
    assert any("without filesystem and network isolation" in str(w.message) for w in caught)


def test_self_test_passes_and_proves_no_capability():
    report = sandbox.self_test()
    if report["isolated"]:
        assert not any(report["caps"].values()) and not report["readable"]
        assert report["host_uid"] != 0 and not report["mount"] and not report["umount"]


@needs_bwrap
def test_self_test_refuses_a_sandbox_that_runs_as_root(monkeypatch):
    """As root, the user-namespace path would map learner code to root on the host: refused."""
    if os.geteuid() != 0:
        pytest.skip("only meaningful when grading as root")
    monkeypatch.setattr(sandbox, "_is_root", lambda: False)
    with pytest.raises(RuntimeError, match="root on the host"):
        sandbox.self_test()


def _as_nobody(tmp_path) -> list[str]:
    """The command prefix that runs this Python as `nobody`. When the interpreter lives under a
    directory `nobody` cannot enter (pyenv under /root, mode 0700), the test runs in a private
    mount namespace where that directory is a world-readable tmpfs holding only a bind of the
    interpreter's tree; the host is unchanged."""
    probe = subprocess.run(["runuser", "-u", "nobody", "--", PY, "-c", "import torch"], capture_output=True)
    if probe.returncode == 0:
        return ["runuser", "-u", "nobody", "--"]
    blocked = next((p for p in reversed(Path(sys.base_prefix).resolve().parents)
                    if p != Path("/") and not os.stat(p).st_mode & 0o001), None)
    if blocked is None or not shutil.which("unshare"):
        pytest.fail(f"the course's Python is not usable by nobody, and no directory to open was found: {probe.stderr[-500:]!r}")
    child = blocked / Path(sys.base_prefix).resolve().relative_to(blocked).parts[0]
    keep = tmp_path / "keep"
    keep.mkdir()
    script = (f"set -e; mount -t tmpfs -o mode=0755 tmpfs {keep}; mkdir {keep}/tree; mount --bind {child} {keep}/tree; "
              f"mount -t tmpfs -o mode=0755 tmpfs {blocked}; mkdir -p {child}; mount --bind {keep}/tree {child}; "
              'exec runuser -u nobody -- "$@"')
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh"]


def test_self_test_as_an_ordinary_user(tmp_path):
    """The same self-test, run by an unprivileged account (nobody): no capability kept, no hidden
    path readable, learner code not root."""
    if os.geteuid() != 0 or not shutil.which("runuser"):
        pytest.skip("needs root to switch to an ordinary user")
    prefix = _as_nobody(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    os.chmod(tmp_path, 0o755)
    os.chmod(home, 0o777)
    code = f"import sys; sys.path.insert(0, {str(course.ROOT)!r}); from grader import sandbox; print(sandbox.self_test())"
    env = dict(os.environ, HOME=str(home), TMPDIR=str(home))
    res = subprocess.run([*prefix, PY, "-c", code], capture_output=True, text=True, env=env, cwd=home, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr[-3000:]


@pytest.fixture
def request_cleanup():
    folders = []
    yield folders
    for f in folders:
        shutil.rmtree(f, ignore_errors=True)


def test_grading_as_an_ordinary_user_gains_nothing_and_touches_nothing(tmp_path, request_cleanup):
    """Issue 7, done when: grading also run by an unprivileged account (nobody), not only as root.
    The escape sample next to a correct submission: the escape scores what its (correct) answers
    earn and nothing more, the other submission is untouched and full marks, no canary anywhere."""
    if os.geteuid() != 0 or not shutil.which("runuser"):
        pytest.skip("needs root to switch to an ordinary user")
    import csv
    import json

    from grader.samples import bank

    prefix = _as_nobody(tmp_path)
    root = Path(tempfile.mkdtemp(prefix="grade-as-nobody-", dir="/tmp"))  # nobody cannot enter pytest's 0700 tree
    request_cleanup.append(root)
    os.chmod(root, 0o755)
    home = root / "home"
    subs = root / "subs"
    for student in ("hostile_escape", "correct"):
        folder = subs / student / bank.A
        folder.mkdir(parents=True)
        (folder / f"{bank.A}.ipynb").write_text(json.dumps(bank.SAMPLES[student][1]()))
    nobody = pwd.getpwnam("nobody")
    for d in (home, root / "work", root / "reports", root / "secret"):  # the instructor's own folders
        d.mkdir(exist_ok=True)
        os.chown(d, nobody.pw_uid, nobody.pw_gid)
    for p in [subs, *subs.rglob("*")]:  # the class's submissions: readable
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    env = dict(os.environ, HOME=str(home), TMPDIR=str(home), GRADER_SECRET_FILE=str(root / "secret" / "salt"),
               GRADEBOOK_URL=f"sqlite:///{root}/work/gradebook.db", JUPYTER_CONFIG_PATH=str(course.GRADER),
               GRADER_CELL_TIMEOUT="20")
    res = subprocess.run([*prefix, PY, "-m", "grader", "autograde", "--quiet", "--submissions", str(subs),
                          "--reports", str(root / "reports"), "--work", str(root / "work")],
                         capture_output=True, text=True, env=env, cwd=course.ROOT, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr[-3000:]
    with open(root / "reports" / "exercises.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    got = {(r["student_id"], r["exercise"]): float(r["score"]) for r in rows}
    for student in ("hostile_escape", "correct"):
        for exercise, score in bank.SAMPLES[student][2].items():
            assert got[(student, exercise)] == score, (student, exercise, got)
    assert json.loads((subs / "correct" / bank.A / f"{bank.A}.ipynb").read_text())["cells"]
    for d in ("/", "/tmp", "/work", str(root)):
        assert not os.path.exists(os.path.join(d, "CANARY-escaped")), d


def test_a_sandboxed_process_sees_none_of_the_graders_environment(monkeypatch):
    """Issue 25 §1: a kernel cell that prints os.environ (round 3 printed PGPASSWORD,
    AWS_SECRET_ACCESS_KEY and CANVAS_API_TOKEN into a student's feedback) shows an allow-list only."""
    secrets = {"PGPASSWORD": "pg-secret", "AWS_SECRET_ACCESS_KEY": "aws-secret", "CANVAS_API_TOKEN": "canvas-token",
               "GRADEBOOK_URL": "postgresql://grader:pw@db/x", "SOME_TOKEN": "tok"}
    for k, v in secrets.items():
        monkeypatch.setenv(k, v)
    res = _run("import json, os\nprint(json.dumps(dict(os.environ)))")
    env = json.loads(res.stdout.strip().splitlines()[-1])
    assert not set(secrets) & set(env) and not any(v in res.stdout for v in secrets.values()), env
    assert env["HOME"] == sandbox.WORKDIR if res.isolated else True


@needs_bwrap
def test_a_read_only_sandbox_writes_nowhere_and_gets_its_descriptor():
    """The re-check's sandbox: nothing writable (working folder, HOME, /tmp, /dev/shm), and a
    descriptor passed in is there at its number."""
    r, w = os.pipe()
    code = ("import os, sys\nout = []\n"
            "for d in ('.', '/tmp', '/tmp/sandbox', '/dev/shm', os.environ['HOME']):\n"
            "    try:\n        open(os.path.join(d, 'x'), 'w'); out.append(d)\n    except OSError:\n        pass\n"
            "os.write(int(sys.argv[1]), repr(out).encode())\n")
    try:
        res = sandbox.run([PY, "t.py", str(w)], files={"t.py": code.encode()}, read_only=True, pass_fds=(w,),
                          limits=sandbox.Limits(wall_seconds=60))
        os.close(w)
        w = None
        got = os.read(r, 1000).decode()
    finally:
        os.close(r)
        if w is not None:
            os.close(w)
    assert got == "[]", (got, res.stderr)
