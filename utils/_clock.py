"""Clocks that never break an import, and dispatch modes that import nothing.

Two kinds of failure made a correct answer fail its check on a busy machine (issue 23):

* **An asynchronous exception inside an import.** A check stops learner code that overspends with
  a CPU-time alarm (``SIGVTALRM``) and a torch-level deadline; the grader interrupts a cell that
  runs past its limit. If either lands while a module is being imported (torch imports many of its
  modules lazily, on first use), the module is left half-initialised in ``sys.modules`` and every
  later use of it in that process fails ("partially initialized module 'torch._dynamo' has no
  attribute 'decorators'"). So every clock here asks :func:`importing` before it raises: while an
  import is running, the exception is *deferred* (the alarm re-arms itself for a moment later; the
  deadline is checked again at the next torch call), up to :data:`MAX_DEFERRAL` seconds of CPU.
* **torch's dynamo imported under a clock.** A ``TorchDispatchMode`` subclass gets its
  ``__torch_dispatch__`` wrapped by ``torch._disable_dynamo``, whose first call imports
  ``torch._dynamo`` (about 1 s of CPU, 2-4 s of wall time on a busy machine). The course's modes
  derive from :class:`DispatchMode`, which opts out: nothing is imported, the first check of a
  kernel costs what later ones cost, and a learner's time budget measures only the learner's code.

``tests/test_clock.py`` proves both: many fresh processes whose first check runs with a clock
firing every millisecond, and a finder that fails the test on any import under a running clock.
"""
from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time

from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["DispatchMode", "importing", "cpu_alarm", "MAX_DEFERRAL"]

# How much longer than its budget a clock waits for imports to finish before raising anyway
# (learner code that hides a loop inside an import is still stopped).
MAX_DEFERRAL = 30.0
_RETRY = 0.02  # seconds of CPU before a deferred alarm fires again

_IMPORT_FILES = ("<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>")


def importing(frame=None) -> bool:
    """Whether the calling thread is inside an import (a module's body, or the import machinery)."""
    f = frame if frame is not None else sys._getframe(1)
    while f is not None:
        if f.f_code.co_filename in _IMPORT_FILES:
            return True
        f = f.f_back
    return False


class DispatchMode(TorchDispatchMode):
    """``TorchDispatchMode`` for the course's own modes: no ``torch._dynamo`` import on first use.

    torch wraps a subclass's ``__torch_dispatch__`` with ``torch._disable_dynamo`` unless the
    class's ``_should_skip_dynamo()`` is False; the course never compiles, so there is nothing to
    disable, and the wrapper's first call would import ``torch._dynamo`` inside a learner's budget.
    """

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False


class Deadline:
    """A CPU-time deadline checked at every torch call (``thread_time``: a busy machine slows the
    wall clock, not the work done). :meth:`passed` is False while an import runs, for at most
    :data:`MAX_DEFERRAL` seconds past the deadline."""

    def __init__(self, seconds: float):
        self.at = time.thread_time() + seconds

    def passed(self) -> bool:
        now = time.thread_time()
        if now <= self.at:
            return False
        return not (now <= self.at + MAX_DEFERRAL and importing(sys._getframe(1)))


@contextlib.contextmanager
def cpu_alarm(seconds: float | None, make_exception):
    """Raise ``make_exception()`` in the main thread after ``seconds`` of the process's CPU time
    (``SIGVTALRM``), never inside an import: there it re-arms itself :data:`_RETRY` s later, for at
    most :data:`MAX_DEFERRAL` s. Elsewhere than the main thread, or where signals may not be set,
    nothing is armed (the torch-level :class:`Deadline` still applies)."""
    if seconds is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    started = time.process_time()

    def on_alarm(signum, frame):
        if importing(frame) and time.process_time() - started < seconds + MAX_DEFERRAL:
            signal.setitimer(signal.ITIMER_VIRTUAL, _RETRY)
            return
        raise make_exception()

    try:
        old = signal.signal(signal.SIGVTALRM, on_alarm)
    except (ValueError, OSError, AttributeError):  # not allowed here: the torch-level clock still applies
        yield
        return
    previous = signal.setitimer(signal.ITIMER_VIRTUAL, 0)[0]
    if previous:  # someone else's timer is pending: leave it alone
        signal.setitimer(signal.ITIMER_VIRTUAL, previous)
        signal.signal(signal.SIGVTALRM, old)
        yield
        return
    signal.setitimer(signal.ITIMER_VIRTUAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        signal.signal(signal.SIGVTALRM, old)


def defer_interrupts_during_imports() -> None:
    """Make SIGINT (a kernel interrupt: the grader's per-cell time limit) wait for a running import
    to finish, as :func:`cpu_alarm` does; raises ``KeyboardInterrupt`` as usual otherwise. For the
    grading kernel, whose later cells must still run after one cell is interrupted."""
    if threading.current_thread() is not threading.main_thread():
        return
    default = signal.getsignal(signal.SIGINT)
    pending = []

    def on_interrupt(signum, frame):
        if importing(frame) and len(pending) < int(MAX_DEFERRAL / _RETRY):
            pending.append(1)
            signal.signal(signal.SIGALRM, lambda _s, f: on_interrupt(signal.SIGINT, f))
            signal.setitimer(signal.ITIMER_REAL, _RETRY)
            return
        pending.clear()
        if callable(default) and default is not on_interrupt:
            return default(signum, frame)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_interrupt)
