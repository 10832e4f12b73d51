"""The machinery behind every learner check.

An :class:`Exercise` bundles what the course knows about one graded exercise:

* ``reference`` — the function or class from :mod:`utils.reference`;
* ``make_cases(seed)`` — a seeded list of :class:`Case` (random shapes, edge cases);
* ``run(impl, case)`` — how to call an implementation on a case (default: ``impl(*args, **kwargs)``);
* ``forbidden`` — what a from-scratch exercise may not call (tripwires);
* ``mutants`` — the bank of known mistakes, each a working implementation *of the mistake* plus
  the sentence that names it. When a learner's output matches a mutant's on every case, the
  failure message names the mistake. ``tests/test_checks.py`` proves that every check rejects
  every mutant in its bank and names it.

``run_check(exercise, impl)`` raises :class:`CheckFailure` (an ``AssertionError``, so nbgrader
scores it zero) with one clear message, or prints one line such as ``✅ 24/24 cases passed``.
"""
from __future__ import annotations

import contextlib
import math
import random
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
import torch.nn as nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from .._guard import ForbiddenCall, _learner_depth, learner_is_running, reference  # noqa: F401


class CheckFailure(AssertionError):
    """A check's verdict. An AssertionError, so nbgrader scores the cell zero."""


# ----------------------------------------------------------------------------------------------
# Cases, mutants, exercises
# ----------------------------------------------------------------------------------------------
@dataclass
class Case:
    """One input to an exercise.

    ``label`` is what the learner reads ("B=2, H=3, S_q=5, S_k=7, D=4, mask with a fully masked
    row"); ``args``/``kwargs`` go to the function (or to ``forward`` for a module); ``init`` holds
    what a module exercise needs to build the module (``ctor`` args and a ``state`` dict).
    """

    label: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    init: dict = field(default_factory=dict)
    tol: tuple | None = None  # (atol, rtol) for this case only, e.g. for statistical estimates


@dataclass
class Mutant:
    """A known mistake: ``impl`` makes it on purpose; ``hint`` names it for the learner."""

    name: str
    hint: str
    impl: Any


@dataclass
class Forbidden:
    """Functions a from-scratch exercise may not call; ``label`` is how the message names them."""

    label: str
    funcs: tuple = ()


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
    extra_checks: tuple = ()  # callables (impl) -> None that raise CheckFailure
    default_seed: int = 0

    def call(self, impl, case: Case):
        runner = self.run or (run_module if self.kind == "class" else run_function)
        return runner(impl, case)


def run_function(fn, case: Case):
    return fn(*case.args, **case.kwargs)


def build_module(cls, case: Case) -> nn.Module:
    """Build ``cls(*ctor)`` under the case's seed, load the case's parameters, switch to eval mode."""
    ctor = case.init.get("ctor", ())
    ctor_kwargs = case.init.get("ctor_kwargs", {})
    with torch.random.fork_rng():
        torch.manual_seed(case.init.get("seed", 0))
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
    """Copy the reference's parameters into the learner's module, with a readable error.

    ``parameters_only``: compare parameter names only, so the learner may keep buffers of their own
    (e.g. a RoPE table) that the reference does not have.
    """
    mine = dict(module.named_parameters()) if parameters_only else module.state_dict()
    missing = sorted(set(state) - set(mine))
    unexpected = sorted(set(mine) - set(state))
    if missing or unexpected:
        raise CheckFailure(
            f"{name} has parameters {sorted(mine)}, but the exercise expects {sorted(state)}"
            + (f" (missing {missing})" if missing else "")
            + (f" (unexpected {unexpected})" if unexpected else "")
            + ". Use the attribute names given in the exercise."
        )
    for key, value in state.items():
        if tuple(mine[key].shape) != tuple(value.shape):
            raise CheckFailure(
                f"{name}.{key} has shape {tuple(mine[key].shape)}, expected {tuple(value.shape)}."
            )
    module.load_state_dict(state, strict=not parameters_only)


# ----------------------------------------------------------------------------------------------
# Tripwires: a from-scratch exercise must not call what it re-implements
# ----------------------------------------------------------------------------------------------
class _Tripwire(TorchFunctionMode):
    def __init__(self, forbidden: Sequence[Forbidden]):
        super().__init__()
        self.table = {}
        for group in forbidden:
            for f in group.funcs:
                self.table[f] = group.label

    def __torch_function__(self, func, types, args=(), kwargs=None):
        label = self.table.get(func)
        if label is not None:
            raise ForbiddenCall(label, getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def learner_code(forbidden: Sequence[Forbidden] = ()):
    """Run learner code: forbidden torch functions and ``utils.reference`` raise ForbiddenCall."""
    _learner_depth.n = getattr(_learner_depth, "n", 0) + 1
    patches = []
    try:
        for group in forbidden:
            for f in group.funcs:
                # Python-level entry points that are not torch functions (nn.MultiheadAttention,
                # torch.autograd.backward) are patched for the duration of the call.
                owner = getattr(f, "_tripwire_owner", None)
                if owner is not None:
                    attr = f._tripwire_attr
                    patches.append((owner, attr, getattr(owner, attr)))
                    setattr(owner, attr, _raiser(group.label, attr))
        with _Tripwire(forbidden):
            yield
    finally:
        for owner, attr, old in reversed(patches):
            setattr(owner, attr, old)
        _learner_depth.n -= 1


def _raiser(label, name):
    def raise_forbidden(*args, **kwargs):
        raise ForbiddenCall(label, name)

    return raise_forbidden


def patched_entry(owner, attr):
    """A marker for a forbidden entry point that must be patched rather than intercepted."""

    class _Entry:
        _tripwire_owner = owner
        _tripwire_attr = attr
        __name__ = attr

        def __hash__(self):
            return hash((id(owner), attr))

        def __eq__(self, other):
            return self is other

    return _Entry()


# ----------------------------------------------------------------------------------------------
# Memory tripwire: the largest tensor an implementation creates
# ----------------------------------------------------------------------------------------------
class _LargestTensor(TorchDispatchMode):
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
                f"{e[tuple(where)].item():.6g}, got {g[tuple(where)].item():.6g} "
                f"(tolerance {atol:g} + {rtol:g}·|expected|)."
            )
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


def _call_learner(exercise: Exercise, impl, case: Case):
    with learner_code(exercise.forbidden):
        return exercise.call(impl, case)


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


def tolerance(exercise: Exercise, case: Case) -> tuple:
    return case.tol if case.tol is not None else (exercise.atol, exercise.rtol)


def evaluate(exercise: Exercise, impl, cases: list) -> tuple[list, list, list]:
    """Run ``impl`` on every case: (outputs, per-case error message or None, expected)."""
    outputs, errors, expected = [], [], []
    for i, case in enumerate(cases):
        torch.manual_seed(case_seed(i))  # the same random state for reference, learner and mutants
        exp = exercise.call(exercise.reference, case)
        expected.append(exp)
        try:
            torch.manual_seed(case_seed(i))
            got = _call_learner(exercise, impl, case)
        except ForbiddenCall as err:
            raise CheckFailure(_forbidden_message(exercise, err)) from None
        except CheckFailure:
            raise
        except NotImplementedError:
            raise CheckFailure(
                f"{exercise.name} is not implemented yet: replace `raise NotImplementedError()` with your code."
            ) from None
        except Exception as err:  # the learner's bug: say which case, keep the traceback chained
            raise CheckFailure(
                f"{exercise.name} raised {type(err).__name__} on case [{case.label}]: {err}"
            ) from err
        outputs.append(got)
        errors.append(compare(exp, got, *tolerance(exercise, case)))
    return outputs, errors, expected


def diagnose(exercise: Exercise, cases: list, outputs: list) -> list[Mutant]:
    """The mutants whose output matches the learner's on every case."""
    found = []
    for mutant in exercise.mutants:
        try:
            with torch.random.fork_rng():
                same = True
                for i, (c, out) in enumerate(zip(cases, outputs)):
                    torch.manual_seed(case_seed(i))
                    if compare(exercise.call(mutant.impl, c), out, *tolerance(exercise, c)) is not None:
                        same = False
                        break
        except Exception:
            same = False
        if same:
            found.append(mutant)
    return found


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
    seed = exercise.default_seed if seed is None else seed
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        cases = exercise.make_cases(seed)
        outputs, errors, _ = evaluate(exercise, impl, cases)
        failed = [i for i, e in enumerate(errors) if e]
        if failed:
            first = failed[0]
            lines = [
                f"{exercise.name}: {len(failed)} of {len(cases)} cases failed.",
                f"First failing case: {cases[first].label}",
                "  " + name_paths(exercise, errors[first]),
            ]
            likely = diagnose(exercise, cases, outputs)
            for m in likely:
                lines.append(f"Likely mistake: {m.hint}")
            raise CheckFailure("\n".join(lines))
        for extra in exercise.extra_checks:
            try:
                with learner_code(exercise.forbidden):
                    extra(impl)
            except ForbiddenCall as err:
                raise CheckFailure(_forbidden_message(exercise, err)) from None
    n = len(cases) + len(exercise.extra_checks)
    if not quiet:
        print(f"✅ {exercise.name}: {n}/{n} cases passed")
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
