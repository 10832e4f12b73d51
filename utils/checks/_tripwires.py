"""Tripwires: what learner code may call, and what one call may spend.

A from-scratch exercise may not call what it re-implements (``Forbidden`` groups, caught at the
torch-function level, below it at the aten level, and at patched Python entry points); every call
runs under a ``Budget``: the largest tensor it creates, the CPU time it spends and, where a rule is
about work, the multiply-adds it does. ``learner_code`` sets them all up; going over raises
``BudgetExceeded``, a forbidden call ``ForbiddenCall``.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
import torch.utils._device  # noqa: F401 - imported lazily by torch on a module's first build: not under a clock (tests/test_clock.py)
from torch.overrides import TorchFunctionMode

from .._clock import Deadline, DispatchMode, cpu_alarm
from .._guard import ForbiddenCall, _learner_depth, learner_is_running, reference  # noqa: F401


class BudgetExceeded(Exception):
    """Raised inside learner code when it creates a tensor or spends time beyond a case's budget."""


@dataclass
class Budget:
    """What one call of an implementation may spend.

    ``numel``: the largest tensor it may create (elements); ``seconds``: CPU time for one call;
    ``work``: the multiply-adds it may do (matmul-family ops count out elements × the summed dim,
    elementwise products their out elements); ``why``: the sentence that says what the limit
    stands for ("a banded kernel never builds the S×S scores"); it appears in the failure message.
    """

    numel: int | None = None
    seconds: float | None = None
    why: str = ""
    work: int | None = None


@dataclass
class Forbidden:
    """Functions a from-scratch exercise may not call; ``label`` is how the message names them.

    ``funcs`` are caught as torch functions (or patched Python entry points); ``aten`` are the
    aten operator packets they reach, caught below ``torch.ops.aten.*`` calls and calls made with
    torch-function handling disabled.
    """

    label: str
    funcs: tuple = ()
    aten: tuple = ()


# ----------------------------------------------------------------------------------------------
# Tripwires: a from-scratch exercise must not call what it re-implements, nor overspend
# ----------------------------------------------------------------------------------------------
class _Tripwire(TorchFunctionMode):
    """Torch-function-level tripwires: forbidden functions, the largest tensor, the time spent.

    (At this level, unlike a dispatch mode, tensor subclasses such as PyTorch's CausalBias can
    still be created inside learner code.)
    """

    def __init__(self, forbidden: Sequence[Forbidden], budget: Budget | None = None):
        super().__init__()
        self.table = {}
        for group in forbidden:
            for f in group.funcs:
                self.table[f] = group.label
        self.budget = budget
        self.deadline = None
        if budget is not None and budget.seconds is not None:
            # CPU time of this thread, never raised inside an import (utils._clock.Deadline).
            self.deadline = Deadline(budget.seconds)

    def _too_big(self, numel, shape, name):
        b = self.budget
        what = f"a tensor of shape {tuple(shape)}" if shape is not None else "a tensor"
        raise BudgetExceeded(
            f"it creates {what} ({_fmt_numel(numel)} elements, in {name}) where this case "
            f"allows at most {_fmt_numel(b.numel)}: {b.why}"
        )

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        label = self.table.get(func)
        if label is not None:
            raise ForbiddenCall(label, getattr(func, "__name__", str(func)))
        b = self.budget
        if b is None:
            return func(*args, **kwargs)
        if self.deadline is not None and self.deadline.passed():
            raise BudgetExceeded(f"it used more than {b.seconds:g} s of CPU time on a small input")
        name = getattr(func, "__name__", str(func))
        if b.numel is not None:
            est = _estimate_numel(name, args)
            if est > b.numel:
                self._too_big(est, None, name)
        out = func(*args, **kwargs)
        if b.numel is not None:  # a tensor on the meta device holds no memory: never counted
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, torch.Tensor) and t.numel() > b.numel and not t.is_meta:
                    self._too_big(t.numel(), t.shape, name)
        return out


def _fmt_numel(n: int) -> str:
    return f"{n:,}"


_MATMULS = {"matmul", "__matmul__", "__rmatmul__", "mm", "bmm", "baddbmm", "addmm"}


def _broadcast_numel(*shapes) -> int:
    """``math.prod(torch.broadcast_shapes(*shapes))`` in plain Python (torch's version goes through
    its symbolic-shape machinery: about 40 µs, on every op a budgeted case runs); 0 when the shapes
    do not broadcast."""
    out = [1] * max((len(s) for s in shapes), default=0)
    for shape in shapes:
        offset = len(out) - len(shape)
        for i, d in enumerate(shape):
            j = offset + i
            if out[j] == 1:
                out[j] = d
            elif d != 1 and d != out[j]:
                return 0
    return math.prod(out)


def _estimate_numel(name: str, args) -> int:
    """The size of the output a matmul or a broadcasting op is about to allocate (0: unknown)."""
    tensors = [t for t in args if isinstance(t, torch.Tensor)]
    if any(t.is_meta for t in tensors):
        return 0
    try:
        if name in _MATMULS and len(tensors) >= 2:
            a, b = tensors[-2], tensors[-1]
            if a.dim() >= 2 and b.dim() >= 2:
                return _broadcast_numel(a.shape[:-2], b.shape[:-2]) * a.shape[-2] * b.shape[-1]
            return 0
        if len(tensors) >= 2:
            return _broadcast_numel(*(t.shape for t in tensors))
    except Exception:  # noqa: BLE001 - not broadcastable: the op will say so itself
        return 0
    return 0


_ATEN = torch.ops.aten
_PRODUCTS = {_ATEN.mm: 0, _ATEN.bmm: 0, _ATEN.addmm: 1, _ATEN.baddbmm: 1, _ATEN.addbmm: 1, _ATEN.mv: 0,
             _ATEN.addmv: 1, _ATEN.dot: 0, _ATEN.vdot: 0}  # op -> index of the left factor (its last dim is summed)


class WorkCounter(DispatchMode):
    """Counts multiply-adds: matmul-family ops (out elements × the summed dim) and elementwise products
    (out elements); raises BudgetExceeded once the count passes ``limit``."""

    def __init__(self, limit: int | None = None, why: str = ""):
        super().__init__()
        self.work, self.limit, self.why = 0, limit, why

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        packet = func.overloadpacket
        if packet in _PRODUCTS:
            a = args[_PRODUCTS[packet]]
            self.work += a.numel() if packet in (_ATEN.dot, _ATEN.vdot) else out.numel() * a.shape[-1]
        elif packet in (_ATEN.mul, _ATEN.mul_) and isinstance(out, torch.Tensor):
            self.work += out.numel()
        if self.limit is not None and self.work > self.limit:
            raise BudgetExceeded(f"its products reach {self.work:,} multiply-adds where this case allows at most "
                                 f"{self.limit:,}: {self.why}")
        return out


class _Limits(DispatchMode):
    """Aten-level tripwire for forbidden operators: catches ``torch.ops.aten.*`` calls and calls
    made with torch-function handling disabled. Used only where an exercise forbids something."""

    def __init__(self, aten_table: dict):
        super().__init__()
        self.aten_table = aten_table

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        label = self.aten_table.get(func.overloadpacket)
        if label is not None:
            raise ForbiddenCall(label, str(func.overloadpacket))
        return func(*args, **(kwargs or {}))


def _alarm(seconds: float | None):
    """SIGVTALRM after ``seconds`` of the process's CPU time (main thread only), never inside an
    import (``utils._clock``): stops a pure-Python loop that overspends, and does not fire because
    the machine is busy. One second later than the torch-level deadline, which usually fires first."""
    return cpu_alarm(None if seconds is None else seconds + 1.0, lambda: BudgetExceeded(
        f"it used more than {seconds:g} s of CPU time on a small input"))


_WARM = False


def warm_up() -> None:
    """Use the tripwires once per process, outside any budget, so that nothing a first use costs
    (Python-level caches; a lazily imported torch module) is paid inside a learner's first case.
    The course's dispatch modes import nothing (``utils._clock.DispatchMode``), so this is cheap."""
    global _WARM
    if _WARM:
        return
    with _Limits({torch.ops.aten._softmax: "warm-up"}), _Tripwire((), Budget(numel=1 << 20, seconds=60.0)):
        x = torch.ones(2, 2)
        (x @ x + x).sum()
    _WARM = True


@contextlib.contextmanager
def learner_code(forbidden: Sequence[Forbidden] = (), budget: Budget | None = None):
    """Run learner code: forbidden functions, operators and ``utils.reference`` raise
    ForbiddenCall; going over ``budget`` raises BudgetExceeded."""
    _learner_depth.n = getattr(_learner_depth, "n", 0) + 1
    patches = []
    aten_table = {}
    for group in forbidden:
        for op in group.aten:
            aten_table[op] = group.label
    try:
        for group in forbidden:
            for f in group.funcs:
                # Python-level entry points that are not torch functions (nn.MultiheadAttention,
                # the autograd engine) are patched for the duration of the call.
                owner = getattr(f, "_tripwire_owner", None)
                if owner is not None:
                    attr = f._tripwire_attr
                    patches.append((owner, attr, owner.__dict__.get(attr, getattr(owner, attr)), attr in owner.__dict__))
                    setattr(owner, attr, f._tripwire_replacement(group.label))
        aten = _Limits(aten_table) if aten_table else contextlib.nullcontext()
        work = (WorkCounter(budget.work, budget.why) if budget is not None and budget.work is not None
                else contextlib.nullcontext())
        # The aten mode first (its first use imports part of torch, ~2 s), then the clock starts.
        with aten, work, _Tripwire(forbidden, budget), _alarm(budget.seconds if budget else None):
            yield
    finally:
        for owner, attr, old, own in reversed(patches):
            if own:
                setattr(owner, attr, old)
            else:
                delattr(owner, attr)
        _learner_depth.n -= 1


def _raiser(label, name):
    def raise_forbidden(*args, **kwargs):
        raise ForbiddenCall(label, name)

    return raise_forbidden


class _RaisingProxy:
    """Stands in for an object (the autograd engine): any attribute use raises ForbiddenCall."""

    def __init__(self, label, name):
        self._label, self._name = label, name

    def __getattr__(self, attr):
        raise ForbiddenCall(self._label, f"{self._name}.{attr}")


def patched_entry(owner, attr, proxy: bool = False):
    """A marker for a forbidden entry point that must be patched rather than intercepted.

    ``proxy``: replace an object (whose methods are looked up at call time) rather than a function.
    """

    class _Entry:
        _tripwire_owner = owner
        _tripwire_attr = attr
        __name__ = attr

        @staticmethod
        def _tripwire_replacement(label):
            return _RaisingProxy(label, attr) if proxy else _raiser(label, attr)

        def __hash__(self):
            return hash((id(owner), attr))

        def __eq__(self, other):
            return self is other

    return _Entry()


# ----------------------------------------------------------------------------------------------
# Memory tripwire: the largest tensor an implementation creates
# ----------------------------------------------------------------------------------------------
class _LargestTensor(DispatchMode):
    def __init__(self):
        super().__init__()
        self.numel = 0
        self.shape = ()
        self.op = ""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and t.numel() > self.numel:
                self.numel, self.shape, self.op = t.numel(), tuple(t.shape), str(func)
        return out


def largest_tensor(fn: Callable, *args, **kwargs):
    """Call ``fn`` and return ``(result, numel, shape, op)`` for the largest tensor it created."""
    mode = _LargestTensor()
    with mode:
        result = fn(*args, **kwargs)
    return result, mode.numel, mode.shape, mode.op


