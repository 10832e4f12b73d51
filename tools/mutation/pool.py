"""Worker processes with a time limit per mutant.

Each worker is ``python -m tools.mutation.worker`` started in a temp folder of its own (its
current directory, ``TMPDIR`` and ``HOME``), which is the only place it may write, and removed
with it. A mutant that has not answered within ``timeout`` seconds (wall clock) is killed with its
worker, counted as killed by the time limit, and a fresh worker takes the next mutant.
"""
from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
START_SECONDS = 180.0  # importing torch and the checks on a busy machine


class Worker:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="mutants-")
        env = dict(os.environ)
        env.update({"TMPDIR": self.dir, "HOME": self.dir, "PYTHONDONTWRITEBYTECODE": "1",
                    "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "MPLBACKEND": "Agg",
                    "MPLCONFIGDIR": self.dir, "PYTHONPATH": os.pathsep.join(
                        [str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])})
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tools.mutation.worker"], cwd=self.dir, env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True, bufsize=1, start_new_session=True)
        self.task = None
        self.deadline = None
        self.buffer = ""
        self.ready = False
        self.started = time.monotonic()

    def fileno(self):
        return self.proc.stdout.fileno()

    def send(self, task: dict, timeout: float):
        self.task = task
        self.deadline = time.monotonic() + timeout
        self.proc.stdin.write(json.dumps(task) + "\n")
        self.proc.stdin.flush()

    def read_line(self):
        """One complete line if there is one (non-blocking after select said readable)."""
        chunk = os.read(self.fileno(), 1 << 20).decode("utf-8", "replace")
        if not chunk:
            return None, True  # end of file: the worker died
        self.buffer += chunk
        lines = []
        while "\n" in self.buffer:
            line, self.buffer = self.buffer.split("\n", 1)
            if line.strip():
                lines.append(line)
        return lines, False

    def stop(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # the worker's own session: it and nothing else
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)


def run_tasks(tasks: list, jobs: int = 2, timeout: float = 120.0, on_result=None, log=None) -> list:
    """Run every task on ``jobs`` workers; returns the results in the order they came back."""
    pending = list(tasks)
    results = []
    failures = 0
    workers = [Worker() for _ in range(max(1, min(jobs, len(pending))))] if pending else []
    try:
        while pending or any(w.task is not None for w in workers):
            for w in workers:
                if w.ready and w.task is None and pending:
                    w.send(pending.pop(0), timeout)
            busy = [w for w in workers if w.proc.poll() is None or w.buffer]
            readable, _, _ = select.select([w for w in busy], [], [], 1.0) if busy else ([], [], [])
            now = time.monotonic()
            for w in list(workers):
                lines, dead = ([], False)
                if w in readable:
                    lines, dead = w.read_line()
                    lines = lines or []
                for line in lines:
                    msg = json.loads(line)
                    if msg.get("ready"):
                        w.ready = True
                        continue
                    results.append(msg)
                    if on_result:
                        on_result(msg)
                    w.task, w.deadline = None, None
                timed_out = w.task is not None and now > w.deadline
                not_started = not w.ready and now - w.started > START_SECONDS
                if dead or timed_out or not_started or (w.proc.poll() is not None and not w.buffer):
                    if w.task is not None:
                        task = w.task
                        msg = {"exercise": task["exercise"], "id": task["id"],
                               "status": "killed" if timed_out or dead else "error",
                               "message": (f"timeout: no verdict within {timeout:g} s" if timed_out
                                           else "the worker died while checking it (out of memory?)"),
                               "timeout": timed_out, "reading": {"bank": False, "clue": False, "share": False,
                                                                 "first": "timeout" if timed_out else "crash",
                                                                 "named": False}}
                        results.append(msg)
                        if on_result:
                            on_result(msg)
                    elif not w.ready:
                        failures += 1
                        if failures > 5:
                            raise RuntimeError("mutation workers do not start: try "
                                               "`python -m tools.mutation.worker` by hand")
                        if log:
                            log("a worker did not start; starting another")
                    w.stop()
                    workers.remove(w)
                    if pending or any(x.task is not None for x in workers):
                        workers.append(Worker())
    finally:
        for w in workers:
            w.stop()
    return results
