"""The case model: what the course knows about one graded exercise, and how to call an answer.

An :class:`Exercise` bundles:

* ``reference`` — the function or class from :mod:`utils.reference`;
* ``contract`` — its declaration (:class:`utils.checks._contract.Contract`): the text of the stub's
  docstring and of the prompt's rules block, and the typed rules the core enforces (forbidden
  calls, budgets at the sizes they are measured, dropout, gradients, output dtype, inputs never
  modified, no state between calls);
* ``make_cases(seed)`` — a seeded list of :class:`Case`, ordered from typical to edge, so that the
  first failure a learner sees is the most telling; the core appends the cases the declaration
  implies (adversarial inputs by the kinds of the arguments, dropout probes, budget sizes). A case
  may carry ``grad=True`` (also compare the gradients of a fixed random loss, in float64), a
  ``judge`` (a statistical or structural verdict instead of a comparison with the reference) and a
  ``budget`` (memory, time and work);
* ``run(impl, case)`` — how to call an implementation on a case (default: ``impl(*args, **kwargs)``,
  or build the module and call ``forward``);
* ``mutants`` — the bank of known mistakes, each a working implementation *of the mistake* plus
  the sentence that names it; ``rescale`` adds a generic "wrong scale factor" diagnosis;
* ``variants`` — correct answers written differently (einsum, loops, float64 inside, another
  parameter-creation order, ``assert`` instead of ``ValueError``): they must pass;
* ``tips`` — advice that never fails (input validation is not graded).

``Exercise.call`` runs an answer on a case inside a guard (``learner_code``: tripwires, budget)
and returns, besides the outputs, what the guards observed (the inputs after the call, the
second call's output: ``utils.checks._guards``), so that ``judge_case`` enforces every guard
wherever the answer ran, the learner's kernel or the grader's sandbox.
"""
from __future__ import annotations

import contextlib
import inspect
import random
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import torch
import torch.nn as nn

from ._compare import describe
from ._guards import (AGAIN, _tensor_paths, clone_inputs, collecting_modules, flipped, layout, note_module,
                      observation)
from ._tripwires import Budget, Forbidden  # noqa: F401


class CheckFailure(AssertionError):
    """A check's verdict. An AssertionError, so nbgrader scores the cell zero.

    IPython shows only the message (``_render_traceback_``), never the harness's source lines.
    """

    def _render_traceback_(self):
        from .._i18n import tr  # the learner's language, at display only: str(err) stays English

        return [f"\x1b[0;31m{type(self).__name__}\x1b[0m: {tr(str(self))}"]


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
    ``observe``: what the guards observe on this case (``"inputs"``: the inputs and parameters
    after the call; ``"again"``: a second call's output); set by the core from the declaration.
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
    observe: tuple = ()


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
    # The declaration (``_contract.Contract``): the stub's docstring and the prompt's rules block are
    # rendered from it, and the core enforces its rules (tests/test_contracts.py).
    contract: Any = None
    # Optional: {phrase: value} describing a case, added to what ``case_features`` derives from its
    # arguments, for the "what the failing cases share" diagnosis (e.g. {"a window wider than S": True}).
    features: Callable[[Case], dict] | None = None
    # Optional: (impl, cases, outputs, expected, errors) -> sentence or None, said after a failure
    # when no mutant is named (TinyGPT: the first sub-module whose output differs).
    locate: Callable | None = None

    def __post_init__(self):
        from ._adversarial import fills_scores, planned_kinds
        from ._contract import Contract

        if isinstance(self.contract, str):  # a docstring alone: the course-wide defaults apply
            self.contract = Contract(self.contract, forbid=tuple(self.forbidden))
        if isinstance(self.contract, Contract):
            if self.contract.forbid and not self.forbidden:
                self.forbidden = tuple(self.contract.forbid)
            self.contract.adversarial = planned_kinds(self)
            if self.contract.fills is None:
                self.contract.fills = fills_scores(self)
            self.own_cases = self.make_cases
            self.make_cases = self._declared_cases

    def _declared_cases(self, seed: int) -> list:
        """The chapter's cases, then the cases the declaration implies, each told what to observe."""
        from ._adversarial import declared_cases

        return declared_cases(self, self.own_cases(seed), seed)

    def _run(self, impl, case: Case, guard: Callable):
        runner = case.run or self.run or (run_module if self.kind == "class" else run_function)
        with guard():
            return runner(impl, case)

    def call(self, impl, case: Case, guard: Callable = contextlib.nullcontext, observe: bool = True):
        """Run ``impl`` on a copy of ``case``'s inputs; learner code runs inside ``guard()`` (tripwires,
        budget).

        For a ``grad`` case, returns a dict of the forward outputs and the gradients
        (``{"out": ..., "weights": ..., "dL/dq": ...}``); the gradients are computed outside
        ``guard`` (the harness calls autograd, the learner's code does not). Otherwise, when the case
        observes something (and ``observe``), returns ``{"__output__": output, "__inputs__": ...,
        "__layout__": ..., "__params__": ..., "__again__": ...}`` (``_guards``): what ``judge_case``
        holds against the declaration; else the output itself.
        """
        if case.grad:
            return forward_and_grads(self, impl, case, guard)
        work = replace(case, args=clone_inputs(case.args), kwargs=clone_inputs(case.kwargs))
        if not observe or not case.observe:
            return self._run(impl, work, guard)
        before = [layout(t) for _, t in _tensor_paths([work.args, work.kwargs], "")]
        rng_state = torch.get_rng_state()
        same_module = "again" in case.observe and self.kind == "class" and case.run is None and self.run is None
        module = None
        with collecting_modules() as modules:
            if same_module:  # the second call goes to the same module: state kept between calls shows
                with guard():
                    module = build_module(impl, work)
                    out = module(*work.args, **work.kwargs)
            else:
                out = self._run(impl, work, guard)
        result = observation(out, work.args, work.kwargs, before, modules, case.init.get("state"),
                             inputs="inputs" in case.observe)
        if "again" in case.observe:  # another call in between (floating inputs flipped), then the same again
            from .._guard import ForbiddenCall
            from ._tripwires import BudgetExceeded

            stop = (ForbiddenCall, BudgetExceeded, NotImplementedError, CheckFailure)
            other = replace(case, args=flipped(clone_inputs(case.args)), kwargs=flipped(clone_inputs(case.kwargs)))
            again = replace(case, args=clone_inputs(case.args), kwargs=clone_inputs(case.kwargs))
            try:
                for step in (other, again):
                    torch.set_rng_state(rng_state)
                    if module is not None:
                        with guard():
                            out2 = module(*step.args, **step.kwargs)
                    else:
                        out2 = self._run(impl, step, guard)
                result[AGAIN] = out2
            except Exception as err:  # noqa: BLE001 - judged: the calls after the first must behave like it
                if isinstance(err, stop):
                    raise
                result[AGAIN] = {"__raised__": f"{type(err).__name__}: {str(err)[:200]}"}
        return result

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
    note_module(module)
    return module


def run_module(cls, case: Case):
    """Build the module (``build_module``) and call ``forward`` on the case's inputs."""
    return build_module(cls, case)(*case.args, **case.kwargs)


def parameter_layout(cls, case):
    """Build the learner's module (no weights loaded) and list its parameters: [[names, shape], ...].

    One entry per distinct parameter, with every name it is reachable under (a layer also held in
    an nn.ModuleList is one parameter with two names). Buffers are listed only where the contract
    allows none (``case.init["buffers"]``).
    """
    init = {k: v for k, v in case.init.items() if k != "state"}
    module = build_module(cls, replace(case, init=init))
    groups: dict = {}
    tensors = list(module.named_parameters(remove_duplicate=False))
    if case.init.get("buffers"):
        tensors += list(module.named_buffers(remove_duplicate=False))
    for name, p in tensors:
        groups.setdefault(id(p), [[], list(p.shape)])[0].append(name)
    return sorted([sorted(names), shape] for names, shape in groups.values())


def layout_judge(what: str, expected: dict, hints: dict):
    """Judge the parameter list against ``expected`` ({name: shape}); ``hints`` name the usual slips."""

    def judge(got) -> str | None:
        try:
            mine = {}
            for names, shape in got:  # a parameter reachable under several names counts once, by the given name
                names = [names] if isinstance(names, str) else [str(n) for n in names]
                mine[next((n for n in names if n in expected), names[0])] = [int(n) for n in shape]
        except (TypeError, ValueError, StopIteration, IndexError):
            return "the module's parameters could not be listed."
        where = f"{what} has parameters {sorted(mine)}"
        has_bias = any(n.endswith(".bias") for n in mine)
        wants_bias = any(n.endswith(".bias") for n in expected)
        if has_bias and not wants_bias:
            return f"{where}. Likely mistake: {hints['bias']}"
        if wants_bias and not has_bias and set(n.replace('.bias', '.weight') for n in expected) <= set(mine):
            return f"{where}, but the exercise expects {sorted(expected)}. Likely mistake: {hints['no_bias']}"
        if set(mine) != set(expected):
            return f"{where}, but the exercise expects {sorted(expected)}. Likely mistake: {hints['names']}"
        for name, shape in expected.items():
            if mine[name] != list(shape):
                return f"{name} has shape {tuple(mine[name])}, expected {tuple(shape)}. Likely mistake: {hints['shapes']}"
        return None

    return judge


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

