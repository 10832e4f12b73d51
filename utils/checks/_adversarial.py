"""The cases a declaration implies, added to every exercise's own: adversarial inputs by the kinds
of its arguments, dropout's probes, budgets at every declared size; and what each case observes.

Kinds of arguments: ``scores`` (exp is taken of them), ``query``, ``key``, ``value``, ``mask`` (bool,
True = may attend), ``tokens`` (a module's input, projected into queries and keys). The names q,
query, k, key(s), v, value(s), mask, scores are inferred; a contract gives the others
(``Contract.kinds``). Each adversarial kind is derived from the first of the exercise's own cases
that has what it needs, with no reference (the grader rebuilds the cases where there is none):

* ``large`` — scores past exp's range: ≈ 10³ in float32, past 709 in float64;
* ``below_fill`` — scores far below any finite fill value (≈ −10¹⁰): a masked score filled with
  −1e9, or a running max started at −1e9, would then lead;
* ``masked_max`` — a masked key holding every row's largest score, by 2·10⁴ (more than any float's
  range);
* ``zero_vectors`` — a zero query and a zero key among the real ones (no mask);
* ``ties`` — two keys (or scores) equal;
* ``fully_masked`` — a mask with a row that is False everywhere;
* ``single`` — S_q = S_k = 1; ``cross`` — S_q < S_k and S_q > S_k (for each setting of a causal flag);
* ``non_contiguous`` — every input transposed in memory, and one expanded (stride 0);
* ``float64`` — float64 inputs (the output-dtype rule);
* ``grad_large`` — a float64 gradient case at large |x|.
"""
from __future__ import annotations

import inspect

import math
from dataclasses import replace

import torch

from ._model import _input_names
from ._tripwires import Budget
from ._contract import PROBE_SECONDS

KIND_NAMES = {"q": "query", "query": "query", "queries": "query", "k": "key", "key": "key", "keys": "key",
              "v": "value", "value": "value", "values": "value", "mask": "mask", "scores": "scores"}
F64 = torch.float64
AGAIN_CASES = 2  # cases per exercise on which a second call is compared with the first


def arg_kinds(exercise) -> dict:
    """{argument name: kind}, from the contract's ``kinds`` and the inferred names."""
    names = _input_names(exercise, 0) if exercise.run is None else []  # a runner of its own: declared kinds only
    kinds = {n: KIND_NAMES[n] for n in names if n in KIND_NAMES}
    kinds.update(exercise.contract.kinds)
    return kinds


def planned_kinds(exercise) -> tuple:
    """The adversarial kinds this exercise gets, from its declaration alone (no case is built)."""
    c = exercise.contract
    kinds = set(arg_kinds(exercise).values())
    dims = c.dims()
    fn = exercise.kind == "function"
    scoring = "scores" in kinds or {"query", "key"} <= kinds or "tokens" in kinds
    out = []
    if scoring and (fn or exercise.rescale is not None or "tokens" in kinds):
        out.append("large")
    if "large" in out and "large" not in c.off and (fn or exercise.rescale is not None):
        out.append("below_fill")
    if fn and "mask" in kinds and ("scores" in kinds or {"query", "key"} <= kinds):
        out.append("masked_max")
    if (fn and {"query", "key"} <= kinds) or "tokens" in kinds:
        out.append("zero_vectors")
    if fn and ("key" in kinds or "scores" in kinds):
        out.append("ties")
    if "mask" in kinds:
        out.append("fully_masked")
    if fn and "query" in kinds:
        out.append("single")
        names = [n for n, k in arg_kinds(exercise).items() if k in ("query", "key")]
        if any("S_q" in dims.get(n, ()) for n in names) and any("S_k" in dims.get(n, ()) for n in names):
            out.append("cross")
    if kinds or exercise.kind == "class":
        out.append("non_contiguous")
    if fn and c.same_dtype and kinds:
        out.append("float64")
    if c.grad is not None and ("large" in out or kinds & {"tensor", "tokens"}):
        out.append("grad_large")
    return tuple(k for k in out if k not in c.off)


def fills_scores(exercise) -> bool:
    """Whether the exercise may fill scores (a mask argument, a causal flag or a window): the
    rules' advice on fill values applies. A contract says so itself where a running max is kept."""
    if "mask" in arg_kinds(exercise).values():
        return True
    try:
        target = exercise.reference.forward if exercise.kind == "class" else exercise.reference
        params = inspect.signature(inspect.unwrap(target)).parameters
    except (TypeError, ValueError, AttributeError):
        return False
    return bool({"causal", "window", "is_causal"} & set(params))


# ----------------------------------------------------------------------------------------------
# Reading and writing a case's arguments by name
# ----------------------------------------------------------------------------------------------
def named_args(exercise, case) -> dict:
    names = _input_names(exercise, len(case.args))
    out = {names[i] if i < len(names) else f"arg{i}": a for i, a in enumerate(case.args)}
    out.update(case.kwargs)
    return out


def with_args(exercise, case, **updates):
    names = _input_names(exercise, len(case.args))
    args, kwargs = list(case.args), dict(case.kwargs)
    for name, value in updates.items():
        if name in names[:len(args)]:
            args[names.index(name)] = value
        elif value is None:
            kwargs.pop(name, None)
        else:
            kwargs[name] = value
    return replace(case, args=tuple(args), kwargs=kwargs)


def describe_args(exercise, case) -> str:
    parts = []
    for name, v in named_args(exercise, case).items():
        if isinstance(v, torch.Tensor):
            dtype = "" if v.dtype in (torch.float32, torch.bool, torch.long) else f" {str(v.dtype)[6:]}"
            parts.append(f"{name} {tuple(v.shape)}{dtype}")
        elif isinstance(v, (int, float, bool)):
            parts.append(f"{name}={v}")
    ctor = case.init.get("ctor") if case.init else None
    if ctor is not None:
        kw = "".join(f", {k}={v}" for k, v in case.init.get("ctor_kwargs", {}).items())
        parts.append(f"{exercise.reference.__name__}({', '.join(map(repr, ctor))}{kw})")
    return ", ".join(parts)


def _of_kind(exercise, case, kind: str):
    kinds = arg_kinds(exercise)
    for name, v in named_args(exercise, case).items():
        if kinds.get(name) == kind and isinstance(v, torch.Tensor):
            return name, v
    return None, None


def _plain_base(case) -> bool:
    return case.judge is None and not case.grad and case.budget is None


def _base(exercise, cases, need=(), pred=None):
    for case in cases:
        if not _plain_base(case):
            continue
        if all(_of_kind(exercise, case, k)[0] is not None for k in need) and (pred is None or pred(case)):
            return case
    return None


def _flags(exercise, case) -> tuple:
    """The case's boolean arguments (causal=True, ...): another setting of them runs other code."""
    return tuple(sorted((n, v) for n, v in named_args(exercise, case).items() if isinstance(v, bool)))


def _bases(exercise, cases, need=(), pred=None, limit: int = 3) -> list:
    """The first plain case with what a kind needs for each setting of the boolean arguments (a
    causal flag), at most ``limit``."""
    out, seen = [], set()
    for case in cases:
        if len(out) >= limit:
            break
        if not _plain_base(case) or not all(_of_kind(exercise, case, k)[0] is not None for k in need):
            continue
        if pred is not None and not pred(case):
            continue
        flags = _flags(exercise, case)
        if flags not in seen:
            seen.add(flags)
            out.append(case)
    return out


def _scores(exercise, case):
    """The scores a case produces, where the core can compute them (no reference)."""
    _, s = _of_kind(exercise, case, "scores")
    if s is not None and s.is_floating_point():
        return s
    _, q = _of_kind(exercise, case, "query")
    _, k = _of_kind(exercise, case, "key")
    if exercise.kind == "function" and q is not None and k is not None and q.dim() >= 2 and k.dim() >= 2 and q.shape[-1] == k.shape[-1]:
        return q.double() @ k.double().transpose(-2, -1) / math.sqrt(q.shape[-1])
    if exercise.contract.scores is not None:
        return exercise.contract.scores(case)
    return None


def _scale(exercise, case, c: float):
    """The case with its scores multiplied by (about) c."""
    if exercise.rescale is not None:
        return exercise.rescale(case, c)
    for kind in ("scores", "query", "tokens"):
        name, t = _of_kind(exercise, case, kind)
        if name is not None and t.is_floating_point():
            return with_args(exercise, case, **{name: t * c})
    return None


def _to(obj, dtype):
    if isinstance(obj, torch.Tensor) and obj.is_floating_point():
        return obj.to(dtype)
    if isinstance(obj, (tuple, list)):
        return type(obj)(_to(v, dtype) for v in obj)
    if isinstance(obj, dict):
        return {k: _to(v, dtype) for k, v in obj.items()}
    return obj


def _full_mask(mask: torch.Tensor, shape) -> torch.Tensor | None:
    try:
        return mask.expand(torch.broadcast_shapes(mask.shape, shape)).clone()
    except RuntimeError:
        return None


# ----------------------------------------------------------------------------------------------
# The kinds
# ----------------------------------------------------------------------------------------------
def _large(exercise, cases):
    base = _base(exercise, cases, pred=lambda c: c.init.get("state") is not None or exercise.kind == "function")
    if base is None:
        return []
    s = _scores(exercise, base)
    top = float(s.abs().max()) if s is not None and s.numel() else 3.0
    out = []
    for dtype, target in ((torch.float32, 1e3), (F64, 5e3)):
        case = _to_dtype(exercise, base, dtype)
        scaled = None if case is None else _scale(exercise, case, target / max(top, 1e-3))
        if scaled is not None:  # float32 rounds scores of 10³ by ~10⁻⁴: compared a little more loosely
            scaled = replace(scaled, tol=(1e-4, 1e-3)) if dtype == torch.float32 else scaled
            out.append((f"large magnitudes, |scores| ≈ {target:g} (past exp's range in {str(dtype)[6:]})", scaled))
    return out


def _to_dtype(exercise, case, dtype):
    if dtype == torch.float32:
        return case
    if exercise.kind == "class":
        return _module_to(case, dtype) if case.run is None and exercise.run is None else None
    return replace(case, args=_to(case.args, dtype), kwargs=_to(case.kwargs, dtype))


def _module_to(case, dtype):
    """A module case in float64: inputs and loaded state converted; the runner converts the module."""
    init = dict(case.init)
    if init.get("state") is not None:
        init["state"] = _to(init["state"], dtype)
    return replace(case, args=_to(case.args, dtype), kwargs=_to(case.kwargs, dtype), init=init, grad=False,
                   run=case.run or _run_module_float64)


def _run_module_float64(cls, case):
    from ._model import build_module

    module = build_module(cls, replace(case, init={k: v for k, v in case.init.items() if k != "state"}))
    module._apply(lambda t: t.to(F64) if t.is_floating_point() else t)
    from ._model import load_state_strict

    load_state_strict(module, case.init["state"], cls.__name__)
    return module(*case.args, **case.kwargs)


BELOW = 1e10  # scores this far below zero: a finite fill value (-1e9, -1e4) would then be the largest score


def _hide_a_key(exercise, case):
    """The case with a mask that hides the last key from every query, where the exercise takes a
    mask and the case has none: a fill value only shows when some key is masked. A (S_q, S_k) mask
    broadcasts to every mask shape the contracts allow ("broadcastable to (..., S_q, S_k)")."""
    masks = [n for n, k in arg_kinds(exercise).items() if k == "mask"]
    if len(masks) != 1 or named_args(exercise, case).get(masks[0]) is not None:
        return case  # no mask, or several (which scores each one masks is not the core's to guess)
    mask_name = masks[0]
    s = _scores(exercise, case)
    if s is None or s.dim() < 2 or s.shape[-1] < 2:
        return case
    mask = torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool)
    mask[:, -1] = False
    return with_args(exercise, case, **{mask_name: mask})


def _below_fill(exercise, cases):
    """Scores far below any finite fill value: a masked score set to -1e9 (or a running max started
    at -1e9) would then lead. Scores given: every one shifted by -10¹⁰ (float64). Queries and keys
    given: every query gets +a·u and every key -a·u along one direction u, so that every score is
    about -10¹⁰ and their differences are kept (float64). A module with a rescale: its scores
    multiplied up to |scores| ≈ 10¹⁰ (the rows whose visible scores are all negative then lie far
    below -1e9)."""
    base = _base(exercise, cases, need=("scores",))
    if base is not None and _of_kind(exercise, base, "scores")[1].is_floating_point():
        case = _to_dtype(exercise, base, F64)
        name, s = _of_kind(exercise, case, "scores")
        return [("every score shifted by −10¹⁰ (float64), far below any finite fill value such as −1e9",
                 _hide_a_key(exercise, with_args(exercise, case, **{name: s - BELOW})))]
    bases = _bases(exercise, cases, need=("query", "key"),
                   pred=lambda c: _of_kind(exercise, c, "query")[1].shape[-1] == _of_kind(exercise, c, "key")[1].shape[-1])
    if bases and exercise.kind == "function":
        out = []
        for base in bases:  # one per setting of the boolean arguments (a causal mask is filled too)
            case = _to_dtype(exercise, base, F64)
            q_name, q = _of_kind(exercise, case, "query")
            k_name, k = _of_kind(exercise, case, "key")
            d = q.shape[-1]
            g = torch.Generator().manual_seed(11)
            u = torch.randn(d, generator=g, dtype=F64)
            u = u / u.norm()
            a = math.sqrt(BELOW * math.sqrt(d))  # q·k / sqrt(d) gets -a²/sqrt(d) = -10¹⁰
            q = q - (q @ u)[..., None] * u + a * u
            k = k - (k @ u)[..., None] * u - a * u
            # q·k sums terms of 10¹⁰: their rounding (~10⁻⁶) differs with the order of the sum, so the
            # weights agree to ~10⁻⁶ only (a fill mistake is off by O(1))
            out.append(("every score ≈ −10¹⁰ (float64; each query +a·u, each key −a·u), far below any finite fill "
                        "value such as −1e9", replace(_hide_a_key(exercise, with_args(exercise, case, **{q_name: q, k_name: k})),
                                                     tol=(1e-4, 1e-3))))
        return out
    if exercise.rescale is None:
        return []
    base = _base(exercise, cases, pred=lambda c: c.init.get("state") is not None or exercise.kind == "function")
    if base is None:
        return []
    s = _scores(exercise, base)
    top = float(s.abs().max()) if s is not None and s.numel() else 3.0
    scaled = _isolate_lowest(exercise, exercise.rescale(base, BELOW / max(top, 1e-3)))
    return [("|scores| ≈ 10¹⁰: rows whose visible scores are all negative lie far below any finite fill value "
             "such as −1e9", replace(scaled, tol=(1e-4, 1e-3)))]


def _isolate_lowest(exercise, case):
    """A module's case whose scores reach ±10¹⁰, with a mask that leaves, in every row whose lowest
    score is below −2·10⁹, only that key visible: the row's one visible score then lies far below any
    finite fill value, which a masked key filled with −1e9 would beat. Other rows keep their mask.
    Modules with one mask argument and scores the core can compute; otherwise the last key hidden."""
    masks = [n for n, k in arg_kinds(exercise).items() if k == "mask"]
    s = _scores(exercise, case)
    if len(masks) != 1 or s is None or s.dim() < 2 or s.shape[-1] < 2:
        return _hide_a_key(exercise, case)
    given = named_args(exercise, case).get(masks[0])
    full = torch.ones(s.shape, dtype=torch.bool) if given is None else _full_mask(given, s.shape)
    if full is None:
        return case
    s = s.double().masked_fill(~full, math.inf)
    low = s.argmin(-1, keepdim=True)
    only = torch.zeros(s.shape, dtype=torch.bool).scatter(-1, low, True)
    rows = s.amin(-1, keepdim=True) < -2e9
    if not bool(rows.any()):
        return _hide_a_key(exercise, case)
    return with_args(exercise, case, **{masks[0]: torch.where(rows, only, full)})


def _masked_max(exercise, cases):
    base = _base(exercise, cases, need=("scores",)) or _base(exercise, cases, need=("query", "key"))
    if base is None:
        return []
    mask_name = next(n for n, k in arg_kinds(exercise).items() if k == "mask")
    s_name, s = _of_kind(exercise, base, "scores")
    if s is not None:
        best = s.argmax(-1, keepdim=True)
        mask = torch.ones(s.shape, dtype=torch.bool).scatter(-1, best, False)
        s = s.scatter(-1, best, s.amax(-1, keepdim=True) + 2e4)
        return [("the masked key holds every row's largest score, by 2·10⁴",
                 with_args(exercise, base, **{s_name: s, mask_name: mask}))]
    q_name, q = _of_kind(exercise, base, "query")
    k_name, k = _of_kind(exercise, base, "key")
    if q is None or k is None or k.shape[-2] < 2:
        return []
    g = torch.Generator().manual_seed(7)
    u = torch.randn(q.shape[-1], generator=g, dtype=q.dtype)
    u = u / u.norm()
    q = q - (q @ u)[..., None] * u + 2.0 * u  # every query: q·u = 2
    k = k.clone()
    d = q.shape[-1]
    k[..., -1, :] = (2e4 * math.sqrt(d) / 2.0) * u  # q_i·k_last/sqrt(d) = 2e4 for every query
    lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    mask = torch.ones(*lead, q.shape[-2], k.shape[-2], dtype=torch.bool)
    mask[..., -1] = False
    return [("the masked (last) key holds every row's largest score, by 2·10⁴",
             with_args(exercise, base, **{q_name: q, k_name: k, mask_name: mask}))]


def _zero_vectors(exercise, cases):
    kinds = arg_kinds(exercise)
    mask_name = next((n for n, k in kinds.items() if k == "mask"), None)
    if "tokens" in kinds.values():
        base = _base(exercise, cases, need=("tokens",))
        if base is None:
            return []
        name, x = _of_kind(exercise, base, "tokens")
        if x.dim() < 2 or x.shape[-2] < 2:
            return []
        x = x.clone()
        x[..., 1, :] = 0
        updates = {name: x}
        if mask_name is not None:
            updates[mask_name] = None
        return [("a zero vector among the real positions", with_args(exercise, base, **updates))]
    base = _base(exercise, cases, need=("query", "key"),
                 pred=lambda c: _of_kind(exercise, c, "key")[1].shape[-2] >= 2 and _of_kind(exercise, c, "query")[1].shape[-2] >= 2)
    if base is None:
        return []
    q_name, q = _of_kind(exercise, base, "query")
    k_name, k = _of_kind(exercise, base, "key")
    q, k = q.clone(), k.clone()
    q[..., 0, :] = 0
    k[..., 1, :] = 0
    updates = {q_name: q, k_name: k}
    if mask_name is not None:
        updates[mask_name] = None
    return [("a zero query and a zero key among the real ones (no mask)", with_args(exercise, base, **updates))]


def _ties(exercise, cases):
    for kind, dim in (("key", -2), ("scores", -1)):
        base = _base(exercise, cases, need=(kind,), pred=lambda c: _of_kind(exercise, c, kind)[1].dim() >= 1
                     and _of_kind(exercise, c, kind)[1].shape[dim] >= 2)
        if base is None:
            continue
        name, t = _of_kind(exercise, base, kind)
        t = t.clone()
        t.narrow(dim, 1, 1).copy_(t.narrow(dim, 0, 1))
        return [("tied scores (two equal keys)" if kind == "key" else "tied scores", with_args(exercise, base, **{name: t}))]
    return []


def _fully_masked(exercise, cases):
    base = _base(exercise, cases, need=("mask",))
    if base is None:
        return []
    name, mask = _of_kind(exercise, base, "mask")
    s = _scores(exercise, base)
    shape = s.shape if s is not None else mask.shape
    full = _full_mask(mask, shape)
    if full is None or full.dim() < 2 or mask.dtype != torch.bool:
        return []
    full[..., 0, :] = False
    full[..., 1:, 0] = True
    return [("the first query row fully masked", with_args(exercise, base, **{name: full}))]


def _narrow(exercise, case, s_q=None, s_k=None):
    """The case with S_q (and S_k) cut to the given sizes: each argument's dims named S_q, S_k (or S,
    both) in the contract's ``name: (dims)`` lines; by kind where a line says nothing."""
    dims = exercise.contract.dims()
    by_kind = {"query": ["S_q", "D"], "key": ["S_k", "D"], "value": ["S_k", "D_v"], "mask": ["S_q", "S_k"],
               "scores": ["S_q", "S_k"]}
    updates = {}
    for name, v in named_args(exercise, case).items():
        names = dims.get(name) or by_kind.get(arg_kinds(exercise).get(name))
        if not isinstance(v, torch.Tensor) or not names or v.dim() < 2:
            continue
        names = names[-v.dim():] if names[0] == "..." or len(names) >= v.dim() else names
        t = v
        for i, dim in enumerate(names[::-1]):
            axis = -1 - i
            size = s_q if dim in ("S_q", "S") else s_k if dim == "S_k" else None
            if size is not None and -axis <= t.dim() and t.shape[axis] > size:
                t = t.narrow(axis, 0, size)
        if t is not v:
            updates[name] = t.clone()
    return with_args(exercise, case, **updates)


def _single(exercise, cases):
    base = _base(exercise, cases, need=("query",))
    if base is None:
        return []
    both = _narrow(exercise, base, 1, 1)
    return [("S = 1 (one query, one key)", both)]


def _cross(exercise, cases):
    def sizes(c):
        _, q = _of_kind(exercise, c, "query")
        _, k = _of_kind(exercise, c, "key")
        return q.shape[-2], (k.shape[-2] if k is not None else q.shape[-2])

    out = []
    for base in _bases(exercise, cases, need=("query", "key"), pred=lambda c: min(sizes(c)) >= 3):
        s_q, s_k = sizes(base)  # both ways: S_q < S_k, and S_q > S_k (with a causal flag: queries that see no key)
        out.append(("S_q < S_k", _narrow(exercise, base, min(s_q, s_k - 2), None)))
        out.append(("S_q > S_k", _narrow(exercise, base, None, min(s_k, s_q - 2))))
    return out


def _reversed_in_memory(t: torch.Tensor) -> torch.Tensor:
    """The same values with every dim's stride reversed: no two dims can be merged by .view."""
    order = list(range(t.dim()))[::-1]
    return t.permute(order).contiguous().permute(order)


def _map(obj, f):
    if isinstance(obj, torch.Tensor):
        return f(obj)
    if type(obj) in (tuple, list):
        return type(obj)(_map(v, f) for v in obj)
    return obj


def _non_contiguous(exercise, cases):
    from ._guards import _tensor_paths

    def dims(c):
        return max((t.dim() for _, t in _tensor_paths([c.args, c.kwargs], "")), default=0)

    plain = [c for c in cases if _plain_base(c) and dims(c) >= 2]
    if not plain:
        return []
    base = max(plain, key=dims)  # the most dims: a transposed layout then breaks any .view across them
    updates = {n: _map(v, lambda t: _reversed_in_memory(t) if t.dim() >= 2 else t)
               for n, v in named_args(exercise, base).items() if not callable(v) or isinstance(v, torch.Tensor)}
    out = [("non-contiguous inputs (every dim transposed in memory)", with_args(exercise, base, **updates))]
    exp_base = _base(exercise, cases, pred=lambda c: any(isinstance(v, torch.Tensor) and v.dim() >= 3 and v.shape[0] >= 2
                                                         for v in named_args(exercise, c).values()))
    if exp_base is not None:
        updates = {n: v[:1].expand(v.shape) for n, v in named_args(exercise, exp_base).items()
                   if isinstance(v, torch.Tensor) and v.dim() >= 3 and v.shape[0] >= 2}
        out.append(("expanded inputs (a batch dim of stride 0)", with_args(exercise, exp_base, **updates)))
    return out


def _float64(exercise, cases):
    from ._guards import _tensor_paths

    base = _base(exercise, cases, pred=lambda c: any(t.dtype == torch.float32 for _, t in _tensor_paths([c.args, c.kwargs], "")))
    if base is None:
        return []
    return [("float64 inputs", replace(base, args=_to(base.args, F64), kwargs=_to(base.kwargs, F64)))]


def _grad_large(exercise, cases):
    base = next((c for c in cases if c.grad and c.judge is None), None)
    if base is None:
        return []
    for kind in ("tokens", "tensor"):  # inputs that are not scores: |x| ≈ 100 to 300
        name, t = _of_kind(exercise, base, kind)
        if name is not None and t.is_floating_point():
            return [("float64 gradients at |x| ≈ 100", with_args(exercise, base, **{name: t * 100.0}))]
    s = _scores(exercise, base)
    top = float(s.abs().max()) if s is not None and s.numel() else 3.0
    scaled = _scale(exercise, base, 1e3 / max(top, 1e-3))
    return [] if scaled is None else [("float64 gradients at |scores| ≈ 10³ (past exp's range)", scaled)]


KINDS = {"large": _large, "below_fill": _below_fill, "masked_max": _masked_max, "zero_vectors": _zero_vectors, "ties": _ties,
         "fully_masked": _fully_masked, "single": _single, "cross": _cross, "non_contiguous": _non_contiguous,
         "float64": _float64, "grad_large": _grad_large}
_DISABLED: set = set()  # kinds and guards switched off (tests prove what each one kills)


def adversarial_cases(exercise, cases) -> list:
    out = []
    for kind in exercise.contract.adversarial:
        if kind in _DISABLED:
            continue
        for what, case in KINDS[kind](exercise, cases):
            out.append(replace(case, label=f"{what}: {describe_args(exercise, case)}"))
    return out


# ----------------------------------------------------------------------------------------------
# Everything a declaration adds
# ----------------------------------------------------------------------------------------------
def budget_cases(exercise, rule) -> list:
    cases = []
    for size in rule.all_sizes():
        probe = size is rule.probe
        for variant in (rule.probe_variants or rule.variants) if probe else rule.variants:
            case = rule.build(**size, **variant)
            budget = Budget(numel=rule.numel(**size) if rule.numel else None, why=rule.why,
                            seconds=PROBE_SECONDS if probe else 3.0,
                            work=rule.work(**size) if rule.work else None,
                            memory=rule.probe_bytes(**size) if probe else None)
            where = ", ".join(f"{k} = {v:,}" if isinstance(v, int) and not isinstance(v, bool) else f"{k} = {v}"
                              for k, v in {**size, **variant}.items())
            limits = [f"no tensor above {rule.numel_text} = {budget.numel:,} elements"] if budget.numel else []
            if budget.work:
                limits.append(f"at most {rule.work_text} = {budget.work:,} multiply-adds")
            if budget.memory:
                limits.append(f"{PROBE_SECONDS:g} s of CPU time; in the re-check, at most "
                              f"{budget.memory / 2**20:,.0f} MiB of memory")
            cases.append(replace(case, label=f"budget at {where}: {describe_args(exercise, case)} ({'; '.join(limits)})",
                                 budget=budget, tol=rule.tol or case.tol))
    return cases


def _same_default(value, default) -> bool:
    """``value`` is the parameter's default itself (a plain Python value, not a tensor)."""
    if isinstance(value, bool) or isinstance(default, bool):
        return value is default
    plain = (int, float, str, type(None))
    return isinstance(value, plain) and isinstance(default, plain) and value == default


def defaults_cases(exercise, own: list) -> list:
    """The contract's signature includes its defaults (``softmax(x, dim=-1)``, ``dropout=0.0``): for
    every defaulted parameter that a case passes at its default value, one more case leaves it out,
    so that an answer whose own default differs (``dim=0``, ``dropout=1.0``) is compared with the
    reference called the same way. Function and module exercises (a module's constructor
    arguments); exercises with their own runner call their code in their own way and are skipped."""
    if exercise.run is not None:
        return []
    ref = getattr(exercise.reference, "__wrapped__", exercise.reference)
    try:
        sig = inspect.signature(ref.__init__ if exercise.kind == "class" else ref)
    except (TypeError, ValueError):
        return []
    params = [p for p in sig.parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if exercise.kind == "class":
        params = params[1:]  # self
    defaulted = {p.name: p.default for p in params if p.default is not p.empty}
    out, covered = [], set()
    for case in own:
        if case.judge is not None or case.grad or case.budget is not None or (case.run is not None and exercise.kind != "class"):
            continue
        if exercise.kind == "class":
            args, kwargs = tuple(case.init.get("ctor", ())), dict(case.init.get("ctor_kwargs", {}))
        else:
            args, kwargs = tuple(case.args), dict(case.kwargs)
        if len(args) > len(params):
            continue
        args, omitted = list(args), []
        while args and params[len(args) - 1].name in defaulted and \
                _same_default(args[-1], defaulted[params[len(args) - 1].name]):
            omitted.append(params[len(args) - 1].name)
            args.pop()
        for name in list(kwargs):
            if name in defaulted and _same_default(kwargs[name], defaulted[name]):
                omitted.append(name)
                del kwargs[name]
        if not set(omitted) - covered:
            continue
        covered |= set(omitted)
        if exercise.kind == "class":
            new = replace(case, init={**case.init, "ctor": tuple(args), "ctor_kwargs": kwargs})
        else:
            new = replace(case, args=tuple(args), kwargs=kwargs)
        what = ", ".join(sorted(omitted))
        out.append(replace(new, label=f"{what} left out (the signature's default): {case.label}"))
        if covered == set(defaulted):
            break
    return out


def declared_cases(exercise, own: list, seed: int) -> list:
    from ._guards import dropout_cases

    c = exercise.contract
    cases = list(own) + adversarial_cases(exercise, own)
    if c.dropout is not None and "dropout" not in _DISABLED:
        cases += dropout_cases(exercise, seed)
    for rule in c.budgets:
        cases += budget_cases(exercise, rule)
    if "defaults" not in _DISABLED:
        cases += defaults_cases(exercise, cases)
    again = AGAIN_CASES if c.stateless and "again" not in _DISABLED else 0
    out = []
    for case in cases:
        observe = ()
        if not case.grad:
            observe = ("inputs",) if c.pure and "inputs" not in _DISABLED else ()
            if again and _plain_base(case):
                observe += ("again",)
                again -= 1
        out.append(replace(case, observe=observe))
    # The probes (a memory cap: the rule at a size where breaking it takes gigabytes) come last, so
    # that an answer failing any other case never reaches them (the check and the re-check stop or
    # skip there): their inputs are the largest and their calls the slowest.
    def probe(case):
        budget = exercise.case_budget(case)
        return budget is not None and budget.memory is not None

    return [case for case in out if not probe(case)] + [case for case in out if probe(case)]
