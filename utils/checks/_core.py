"""The machinery behind every learner check.

An :class:`Exercise` bundles what the course knows about one graded exercise:

* ``reference`` — the function or class from :mod:`utils.reference`;
* ``make_cases(seed)`` — a seeded list of :class:`Case`, ordered from typical to edge, so that the
  first failure a learner sees is the most telling. A case may carry ``grad=True`` (also compare
  the gradients of a fixed random loss, in float64), a ``judge`` (a statistical or structural
  verdict instead of a comparison with the reference) and a ``budget`` (memory and time);
* ``run(impl, case)`` — how to call an implementation on a case (default: ``impl(*args, **kwargs)``,
  or build the module and call ``forward``);
* ``forbidden`` — what a from-scratch exercise may not call (tripwires at the Python, torch-function
  and aten levels);
* ``mutants`` — the bank of known mistakes, each a working implementation *of the mistake* plus
  the sentence that names it. When a learner's output matches a mutant's on every case where both
  ran, the failure message names the mistake; ``rescale`` adds a generic "wrong scale factor"
  diagnosis;
* ``variants`` — correct answers written differently (einsum, loops, float64 inside, another
  parameter-creation order, ``assert`` instead of ``ValueError``): they must pass;
* ``tips`` — advice that never fails (input validation is not graded).

``tests/test_checks.py`` proves that every check passes its reference and its variants, fails the
stub, rejects every mutant and names it.

``run_check(exercise, impl)`` raises :class:`CheckFailure` (an ``AssertionError``, so nbgrader
scores it zero) with one clear message, or prints one line such as
``✅ scaled_dot_product_attention: 17 visible cases passed``.
"""
from __future__ import annotations

import contextlib
import hashlib
import inspect
import math
import random
import time
import traceback
import warnings
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

import torch
import torch.nn as nn
import torch.utils._device  # noqa: F401 - imported lazily by torch on a module's first build: not under a clock (tests/test_clock.py)
from torch.overrides import TorchFunctionMode

from .._clock import Deadline, DispatchMode, cpu_alarm
from .._guard import ForbiddenCall, _learner_depth, learner_is_running, reference  # noqa: F401


class CheckFailure(AssertionError):
    """A check's verdict. An AssertionError, so nbgrader scores the cell zero.

    IPython shows only the message (``_render_traceback_``), never the harness's source lines.
    """

    def _render_traceback_(self):
        return [f"\x1b[0;31m{type(self).__name__}\x1b[0m: {self}"]


class BudgetExceeded(Exception):
    """Raised inside learner code when it creates a tensor or spends time beyond a case's budget."""


# ----------------------------------------------------------------------------------------------
# Cases, mutants, exercises
# ----------------------------------------------------------------------------------------------
@dataclass
class Budget:
    """What one call of an implementation may spend.

    ``numel``: the largest tensor it may create (elements); ``seconds``: wall time for one call;
    ``why``: the sentence that says what the limit stands for ("a banded kernel never builds the
    S×S scores"); it appears in the failure message.
    """

    numel: int | None = None
    seconds: float | None = None
    why: str = ""


@dataclass
class Case:
    """One input to an exercise.

    ``label`` is what the learner reads ("B=2, H=3, S_q=5, S_k=7, D=4, mask with a fully masked
    row"); ``args``/``kwargs`` go to the function (or to ``forward`` for a module); ``init`` holds
    what a module exercise needs to build the module (``ctor`` args and a ``state`` dict).
    ``grad``: also compare the gradients of a fixed random loss of the outputs with respect to
    every floating-point input (and the module's parameters), in the inputs' dtype (float64).
    ``judge(got) -> message or None``: judge the output directly instead of comparing it with the
    reference (statistics such as dropout's, structure such as a cache's state).
    ``budget``: overrides the exercise's budget for this case.
    """

    label: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    init: dict = field(default_factory=dict)
    tol: tuple | None = None  # (atol, rtol) for this case only, e.g. for statistical estimates
    grad: bool = False
    judge: Callable | None = None
    budget: Budget | None = None
    run: Callable | None = None  # overrides the exercise's runner for this case (e.g. repeated calls)


@dataclass
class Mutant:
    """A known mistake: ``impl`` makes it on purpose; ``hint`` names it for the learner."""

    name: str
    hint: str
    impl: Any


@dataclass
class Variant:
    """A correct answer written differently from the reference; it must pass the check.

    ``demo=True`` marks the accepted answer that differs most from the course's solution (its
    memory profile, code path, float precision, parameter initialisation): CI executes the
    solution notebook with it in place of the solution (``tests/test_notebook_variants.py``), so
    every later cell must run, asserts included, whichever correct answer a learner wrote.
    """

    name: str
    impl: Any
    demo: bool = False


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


DIAGNOSIS_SECONDS = 1.5  # time the diagnosis may take to name a mistake
DEFAULT_SECONDS = 3.0  # per call, on the small inputs of a check: generous for Python loops


def default_budget(case: Case) -> Budget:
    """No tensor larger than 64× the largest input (at least 2**20 elements); 3 s per call."""
    biggest = max((t.numel() for t in _tensors((case.args, case.kwargs, case.init))), default=0)
    return Budget(numel=max(2**20, 64 * biggest), seconds=DEFAULT_SECONDS,
                  why="it builds a far larger intermediate than this exercise needs")


@dataclass
class Exercise:
    name: str
    reference: Any
    make_cases: Callable[[int], list]
    kind: str = "function"  # "function" or "class"
    run: Callable | None = None
    forbidden: tuple = ()
    mutants: list = field(default_factory=list)
    atol: float = 1e-5
    rtol: float = 1e-4
    output_names: tuple | None = None  # e.g. ("output", "weights") for messages
    extra_checks: tuple = ()  # deprecated: write a Case with a `judge` instead (re-verified by the grader)
    default_seed: int = 0
    variants: list = field(default_factory=list)
    tips: tuple = ()  # callables (impl) -> str | None: printed advice that never fails
    budget: Callable[[Case], Budget] | None = None  # default: default_budget
    rescale: Callable[[Case, float], Case] | None = None  # the case with the scores multiplied by c
    scale_names: Callable[[Case], dict] | None = None  # {"1/sqrt(d_k)": value, ...}, correct one first
    input_names: tuple | None = None  # names of the inputs for gradient messages (default: signature)
    # The stub's docstring, word for word: everything the check demands is stated here or in the
    # curriculum's conventions (tests/test_checks.py compares it with the solution notebook).
    contract: str = ""
    # Optional: {phrase: value} describing a case, added to what ``case_features`` derives from its
    # arguments, for the "what the failing cases share" diagnosis (e.g. {"a window wider than S": True}).
    features: Callable[[Case], dict] | None = None

    def call(self, impl, case: Case, guard: Callable = contextlib.nullcontext):
        """Run ``impl`` on ``case``; learner code runs inside ``guard()`` (tripwires, budget).

        For a ``grad`` case, returns a dict of the forward outputs and the gradients
        (``{"out": ..., "weights": ..., "dL/dq": ...}``); the gradients are computed outside
        ``guard`` (the harness calls autograd, the learner's code does not).
        """
        if case.grad:
            return forward_and_grads(self, impl, case, guard)
        runner = case.run or self.run or (run_module if self.kind == "class" else run_function)
        with guard():
            return runner(impl, case)

    def case_budget(self, case: Case) -> Budget:
        if case.budget is not None:
            return case.budget
        return (self.budget or default_budget)(case)


def _tensors(obj, depth: int = 0):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif depth < 4 and isinstance(obj, (tuple, list)):
        for v in obj:
            yield from _tensors(v, depth + 1)
    elif depth < 4 and isinstance(obj, dict):
        for v in obj.values():
            yield from _tensors(v, depth + 1)


def run_function(fn, case: Case):
    return fn(*case.args, **case.kwargs)


def build_module(cls, case: Case) -> nn.Module:
    """Build ``cls(*ctor)`` under the case's seed, load the case's parameters, switch to eval mode."""
    ctor = case.init.get("ctor", ())
    ctor_kwargs = case.init.get("ctor_kwargs", {})
    with torch.random.fork_rng():
        reseed(case.init.get("seed", 0))
        module = cls(*ctor, **ctor_kwargs)
    if not isinstance(module, nn.Module):
        raise CheckFailure(f"{cls.__name__}(...) should build an nn.Module, got {type(module).__name__}.")
    state = case.init.get("state")
    if state is not None:
        load_state_strict(module, state, cls.__name__)
    module.eval()
    return module


def run_module(cls, case: Case):
    """Build the module (``build_module``) and call ``forward`` on the case's inputs."""
    return build_module(cls, case)(*case.args, **case.kwargs)


def load_state_strict(module: nn.Module, state: dict, name: str, parameters_only: bool = False) -> None:
    """Copy the reference's parameters into the learner's module by the names the exercise gives.

    Each name of ``state`` must reach a tensor of the learner's module (a parameter, or a buffer
    where the reference keeps one) of the same shape, and gets that value. What the exercise does
    not name is left alone: buffers of the learner's own (an ``eps`` or a RoPE table), and the same
    parameter reachable under a second name (``linear1`` also held in an ``nn.Sequential``). A
    parameter that none of the given names reaches is reported: the check would not set it.
    ``parameters_only`` is kept for callers; buffers are never compared either way.
    """
    params = dict(module.named_parameters(remove_duplicate=False))
    buffers = dict(module.named_buffers(remove_duplicate=False))
    missing = sorted(k for k in state if k not in params and k not in buffers)
    loaded = {id(params[k]) for k in state if k in params}
    unexpected = sorted({n for n, p in params.items() if id(p) not in loaded and n not in state})
    # a parameter reachable under several names counts once, under its first name
    seen, unique_unexpected = set(), []
    for n in unexpected:
        if id(params[n]) not in seen:
            seen.add(id(params[n]))
            unique_unexpected.append(n)
    if missing or unique_unexpected:
        expected = sorted(k for k in state if k in params or k not in buffers)
        have = sorted({n for n, p in module.named_parameters()})
        raise CheckFailure(
            f"{name} has parameters {have}, but the exercise expects {expected}"
            + (f" (missing {missing})" if missing else "")
            + (f" (extra parameters the exercise does not name, so the check cannot set them: {unique_unexpected})"
               if unique_unexpected else "")
            + ". Use the attribute names given in the exercise (buffers and other attributes are fine)."
        )
    for key, value in state.items():
        target = params.get(key, buffers.get(key))
        if not isinstance(target, torch.Tensor) or tuple(target.shape) != tuple(value.shape):
            raise CheckFailure(
                f"{name}.{key} has shape {describe(target) if not isinstance(target, torch.Tensor) else tuple(target.shape)}, "
                f"expected {tuple(value.shape)}."
            )
    with torch.no_grad():
        for key, value in state.items():
            params.get(key, buffers.get(key)).copy_(value)



def _input_names(exercise: Exercise, n_args: int) -> list:
    if exercise.input_names:
        return list(exercise.input_names)
    target = exercise.reference
    if exercise.kind == "class":
        target = getattr(target, "forward", target)
    def named(fn) -> list:
        try:
            return [n for n, p in inspect.signature(fn).parameters.items() if n not in ("self", "ctx")
                    and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)]
        except (TypeError, ValueError):
            return []

    params = named(target)
    if not params and isinstance(target, type) and issubclass(target, torch.autograd.Function):
        params = named(target.forward)  # Function.apply(*args): the names of forward(ctx, ...)
    return params + [f"arg{i}" for i in range(len(params), n_args)]


def loss_weights(outputs: list, seed: int = 4321) -> list:
    """Fixed random weights, one tensor per output: L = Σ_i (w_i ⊙ out_i).sum()."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(o.shape, generator=g, dtype=torch.float64).to(o.dtype) for o in outputs]


def forward_and_grads(exercise: Exercise, impl, case: Case, guard: Callable = contextlib.nullcontext) -> dict:
    """Forward outputs and dL/d(input) (and dL/d(parameter)) for a fixed random loss L.

    Every floating-point input becomes a fresh leaf that requires grad. The forward runs inside
    ``guard`` (learner code); the loss and ``torch.autograd.grad`` run outside it.
    """
    def leaf(t):
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            return t.detach().clone().requires_grad_()
        return t

    args = tuple(leaf(a) for a in case.args)
    kwargs = {k: leaf(v) for k, v in case.kwargs.items()}
    names = _input_names(exercise, len(args))
    targets = [(f"dL/d{names[i]}", a) for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.requires_grad]
    targets += [(f"dL/d{k}", v) for k, v in kwargs.items() if isinstance(v, torch.Tensor) and v.requires_grad]
    leaf_case = replace(case, args=args, kwargs=kwargs, grad=False)
    with torch.enable_grad():
        if exercise.kind == "class" and exercise.run is None:
            with guard():
                module = build_module(impl, leaf_case)
                # float64 for floating-point parameters and buffers only (a complex RoPE table stays complex)
                module._apply(lambda t: t.to(torch.float64) if t.is_floating_point() else t)
                out = module(*args, **kwargs)
            state = (leaf_case.init or {}).get("state")  # by the names the exercise gives, aliases allowed
            named = (sorted((n, p) for n, p in module.named_parameters(remove_duplicate=False) if n in state)
                     if state else sorted(module.named_parameters()))
            targets += [(f"dL/d{n}", p) for n, p in named if p.requires_grad]
        else:
            runner = exercise.run or run_function
            with guard():
                out = runner(impl, leaf_case)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    floats = [o for o in outs if isinstance(o, torch.Tensor) and o.is_floating_point() and o.requires_grad]
    result = {}
    names_out = exercise.output_names or tuple(f"output[{i}]" for i in range(len(outs)))
    if isinstance(out, (tuple, list)):
        for i, o in enumerate(outs):
            result[names_out[i] if i < len(names_out) else f"output[{i}]"] = _detach(o)
    else:
        result[exercise.output_names[0] if exercise.output_names else "output"] = _detach(out)
    if not floats:
        for name, t in targets:
            result[name] = "no gradient: the output does not depend on the inputs through autograd"
        return result
    weights = loss_weights(floats)
    loss = sum((o * w).sum() for o, w in zip(floats, weights))
    grads = torch.autograd.grad(loss, [t for _, t in targets], allow_unused=True)
    for (name, t), g in zip(targets, grads):
        result[name] = torch.zeros_like(t.detach()) if g is None else g.detach()
    return result


def _detach(x):
    if isinstance(x, torch.Tensor):
        return x.detach()
    if isinstance(x, (tuple, list)):
        return type(x)(_detach(v) for v in x)
    return x


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
        if b.numel is not None:
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, torch.Tensor) and t.numel() > b.numel:
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
        # The aten mode first (its first use imports part of torch, ~2 s), then the clock starts.
        with aten, _Tripwire(forbidden, budget), _alarm(budget.seconds if budget else None):
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


# ----------------------------------------------------------------------------------------------
# Comparing outputs
# ----------------------------------------------------------------------------------------------
def describe(x) -> str:
    if isinstance(x, torch.Tensor):
        return f"a Tensor of shape {tuple(x.shape)} ({str(x.dtype).replace('torch.', '')})"
    if isinstance(x, (tuple, list)):
        return f"a {type(x).__name__} of {len(x)} ({', '.join(describe(v) for v in x)})"
    return f"a {type(x).__name__} ({x!r})" if isinstance(x, (int, float, bool)) else f"a {type(x).__name__}"


def _fmt_idx(idx) -> str:
    return "(" + ", ".join(str(int(i)) for i in idx) + ")"


def _apart(expected: float, got: float) -> str:
    """'X, got Y' with enough digits that X and Y differ (6 unless they look the same)."""
    for digits in (6, 8, 10, 12, 14, 17):
        a, b = f"{expected:.{digits}g}", f"{got:.{digits}g}"
        if a != b:
            break
    return f"{a}, got {b}"


def compare(expected, got, atol: float, rtol: float, path: str = "output") -> str | None:
    """None when ``got`` matches ``expected``; otherwise one sentence saying how it differs."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return f"{path} should be {describe(expected)}, but your code returned {describe(got)}."
        if type(got) is not torch.Tensor and not isinstance(got, nn.Parameter):
            got = got.as_subclass(torch.Tensor)
        if tuple(got.shape) != tuple(expected.shape):
            return f"{path} has shape {tuple(got.shape)}, expected {tuple(expected.shape)}."
        if expected.dtype == torch.bool or not expected.is_floating_point():
            if got.dtype != expected.dtype:
                return f"{path} has dtype {got.dtype}, expected {expected.dtype}."
            diff = got != expected
            if bool(diff.any()):
                where = diff.nonzero()[0].tolist()
                return (
                    f"{path} differs at {int(diff.sum())} of {diff.numel()} positions; first at index "
                    f"{_fmt_idx(where)}: expected {expected[tuple(where)].item()}, got {got[tuple(where)].item()}."
                )
            return None
        if not got.is_floating_point():
            return f"{path} has dtype {got.dtype}, expected a floating-point tensor like {expected.dtype}."
        e = expected.detach().double()
        g = got.detach().double()
        bad_nan = torch.isnan(g) ^ torch.isnan(e)
        if bool(bad_nan.any()):
            where = bad_nan.nonzero()[0].tolist()
            return (f"{path} has NaN where a number is expected, or a number where NaN is expected "
                    f"({int(bad_nan.sum())} values), first at index {_fmt_idx(where)}: expected "
                    f"{e[tuple(where)].item():.4g}, got {g[tuple(where)].item():.4g}.")
        bad_inf = (torch.isinf(g) | torch.isinf(e)) & (g != e)
        if bool(bad_inf.any()):
            where = bad_inf.nonzero()[0].tolist()
            return f"{path} contains inf ({int(bad_inf.sum())} values), first at index {_fmt_idx(where)}; expected {e[tuple(where)].item():.4g}."
        special = torch.isinf(e) | torch.isnan(e)  # equal infinities and NaN-for-NaN match
        err = torch.where(special, torch.zeros_like(e), (g - e).abs())
        tol = atol + rtol * e.abs().nan_to_num(posinf=0.0, neginf=0.0)
        over = err > tol
        if bool(over.any()):
            flat = int(torch.argmax(torch.where(over, err, torch.zeros_like(err))).item())
            where = list(torch.unravel_index(torch.tensor(flat), e.shape)) if e.dim() else []
            where = [int(w) for w in where]
            return (
                f"{path} is off at {int(over.sum())} of {e.numel()} positions; largest error "
                f"{err[tuple(where)].item():.3g} at index {_fmt_idx(where)}: expected "
                f"{_apart(e[tuple(where)].item(), g[tuple(where)].item())} "
                f"(tolerance {atol:g} + {rtol:g}·|expected|)."
            )
        return None
    if isinstance(expected, dict):
        if not isinstance(got, dict):
            return f"{path} should be {describe(expected)}, but your code returned {describe(got)}."
        for key, e in expected.items():
            sub = key if path == "output" else f"{path}[{key!r}]"
            if key not in got:
                return f"{sub} is missing."
            if isinstance(e, str):  # a note in place of a value (e.g. no gradient): must match
                if got[key] != e:
                    return f"{sub}: expected a value, but {e if isinstance(got[key], str) else 'got one'}."
                continue
            if isinstance(got[key], str):
                return f"{sub}: {got[key]}."
            msg = compare(e, got[key], atol, rtol, sub)
            if msg:
                return msg
        return None
    if isinstance(expected, (tuple, list)):
        if not isinstance(got, (tuple, list)):
            return f"{path} should be {describe(expected)}, but your code returned {describe(got)}."
        if len(got) != len(expected):
            return f"{path} should have {len(expected)} elements, but your code returned {len(got)}."
        for i, (e, g) in enumerate(zip(expected, got)):
            msg = compare(e, g, atol, rtol, f"{path}[{i}]")
            if msg:
                return msg
        return None
    if isinstance(expected, bool):
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = bool(got.item())
        return None if got is expected or got == expected else f"{path} should be {expected}, got {got!r}."
    if isinstance(expected, int):
        if isinstance(got, torch.Tensor) and got.numel() == 1 and not got.is_floating_point():
            got = int(got.item())
        if isinstance(got, bool) or not isinstance(got, int):
            return f"{path} should be an int, but your code returned {describe(got)}."
        return None if got == expected else f"{path} should be {expected}, got {got}."
    if isinstance(expected, float):
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = float(got.item())
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            return f"{path} should be a float, but your code returned {describe(got)}."
        if math.isnan(got) and not math.isnan(expected):
            return f"{path} is NaN, expected {expected:.6g}."
        if abs(got - expected) > atol + rtol * abs(expected):
            return f"{path} should be {expected:.6g}, got {got:.6g} (error {abs(got - expected):.3g})."
        return None
    if expected is None:
        return None if got is None else f"{path} should be None, got {describe(got)}."
    return None if got == expected else f"{path} should be {expected!r}, got {got!r}."


def name_paths(exercise: Exercise, msg: str) -> str:
    """Replace output[0], output[1] by the exercise's names (output, weights)."""
    if exercise.output_names:
        for i, n in enumerate(exercise.output_names):
            msg = msg.replace(f"output[{i}]", n)
    return msg


# ----------------------------------------------------------------------------------------------
# The check itself
# ----------------------------------------------------------------------------------------------
def validate_impl(exercise: Exercise, impl) -> None:
    what = "class" if exercise.kind == "class" else "function"
    if impl is None:
        raise CheckFailure(
            f"`{exercise.name}` is None: pass your {what} itself, e.g. check_{exercise.name}({exercise.name}), "
            "after running the cell that defines it."
        )
    if isinstance(impl, (torch.Tensor, tuple, list, dict, int, float, str)):
        raise CheckFailure(
            f"check_{exercise.name} takes your {what} `{exercise.name}`, not its result "
            f"({describe(impl)}): write check_{exercise.name}({exercise.name}) without calling it."
        )
    if exercise.kind == "class":
        if not (isinstance(impl, type) and issubclass(impl, nn.Module)):
            raise CheckFailure(
                f"`{exercise.name}` should be a class that subclasses nn.Module; got {describe(impl)}."
            )
    elif not callable(impl):
        raise CheckFailure(f"`{exercise.name}` should be a function; got {describe(impl)}.")


def _guard_for(exercise: Exercise, case: Case) -> Callable:
    budget = exercise.case_budget(case)
    return lambda: learner_code(exercise.forbidden, budget)


def _call_learner(exercise: Exercise, impl, case: Case):
    return exercise.call(impl, case, guard=_guard_for(exercise, case))


def _forbidden_message(exercise: Exercise, err: ForbiddenCall) -> str:
    if err.label == "utils.reference":
        return (
            f"{exercise.name} calls utils.reference.{err.func_name}: the exercise is to write it "
            "yourself, so a call to the reference scores zero."
        )
    return (
        f"{exercise.name} calls {err.label} (seen: {err.func_name}). This exercise re-implements it "
        "from scratch, so calling it scores zero: write the computation yourself."
    )


def case_seed(i: int) -> int:
    return 1000 + i


def reseed(s: int) -> None:
    """``torch.manual_seed(s)`` for the checks, without its cost. ``torch.manual_seed`` also hands the
    seed to CUDA, XPU and MTIA, and while those are not in use it queues it with a formatted copy of
    the whole Python stack (about 1 ms each time): a third of a failing check's time went there. The
    cases are CPU tensors and draw from the CPU generator; an accelerator already in use is seeded too."""
    torch.default_generator.manual_seed(s)
    for name in ("cuda", "xpu"):
        mod = getattr(torch, name, None)
        if mod is not None and mod.is_initialized():
            mod.manual_seed_all(s)


def tolerance(exercise: Exercise, case: Case) -> tuple:
    return case.tol if case.tol is not None else (exercise.atol, exercise.rtol)


class _Crashed:
    """Stands for the output of a case on which the learner's code raised."""

    def __init__(self, message: str):
        self.message = message


def _where_in_learner_code(err: BaseException) -> str:
    """' (line N: `code`)' for the innermost frame of the learner's own code, if any."""
    frames = traceback.extract_tb(err.__traceback__)
    mine = [f for f in frames if "/utils/" not in f.filename and "/torch/" not in f.filename
            and "/site-packages/" not in f.filename and "/lib/python" not in f.filename]
    if not mine:
        return ""
    f = mine[-1]
    code = f" `{f.line.strip()}`" if f.line else ""
    return f" (at line {f.lineno}:{code})"


def judge_case(exercise: Exercise, case: Case, expected, got) -> str | None:
    """The verdict on one case: None when right, else one sentence (the grader uses this too)."""
    if case.judge is not None:
        try:
            return case.judge(got)
        except Exception as err:  # noqa: BLE001 - a malformed output the judge could not read
            return f"the output could not be judged ({type(err).__name__}: {err}); got {describe(got)}."
    return compare(expected, got, *tolerance(exercise, case))


def expected_output(exercise: Exercise, case: Case, i: int):
    """The reference's output on case ``i`` (None for a judged case)."""
    if case.judge is not None:
        return None
    from .._guard import unguarded

    with torch.random.fork_rng():
        reseed(case_seed(i))
        return exercise.call(unguarded(exercise.reference), case)


def evaluate(exercise: Exercise, impl, cases: list) -> tuple[list, list, list]:
    """Run ``impl`` on every case: (outputs, per-case error message or None, expected).

    A case on which the learner's code raises gets a _Crashed output and a message; the other
    cases still run, so the diagnosis can use them. A forbidden call, or a stub that is not
    implemented, stops the check at once.
    """
    outputs, errors, expected = [], [], []
    for i, case in enumerate(cases):
        exp = expected_output(exercise, case, i)
        expected.append(exp)
        try:
            reseed(case_seed(i))
            got = _call_learner(exercise, impl, case)
        except ForbiddenCall as err:
            raise CheckFailure(_forbidden_message(exercise, err)) from None
        except NotImplementedError:
            raise CheckFailure(
                f"{exercise.name} is not implemented yet: replace `raise NotImplementedError()` with your code."
            ) from None
        except BudgetExceeded as err:
            outputs.append(_Crashed(f"over budget: {err}"))
            errors.append(f"{exercise.name} is over its budget on this case: {err}.")
            continue
        except CheckFailure as err:  # a runner's own verdict on this case
            outputs.append(_Crashed(_crash_message(err)))
            errors.append(str(err))
            continue
        except Exception as err:  # the learner's bug: say which case and where, go on
            outputs.append(_Crashed(_crash_message(err)))
            errors.append(f"{exercise.name} raised {type(err).__name__}{_where_in_learner_code(err)}: {err}")
            continue
        outputs.append(got)
        errors.append(judge_case(exercise, case, exp, got))
    return outputs, errors, expected


def _same_as(exercise: Exercise, impl, cases: list, outputs: list, expected: list) -> bool:
    """True when ``impl`` (a mutant) matches the learner on every case where both ran (or where
    both raised the same error), and the mistake shows on at least one of them."""
    shown = False
    with torch.random.fork_rng():
        for i, (c, out) in enumerate(zip(cases, outputs)):
            if c.judge is not None:
                continue
            try:
                reseed(case_seed(i))
                with warnings.catch_warnings(), _Tripwire((), exercise.case_budget(c)):
                    warnings.simplefilter("ignore")
                    m = exercise.call(impl, c)
            except Exception as err:  # noqa: BLE001 - the mutant cannot run this case
                if isinstance(out, _Crashed) and out.message == _crash_message(err):
                    shown = True  # the same error as the learner's: evidence for this mistake
                    continue
                if isinstance(out, _Crashed):
                    continue
                continue
            if isinstance(out, _Crashed):
                continue  # the mutant ran where the learner's code raised: no evidence either way
            if compare(m, out, *tolerance(exercise, c)) is not None:
                return False
            if compare(expected[i], m, *tolerance(exercise, c)) is not None:
                shown = True
    return shown


def _crash_message(err: BaseException) -> str:
    text = str(err).split("Hint:")[0].strip()  # autograd appends a long hint that may vary
    return f"{type(err).__name__}: {text}"


def diagnose(exercise: Exercise, cases: list, outputs: list, expected: list | None = None) -> list[str]:
    """Hints for the known mistakes whose outputs match the learner's where both ran."""
    if expected is None:
        expected = [expected_output(exercise, c, i) for i, c in enumerate(cases)]
    hints = []
    # CPU time of this process (all its threads): a busy machine slows the diagnosis down but does
    # not cut it short, so the same mistake is named on a laptop, in CI and in the grader.
    deadline = time.process_time() + DIAGNOSIS_SECONDS
    for mutant in exercise.mutants:
        if time.process_time() > deadline:  # a failing check answers within about 2 s of CPU
            break
        if _same_as(exercise, mutant.impl, cases, outputs, expected):
            hints.append(mutant.hint)
    if not hints and exercise.rescale is not None:
        hint = _diagnose_scale(exercise, cases, outputs, expected)
        if hint:
            hints.append(hint)
    budget_notes = [o.message for o in outputs if isinstance(o, _Crashed) and o.message.startswith("over budget")]
    if budget_notes and not hints:
        hints.append(budget_notes[0][len("over budget: "):])
    return hints


def _best_factor(exercise: Exercise, case: Case, i: int, got) -> float | None:
    """The factor c for which the reference on ``rescale(case, c)`` matches ``got``, if any."""
    from .._guard import unguarded

    ref = unguarded(exercise.reference)

    def err(logc: float) -> float:
        with torch.random.fork_rng():
            reseed(case_seed(i))
            out = exercise.call(ref, exercise.rescale(case, math.exp(logc)))
        return _max_abs_diff(out, got)

    grid = [x / 8.0 for x in range(-48, 49)]  # c from e^-6 to e^6
    errs = [err(x) for x in grid]
    k = min(range(len(grid)), key=errs.__getitem__)
    lo, hi = grid[max(k - 1, 0)], grid[min(k + 1, len(grid) - 1)]
    # Golden-section refinement: each step keeps one of its two points, so it costs one reference
    # call; 48 steps narrow the bracket of log c (width 0.25) to about 1e-11.
    g = (math.sqrt(5) - 1) / 2
    m1, m2 = hi - g * (hi - lo), lo + g * (hi - lo)
    e1, e2 = err(m1), err(m2)
    for _ in range(48):
        if e1 < e2:
            hi, m2, e2 = m2, m1, e1
            m1 = hi - g * (hi - lo)
            e1 = err(m1)
        else:
            lo, m1, e1 = m1, m2, e2
            m2 = lo + g * (hi - lo)
            e2 = err(m2)
    logc = (lo + hi) / 2
    with torch.random.fork_rng():
        reseed(case_seed(i))
        out = exercise.call(ref, exercise.rescale(case, math.exp(logc)))
    if compare(out, got, *(x * 10 for x in tolerance(exercise, case))) is None and abs(logc) > 1e-3:
        return math.exp(logc)
    return None


def _max_abs_diff(a, b) -> float:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape:
        d = (a.detach().double() - b.detach().double()).abs().nan_to_num(nan=1e9, posinf=1e9, neginf=1e9)
        return float(d.max()) if d.numel() else 0.0
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)) and len(a) == len(b):
        return max((_max_abs_diff(x, y) for x, y in zip(a, b)), default=0.0)
    if isinstance(a, dict) and isinstance(b, dict):
        return max((_max_abs_diff(a[k], b.get(k)) for k in a), default=0.0)
    return 1e9


def _diagnose_scale(exercise: Exercise, cases: list, outputs: list, expected: list) -> str | None:
    """'the scores were scaled by the wrong factor': the reference with another scale matches."""
    found = []
    for i, (case, out) in enumerate(zip(cases, outputs)):
        if isinstance(out, _Crashed) or case.judge is not None or case.grad:
            continue
        if compare(expected[i], out, *tolerance(exercise, case)) is None:
            continue  # this case does not show the mistake (e.g. S_k = 1)
        c = _best_factor(exercise, case, i, out)
        if c is None:
            return None
        found.append((i, case, c))
        if len(found) == 3:
            break
    if not found:
        return None
    i, case, c = found[0]
    if exercise.scale_names is None:
        return (f"the scores were scaled by the wrong factor: your output equals the reference's with the "
                f"scores multiplied by an extra {c:.4g} (case [{case.label}]).")
    names = exercise.scale_names(case)
    right_name, right = next(iter(names.items()))
    used = c * right
    match = None
    for name, value in list(names.items())[1:]:
        if all(abs(cc * next(iter(exercise.scale_names(cs).values())) - exercise.scale_names(cs)[name])
               <= 0.02 * abs(exercise.scale_names(cs)[name]) for _, cs, cc in found):
            match = name
            break
    said = f"{match} = {used:.4g}" if match else f"{used:.4g}"
    return (f"the scores were scaled by the wrong factor: your output equals the reference's with the scores "
            f"multiplied by {said} instead of {right_name} = {right:.4g} (case [{case.label}]).")


# ----------------------------------------------------------------------------------------------
# Generic diagnoses: what a failing answer's outputs and cases show, with no mutant
# ----------------------------------------------------------------------------------------------
CLUE_PREFIX = "Clue: "
SHARE_PREFIX = "What the failing cases share: "
GENERIC_SECONDS = 0.3  # CPU time the output clues may take, after the bank's diagnosis
LARGE_INPUT = 10.0  # |x| above this is "large" (randn inputs stay below ~5)
_Q_NAMES = ("q", "query", "queries", "x", "tgt", "target")
_K_NAMES = ("k", "key", "keys", "memory", "context", "kv", "src", "source")


def _named_inputs(exercise: Exercise, case: Case) -> list:
    """[(name, value)] of a case's call arguments, keyword arguments and constructor arguments."""
    pairs = list(zip(_input_names(exercise, len(case.args)), case.args)) + list(case.kwargs.items())
    ctor, ctor_kwargs = case.init.get("ctor", ()), case.init.get("ctor_kwargs", {})
    if exercise.kind == "class" and (ctor or ctor_kwargs):
        try:
            names = [p for p in inspect.signature(exercise.reference.__init__).parameters if p != "self"]
        except (TypeError, ValueError):
            names = []
        names += [f"ctor{i}" for i in range(len(names), len(ctor))]
        pairs += list(zip(names, ctor)) + list(ctor_kwargs.items())
    return pairs


def _fully_masked(mask: torch.Tensor) -> bool:
    if mask.dim() == 0 or mask.shape[-1] == 0:
        return False
    if mask.dtype == torch.bool:
        return bool((~mask).all(-1).any())
    if mask.is_floating_point():
        return bool(torch.isneginf(mask).all(-1).any())
    return False


def case_features(exercise: Exercise, case: Case) -> dict:
    """What a case is made of, derived from its arguments: ``{phrase: value}``.

    Booleans read "all failing cases have <phrase>" (False: "have no <phrase>", or the text after a
    "¦" in the phrase); other values read "<phrase> = <value>". ``Exercise.features(case)`` may add
    or override entries.
    """
    feats: dict = {"gradients compared (float64)¦forward outputs compared only": bool(case.grad)}
    pairs = _named_inputs(exercise, case)
    tensors = [(n, t) for n, t in pairs if isinstance(t, torch.Tensor)]
    floats = [(n, t) for n, t in tensors if t.is_floating_point()]
    q = next(((n, t) for n, t in floats if n.lower() in _Q_NAMES and t.dim() >= 2), None)
    k = next(((n, t) for n, t in floats if n.lower() in _K_NAMES and t.dim() >= 2), None)
    if q is not None and k is not None:
        feats["S_q ≠ S_k¦S_q = S_k"] = q[1].shape[-2] != k[1].shape[-2]
    if q is not None and q[1].dim() >= 3:
        feats[f"a single position ({q[0]}.shape[-2] = 1)¦several positions ({q[0]}.shape[-2] > 1)"] = \
            q[1].shape[-2] == 1
    for n, t in tensors:
        if "mask" in n.lower() or t.dtype == torch.bool:
            feats[f"a {n}" if "mask" in n.lower() else f"a mask ({n})"] = True
            feats[f"a fully masked row in {n}"] = _fully_masked(t)
    for n, v in pairs:
        if v is None and "mask" in n.lower():
            feats[f"a {n}"] = False
    if floats:
        name, first = floats[0]
        feats[f"the number of dims of {name}"] = first.dim()
        feats[f"the dtype of {name}"] = str(first.dtype).replace("torch.", "")
        big = max((float(t.detach().abs().max()) for _, t in floats if t.numel()), default=0.0)
        feats[f"large inputs (|x| > {LARGE_INPUT:g})¦inputs with |x| ≤ {LARGE_INPUT:g}"] = big > LARGE_INPUT
    for n, v in pairs:
        if isinstance(v, (bool, int, str)) or (isinstance(v, float) and math.isfinite(v)):
            feats[n] = (v,)  # a 1-tuple: an argument's value, read "n = v"
    if getattr(exercise, "features", None) is not None:
        try:
            feats.update(exercise.features(case))
        except Exception:  # noqa: BLE001 - a chapter's hook never breaks a verdict
            pass
    return feats


def _say_values(phrase: str, values: set, failing: bool) -> str:
    if all(isinstance(v, bool) for v in values):
        pos, _, neg = phrase.partition("¦")
        if not neg:
            neg = (pos.replace(" = ", " ≠ ", 1) if " = " in pos else f"no {pos[2:]}" if pos.startswith("a ")
                   else f"no {pos}")
        if len(values) == 2:
            return f"have {pos} or {neg}"
        return f"have {pos if True in values else neg}"
    plain = sorted((v[0] if isinstance(v, tuple) else v for v in values), key=lambda v: (str(type(v)), v))
    shown = ", ".join(repr(v) if isinstance(v, str) else f"{v:g}" if isinstance(v, float) else str(v) for v in plain)
    if phrase.startswith("the dtype of "):
        return f"have {phrase[len('the dtype of '):]} in {shown.replace(', ', ' or ')}".replace("'", "")
    if phrase.startswith("the number of dims of "):
        return f"have {phrase[len('the number of dims of '):]} with {shown.replace(', ', ' or ')} dims"
    return f"have {phrase} = {shown}" if len(values) == 1 else f"have {phrase} in {{{shown}}}"


def shared_features(exercise: Exercise, cases: list, failed: list) -> str | None:
    """One sentence: a feature whose values in the failing cases never occur in the passing ones.

    Only with at least 2 failing and 2 passing cases; features taking a different value in almost
    every case (random sizes) are not used.
    """
    if len(failed) < 2 or len(cases) - len(failed) < 2:
        return None
    feats = [case_features(exercise, c) for c in cases]
    keys = []
    for f in feats:
        keys += [k for k in f if k not in keys]
    found = []
    for order, key in enumerate(keys):
        boolean = any(isinstance(f.get(key), bool) for f in feats)
        values = [f.get(key, False if boolean else None) for f in feats]
        known = [i for i, v in enumerate(values) if v is not None]
        distinct = {values[i] for i in known}
        if len(distinct) < 2 or (len(distinct) > 3 and len(distinct) > len(known) // 3):
            continue
        bad = [i for i in failed if values[i] is not None]
        good = [i for i in known if i not in failed]
        if len(bad) < len(failed) or len(good) < 2:  # said of every failing case, and of 2+ passing ones
            continue
        bad_values, good_values = {values[i] for i in bad}, {values[i] for i in good}
        if bad_values & good_values:
            continue
        found.append((len(distinct), order, key, bad_values, good_values, len(good)))
    if not found:
        return None
    _, _, key, bad, good, n_good = min(found, key=lambda f: f[:2])
    every = "both failing cases" if len(failed) == 2 else f"all {len(failed)} failing cases"
    return (f"{every} {_say_values(key, bad, True)}; the {n_good} passing ones "
            f"{_say_values(key, good, False)}.")


def _leaves(expected, got, path: str = "output"):
    """(path, expected tensor or scalar, got) for the leaves of an output structure."""
    if isinstance(expected, (torch.Tensor, int, float)) and not isinstance(expected, bool):
        yield path, expected, got
    elif isinstance(expected, dict) and isinstance(got, dict):
        for key, e in expected.items():
            if key in got and not isinstance(e, str):
                yield from _leaves(e, got[key], key if path == "output" else f"{path}[{key!r}]")
    elif isinstance(expected, (tuple, list)) and isinstance(got, (tuple, list)) and len(got) == len(expected):
        for i, (e, g) in enumerate(zip(expected, got)):
            yield from _leaves(e, g, f"{path}[{i}]")


def _close(a: torch.Tensor, b: torch.Tensor, atol: float, rtol: float) -> bool:
    if a.shape != b.shape:
        return False
    a, b = a.double(), b.double()
    if not (bool(torch.isfinite(a).all()) and bool(torch.isfinite(b).all())):
        return bool(((a == b) | ((a - b).abs() <= atol + rtol * b.abs())).all())
    return bool(((a - b).abs() <= atol + rtol * b.abs()).all())


def _nice_number(c: float) -> str:
    """c, and a simple form of it when there is one (2, 1/4, √8, 1/√8)."""
    text = f"{c:.4g}"
    if abs(c - round(c)) <= 1e-6 * abs(c):
        return text
    for k in range(10, 41):  # binary units: 2^20 (MiB), 2^30 (GiB)
        if abs(abs(c) - 2.0 ** -k) <= 1e-6 * 2.0 ** -k:
            return f"{text} (= {'−' if c < 0 else ''}1/2^{k})"
    for k in range(2, 257):
        for value, name in ((k, f"{k}"), (1 / k, f"1/{k}"), (math.sqrt(k), f"√{k}"), (1 / math.sqrt(k), f"1/√{k}")):
            if abs(abs(c) - value) <= 1e-6 * value and not (name == text):
                return f"{text} (= {'−' if c < 0 else ''}{name})"
    return text


def _slice_permutation(e: torch.Tensor, g: torch.Tensor, dim: int, atol: float, rtol: float):
    """The permutation p with g.select(dim, i) ≈ e.select(dim, p[i]) (None if none, or identity)."""
    n = e.shape[dim]
    if n < 2 or n > 32:
        return None
    es = [e.select(dim, j) for j in range(n)]
    for a in range(n):  # the expected slices must be told apart
        for b in range(a + 1, n):
            if _close(es[a], es[b], atol, rtol):
                return None
    perm, used = [], set()
    for i in range(n):
        gi = g.select(dim, i)
        j = next((j for j in range(n) if j not in used and _close(es[j], gi, atol, rtol)), None)
        if j is None:
            return None
        perm.append(j)
        used.add(j)
    return None if perm == list(range(n)) else perm


def _say_perm(perm: list) -> str:
    n = len(perm)
    if perm == list(range(n))[::-1]:
        return "in reverse order"
    for s in range(1, n):
        if perm == [(i + s) % n for i in range(n)]:
            return f"rolled by {n - s} (your slice i is the expected slice i + {s}, cyclically)"
    return f"in another order (your slices are the expected ones {perm})"


def _float_clues(e: torch.Tensor, g: torch.Tensor, path: str, atol: float, rtol: float) -> list:
    """[(kind, message)]: what a wrong floating-point output is, relative to the expected one."""
    clues = []
    if e.numel() == 0:
        return clues
    ed, gd = e.detach().double(), g.detach().double()
    finite = bool(torch.isfinite(ed).all())
    if g.shape != e.shape:
        if not finite:
            return clues
        if e.dim() >= 2 and tuple(g.shape) == tuple(e.mT.shape) and _close(ed.mT, gd, atol, rtol):
            return [("transposed", f"your {path} is the expected one transposed in its last two dims "
                                   f"(shape {tuple(g.shape)} instead of {tuple(e.shape)}).")]
        if e.dim() <= 5:
            import itertools

            for p in itertools.permutations(range(e.dim())):
                if tuple(e.shape[i] for i in p) == tuple(g.shape) and list(p) != list(range(e.dim())) \
                        and _close(ed.permute(p), gd, atol, rtol):
                    return [("dims permuted", f"your {path} holds the expected values with its dims in another "
                             f"order: shape {tuple(g.shape)} instead of {tuple(e.shape)} (your dims are the "
                             f"expected dims {list(p)}): a transpose or permute is missing or extra.")]
        if g.dim() == e.dim() - 1 or (g.dim() == e.dim() and sum(a != b for a, b in zip(g.shape, e.shape)) == 1):
            for d in range(e.dim()):
                rest = tuple(e.shape[:d]) + tuple(e.shape[d + 1:])
                if tuple(g.shape) not in (rest, tuple(e.shape[:d]) + (1,) + tuple(e.shape[d + 1:])) or e.shape[d] < 2:
                    continue
                for how, r in (("averaged", ed.mean(d)), ("summed", ed.sum(d)), ("taken at index 0", ed.select(d, 0)),
                               ("taken at the last index", ed.select(d, -1))):
                    if _close(r.reshape(g.shape), gd, atol, rtol) and float(r.max() - r.min()) > atol:
                        return [(f"reduced over dim {d - e.dim()}",
                                 f"your {path} (shape {tuple(g.shape)}) is the expected one {how} over dim "
                                 f"{d - e.dim()} (size {e.shape[d]}, shape {tuple(e.shape)}): keep that dim.")]
        if g.numel() != e.numel():
            return clues
        if _close(ed.reshape(g.shape), gd, atol, rtol):
            return [("reshaped", f"your {path} holds the expected values in the expected order, but with shape "
                                 f"{tuple(g.shape)} instead of {tuple(e.shape)}{_why_reshaped(e, g)}.")]
        return clues
    if not finite or not bool(torch.isfinite(gd).all()):
        return clues
    err = (gd - ed).abs()
    scale = float(ed.abs().max())
    if e.dtype == torch.float64 and scale > 0:
        rel = float(err.max()) / scale
        if 2e-9 <= rel <= 3e-6:  # float32 rounding (eps 6e-8), far above float64's (1e-16)
            kind = "float32 output" if g.dtype == torch.float32 else "float32 precision"
            what = "is float32" if g.dtype == torch.float32 else "has float32 precision"
            clues.append((kind, f"your {path} {what} (error ~{rel:.0e} relative) in a float64 case: a tensor "
                                "created inside without dtype=... (or a .float()) is float32; keep the inputs' dtype."))
            return clues
    if scale == 0:
        return clues
    if float(gd.abs().max()) == 0:
        return [("zeros", f"your {path} is all zeros.")]
    if e.dim() >= 2 and e.shape[-1] == e.shape[-2] and _close(ed.mT, gd, atol, rtol):
        return [("transposed", f"your {path} is the expected one transposed in its last two dims.")]
    # a probability distribution over the last dim, normalised over another dim
    sums = ed.sum(-1)
    if e.shape[-1] >= 2 and float(ed.min()) >= -atol and bool((((sums - 1).abs() < 1e-3) | (sums.abs() < 1e-6)).all()) \
            and bool(((sums - 1).abs() < 1e-3).any()):
        rows = (sums - 1).abs() < 1e-3
        gsums = gd.sum(-1)
        if not bool(((gsums - 1).abs() < 1e-3)[rows].all()) and float(gd.min()) >= -atol:
            others = [d for d in range(e.dim() - 1) if e.shape[d] >= 2
                      and bool(((gd.sum(d) - 1).abs() < 1e-3).all())]
            if others:
                d = others[-1]
                clues.append(("normalised over another dim",
                              f"your {path} sums to 1 over dim {d - e.dim()} (size {e.shape[d]}); the expected one sums "
                              f"to 1 over the last dim (size {e.shape[-1]}): the softmax or normalisation is over the "
                              "wrong dim."))
            else:
                lo, hi = float(gsums[rows].min()), float(gsums[rows].max())
                sums_to = f"{lo:.4g}" if f"{lo:.4g}" == f"{hi:.4g}" else f"{lo:.4g} … {hi:.4g}"
                clues.append(("rows do not sum to 1",
                              f"the rows of your {path} (over the last dim) sum to {sums_to}; the expected "
                              "rows sum to 1 (a distribution over the last dim)."))
    # a constant factor or offset, for the whole tensor or per row
    c = float((gd * ed).sum() / (ed * ed).sum())
    if abs(c - 1) > 1e-3 and _close(c * ed, gd, atol, rtol):
        return [(f"constant factor={c!r}={path}", f"your {path} is the expected one times {_nice_number(c)} everywhere.")]
    shift = float((gd - ed).mean())
    if abs(shift) > atol and _close(ed + shift, gd, atol, rtol):
        clues.append((f"constant offset={shift!r}={path}", f"your {path} is the expected one plus {shift:.4g} everywhere."))
        return clues
    if e.dim() >= 1 and e.shape[-1] >= 2 and e.numel() > e.shape[-1]:
        num, den = (gd * ed).sum(-1, keepdim=True), (ed * ed).sum(-1, keepdim=True)
        r = torch.where(den > 0, num / den.clamp_min(1e-300), torch.ones_like(den))
        if _close(r * ed, gd, atol, rtol) and float((r - 1).abs().max()) > 1e-3:
            clues = [c for c in clues if c[0] != "rows do not sum to 1"]  # the factor says more
            clues.append(("factor per row", f"each row (over the last dim) of your {path} is the expected row times its "
                          f"own factor ({float(r.min()):.4g} … {float(r.max()):.4g}): a missing or wrong normalisation "
                          "of each row."))
            return clues
        d = (gd - ed).mean(-1, keepdim=True)
        if _close(ed + d, gd, atol, rtol) and float(d.abs().max()) > atol:
            clues.append(("offset per row", f"each row (over the last dim) of your {path} is the expected row plus its "
                          f"own constant ({float(d.min()):.4g} … {float(d.max()):.4g})."))
            return clues
    # the expected values in other positions
    for dim in range(e.dim() - 1):
        perm = _slice_permutation(ed, gd, dim, atol, rtol)
        if perm is not None:
            clues.append((f"permuted along dim {dim - e.dim()}",
                          f"your {path} has the expected slices along dim {dim - e.dim()} (size {e.shape[dim]}) "
                          f"{_say_perm(perm)}: heads, positions or batch entries are mixed up."))
            return clues
    m = e.shape[-1] if e.dim() else 0
    for n in range(2, min(m, 32) + 1):  # the coarsest blocks first; n == m: single features
        if m % n:
            continue
        shape = tuple(e.shape[:-1]) + (n, m // n)
        perm = _slice_permutation(ed.reshape(shape), gd.reshape(shape), e.dim() - 1, atol, rtol)
        if perm is not None:
            what = f"{n} blocks of {m // n}" if n < m else f"{m} features"
            clues.append(("blocks permuted", f"the last dim of your {path} holds the expected {what} "
                          f"{_say_perm(perm)}: heads (or concatenated parts) in another order."))
            return clues
    if e.numel() >= 4:
        es, gs = ed.flatten().sort().values, gd.flatten().sort().values
        distinct = len(set(round(v, 6) for v in es.tolist()))
        if distinct >= 0.5 * e.numel() and _close(es, gs, atol, rtol):
            clues.append(("values moved", f"your {path} holds exactly the expected values, in other positions: a "
                          "reshape or view mixes dims (e.g. heads merged or split without the transpose)."))
    return clues


def _offsets(m: torch.Tensor):
    """The set of offsets j − i allowed in every (S_q, S_k) slice of a Toeplitz bool mask, or None."""
    sq, sk = m.shape[-2], m.shape[-1]
    flat = m.reshape(-1, sq, sk)
    allowed = None
    for s in flat:
        here = set()
        for o in range(-(sq - 1), sk):
            d = torch.diagonal(s, offset=o)
            if bool(d.any()) != bool(d.all()):
                return None
            if bool(d.all()):
                here.add(o)
        if allowed is None:
            allowed = here
        elif here != allowed:
            return None
    return allowed


def _say_offsets(offsets: set) -> str:
    if not offsets:
        return "none"
    runs, items = [], sorted(offsets)
    start = prev = items[0]
    for o in items[1:] + [None]:
        if o is not None and o == prev + 1:
            prev = o
            continue
        runs.append(f"{start}" if start == prev else f"{start} … {prev}")
        if o is not None:
            start = prev = o
    return ", ".join(runs).replace("-", "−")


def _why_reshaped(e: torch.Tensor, g: torch.Tensor) -> str:
    if [n for n in e.shape if n != 1] == [n for n in g.shape if n != 1]:
        return " (a dim of size 1 kept or dropped: keepdim, squeeze or unsqueeze)"
    return ": reshape it"


def _reshape_clue(e: torch.Tensor, g: torch.Tensor, path: str) -> list:
    if g.numel() != e.numel() or g.dtype != e.dtype or e.numel() < 2:
        return []
    if bool((e.reshape(g.shape) == g).all()):
        return [("reshaped", f"your {path} holds the expected values in the expected order, but with shape "
                             f"{tuple(g.shape)} instead of {tuple(e.shape)}{_why_reshaped(e, g)}.")]
    return []


def _mask_clues(e: torch.Tensor, g: torch.Tensor, path: str) -> list:
    if g.dtype != torch.bool or e.numel() == 0:
        return _reshape_clue(e, g, path) if g.shape != e.shape else []
    if e.dim() >= 2 and tuple(g.shape) == tuple(e.mT.shape) and bool((e.mT == g).all()) and not bool((e.mT == e).all()):
        return [("transposed", f"your {path} is the expected one transposed in its last two dims.")]
    if g.shape != e.shape:
        return _reshape_clue(e, g, path)
    if bool((g == ~e).all()):
        return [("negated mask", f"your {path} is the exact negation of the expected one (True and False swapped).")]
    if e.dim() >= 2 and e.shape[-1] >= 2 and e.shape[-2] >= 2:
        oe, og = _offsets(e), _offsets(g)
        if oe is not None and og is not None:
            edge = ""
            if oe and og and (len(og ^ oe) == 1 or (min(og) - min(oe) in (-1, 1) and max(og) == max(oe))
                             or (max(og) - max(oe) in (-1, 1) and min(og) == min(oe))):
                edge = ": an edge of the band or diagonal is off by one"
            return [("mask offsets", f"your {path} allows the key offsets j − i in {{{_say_offsets(og)}}}; the expected "
                                     f"one allows {{{_say_offsets(oe)}}}{edge}.")]
    # every row a prefix (True then False) or a suffix: its boundary moved
    for flip in (False, True):
        ee, gg = (e.flip(-1), g.flip(-1)) if flip else (e, g)
        ce, cg = ee.sum(-1), gg.sum(-1)
        prefix = lambda m, c: bool((m == (torch.arange(m.shape[-1]) < c.unsqueeze(-1))).all())  # noqa: E731
        if prefix(ee, ce) and prefix(gg, cg):
            diff = (cg - ce).unique().tolist()
            if len(diff) == 1 and diff[0] != 0:
                k = int(diff[0])
                return [("boundary moved", f"every row of your {path} has {abs(k)} {'more' if k > 0 else 'fewer'} True "
                                           f"position{'s' if abs(k) > 1 else ''} than expected: its boundary is off by "
                                           f"{abs(k)} (< versus <=, or a length off by one).")]
    for dim in range(e.dim()):
        if e.shape[dim] < 3:
            continue
        for s in (1, -1):
            body = e.narrow(dim, 0, e.shape[dim] - 1) if s == 1 else e.narrow(dim, 1, e.shape[dim] - 1)
            edge_e = e.narrow(dim, 0, 1) if s == 1 else e.narrow(dim, e.shape[dim] - 1, 1)
            for fill in (edge_e, torch.zeros_like(edge_e), torch.ones_like(edge_e)):
                shifted = torch.cat([fill, body], dim) if s == 1 else torch.cat([body, fill], dim)
                if bool((shifted == g).all()):
                    return [("shifted", f"your {path} is the expected one shifted by one position along dim "
                                        f"{dim - e.dim()} (towards {'higher' if s == 1 else 'lower'} indices): an off-by-one.")]
    return []


def _scalar_clue(e, g, path: str, atol: float, rtol: float) -> list:
    try:
        ev, gv = float(e), float(g)
    except (TypeError, ValueError, RuntimeError):
        return []
    if not (math.isfinite(ev) and math.isfinite(gv)) or abs(gv - ev) <= atol + rtol * abs(ev):
        return []
    clues = [(f"constant offset={gv - ev!r}={path}", f"your {path} is the expected value plus {gv - ev:.4g}.")]
    if ev != 0:
        clues.append((f"constant factor={gv / ev!r}={path}", f"your {path} is the expected value times {_nice_number(gv / ev)}."))
    return clues


def _size_forms(exercise: Exercise, case: Case) -> dict:
    """{(form, name, dim): value} for the sizes of a case's tensors: n, 1/n, √n, 1/√n."""
    forms = {}
    for name, t in _named_inputs(exercise, case):
        if isinstance(t, int) and not isinstance(t, bool) and t >= 2:
            sizes = [(name, t)]
        elif isinstance(t, torch.Tensor):
            sizes = [(f"{name}.shape[{d}]", t.shape[d]) for d in range(-t.dim(), 0) if t.shape[d] >= 2]
        else:
            continue
        for what, n in sizes:
            for form, value in (("{}", n), ("1/{}", 1 / n), ("√({})", math.sqrt(n)), ("1/√({})", 1 / math.sqrt(n))):
                forms[(form, what)] = value
    return forms


def _merge_constants(exercise: Exercise, cases: list, per_kind: dict) -> None:
    """Join the constant factors (offsets) of one output found in several cases: the same value,
    or a value that follows one size of the inputs (√D), or values that change with the case."""
    groups: dict = {}
    for kind in [k for k in per_kind if k.startswith(("constant factor=", "constant offset=")) or k.endswith(" (scalar)")]:
        scalar = kind.endswith(" (scalar)")
        what, value, path = kind.removesuffix(" (scalar)").split("=", 2)
        for i, msg in per_kind.pop(kind):
            groups.setdefault((what, path), []).append((i, float(value), msg, scalar))
    for (what, path), hits in groups.items():
        values = [v for _, v, _, _ in hits]
        if len(hits) == 1 and hits[0][3]:
            continue  # a single number is always the expected one times something
        if all(abs(v - values[0]) <= 1e-3 * max(abs(values[0]), 1e-12) for v in values):
            i, _, msg, _ = hits[0]
            per_kind[f"{what} {values[0]:.4g} {path}"] = [(i, msg) for i, _, msg, _ in hits]
            continue
        op = "times" if what == "constant factor" else "plus"
        shared = None
        if what == "constant factor":
            common = None
            for i, v, _, _ in hits:
                here = {k for k, x in _size_forms(exercise, cases[i]).items() if abs(x - v) <= 1e-3 * abs(v)}
                common = here if common is None else common & here
            if common:
                shared = sorted(common, key=lambda k: (len(k[0]), k[1]))[0]
        examples = "; ".join(f"{_nice_number(v) if what == 'constant factor' else f'{v:.4g}'} in [{cases[i].label}]"
                             for i, v, _, _ in hits[:2])
        if shared is not None:
            form, what_size = shared
            msg = f"your {path} is the expected one {op} {form.format(what_size)} (e.g. {examples})."
        elif any(scalar for _, _, _, scalar in hits):
            continue  # a wrong number is always the expected one times (plus) something
        else:
            msg = f"your {path} is the expected one {op} a constant that changes from case to case ({examples})."
        per_kind[f"varying {what} {path}" if len(hits) > 1 else f"{what} {path}"] = [(hits[0][0], msg)] + \
            [(i, "") for i, _, _, _ in hits[1:]]


def output_clues(exercise: Exercise, cases: list, outputs: list, expected: list, failed: list,
                 deadline: float | None = None) -> list[str]:
    """Sentences about what the failing outputs are, relative to the expected ones (no mutant)."""
    per_kind: dict = {}
    wrong_paths, right_paths, checked = set(), set(), 0
    for i in failed:
        out, case = outputs[i], cases[i]
        if isinstance(out, _Crashed) or case.judge is not None or expected[i] is None:
            continue
        if deadline is not None and time.process_time() > deadline:
            break
        checked += 1
        atol, rtol = tolerance(exercise, case)
        first = None
        for path, e, g in _leaves(expected[i], out):
            # "right in every case" is said of values (float or bool tensors), not of shapes or counts
            tensor = isinstance(e, torch.Tensor) and (e.is_floating_point() or e.dtype == torch.bool)
            if compare(e, g, atol, rtol, path) is None:
                if tensor:
                    right_paths.add(path)
                continue
            if tensor:
                wrong_paths.add(path)
            if first is None:
                first = (path, e, g)
        if first is None:
            continue
        path, e, g = first
        path = name_paths(exercise, path)
        try:
            if isinstance(e, torch.Tensor) and isinstance(g, torch.Tensor) and e.numel() > 1:
                if e.dtype == torch.bool:
                    found = _mask_clues(e, g, path)
                elif e.is_floating_point() and g.is_floating_point():
                    found = _float_clues(e, g, path, atol, rtol)
                else:
                    found = []
            elif isinstance(e, torch.Tensor) and isinstance(g, torch.Tensor) and e.shape != g.shape:
                found = _reshape_clue(e, g, path)
            else:
                found = [(k + " (scalar)", m) for k, m in _scalar_clue(e, g, path, atol, rtol)]
        except Exception:  # noqa: BLE001 - a diagnosis never breaks a verdict
            found = []
        for kind, msg in found:
            per_kind.setdefault(kind, []).append((i, msg))
    _merge_constants(exercise, cases, per_kind)
    lines = []
    ran = "" if checked == len(failed) else " compared with the reference output"
    # the clues seen in the most cases first, at most two
    for kind, hits in sorted(per_kind.items(), key=lambda kv: -len(kv[1]))[:2]:
        i, msg = hits[0]
        if len(hits) == checked and checked > 1:
            where = "in both failing cases" if checked == 2 else f"in all {checked} failing cases{ran}"
            if kind.startswith("varying "):
                where = ""
        elif len(hits) == 1:
            where = f"in case [{cases[i].label}]"
        else:
            where = f"in {len(hits)} of the {checked} failing cases{ran}, e.g. [{cases[i].label}]"
        text = f"{where}, {msg}" if where else msg
        lines.append(text[0].upper() + text[1:])
    grads = {p for p in wrong_paths if p.startswith("dL/d")}
    if checked and grads and grads == wrong_paths:
        right = sorted(p for p in right_paths if not p.startswith("dL/d"))
        zero = sorted(p for i in failed if isinstance(outputs[i], dict)
                      for p, v in outputs[i].items() if p in grads and isinstance(v, torch.Tensor)
                      and v.numel() and float(v.abs().max()) == 0)
        line = (f"your forward outputs are right in every failing case; only the gradients differ "
                f"({', '.join(sorted(grads))}): something between the inputs and the outputs is invisible to "
                "autograd or changed in place (.detach(), .data, .item(), numpy, torch.tensor(...) of a result, "
                "an in-place op).")
        if zero:
            line += f" {', '.join(zero[:3])} {'is' if len(zero) == 1 else 'are'} zero everywhere."
        lines.insert(0, line[0].upper() + line[1:])
    else:  # several outputs: say which are right (gradients aside)
        wrong = {name_paths(exercise, p) for p in wrong_paths if not p.startswith("dL/d")}
        right = {name_paths(exercise, p) for p in right_paths if not p.startswith("dL/d")} - wrong
        if checked and wrong and right and len(wrong | right) <= 4:
            named = lambda ps: ", ".join(sorted(ps))  # noqa: E731
            lines.append(f"{named(right)} {'is' if len(right) == 1 else 'are'} right in every case; only "
                         f"{named(wrong)} {'is' if len(wrong) == 1 else 'are'} wrong.")
    return lines


def generic_diagnoses(exercise: Exercise, cases: list, outputs: list, expected: list, errors: list,
                      clues: bool = True) -> list[str]:
    """Lines that need no mutant: clues about the outputs, and what the failing cases share."""
    failed = [i for i, e in enumerate(errors) if e]
    lines = []
    deadline = time.process_time() + GENERIC_SECONDS
    if clues:
        try:
            lines += [CLUE_PREFIX + ln for ln in output_clues(exercise, cases, outputs, expected, failed, deadline)]
        except Exception:  # noqa: BLE001 - a diagnosis never breaks a verdict
            pass
    try:
        share = shared_features(exercise, cases, failed)
    except Exception:  # noqa: BLE001
        share = None
    if share:
        lines.append(SHARE_PREFIX + share)
    return lines


def run_check(exercise: Exercise, impl, seed: int | None = None, quiet: bool = False) -> int:
    """Check ``impl`` against the reference on the exercise's cases; see the module docstring."""
    __tracebackhide__ = True
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: one thread is faster, and steady on a busy machine
    try:
        with warnings.catch_warnings():
            # A warning printed to stderr inside a test cell makes nbgrader score the cell zero.
            warnings.simplefilter("ignore")
            return _run_check(exercise, impl, seed, quiet)
    finally:
        torch.set_num_threads(threads)


def _run_check(exercise: Exercise, impl, seed: int | None, quiet: bool) -> int:
    __tracebackhide__ = True
    validate_impl(exercise, impl)
    warm_up()
    seed = exercise.default_seed if seed is None else seed
    with torch.random.fork_rng():
        reseed(seed)
        cases = exercise.make_cases(seed)
        outputs, errors, expected = evaluate(exercise, impl, cases)
        failed = [i for i, e in enumerate(errors) if e]
        if failed:
            first = failed[0]
            crashed = sum(isinstance(outputs[i], _Crashed) for i in failed)
            lines = [
                f"{exercise.name}: {len(failed)} of {len(cases)} cases failed"
                + (f" ({crashed} raised an error)" if crashed else "") + ".",
                f"First failing case: {cases[first].label}",
                "  " + name_paths(exercise, errors[first]),
            ]
            hints = []
            if not any(m.hint in errors[first] for m in exercise.mutants):  # not named yet
                for hint in diagnose(exercise, cases, outputs, expected):
                    if hint not in errors[first]:
                        lines.append(f"Likely mistake: {hint}")
                        hints.append(hint)
            named = bool(hints) or any(m.hint in errors[first] for m in exercise.mutants)
            # Generic diagnoses come after the bank's hints and never replace them: when a known
            # mistake is named, only the (factual) features the failing cases share are added.
            lines += generic_diagnoses(exercise, cases, outputs, expected, errors, clues=not named)
            raise CheckFailure("\n".join(lines))
        for extra in exercise.extra_checks:
            try:
                with learner_code(exercise.forbidden):
                    extra(impl)
            except ForbiddenCall as err:
                raise CheckFailure(_forbidden_message(exercise, err)) from None
    n = len(cases) + len(exercise.extra_checks)
    if not quiet:
        print(f"✅ {exercise.name}: {n} visible cases passed. Grading runs more cases, on new random inputs.")
        for tip in exercise.tips:
            try:
                text = tip(impl)
            except Exception:  # noqa: BLE001 - a tip never fails the check
                text = None
            if text:
                print(f"Tip (not graded): {text}")
    return n


# ----------------------------------------------------------------------------------------------
# Helpers for writing cases
# ----------------------------------------------------------------------------------------------
def rng(seed: int) -> random.Random:
    return random.Random(seed)


def randn(*shape, gen: torch.Generator, scale: float = 1.0, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=dtype) * scale


def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def random_padding_mask(batch: int, s_q: int, s_k: int, gen: torch.Generator, fully_masked_row: bool = False):
    """A bool mask (B, 1 or S_q, S_k), True = may attend; optionally one query row masked out."""
    mask = torch.rand(batch, s_q, s_k, generator=gen) > 0.3
    mask[..., 0] = True  # every row may attend somewhere ...
    if fully_masked_row:  # ... except, on request, one query row of the first batch element
        mask[0, min(1, s_q - 1), :] = False
    return mask


def shape_label(**dims) -> str:
    return ", ".join(f"{k}={v}" for k, v in dims.items())


def make_check(exercise: Exercise) -> Callable:
    """The learner-facing ``check_<name>(impl, seed=None)``."""

    def check(impl=None, seed: int | None = None) -> None:
        __tracebackhide__ = True  # IPython and pytest show the message, not the harness
        run_check(exercise, impl, seed=seed)  # returns None: nbgrader reads a result as partial credit

    check.__name__ = f"check_{exercise.name}"
    check.__qualname__ = check.__name__
    check.__doc__ = (
        f"Check your `{exercise.name}` against the reference on random cases.\n\n"
        "Raises AssertionError with the first failing case, the largest error and, when it "
        "recognises it, the likely mistake; prints one line when every case passes."
    )
    check.exercise = exercise
    return check
