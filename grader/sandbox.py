"""Run untrusted learner code in a sandbox with limits.

With bubblewrap (``bwrap``, Debian's ``bubblewrap``): new user, pid, net, ipc and uts namespaces
(no network but a private loopback), the whole filesystem read-only, ``solutions/``, ``grader/``,
``.git``, the submissions and the reports hidden under empty tmpfs, a private ``/tmp``, and one
writable scratch folder. Always, with or without bwrap: a cgroup (v1 or v2, where writable) caps
processes and memory, rlimits cap address space, CPU time, file size and open files, and a wall-clock
timeout kills the whole process group. Without bwrap the limits stay and a warning says the
filesystem and network are not isolated.
"""
from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
import time
import uuid
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from . import course

SCRATCH_IN_SANDBOX = "/tmp/sandbox"


@dataclass
class Limits:
    wall_seconds: float = 300.0  # the whole run (per notebook, or per verification)
    memory_bytes: int = 6 * 2**30  # all processes together (cgroup)
    address_space_bytes: int = 10 * 2**30  # per process (RLIMIT_AS): a 20 GB tensor fails cleanly
    max_processes: int = 256  # cgroup pids.max: a fork storm stops here
    cpu_seconds: int = 900  # per process (RLIMIT_CPU)
    file_bytes: int = 256 * 2**20  # largest file a process may write (RLIMIT_FSIZE)
    open_files: int = 512


@dataclass
class Result:
    returncode: int
    timed_out: bool
    stdout: str
    stderr: str
    seconds: float
    isolated: bool  # True when bwrap namespaces were used
    notes: list = field(default_factory=list)


def bwrap_available() -> bool:
    exe = shutil.which("bwrap")
    if not exe:
        return False
    probe = subprocess.run([exe, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "true"],
                           capture_output=True)
    return probe.returncode == 0


_BWRAP = None


def _bwrap_ok() -> bool:
    global _BWRAP
    if _BWRAP is None:
        _BWRAP = bwrap_available()
        if not _BWRAP:
            warnings.warn("bubblewrap (bwrap) is not available: grading runs with resource limits but "
                          "without filesystem and network isolation. Install Debian's `bubblewrap`.",
                          stacklevel=2)
    return _BWRAP


# ------------------------------------------------------------------------------------- cgroups
class _Cgroup:
    """A pids + memory cgroup for one sandboxed run, where the machine lets us make one."""

    def __init__(self, limits: Limits):
        self.dirs: list[Path] = []
        name = f"attention-grader-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        v1 = Path("/sys/fs/cgroup/pids")
        if v1.is_dir() and os.access(v1, os.W_OK):
            self._make(v1 / name, {"pids.max": str(limits.max_processes)})
            mem = Path("/sys/fs/cgroup/memory")
            if mem.is_dir() and os.access(mem, os.W_OK):
                self._make(mem / name, {"memory.limit_in_bytes": str(limits.memory_bytes),
                                        "memory.memsw.limit_in_bytes": str(limits.memory_bytes)})
        else:
            v2 = Path("/sys/fs/cgroup")
            if (v2 / "cgroup.controllers").exists() and os.access(v2, os.W_OK):
                self._make(v2 / name, {"pids.max": str(limits.max_processes),
                                       "memory.max": str(limits.memory_bytes), "memory.swap.max": "0"})

    def _make(self, path: Path, settings: dict) -> None:
        try:
            path.mkdir()
        except OSError:
            return
        self.dirs.append(path)
        for key, value in settings.items():
            try:
                (path / key).write_text(value)
            except OSError:
                pass  # e.g. memsw without swap accounting

    @property
    def active(self) -> bool:
        return bool(self.dirs)

    def join(self) -> None:  # in the child, before exec
        for d in self.dirs:
            try:
                (d / "cgroup.procs").write_text(str(os.getpid()))
            except OSError:
                pass

    def oom_killed(self) -> bool:
        for d in self.dirs:
            for name in ("memory.oom_control", "memory.events"):
                f = d / name
                if f.exists():
                    text = f.read_text()
                    for line in text.splitlines():
                        if line.startswith("oom_kill ") and int(line.split()[1]) > 0:
                            return True
        return False

    def kill_all(self) -> None:
        for _ in range(50):
            alive = False
            for d in self.dirs:
                try:
                    pids = [int(p) for p in (d / "cgroup.procs").read_text().split()]
                except OSError:
                    pids = []
                for pid in pids:
                    alive = True
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            if not alive:
                return
            time.sleep(0.05)

    def remove(self) -> None:
        self.kill_all()
        for d in self.dirs:
            for _ in range(40):
                try:
                    d.rmdir()
                    break
                except OSError:
                    time.sleep(0.05)


def _preexec(limits: Limits, cgroup: _Cgroup):
    def setup():
        os.setsid()  # its own process group: the timeout kills all of it
        cgroup.join()
        resource.setrlimit(resource.RLIMIT_AS, (limits.address_space_bytes, limits.address_space_bytes))
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes))
        resource.setrlimit(resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if not cgroup.active:  # without a pids cgroup, RLIMIT_NPROC is the fork-storm guard
            n = limits.max_processes + _count_own_processes()
            resource.setrlimit(resource.RLIMIT_NPROC, (n, n))

    return setup


def _count_own_processes() -> int:
    uid = os.getuid()
    n = 0
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if p.stat().st_uid == uid:
                    n += 1
            except OSError:
                pass
    return n


def _bwrap_command(cmd: list[str], scratch: Path, hide: list[Path]) -> list[str]:
    args = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    # Hide the grader's own home (caches, credentials) and /tmp, but keep what the kernel needs
    # visible wherever it lives: Python, the virtual environment and the course (its solutions/,
    # grader/ and .git are hidden again below).
    home = Path.home().resolve()
    masked = [Path("/tmp")]
    if home != Path("/"):
        args += ["--tmpfs", str(home)]
        masked.append(home)
    needed = {Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve(), course.ROOT.resolve()}
    for path in sorted(needed):
        for top_dir in masked:
            if path.is_relative_to(top_dir) and path != top_dir:
                keep = top_dir / path.relative_to(top_dir).parts[0]
                args += ["--ro-bind", str(keep), str(keep)]
    for path in hide:
        if path.exists():
            args += ["--tmpfs", str(path.resolve())]
    args += ["--bind", str(scratch.resolve()), SCRATCH_IN_SANDBOX, "--chdir", SCRATCH_IN_SANDBOX,
             "--unshare-all", "--die-with-parent", "--new-session",
             "--setenv", "HOME", SCRATCH_IN_SANDBOX, "--setenv", "TMPDIR", "/tmp", "--"]
    return args + cmd


def default_hidden() -> list[Path]:
    """What learner code must never read: solutions, the grader (samples, gradebook), git history."""
    return [course.SOLUTIONS, course.GRADER, course.ROOT / ".git", course.ROOT / "tests"]


def run(cmd: list[str], scratch: Path, limits: Limits | None = None, hide: list[Path] | None = None,
        env: dict | None = None) -> Result:
    """Run ``cmd`` sandboxed with ``scratch`` as its writable working folder.

    ``cmd`` paths that point into ``scratch`` must be given relative to it (the working folder).
    """
    limits = limits or Limits()
    hidden = default_hidden() + list(hide or [])
    isolated = _bwrap_ok()
    full = _bwrap_command(cmd, scratch, hidden) if isolated else cmd
    run_env = {k: v for k, v in os.environ.items() if not k.startswith(("GRADEBOOK", "JUPYTER_CONFIG"))}
    run_env.update({"HOME": SCRATCH_IN_SANDBOX if isolated else str(scratch), "PYTHONDONTWRITEBYTECODE": "1",
                    "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONHASHSEED": "0"})
    run_env.update(env or {})
    cgroup = _Cgroup(limits)
    notes = []
    start = time.monotonic()
    out_path, err_path = scratch / ".stdout", scratch / ".stderr"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(full, cwd=scratch, env=run_env, stdout=out, stderr=err,
                                stdin=subprocess.DEVNULL, preexec_fn=_preexec(limits, cgroup))
        timed_out = False
        try:
            proc.wait(timeout=limits.wall_seconds)
        except subprocess.TimeoutExpired:
            timed_out = True
            notes.append(f"stopped after the {limits.wall_seconds:.0f} s time limit")
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
            if cgroup.oom_killed():
                notes.append(f"a process was killed for using more than {limits.memory_bytes / 2**30:.0f} GiB of memory")
            cgroup.remove()
    return Result(proc.returncode, timed_out, _tail(out_path), _tail(err_path), time.monotonic() - start,
                  isolated, notes)


def self_test(scratch: Path) -> None:
    """Run the course's imports in the sandbox once; raise with the sandbox's own error if it fails.

    Without this, a broken sandbox (say, a course folder it cannot see) would quietly give every
    student zero.
    """
    scratch.mkdir(parents=True, exist_ok=True)
    probe = "import nbclient, torch, utils.checks; print('sandbox ok')"
    res = run([sys.executable, "-c", probe], scratch, Limits(wall_seconds=120))
    if res.returncode != 0 or "sandbox ok" not in res.stdout:
        raise RuntimeError("the grading sandbox cannot run the course's Python (nothing was graded):\n"
                           + (res.stderr.strip()[-2000:] or "; ".join(res.notes) or f"exit code {res.returncode}"))


def _tail(path: Path, limit: int = 20_000) -> str:
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            if size > limit:
                f.seek(size - limit)
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""
