"""Run untrusted learner code in a sandbox with limits.

Everything a sandboxed process can reach is listed here; nothing else of the host exists for it.

* **Nothing is bound unless it is needed.** The sandbox's root is an empty tmpfs; the system
  (``/usr``, ``/lib*``, a few files of ``/etc``), the Python installation and the virtual
  environment are bound read-only, and, only when a caller asks (``expose``), a course folder
  such as ``utils/``. The rest of the course (``solutions/``, ``grader/``, ``.git``, ``tests/``, an
  earlier ``reports/``), the submissions, the gradebook, the grader's secret salt, other
  checkouts of the course and the home folder are not there at all.
* **No privilege.** Run as root (CI, a container), bubblewrap drops every capability but
  SETUID/SETGID/SETPCAP, and ``setpriv`` then switches to an unprivileged uid of the host (one per
  concurrent run) with an empty bounding set: learner code runs with no capability and cannot
  mount, unmount or remount anything. Run as an ordinary user, bubblewrap makes a user namespace
  and drops every capability in it. ``self_test`` refuses to grade if a sandboxed process keeps
  any capability or can read a hidden path.
* **Scratch is small and private.** The working folder (``/tmp/sandbox``, also HOME) is a tmpfs
  of ``Limits.scratch_bytes``, gone when the run ends. Inputs are bound read-only as single files;
  each declared output is one host file bound at its name (learner code can write it, up to
  ``Limits.file_bytes``, but cannot replace it by a link or a FIFO, or create any other host file).
  Outputs are read back with :func:`read_regular` (no link followed, no blocking, size-capped), and
  the run's host folder is deleted afterwards.
* **Limits.** A cgroup (v1 or v2, where writable) caps processes, memory and the CPU of all the
  run's processes together (``Limits.cpu_cores``; without a cpu controller: nice 19), rlimits cap
  address space, CPU time, file size and open files, and a wall-clock timeout kills the whole process group.
  No network: a new network namespace with only loopback.

Without bubblewrap the limits stay and a warning says the filesystem and network are not isolated.
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from . import course

WORKDIR = "/tmp/sandbox"  # the working folder and HOME inside the sandbox
SANDBOX_UID_BASE = int(os.environ.get("GRADER_SANDBOX_UID", "61000"))  # uids for learner code when root
_ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "passwd", "group", "nsswitch.conf", "hosts",
        "host.conf", "localtime", "fonts", "mime.types", "alternatives", "gai.conf", "protocols")


@dataclass
class Limits:
    wall_seconds: float = 300.0  # the whole run (per notebook, or per verification)
    memory_bytes: int = 6 * 2**30  # all processes together (cgroup)
    address_space_bytes: int = 10 * 2**30  # per process (RLIMIT_AS): a 20 GB tensor fails cleanly
    max_processes: int = 256  # cgroup pids.max: a fork storm stops here
    cpu_seconds: int = 900  # per process (RLIMIT_CPU)
    file_bytes: int = 64 * 2**20  # largest file a process may write (RLIMIT_FSIZE)
    open_files: int = 512
    # All processes of one run together (cgroup cpu.max / cfs quota): busy loops in any number of
    # processes or sessions get at most this many cores; 0: no cap. Without a cpu cgroup: nice 19.
    cpu_cores: float = float(os.environ.get("GRADER_SANDBOX_CPUS", "1"))
    scratch_bytes: int = 256 * 2**20  # the tmpfs holding the working folder and /tmp


@dataclass
class Result:
    returncode: int
    timed_out: bool
    stdout: str
    stderr: str
    seconds: float
    isolated: bool  # True when bwrap namespaces were used
    notes: list = field(default_factory=list)
    outputs: dict = field(default_factory=dict)  # name -> bytes, or None when unusable
    output_problems: dict = field(default_factory=dict)  # name -> why it is unusable
    cpu_capped: bool = False  # all the run's processes shared Limits.cpu_cores (a cpu cgroup)


# ------------------------------------------------------------------------------ reading scratch
def read_regular(path: Path, limit: int) -> tuple[bytes | None, str | None]:
    """Read a file that hostile code may have tampered with: ``(data, None)`` or ``(None, why)``.

    Never follows a symbolic link, never blocks (a FIFO is refused, not opened for reading until
    someone writes), accepts only a regular file, and reads at most ``limit`` bytes.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        return None, "it was not written"
    except OSError as err:
        return None, f"it could not be opened safely ({err.strerror})"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None, "it is not a regular file"
        return _read_capped(fd, st, limit)
    finally:
        os.close(fd)


def _read_capped(fd: int, st: os.stat_result, limit: int) -> tuple[bytes | None, str | None]:
    """The bytes of the open regular file ``fd`` (its ``fstat`` is ``st``), at most ``limit`` of
    them: a file that is or grows larger is refused with a reason."""
    if st.st_size > limit:
        return None, f"it is larger than {limit // 2**20} MiB"
    chunks, total = [], 0
    while total <= limit:
        b = os.read(fd, min(1 << 20, limit + 1 - total))
        if not b:
            break
        chunks.append(b)
        total += len(b)
    if total > limit:
        return None, f"it is larger than {limit // 2**20} MiB"
    return b"".join(chunks), None


def read_below(root: Path, parts: list[str], limit: int) -> tuple[bytes | None, str | None]:
    """Read ``root/parts[0]/.../parts[-1]`` without following a link anywhere below ``root``:
    every folder is opened relative to the one before it with ``O_NOFOLLOW | O_DIRECTORY``, so a
    student folder, an assignment folder or a notebook that is a symbolic link (to the solutions,
    to a peer's folder) is refused with a reason, and nothing outside ``root`` is ever opened. A
    notebook with more than one hard link is refused too (it may be another file's second name).
    ``(data, None)`` or ``(None, why)``."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    fds = []
    try:
        try:
            fds.append(os.open(root, flags | os.O_DIRECTORY))
        except OSError as err:
            return None, f"the submissions folder could not be opened ({err.strerror})"
        for i, part in enumerate(parts[:-1]):
            if part in ("", ".", "..") or "/" in part:
                return None, f"{part!r} is not a folder name"
            try:
                fds.append(os.open(part, flags | os.O_DIRECTORY, dir_fd=fds[-1]))
            except OSError as err:
                where = "/".join(parts[:i + 1])
                if os.path.islink(os.path.join(root, where)):
                    return None, f"`{where}` is a symbolic link: links are refused, nothing outside your own folder is read"
                return None, f"`{where}` could not be opened ({err.strerror})"
        name = parts[-1]
        try:
            fd = os.open(name, flags | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0), dir_fd=fds[-1])
        except FileNotFoundError:
            return None, "it was not written"
        except OSError as err:
            if os.path.islink(os.path.join(root, *parts)):
                return None, f"`{'/'.join(parts)}` is a symbolic link: links are refused, nothing outside your own folder is read"
            return None, f"it could not be opened safely ({err.strerror})"
        fds.append(fd)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None, "it is not a regular file"
        if st.st_nlink > 1:
            return None, "it is a hard link to another file: links are refused"
        return _read_capped(fd, st, limit)
    finally:
        for fd in reversed(fds):
            os.close(fd)


# ------------------------------------------------------------------------------------ bwrap
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


def _is_root() -> bool:
    return os.geteuid() == 0


_UIDS_LOCK = threading.Lock()
_UIDS_IN_USE: dict = {}  # uid -> the open lock file that reserves it machine-wide


def _take_uid() -> int:
    """An unprivileged host uid of its own for each run, unique on the whole machine: other
    grading processes (another checkout, another instructor's batch) hold an flock on theirs, so
    rlimits per uid and the final kill of whatever still runs as that uid never touch another run."""
    import fcntl

    with _UIDS_LOCK:
        for uid in range(SANDBOX_UID_BASE, SANDBOX_UID_BASE + 4096):
            if uid in _UIDS_IN_USE:
                continue
            path = Path(tempfile.gettempdir()) / f".attention-grader-uid-{uid}.lock"
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            if _uid_has_processes(uid):  # a stale run of someone else's: leave that uid alone
                os.close(fd)
                continue
            _UIDS_IN_USE[uid] = fd
            return uid
    raise RuntimeError("no free sandbox uid")


def _uid_has_processes(uid: int) -> bool:
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if p.stat().st_uid == uid:
                    return True
            except OSError:
                pass
    return False


def _give_uid(uid: int) -> None:
    with _UIDS_LOCK:
        fd = _UIDS_IN_USE.pop(uid, None)
        if fd is not None:
            os.close(fd)


def system_binds() -> list[Path]:
    """What any Python process needs: the system, the interpreter, the virtual environment."""
    paths = []
    for top in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.lexists(top):
            paths.append(Path(top))
    for etc in _ETC:
        p = Path("/etc") / etc
        if p.exists():
            paths.append(p)
    for prefix in {sys.base_prefix, sys.prefix, os.path.dirname(os.path.realpath(sys.executable))}:
        paths.append(Path(prefix))
    return paths


def _bwrap_command(cmd: list[str], limits: Limits, binds: list[tuple[Path, str, bool]], uid: int | None,
                   read_only: bool = False) -> list[str]:
    """binds: (host path, path inside, writable). ``read_only``: the scratch tmpfs (/tmp, the
    working folder, HOME) and /dev/shm are remounted read-only once everything is in place, so
    the process can write nowhere but the writable binds (and the descriptors it was given)."""
    args = ["bwrap", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    if uid is not None:  # root: keep only what setpriv needs to switch uid, then it drops those too
        args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]
    else:  # an ordinary user: a user namespace, and no nested ones
        args += ["--unshare-user", "--disable-userns"]
    made: set[str] = {"/"}
    bound: list[str] = []

    def covered(p: str) -> bool:
        return any(p == b or p.startswith(b.rstrip("/") + "/") for b in bound)

    def parents(p: str) -> list[str]:
        out = []
        for parent in reversed(Path(p).parents):
            s = str(parent)
            if s not in made and not covered(s):
                made.add(s)
                out += ["--perms", "0755", "--dir", s]
        return out

    # Private /proc, /dev and sized tmpfs first: a bind made before `--tmpfs /tmp` would be hidden
    # by it (CI clones the course, and so its venv, under /tmp).
    args += ["--proc", "/proc", "--dev", "/dev", "--size", str(limits.scratch_bytes), "--tmpfs", "/dev/shm",
             "--size", str(limits.scratch_bytes), "--tmpfs", "/tmp"]
    made.update({"/proc", "/dev", "/tmp"})
    # The system: directories bound as they are, merged-/usr symlinks recreated as symlinks.
    for host in system_binds():
        s = str(host)
        if covered(s):
            continue
        if host.is_symlink() and str(host) in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
            args += ["--symlink", os.readlink(host), s]
            made.add(s)
            continue
        real = os.path.realpath(s)
        args += parents(s) + ["--ro-bind", real, s]
        bound.append(s)
    args += parents(WORKDIR) + ["--perms", "0777", "--dir", WORKDIR]
    made.add(WORKDIR)
    for host, inside, writable in binds:
        args += parents(inside) + ["--bind" if writable else "--ro-bind", str(host), inside]
        bound.append(inside)
    if read_only:
        args += ["--remount-ro", "/tmp", "--remount-ro", "/dev/shm"]
    args += ["--chdir", WORKDIR, "--setenv", "HOME", WORKDIR, "--setenv", "TMPDIR", "/tmp", "--"]
    if uid is not None:
        args += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
                 "--bounding-set=-all", "--"]
    return args + cmd


# ------------------------------------------------------------------------------------- cgroups
CGROUP_PREFIX = "attention-grader-"
_SWEEP_LOCK = threading.Lock()
_SWEPT = False


def _cgroup_roots() -> list[Path]:
    base = Path("/sys/fs/cgroup")
    if (base / "cgroup.controllers").exists():  # v2, unified
        return [base]
    return [base / c for c in ("pids", "memory", "cpu", "cpu,cpuacct") if (base / c).is_dir()]


def sweep_cgroups() -> list[str]:
    """Remove ``attention-grader-*`` cgroups whose grading process is gone (a batch killed before
    it could remove its own): their processes are killed and the folders removed. Returns what
    was removed. Runs once per grading process, at its first sandbox."""
    removed = []
    for root in _cgroup_roots():
        try:
            found = [p for p in root.iterdir() if p.name.startswith(CGROUP_PREFIX) and p.is_dir()]
        except OSError:
            continue
        for d in found:
            try:
                owner = int(d.name[len(CGROUP_PREFIX):].split("-")[0])
            except ValueError:
                continue
            if owner == os.getpid() or Path(f"/proc/{owner}").exists():
                continue  # a live grading process's own cgroup
            _kill_cgroup_procs(d)
            for _ in range(20):
                try:
                    d.rmdir()
                    removed.append(str(d))
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)
    return removed


def _kill_cgroup_procs(d: Path) -> bool:
    try:
        pids = [int(p) for p in (d / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return False
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return bool(pids)


def _v2_enable_controllers(root: Path) -> None:
    """cgroup v2: the cpu, memory and pids controllers must be enabled in the parent's
    ``cgroup.subtree_control`` for a child cgroup to have their files (best effort)."""
    try:
        enabled = set((root / "cgroup.subtree_control").read_text().split())
        available = set((root / "cgroup.controllers").read_text().split())
    except OSError:
        return
    for ctl in ("cpu", "memory", "pids"):
        if ctl in available and ctl not in enabled:
            try:
                (root / "cgroup.subtree_control").write_text(f"+{ctl}")
            except OSError:
                pass


class _Cgroup:
    """A pids + memory + cpu cgroup for one sandboxed run, where the machine lets us make one.

    CPU: every process of the run together gets at most ``Limits.cpu_cores`` cores (v2
    ``cpu.max``, v1 ``cpu.cfs_quota_us``), however many processes or sessions learner code starts,
    so 240 busy loops slow down only their own sandbox. ``cpu_limited`` says whether that cap is in
    place; without a writable cpu controller the fallback is the per-process ``RLIMIT_CPU`` and
    ``nice`` 19 for every process of the run (inherited, and an unprivileged process cannot lower
    it): the machine's other work (the grader, other students' sandboxes at nice 0) still runs first.
    """

    def __init__(self, limits: Limits):
        global _SWEPT
        with _SWEEP_LOCK:
            if not _SWEPT:
                _SWEPT = True
                sweep_cgroups()
        self.dirs: list[Path] = []
        self.cpu_limited = False
        name = f"{CGROUP_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}"
        period = 100_000
        quota = str(max(int(limits.cpu_cores * period), 1000))
        v1 = Path("/sys/fs/cgroup/pids")
        if v1.is_dir() and os.access(v1, os.W_OK):
            self._make(v1 / name, {"pids.max": str(limits.max_processes)})
            mem = Path("/sys/fs/cgroup/memory")
            if mem.is_dir() and os.access(mem, os.W_OK):
                self._make(mem / name, {"memory.limit_in_bytes": str(limits.memory_bytes),
                                        "memory.memsw.limit_in_bytes": str(limits.memory_bytes)})
            for cpu in (Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup/cpu,cpuacct")):
                if cpu.is_dir() and os.access(cpu, os.W_OK) and limits.cpu_cores:
                    ok = self._make(cpu / name, {"cpu.cfs_period_us": str(period), "cpu.cfs_quota_us": quota})
                    self.cpu_limited = ok.get("cpu.cfs_quota_us", False)
                    break
        else:
            v2 = Path("/sys/fs/cgroup")
            if (v2 / "cgroup.controllers").exists() and os.access(v2, os.W_OK):
                _v2_enable_controllers(v2)
                settings = {"pids.max": str(limits.max_processes), "memory.max": str(limits.memory_bytes),
                            "memory.swap.max": "0"}
                if limits.cpu_cores:
                    settings["cpu.max"] = f"{quota} {period}"
                ok = self._make(v2 / name, settings)
                self.cpu_limited = ok.get("cpu.max", False)

    def _make(self, path: Path, settings: dict) -> dict:
        try:
            path.mkdir()
        except OSError:
            return {}
        self.dirs.append(path)
        ok = {}
        for key, value in settings.items():
            try:
                (path / key).write_text(value)
                ok[key] = True
            except OSError:
                ok[key] = False  # e.g. memsw without swap accounting
        return ok

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
                try:
                    text = f.read_text()
                except OSError:
                    continue
                for line in text.splitlines():
                    if line.startswith("oom_kill ") and int(line.split()[1]) > 0:
                        return True
        return False

    def kill_all(self) -> None:
        for _ in range(100):
            alive = False
            for d in self.dirs:
                alive |= _kill_cgroup_procs(d)
            if not alive:
                return
            time.sleep(0.05)

    def remove(self) -> None:
        """Kill what is left and remove the folders; one that is still busy (a process the kernel
        has not finished tearing down) is retried for 10 s in the background, and the next grading
        process's ``sweep_cgroups`` removes anything that still outlives this one."""
        self.kill_all()
        left = [d for d in self.dirs if not _rmdir_retry(d, 40)]
        if left:
            threading.Thread(target=lambda: [_rmdir_retry(d, 200) for d in left], daemon=True).start()


def _rmdir_retry(d: Path, tries: int) -> bool:
    for _ in range(tries):
        try:
            d.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:
            _kill_cgroup_procs(d)
            time.sleep(0.05)
    return False


def _preexec(limits: Limits, cgroup: _Cgroup, uid: int | None):
    def setup():
        os.setsid()  # its own process group: the timeout kills all of it
        cgroup.join()
        resource.setrlimit(resource.RLIMIT_AS, (limits.address_space_bytes, limits.address_space_bytes))
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes))
        resource.setrlimit(resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if not cgroup.cpu_limited:  # the fallback CPU cap: see _Cgroup
            os.nice(19)
        if not cgroup.active:  # without a pids cgroup, RLIMIT_NPROC (per uid) is the fork-storm guard
            n = limits.max_processes + (0 if uid is not None else _count_own_processes())
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


def _kill_uid(uid: int) -> None:
    """Whatever still runs as this run's own uid (a process that left the process group)."""
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if p.stat().st_uid == uid:
                    os.kill(int(p.name), signal.SIGKILL)
            except OSError:
                pass


# ----------------------------------------------------------------------------------------- run
# The only variables of the grader's own environment a sandboxed process sees (issue 25 §1): the
# locale and the CPU kernel choice. Nothing else of the instructor's (PGPASSWORD, AWS_*, tokens,
# GRADEBOOK_URL, the grader's settings) is passed, whatever it is called; PATH is fixed.
ENV_ALLOWED = ("LANG", "LC_ALL", "LC_CTYPE", "TZ", "ATEN_CPU_CAPABILITY")


def sandbox_env(home: str, extra: dict | None = None) -> dict:
    """The whole environment of a sandboxed process: an allow-list, never the grader's own."""
    env = {k: os.environ[k] for k in ENV_ALLOWED if k in os.environ}
    env.update({"PATH": os.pathsep.join([str(course.BIN), "/usr/local/bin", "/usr/bin", "/bin"]),
                "HOME": home, "USER": "learner", "LOGNAME": "learner", "PYTHONDONTWRITEBYTECODE": "1",
                "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONHASHSEED": "0",
                "MPLCONFIGDIR": f"{home}/.matplotlib", "JUPYTER_RUNTIME_DIR": f"{home}/.jupyter-runtime",
                "IPYTHONDIR": f"{home}/.ipython",
                # torch's first dispatch mode imports torch._dynamo, which wants a cache folder
                "TORCHINDUCTOR_CACHE_DIR": f"{home}/.torchinductor"})
    env.update(extra or {})
    return env


def run(cmd: list[str], files: dict | None = None, outputs: dict | None = None, limits: Limits | None = None,
        expose: list | None = None, env: dict | None = None, host_dir: Path | None = None,
        read_only: bool = False, pass_fds: tuple = (), interact=None) -> Result:
    """Run ``cmd`` sandboxed, in the working folder ``/tmp/sandbox``.

    ``files``: {name: bytes or host Path} put in the working folder, read-only.
    ``outputs``: {name: size cap in bytes}: files the command may write in the working folder; they
    come back in ``Result.outputs`` (``None`` and a reason in ``output_problems`` when missing,
    too large or not a regular file).
    ``expose``: host paths (or (host, inside) pairs) bound read-only, e.g. the course's ``utils/``.
    ``host_dir``: where the run's host files go (a fresh temporary folder by default); deleted after.
    ``env``: variables added to the allow-listed environment (``sandbox_env``).
    ``read_only``: nothing in the sandbox is writable but the declared outputs (``_bwrap_command``).
    ``pass_fds``: descriptors the process inherits (at the same numbers).
    ``interact(proc, deadline)``: called once the process has started, in this thread, to talk to
    it over ``pass_fds`` until it returns or ``deadline`` (``time.monotonic()``) passes; the run
    then waits for the process until the deadline, as without it.
    """
    limits = limits or Limits()
    files, outputs = dict(files or {}), dict(outputs or {})
    isolated = _bwrap_ok()
    base = Path(tempfile.mkdtemp(prefix="sandbox-", dir=host_dir))
    uid = _take_uid() if (isolated and _is_root()) else None
    try:
        os.chmod(base, 0o711)
        work = base / "w"
        work.mkdir()
        logs = base / "logs"
        logs.mkdir(mode=0o700)
        binds: list[tuple[Path, str, bool]] = []
        for name, content in files.items():
            _check_name(name)
            target = work / name
            if isinstance(content, (bytes, bytearray)):
                target.write_bytes(content)
            else:
                shutil.copyfile(content, target)
            os.chmod(target, 0o644)
            binds.append((target, f"{WORKDIR}/{name}", False))
        for name in outputs:
            _check_name(name)
            target = work / name
            target.touch(mode=0o600)
            if uid is not None:
                os.chown(target, uid, uid)
            binds.append((target, f"{WORKDIR}/{name}", True))
        for item in expose or []:
            host, inside = (item, str(item)) if isinstance(item, (str, Path)) else item
            binds.append((Path(host), str(inside), False))
        if isolated:
            full, cwd = _bwrap_command(cmd, limits, binds, uid, read_only=read_only), base
        else:  # no namespaces: the learner's folder is a host folder; outputs are checked just the same
            full, cwd = cmd, work
            os.chmod(work, 0o700)
        run_env = sandbox_env(WORKDIR if isolated else str(work), env)
        cgroup = _Cgroup(limits)
        notes = []
        start = time.monotonic()
        out_path, err_path = logs / "stdout", logs / "stderr"
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen(full, cwd=cwd, env=run_env, stdout=out, stderr=err, pass_fds=tuple(pass_fds),
                                    stdin=subprocess.DEVNULL, preexec_fn=_preexec(limits, cgroup, uid))
            deadline = start + limits.wall_seconds
            timed_out = False
            try:
                if interact is not None:
                    interact(proc, deadline)
                proc.wait(timeout=max(deadline - time.monotonic(), 0.01))
            except subprocess.TimeoutExpired:
                timed_out = True
                notes.append(f"stopped after the {limits.wall_seconds:.0f} s time limit")
            finally:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                proc.wait()
                if uid is not None:
                    _kill_uid(uid)
                if cgroup.oom_killed():
                    notes.append(f"a process was killed for using more than {limits.memory_bytes / 2**30:.0f} GiB of memory")
                cgroup.remove()
        result = Result(proc.returncode, timed_out, _tail(out_path), _tail(err_path), time.monotonic() - start,
                        isolated, notes, cpu_capped=cgroup.cpu_limited)
        for name, cap in outputs.items():
            data, why = read_regular(work / name, cap)
            if data is not None and not data and why is None:
                data, why = None, "it was not written"
            result.outputs[name] = data
            if why:
                result.output_problems[name] = why
        return result
    finally:
        if uid is not None:
            _give_uid(uid)
        shutil.rmtree(base, ignore_errors=True)


def _check_name(name: str) -> None:
    if "/" in name or name in ("", ".", "..") or name.startswith("."):
        raise ValueError(f"bad sandbox file name {name!r}")


def _tail(path: Path, limit: int = 20_000) -> str:
    data, _ = read_regular(path, 2**62)  # the grader's own log file, opened safely all the same
    if data is None:
        return ""
    return data[-limit:].decode("utf-8", "replace")


# ---------------------------------------------------------------------------------- self-test
SELF_TEST_PROBE = r'''
import json, os, sys
report = {"caps": {}, "readable": [], "uid": os.getuid(), "host_uid": None}
for line in open("/proc/self/status"):
    if line.startswith("Cap"):
        k, v = line.split(":")
        report["caps"][k] = int(v.strip(), 16)
for line in open("/proc/self/uid_map"):
    inside, outside, count = map(int, line.split())
    if inside <= report["uid"] < inside + count:
        report["host_uid"] = outside + report["uid"] - inside
spec = json.load(open("hidden.json"))
allowed = spec["allowed"]
def leaks(p):  # p is neither a bound path nor on the way to one
    return not any(a == p or a.startswith(p.rstrip("/") + "/") for a in allowed)
for p in spec["hidden"]:
    try:
        if os.path.isdir(p):
            names = [n for n in os.listdir(p) if leaks(os.path.join(p, n))]
            if names:
                report["readable"].append(p + ": " + ", ".join(sorted(names)[:5]))
        elif leaks(p):
            open(p, "rb").read(1); report["readable"].append(p)
    except OSError:
        pass
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
report["mount"] = libc.mount(b"none", b"/tmp", b"tmpfs", 0, None) == 0
report["umount"] = libc.umount2(b"/proc", 2) == 0
try:
    open("/usr/bin/.sandbox-probe", "w"); report["wrote_system"] = True
except OSError:
    report["wrote_system"] = False
import nbclient, torch, utils.checks
print("SANDBOX-REPORT " + json.dumps(report))
'''


def hidden_paths(extra: list | None = None) -> list[str]:
    """Paths a sandboxed process must not read: checked by ``self_test``."""
    root = course.ROOT
    paths = [root / "solutions", root / "grader", root / ".git", root / "tests", root / "reports", root,
             root.parent, Path.home(), Path("/root"), Path("/home"), Path("/etc"), Path("/var"), Path("/run"),
             Path("/etc/shadow"), course.secret_path()]
    try:  # other checkouts beside this one
        paths += [p for p in root.parent.iterdir() if p != root]
    except OSError:
        pass
    paths += [Path(p) for p in extra or []]
    return sorted({str(p) for p in paths})


def self_test(scratch: Path | None = None, extra_hidden: list | None = None) -> dict:
    """Before a batch: the sandbox runs the course's Python, keeps no capability, hides what it must.

    Raises RuntimeError (nothing is graded) when the sandbox cannot run the course's imports,
    when a sandboxed process keeps any capability, can mount or unmount, can write the system,
    or can read any of ``hidden_paths``. Without a working sandbox every student would get zero,
    or worse, learner code would run with the grader's privileges.
    """
    exposed = [str(course.ROOT / "utils")]
    allowed = [str(p) for p in system_binds()] + exposed + [WORKDIR]
    spec = {"hidden": hidden_paths(extra_hidden), "allowed": allowed}
    res = run([sys.executable, "probe.py"], files={"probe.py": SELF_TEST_PROBE.encode(),
                                                   "hidden.json": json.dumps(spec).encode()},
              limits=Limits(wall_seconds=120), expose=[course.ROOT / "utils"], host_dir=scratch)
    line = next((x for x in res.stdout.splitlines() if x.startswith("SANDBOX-REPORT ")), None)
    if res.returncode != 0 or line is None:
        raise RuntimeError("the grading sandbox cannot run the course's Python (nothing was graded):\n"
                           + (res.stderr.strip()[-2000:] or "; ".join(res.notes) or f"exit code {res.returncode}"))
    report = json.loads(line.split(" ", 1)[1])
    report["isolated"] = res.isolated
    if not res.isolated:
        return report  # the warning has been given: limits only
    problems = []
    kept = {k: hex(v) for k, v in report["caps"].items() if v}
    if kept:
        problems.append(f"sandboxed code keeps capabilities {kept}")
    if report["mount"] or report["umount"]:
        problems.append("sandboxed code can mount or unmount file systems")
    if report["wrote_system"]:
        problems.append("sandboxed code can write /usr")
    if report["readable"]:
        problems.append(f"sandboxed code can read hidden paths: {report['readable']}")
    if not _is_root():
        # Started by an ordinary user, bubblewrap's user namespace can map only that user's own uid
        # (it nests a second namespace for --disable-userns, so the probe's uid_map shows uid 0 of
        # the intermediate namespace, not of the host).
        report["host_uid"] = os.geteuid()
    if report["host_uid"] in (0, None):
        problems.append("sandboxed code runs as root on the host")
    if problems:
        raise RuntimeError("the grading sandbox is not safe, nothing was graded: " + "; ".join(problems))
    return report
