"""Where things are, and running nbgrader on this course."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "solutions"
NOTEBOOKS = ROOT / "notebooks"
GRADER = ROOT / "grader"
WORK = GRADER / "work"
BIN = Path(sys.executable).parent


def secret_path() -> Path:
    """The per-installation secret salt of the re-check's seeds (made at first use, never in git).

    It lives in ``grader/.secret/`` (mode 0600), which no sandbox binds.
    """
    return Path(os.environ.get("GRADER_SECRET_FILE", str(GRADER / ".secret" / "salt")))


_SALT_LOCK = threading.Lock()


def secret_salt() -> str:
    """The salt, made atomically at first use: each writer writes its own uniquely named temporary
    file (``mkstemp``: unique across threads and processes, unlike a name made of the process id)
    and links it to the final name; the first link wins and every thread and process reads the
    same salt. Grading threads of one process also serialise here."""
    path = secret_path()
    with _SALT_LOCK:
        try:
            data = path.read_text().strip()
            if len(data) >= 32:
                return data
        except OSError:
            pass
        import secrets
        import tempfile

        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(path.parent, 0o700)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # mode 0600
        try:
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32))
            try:
                os.link(tmp, path)  # the first writer wins; everyone reads the same salt
            except FileExistsError:
                pass
        finally:
            os.unlink(tmp)
        for _ in range(50):  # another process's link is complete once it exists: read it
            data = path.read_text().strip()
            if len(data) >= 32:
                return data
            time.sleep(0.02)
        raise RuntimeError(f"the grader's secret salt {path} is unusable (shorter than 32 characters)")


def assignments() -> list[str]:
    """Every assignment: solutions/<NN_name>/<NN_name>.ipynb."""
    return sorted(p.parent.name for p in SOLUTIONS.glob("*/*.ipynb") if p.stem == p.parent.name)


def source_path(assignment: str) -> Path:
    return SOLUTIONS / assignment / f"{assignment}.ipynb"


def release_path(assignment: str) -> Path:
    return NOTEBOOKS / assignment / f"{assignment}.ipynb"


def db_url() -> str:
    return os.environ.get("GRADEBOOK_URL", f"sqlite:///{GRADER / 'gradebook.db'}")


NBGRADER_MAIN = ("import sys; sys.modules.setdefault('rfc3987_syntax', None); sys.argv[0] = 'nbgrader'; "
                 "from nbgrader.apps.nbgraderapp import main; sys.exit(main())")


def config_path(first: str | None = None) -> str:
    """JUPYTER_CONFIG_PATH for nbgrader: ``first`` (the grader's own settings for one command,
    which win), then the folders the instructor's environment names (their own nbgraderc settings,
    e.g. ``LateSubmissionPlugin.penalty_method``), then the course's grader/nbgrader_config.py."""
    given = [p for p in os.environ.get("JUPYTER_CONFIG_PATH", "").split(os.pathsep)
             if p and Path(p).resolve() != GRADER.resolve()]
    return os.pathsep.join(([first] if first else []) + given + [str(GRADER)])


def nbgrader(*args: str, db: str | None = None, root: Path = ROOT, check: bool = True,
             extra_env: dict | None = None, timeout: float | None = None,
             config: str | None = None) -> subprocess.CompletedProcess:
    """Run one nbgrader command on the course (config from grader/nbgrader_config.py, after the
    instructor's own configuration folders and ``config``, a folder of settings for this command)."""
    env = dict(os.environ)
    env["JUPYTER_CONFIG_PATH"] = config_path(config)
    env["GRADEBOOK_URL"] = db or db_url()
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"  # nbgrader runs `alembic` from PATH
    env.update(extra_env or {})
    # bin/nbgrader, without the lark grammars nbformat never needs (grader/__init__.py)
    cmd = [sys.executable, "-c", NBGRADER_MAIN, *args, f"--CourseDirectory.root={root}"]
    try:
        proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as err:
        proc = subprocess.CompletedProcess(cmd, -9, _str(err.stdout), _str(err.stderr) + f"\nstopped after {timeout} s")
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def _str(x) -> str:
    return x.decode("utf-8", "replace") if isinstance(x, bytes) else (x or "")


def generate(assignment: str, release_dir: Path, db: str | None = None) -> Path:
    """nbgrader generate_assignment into ``release_dir`` (and record the assignment in the db)."""
    nbgrader("generate_assignment", assignment, "--force",
             f"--CourseDirectory.release_directory={release_dir}", db=db)
    return release_dir / assignment / f"{assignment}.ipynb"


def generate_all(release_dir: Path, db: str | None = None) -> dict[str, Path]:
    """Every assignment in one nbgrader process (its assignment id ``*`` is a glob over solutions/):
    nbgrader's start-up (about 3 s) is paid once, not sixteen times."""
    nbgrader("generate_assignment", "*", "--force", f"--CourseDirectory.release_directory={release_dir}", db=db)
    return {a: release_dir / a / f"{a}.ipynb" for a in assignments()}


def load_json(path: Path) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def comparable(nb: dict) -> dict:
    """The parts of a notebook that must not drift: cells (type, source, metadata) and kernelspec."""
    cells = [
        {"cell_type": c["cell_type"], "source": "".join(c.get("source", "")), "metadata": c.get("metadata", {})}
        for c in nb.get("cells", [])
    ]
    return {"cells": cells, "kernelspec": nb.get("metadata", {}).get("kernelspec")}
