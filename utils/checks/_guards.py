"""The guards the core applies to every exercise from its declaration (``_contract``).

Enforced through the public API, wherever an answer runs: ``Exercise.call`` runs the answer on a
copy of the case's inputs (same values, shape, strides, storage offset) and returns, besides its
output, what it observed — the inputs after the call, the module's parameters, the output of a
second call with the same inputs and random state — as named parts of the result (plain tensors
and containers, which the grader serialises). ``judge_guards`` (called by ``judge_case``) compares
them with the case itself and names the rule broken; ``dtype_message`` holds the output-dtype rule.
Dropout's probes and judge are here too (``dropout_cases``).
"""
from __future__ import annotations

import contextlib
import functools
import math
import threading
import types
from dataclasses import replace

import torch
import torch.nn as nn

from ._compare import compare, describe

OUT, INPUTS, LAYOUT, PARAMS, AGAIN = "__output__", "__inputs__", "__layout__", "__params__", "__again__"
SHARES, RETURNED = "__shares__", "__returned__"
_built = threading.local()


# ----------------------------------------------------------------------------------------------
# Copies that keep the layout, and what a call leaves behind
# ----------------------------------------------------------------------------------------------
def clone_keep_layout(t: torch.Tensor) -> torch.Tensor:
    """A copy of ``t`` with the same values, shape, strides and storage offset (its own storage)."""
    t = t.detach()
    if t.layout != torch.strided or t.is_quantized or type(t) is not torch.Tensor:
        return t.clone()
    out = torch.empty(0, dtype=t.dtype, device=t.device)
    return out.set_(t.untyped_storage().clone(), t.storage_offset(), t.size(), t.stride())


class Watched:
    """A function argument (``score_fn``), called through: each tensor it returns is kept with a copy,
    so that the guards can tell whether the call then changed it in place. What a function passed
    in returns belongs to the caller (it may be cached, or saved by autograd): like an input, it is
    never modified."""

    LIMIT = 64  # results kept per call of the exercise

    def __init__(self, fn):
        functools.update_wrapper(self, fn)
        self.fn, self.returned = fn, []

    def __call__(self, *args, **kwargs):
        out = self.fn(*args, **kwargs)
        for _, t in _tensor_paths(out, ""):
            if len(self.returned) < self.LIMIT and t.layout == torch.strided:
                self.returned.append((t, clone_keep_layout(t), layout(t)))
        return out

    def changed(self) -> str | None:
        """How a returned tensor changed since it was returned, or None."""
        for t, copy, before in self.returned:
            if layout(t) != before:
                return "its shape or strides changed"
            now = t.detach()
            if not _same_values(copy, now):
                diff = ~((copy == now) | (torch.isnan(copy) & torch.isnan(now))) if copy.is_floating_point() else copy != now
                return f"{int(diff.sum())} of its {diff.numel()} values changed"
        return None


def _watchable(obj) -> bool:
    return isinstance(obj, (types.FunctionType, functools.partial))


def clone_inputs(obj, depth: int = 0):
    """Tuples, lists and dicts copied (tensors by ``clone_keep_layout``), plain functions watched
    (``Watched``); anything else as it is."""
    if isinstance(obj, torch.Tensor) and not isinstance(obj, nn.Parameter):
        return clone_keep_layout(obj)
    if depth == 0 and type(obj) in (tuple, list):  # the arguments themselves: functions among them watched
        return type(obj)(Watched(v) if _watchable(v) else clone_inputs(v, depth + 1) for v in obj)
    if depth == 0 and type(obj) is dict:
        return {k: Watched(v) if _watchable(v) else clone_inputs(v, depth + 1) for k, v in obj.items()}
    if depth < 4 and type(obj) in (tuple, list):
        return type(obj)(clone_inputs(v, depth + 1) for v in obj)
    if depth < 4 and type(obj) is dict:
        return {k: clone_inputs(v, depth + 1) for k, v in obj.items()}
    return obj


def flipped(obj, depth: int = 0):
    """Other valid inputs of the same shapes: floating tensors reversed along their last dim."""
    if isinstance(obj, torch.Tensor):
        return obj.flip(-1) if obj.is_floating_point() and obj.dim() >= 1 else obj
    if depth < 4 and type(obj) in (tuple, list):
        return type(obj)(flipped(v, depth + 1) for v in obj)
    if depth < 4 and type(obj) is dict:
        return {k: flipped(v, depth + 1) for k, v in obj.items()}
    return obj


def layout(t: torch.Tensor) -> list:
    return [t.dim(), *t.shape, *t.stride(), t.storage_offset()]


def _tensor_paths(obj, path: str, depth: int = 0):
    if isinstance(obj, torch.Tensor):
        yield path, obj
    elif depth < 4 and isinstance(obj, (tuple, list)):
        for i, v in enumerate(obj):
            yield from _tensor_paths(v, f"{path}[{i}]", depth + 1)
    elif depth < 4 and isinstance(obj, dict):
        for k, v in obj.items():
            yield from _tensor_paths(v, f"{path}[{k!r}]", depth + 1)


def snapshot(obj, depth: int = 0):
    """Plain data (what the grader serialises): tensors detached and copied, containers as lists and
    dicts; anything else that is not plain data becomes its type's name."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone().as_subclass(torch.Tensor) if obj.layout == torch.strided else obj.detach()
    if depth < 5 and isinstance(obj, (tuple, list)):
        return [snapshot(v, depth + 1) for v in obj]
    if depth < 5 and isinstance(obj, dict) and all(isinstance(k, str) for k in obj):
        return {k: snapshot(v, depth + 1) for k, v in obj.items()}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    return f"<{type(obj).__name__}>"


@contextlib.contextmanager
def collecting_modules():
    """Modules that ``build_module`` builds while this is active (their parameters are observed)."""
    previous = getattr(_built, "modules", None)
    _built.modules = []
    try:
        yield _built.modules
    finally:
        _built.modules = previous


def note_module(module: nn.Module) -> None:
    modules = getattr(_built, "modules", None)
    if modules is not None:
        modules.append(module)


def observation(out, args, kwargs, before: list, modules: list, state: dict | None, inputs: bool = True) -> dict:
    """The result of a guarded call: its output and (``inputs``) what the call left behind."""
    result = {OUT: out}
    if not inputs:
        return result
    after = [layout(t) for _, t in _tensor_paths([args, kwargs], "")]
    result.update({INPUTS: snapshot([args, kwargs]), LAYOUT: [b + a for b, a in zip(before, after)],
                   SHARES: _shared_inputs(out, args, kwargs)})
    returned = [[f"[0][{i}]", v.changed()] for i, v in enumerate(args) if isinstance(v, Watched)]
    returned += [[f"[1][{k!r}]", v.changed()] for k, v in kwargs.items() if isinstance(v, Watched)]
    result[RETURNED] = [pair for pair in returned if pair[1]]
    if state and modules:
        params = dict(modules[0].named_parameters(remove_duplicate=False))
        result[PARAMS] = {k: params[k].detach().clone() for k in state if k in params}
    return result


def _storage(t: torch.Tensor):
    try:
        st = t.untyped_storage()
        return (st.data_ptr(), st.nbytes()) if st.nbytes() else None
    except (RuntimeError, NotImplementedError):  # no storage (a meta or a wrapper tensor): shares nothing
        return None


def _shared_inputs(out, args, kwargs) -> list:
    """The paths of the inputs whose memory an output tensor shares (the input itself, or a view)."""
    outs = {_storage(t) for _, t in _tensor_paths(out, "")} - {None}
    return [path for path, t in _tensor_paths([args, kwargs], "") if _storage(t) in outs]


def split(got):
    """(output, observations) of a call's result; observations are {} for a plain result."""
    if isinstance(got, dict) and OUT in got:
        return got[OUT], {k: v for k, v in got.items() if k != OUT}
    return got, {}


# ----------------------------------------------------------------------------------------------
# Judging what the guards observed
# ----------------------------------------------------------------------------------------------
INPLACE = "changed its input {name} in place"
PARAMS_CHANGED = "changed its parameter {name} during the forward pass"
STATE = "called again with the same inputs (after a call on other inputs), it gave another result"
DTYPE = "returned {got} for {want} inputs"
SHARED = "returned a tensor that shares its memory with the input {name}"
RETURNED_CHANGED = "changed in place the tensor that {name} returned"


def _same_values(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        if not isinstance(b, torch.Tensor) or a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.is_floating_point() or a.is_complex():
            return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())
        return bool((a == b).all())
    if isinstance(a, (tuple, list)):
        return isinstance(b, (tuple, list)) and len(a) == len(b) and all(_same_values(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and set(a) == set(b) and all(_same_values(a[k], b[k]) for k in a)
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b or (not isinstance(a, (bool, int, float, str, type(None))) and isinstance(b, str))


def _how_changed(name: str, before, after) -> str:
    if isinstance(before, torch.Tensor) and isinstance(after, torch.Tensor):
        if before.shape != after.shape:
            return (f"its shape went from {tuple(before.shape)} to {tuple(after.shape)} "
                    f"(an in-place reshape such as {name}.unsqueeze_(...) or {name}.resize_(...))")
        if before.dtype != after.dtype:
            return f"its dtype went from {before.dtype} to {after.dtype}"
        diff = ~((before == after) | (torch.isnan(before) & torch.isnan(after))) if before.is_floating_point() \
            else before != after
        return (f"{int(diff.sum())} of its {diff.numel()} values changed ({name}.mul_(...), {name} *= ..., "
                f"{name}[...] = ..., {name}.masked_fill_(...) or an op with inplace=True)")
    if isinstance(before, (tuple, list)) and isinstance(after, (tuple, list)):
        if len(before) != len(after):
            return f"its length went from {len(before)} to {len(after)} (append, pop, extend on the caller's list)"
        return "its items changed or were reordered (list.reverse(), list.sort(), item assignment on the caller's list)"
    if isinstance(before, dict):
        return "its entries changed (assignment, pop or update on the caller's dict)"
    return f"it went from {describe(before)} to {describe(after)}"


def judge_guards(exercise, case, out, obs: dict) -> str | None:
    """What the guards observed on one call, against the case itself: None, or the rule broken."""
    from ._model import _input_names

    name = exercise.name
    if INPUTS in obs:
        before_all = [list(case.args), dict(case.kwargs)]
        after_all = obs[INPUTS]
        if not (isinstance(after_all, (list, tuple)) and len(after_all) == 2):
            return "the inputs after the call could not be read back."
        names = _input_names(exercise, len(case.args))
        pairs = [(names[i] if i < len(names) else f"argument {i}", b, a)
                 for i, (b, a) in enumerate(zip(before_all[0], list(after_all[0]) + [None] * len(before_all[0])))]
        kw_after = after_all[1] if isinstance(after_all[1], dict) else {}
        pairs += [(k, v, kw_after.get(k)) for k, v in before_all[1].items()]
        for arg, before, after in pairs:
            if isinstance(before, nn.Module) or callable(before) and not isinstance(before, torch.Tensor):
                continue
            if not _same_values(snapshot(before), after):
                return (f"{name} {INPLACE.format(name=arg)}: {_how_changed(arg, before, after)}. Inputs are never "
                        f"modified: the caller's {arg} must be left as it was (build a new tensor or list instead).")
        paths = [p for p, _ in _tensor_paths([case.args, case.kwargs], "")]
        for path, pair in zip(paths, obs.get(LAYOUT, [])):
            half = len(pair) // 2
            if list(pair[:half]) != list(pair[half:]):
                arg = _path_name(path, names)
                return (f"{name} {INPLACE.format(name=arg)}: its strides or storage offset changed (an in-place "
                        f"view op such as {arg}.t_(), {arg}.transpose_(...), {arg}.squeeze_() or {arg}.as_strided_(...)). "
                        f"Inputs are never modified.")
    from ._adversarial import _DISABLED

    changed = obs.get(RETURNED)
    if isinstance(changed, list) and changed and isinstance(changed[0], list) and len(changed[0]) == 2:
        arg = _path_name(str(changed[0][0]), _input_names(exercise, len(case.args)))
        return (f"{name} {RETURNED_CHANGED.format(name=arg)}: {changed[0][1]}. What a function passed in returns "
                f"belongs to the caller (it may be cached, or saved by autograd): build a new tensor "
                f"(masked_fill, not masked_fill_ or item assignment).")
    contract = getattr(exercise, "contract", None)
    shared = obs.get(SHARES)
    if getattr(contract, "fresh", False) and isinstance(shared, list) and shared and "fresh" not in _DISABLED:
        arg = _path_name(str(shared[0]), _input_names(exercise, len(case.args)))
        return (f"{name} {SHARED.format(name=arg)} ({arg} itself or a view of "
                f"it): the output is a new tensor (e.g. {arg}.clone() where nothing moves), so that editing it "
                f"later cannot change the caller's {arg}.")
    if PARAMS in obs:
        state = case.init.get("state") or {}
        for key, after in obs[PARAMS].items():
            before = state.get(key)
            if isinstance(before, torch.Tensor) and isinstance(after, torch.Tensor) and \
                    not _same_values(before.to(after.dtype), after):
                return (f"{name} {PARAMS_CHANGED.format(name=key)} (an in-place edit of a weight, e.g. "
                        f"self.{key}.data.mul_(...) or a weight used as an `out=`): the forward pass only reads "
                        "its parameters.")
    return None


def judge_again(exercise, case, out, obs: dict, tol) -> str | None:
    if AGAIN not in obs:
        return None
    again = obs[AGAIN]
    if isinstance(again, dict) and set(again) == {"__raised__"}:
        return (f"{STATE} — a later call raised {again['__raised__']}. The exercise keeps no state between "
                "calls: nothing may be cached or consumed from one call to the next.")
    msg = compare(out, again, *tol, path="the later call's output")
    if msg:
        return (f"{STATE} (with the same random state): {msg} The exercise keeps no state between calls: "
                "no cache, counter or tensor kept on the function, the module or a default argument.")
    return None


def _path_name(path: str, names: list) -> str:
    """'[0][1]' (args, index 1) -> the argument's name; '[1]['mask']' -> 'mask'."""
    import re

    m = re.match(r"\[(\d)\]\[(\d+|'[^']*')\](.*)", path)
    if not m:
        return path
    top, key, rest = m.groups()
    if top == "0":
        i = int(key)
        base = names[i] if i < len(names) else f"argument {i}"
    else:
        base = key.strip("'")
    return base + rest


def dtype_message(exercise, case, expected, got) -> str | None:
    """The output-dtype rule: a floating output has the dtype of the reference's (the floating
    inputs' dtype)."""
    floats = [t for _, t in _tensor_paths([case.args, case.kwargs, (case.init or {}).get("state")], "")
              if t.is_floating_point()]
    if not floats:
        return None
    for path, e, g in _float_leaves(expected, got, "output"):
        if e.dtype != g.dtype:
            return (f"{path} {DTYPE.format(got=str(g.dtype).replace('torch.', ''), want=str(e.dtype).replace('torch.', ''))}: "
                    f"the output keeps the floating inputs' dtype (float64 in, float64 out; a tensor created "
                    f"inside without dtype=..., or a .float() / .double(), changes it).")
    return None


def _float_leaves(e, g, path):
    if isinstance(e, torch.Tensor):
        if isinstance(g, torch.Tensor) and e.is_floating_point() and g.is_floating_point():
            yield path, e, g
    elif isinstance(e, dict) and isinstance(g, dict):
        for k, v in e.items():
            if k in g:
                yield from _float_leaves(v, g[k], k if path == "output" else f"{path}[{k!r}]")
    elif isinstance(e, (tuple, list)) and isinstance(g, (tuple, list)) and len(e) == len(g):
        for i, (a, b) in enumerate(zip(e, g)):
            yield from _float_leaves(a, b, f"{path}[{i}]")


def explain_crash(exercise, err: BaseException) -> str:
    """A sentence added to a crash that breaks a declared rule (an in-place edit of a leaf input)."""
    text = str(err)
    if "leaf Variable that requires grad is being used in an in-place operation" in text:
        return (f" ({exercise.name} {INPLACE.format(name='input')}: inputs are never modified, and the "
                "gradient cases pass inputs that require grad)")
    if "modified by an inplace operation" in text:
        return (" (an in-place operation — dropout or an activation with inplace=True, x *= ..., x.masked_fill_(...) — "
                "edited a tensor that autograd saved for the backward pass, so loss.backward() fails: build a new "
                "tensor instead)")
    if "more than one element of the written-to tensor refers to a single memory location" in text:
        return (f" ({exercise.name} {INPLACE.format(name='input')}: an expanded input shares its memory; "
                "inputs are never modified)")
    return ""


# ----------------------------------------------------------------------------------------------
# Dropout: judged at several p
# ----------------------------------------------------------------------------------------------
DROPOUT_HINTS = {
    "ignored": "{p} > 0 was ignored: nothing was dropped.",
    "keep_probability": ("{p} was used as the probability of keeping (the share dropped is about 1 - {p}): "
                         "{p} is the probability of dropping."),
    "not_rescaled": "the kept values were not rescaled by 1/(1 - {p}).",
    "rescaled_by_1_over_p": "the kept values were rescaled by 1/{p} instead of 1/(1 - {p}).",
    "renormalised": "the kept values were renormalised (divided by their new sums) instead of multiplied by 1/(1 - {p}).",
}


def dropout_hint(key: str, name: str) -> str:
    """The sentence a dropout judge gives for the usual slip ``key`` (mutants' hints use it too)."""
    return DROPOUT_HINTS[key].format(p=name)


def run_training(cls, case):
    """Build the module, switch it to training mode, call ``forward`` (dropout's probes)."""
    from ._model import build_module

    module = build_module(cls, case)
    module.train()
    return module(*case.args, **case.kwargs)


def dropout_judge(exercise, p: float):
    """The judge of a dropout probe at probability ``p``: the share dropped within 6σ of p (plus
    1%), every kept value exactly the undropped one × 1/(1 − p), and the contract's consistency."""
    rule = exercise.contract.dropout

    def hint(key: str) -> str:
        return rule.hints.get(key, DROPOUT_HINTS[key]).format(p=rule.name)

    def judge_at(case, got) -> str | None:
        from .._guard import unguarded
        from ._model import reseed

        where = f"with {rule.name} = {p:g}"
        try:
            w = rule.values(case, got)
        except Exception as err:  # noqa: BLE001 - the output has another structure: say what it is
            return f"{where}, the output could not be read ({type(err).__name__}: {err}); got {describe(got)}."
        off = _set_p(rule, case, 0.0)
        with torch.random.fork_rng():
            reseed(0)
            ref_out = exercise.call(unguarded(exercise.reference), off, observe=False)
        w0 = rule.values(off, ref_out)
        if not isinstance(w, torch.Tensor) or tuple(w.shape) != tuple(w0.shape):
            return f"{where}, the dropped values should have shape {tuple(w0.shape)}, got {describe(w)}."
        if rule.consistent is not None:
            msg = rule.consistent(case, got)
            if msg:
                return f"{where}: {msg}"
        w, w0 = w.detach().double(), w0.detach().double()
        live = w0 != 0
        n = int(live.sum())
        dropped = float((w[live] == 0).double().mean())
        bound = 6 * math.sqrt(p * (1 - p) / max(n, 1)) + 0.01
        if abs(dropped - p) > bound:
            seen = f"{where}, {100 * dropped:.1f}% of the {rule.what} were dropped, expected {100 * p:g}% ± {100 * bound:.1f}%."
            if dropped < 0.01:
                return f"{seen} Likely mistake: {hint('ignored')}"
            if abs(dropped - (1 - p)) <= bound:
                return f"{seen} Likely mistake: {hint('keep_probability')}"
            return seen
        kept = live & (w != 0)
        if bool(kept.any()):
            ratio = w[kept] / w0[kept]
            want = 1 / (1 - p)
            if not bool(torch.allclose(ratio, torch.full_like(ratio, want), rtol=1e-4, atol=0)):
                lo, hi = float(ratio.min()), float(ratio.max())
                seen = (f"{where}, the kept {rule.what} are the undropped ones times {lo:.4g} to {hi:.4g}, expected "
                        f"exactly 1/(1 - {rule.name}) = {want:.4g}.")
                if abs(lo - 1) < 1e-3 and abs(hi - 1) < 1e-3:
                    return f"{seen} Likely mistake: {hint('not_rescaled')}"
                if abs(lo * p - 1) < 1e-3 and abs(hi * p - 1) < 1e-3:
                    return f"{seen} Likely mistake: {hint('rescaled_by_1_over_p')}"
                if hi - lo > 1e-3 * want:
                    return f"{seen} Likely mistake: {hint('renormalised')}"
                return seen
        return None

    return judge_at


def _set_p(rule, case, p: float):
    if rule.arg is not None:
        return replace(case, kwargs={**case.kwargs, rule.arg: p}, judge=None)
    init = dict(case.init)
    init["ctor_kwargs"] = {**init.get("ctor_kwargs", {}), rule.ctor: p}
    return replace(case, init=init, judge=None)


class DropoutProbe:
    """A judged case's judge, bound to its case (a case's judge takes the output only)."""

    def __init__(self, exercise, case, p):
        self.judge_at, self.case = dropout_judge(exercise, p), case

    def __call__(self, got):
        return self.judge_at(self.case, got)


def run_training_grads(impl, case):
    """A dropout probe with gradients: the module built and switched to training mode (or the
    function called), every floating input a leaf that requires grad, then the gradients of a
    fixed random loss of the floating outputs with respect to the inputs (and the parameters).
    Returns {"output": the output, "gradients": [dL/d(each), ...]}: training through a dropout
    must work (an in-place dropout on a tensor autograd saved makes ``backward`` fail)."""
    from ._model import build_module, loss_weights

    def leaf(t):
        return t.detach().clone().requires_grad_() if isinstance(t, torch.Tensor) and t.is_floating_point() else t

    args, kwargs = tuple(leaf(a) for a in case.args), {k: leaf(v) for k, v in case.kwargs.items()}
    targets = [t for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor) and t.requires_grad]
    with torch.enable_grad():
        if isinstance(impl, type):
            module = build_module(impl, case)
            module.train()
            targets += [p for p in module.parameters() if p.requires_grad]
            out = module(*args, **kwargs)
        else:
            out = impl(*args, **kwargs)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        floats = [o for o in outs if isinstance(o, torch.Tensor) and o.is_floating_point() and o.requires_grad]
        if not floats:
            return {"output": out, "gradients": []}
        loss = sum((o * w).sum() for o, w in zip(floats, loss_weights(floats)))
        grads = torch.autograd.grad(loss, targets, allow_unused=True)
    return {"output": out, "gradients": [torch.zeros(0) if g is None else g for g in grads]}


class DropoutGradProbe(DropoutProbe):
    """The judge of the probe with gradients: the gradients are finite, and the output is judged
    like the plain probe's (``case``: the plain probe, without gradients)."""

    def __init__(self, exercise, case, p):
        super().__init__(exercise, case, p)
        self.name, self.p = exercise.contract.dropout.name, p

    def __call__(self, got):
        if not (isinstance(got, dict) and "output" in got and isinstance(got.get("gradients"), list)):
            return f"with {self.name} = {self.p:g} and gradients, the result could not be read; got {describe(got)}."
        if not got["gradients"]:
            return (f"with {self.name} = {self.p:g} in training mode, the output does not depend on the inputs through "
                    "autograd: no gradient reaches them.")
        if any(isinstance(g, torch.Tensor) and not bool(torch.isfinite(g).all()) for g in got["gradients"]):
            return f"with {self.name} = {self.p:g} in training mode, some gradients are NaN or infinite."
        return self.judge_at(self.case, got["output"])


def dropout_cases(exercise, seed: int) -> list:
    """The probes of a declared dropout: p = 0 compared with the reference (training mode for a
    module), then one judged case per p of the declaration."""
    rule = exercise.contract.dropout
    cases = []
    for p in (0.0, *rule.ps):
        case = rule.probe(p, seed)
        case = _set_p(rule, case, p)
        if rule.ctor is not None:
            case = replace(case, run=run_training)
        mode = " in training mode (model.train())" if rule.ctor is not None else ""
        label = f"{rule.name} = {p:g}{mode}: {case.label}"
        if p == 0:
            cases.append(replace(case, label=label))
        else:
            c = replace(case, label=label)
            cases.append(replace(c, judge=DropoutProbe(exercise, c, p)))
    # training through the dropout: backward runs (no in-place dropout on a tensor autograd saved)
    p = rule.ps[-1]
    plain = cases[-1]
    cases.append(replace(plain, label=f"training with gradients (backward through the dropout), {plain.label}",
                         run=run_training_grads, judge=DropoutGradProbe(exercise, plain, p)))
    return cases
