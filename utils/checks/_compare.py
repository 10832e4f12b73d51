"""Comparing outputs: one sentence saying how a learner's output differs from the reference's."""
from __future__ import annotations

import math

import torch
import torch.nn as nn


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


def name_paths(exercise, msg: str) -> str:
    """Replace output[0], output[1] by the exercise's names (output, weights)."""
    if exercise.output_names:
        for i, n in enumerate(exercise.output_names):
            msg = msg.replace(f"output[{i}]", n)
    return msg


