"""Tripwires: what learner code may call, and what one call may spend.

A from-scratch exercise may not call what it re-implements (``Forbidden`` groups, caught at the
torch-function level, below it at the aten level, and at patched Python entry points); every call
runs under a ``Budget``: the largest tensor it creates, the CPU time it spends and, where a rule is
about work, the multiply-adds it does. ``learner_code`` sets them all up; going over raises
``BudgetExceeded``, a forbidden call ``ForbiddenCall``. Where a rule is about everything a call
keeps alive at once (a tiled kernel holds one tile, not a strip of them), ``live_budget`` makes the
active tripwire count the elements of the tensors it sees created and still alive.
"""
from __future__ import annotations

import contextlib
import gc
import math
import weakref
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

    ``memory``: bytes the grader's re-check lets the operating system give the exercise's process
    beyond what it holds before the learner's code loads (``RLIMIT_AS``, lowered for good before
    the first line of learner code: ``grader/_verify_child.py``). The notebook's check does not
    measure it; the other limits are measured inside the learner's process, where code that
    switches torch's modes off escapes them, and this one is not (issue 25, red team R1). A case
    that declares it is a *probe*: large enough that breaking the rule needs several times this
    many bytes, while the reference needs a small part of it.
    """

    numel: int | None = None
    seconds: float | None = None
    why: str = ""
    work: int | None = None
    memory: int | None = None


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
    """Torch-function-level tripwires: forbidden functions, the largest tensor, the time spent, and
    (while ``live_budget`` is active) the elements of the tensors created and still alive.

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
        self.live = None  # a _LiveCount while live_budget is active
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
        if b is None and self.live is None:
            return func(*args, **kwargs)
        limit = b.numel if b is not None else None
        if b is not None and self.deadline is not None and self.deadline.passed():
            raise BudgetExceeded(f"it used more than {b.seconds:g} s of CPU time on this input")
        if limit is not None and (len(args) >= 2 or func in _FACTORY_FUNCS):
            est = _estimate_numel(func, args, kwargs)
            if est > limit:
                self._too_big(est, _factory_shape(func, args, kwargs), getattr(func, "__name__", str(func)))
        out = func(*args, **kwargs)
        if limit is not None or self.live is not None:
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, torch.Tensor) and not t.is_meta:  # a meta tensor holds no memory: never counted
                    if limit is not None and t.numel() > limit:
                        self._too_big(t.numel(), t.shape, getattr(func, "__name__", str(func)))
                    if self.live is not None:
                        self.live.add(t, getattr(func, "__name__", str(func)))
        return out


class _LiveCount:
    """The elements of the tensors seen created and still alive (a storage shared by views counts
    once), against ``limit``; the storages in ``exclude`` (the inputs) are never counted."""

    def __init__(self, limit: int, why: str, exclude=(), text: str = ""):
        self.limit, self.why, self.text = limit, why, text
        self.exclude = set(exclude)
        self.live = self.peak = 0
        self.refs: dict = {}  # storage address -> [elements, live tensors on it]
        self.active = True

    def _release(self, ptr):
        entry = self.refs.get(ptr)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            self.live -= entry[0]
            del self.refs[ptr]

    def add(self, t: torch.Tensor, name: str) -> None:
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr == 0 or ptr in self.exclude:
            return
        entry = self.refs.get(ptr)
        if entry is None:
            entry = self.refs[ptr] = [storage.nbytes() // max(t.element_size(), 1), 0]
            self.live += entry[0]
            self.peak = max(self.peak, self.live)
        entry[1] += 1
        weakref.finalize(t, self._release, ptr)
        if self.active and self.live > self.limit:
            self.active = False  # raised once; the tensors being freed then must not raise again
            raise BudgetExceeded(
                f"the tensors it holds at once reach {_fmt_numel(self.live)} elements (after {name} made one of shape "
                f"{tuple(t.shape)}) where this case allows at most "
                f"{self.text + ' = ' if self.text else ''}{_fmt_numel(self.limit)}: {self.why}")


def _active_tripwire():
    """The innermost active ``_Tripwire`` (the learner guard's), or None."""
    from torch.overrides import _get_current_function_mode_stack

    for mode in reversed(_get_current_function_mode_stack()):
        if isinstance(mode, _Tripwire):
            return mode
    return None


@contextlib.contextmanager
def live_budget(limit: int, why: str, exclude=(), text: str = ""):
    """Inside learner code: the tensors created while this is active may hold at most ``limit``
    elements alive at once (each storage once, those of ``exclude`` — the inputs — never). The
    learner guard's tripwire counts them (so the grader's re-run counts them too); outside any
    guard (the reference's run) this does nothing. Yields the count (``.peak``)."""
    trip = _active_tripwire()
    if trip is None:
        yield None
        return
    count = _LiveCount(limit, why, (t.untyped_storage().data_ptr() for t in exclude), text)
    previous, trip.live = trip.live, count
    try:
        yield count
    finally:
        trip.live = previous
        count.active = False


def _fmt_numel(n: int) -> str:
    return f"{n:,}"


_MATMULS = {"matmul", "__matmul__", "__rmatmul__", "mm", "bmm", "baddbmm", "addmm"}


def broadcast_shape(*shapes) -> tuple | None:
    """``torch.broadcast_shapes(*shapes)`` in plain Python, or None when they do not broadcast.

    torch's version goes through its symbolic-shape machinery: about 40 µs a call, and its first
    call imports ``torch.fx.experimental.symbolic_shapes`` and sympy (0.3-0.5 s of CPU, once per
    process, inside the first check that calls it)."""
    out = [1] * max((len(s) for s in shapes), default=0)
    for shape in shapes:
        offset = len(out) - len(shape)
        for i, d in enumerate(shape):
            j = offset + i
            if out[j] == 1:
                out[j] = d
            elif d != 1 and d != out[j]:
                return None
    return tuple(out)


def _broadcast_numel(*shapes) -> int:
    """The elements of the broadcast shape; 0 when the shapes do not broadcast."""
    out = broadcast_shape(*shapes)
    return 0 if out is None else math.prod(out)


_FACTORIES = {"zeros", "ones", "empty", "full", "rand", "randn", "randint", "new_zeros", "new_ones", "new_empty",
              "new_full"}
_FACTORY_FUNCS = {getattr(owner, n) for owner in (torch, torch.Tensor) for n in _FACTORIES if hasattr(owner, n)}


def _size_dims(args) -> tuple | None:
    """A factory's size arguments (``torch.zeros(2, 3)``, ``zeros((2, 3))``) as a tuple of ints."""
    dims = args[0] if len(args) == 1 and isinstance(args[0], (tuple, list, torch.Size)) else args
    if not dims or not all(isinstance(d, int) and not isinstance(d, bool) for d in dims):
        return None
    return tuple(dims)


def _factory_sizes(func, args, kwargs) -> tuple | None:
    """The shape a factory (``torch.zeros``, ``x.new_full`` ...) is asked for, or None."""
    if func not in _FACTORY_FUNCS:
        return None
    kwargs = kwargs or {}
    name = getattr(func, "__name__", "")
    if str(kwargs.get("device", "")) == "meta" or (name.startswith("new_") and args and
                                                   isinstance(args[0], torch.Tensor) and args[0].is_meta):
        return None
    if "size" in kwargs:
        sizes = (kwargs["size"],)
    elif name == "randint":  # randint(high, size) or randint(low, high, size)
        sizes = args[-1:]
    elif name == "full":  # full(size, fill_value)
        sizes = args[:1]
    elif name == "new_full":  # x.new_full(size, fill_value)
        sizes = args[1:2]
    else:
        sizes = args[1:] if name.startswith("new_") else args
    return _size_dims(tuple(sizes))


def _factory_shape(func, args, kwargs):
    return _factory_sizes(func, args, kwargs) if func in _FACTORY_FUNCS else None


def _estimate_numel(func, args, kwargs=None) -> int:
    """The size of the output a matmul, a broadcasting op or a factory is about to allocate (0:
    unknown), so that a huge one is refused before it is allocated."""
    if func in _FACTORY_FUNCS:
        dims = _factory_sizes(func, args, kwargs)
        return 0 if dims is None else math.prod(dims)
    name = getattr(func, "__name__", "")
    tensors = [t for t in args if isinstance(t, torch.Tensor)]
    if len(tensors) < 2 or any(t.is_meta for t in tensors):
        return 0
    try:
        if name in _MATMULS:
            a, b = tensors[-2], tensors[-1]
            if a.dim() >= 2 and b.dim() >= 2:
                return _broadcast_numel(a.shape[:-2], b.shape[:-2]) * a.shape[-2] * b.shape[-1]
            return 0
        return _broadcast_numel(*(t.shape for t in tensors))
    except Exception:  # noqa: BLE001 - not broadcastable: the op will say so itself
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
        f"it used more than {seconds:g} s of CPU time on this input"))


_WARM = False


def warm_up() -> None:
    """Use the tripwires once per process, outside any budget, so that nothing a first use costs
    (Python-level caches; a lazily imported torch module) is paid inside a learner's first case.
    The course's dispatch modes import nothing (``utils._clock.DispatchMode``), so this is cheap.

    It also moves every object alive now (torch's modules, the notebook's imports) to the garbage
    collector's permanent generation (``gc.freeze``): right after the imports, the next full
    collection walks all of them (0.09 s of CPU in a bare process, more in a notebook kernel) and
    it landed in the first check; frozen, full collections only walk what is made afterwards."""
    global _WARM
    if _WARM:
        return
    gc.freeze()
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


