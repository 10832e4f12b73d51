"""Self-check answers, graded as the learner's visible check judges them (issue 16 §3).

A quiz answer cell is not executed here: its assignments are *evaluated* by a small, bounded
evaluator that knows numbers, strings, arithmetic, ``math`` (and numpy's scalar functions of the
same names) and a few builtins. ``answer_2 = math.log(2)`` is worth what the notebook's ✅ says it
is; anything it cannot evaluate (a call to a learner function, a loop) is refused with a reason
that says how to write the answer. No learner code runs: every operation is one of a fixed list,
every intermediate integer and string is size-capped, so an answer such as ``10 ** 10 ** 10`` is
refused at once.

The verdict is then the visible check's own: the solution's test cell's ``check_choice`` /
``check_number`` call (its key, decimals, choices and qid, read as literals) is applied to the
evaluated value with the course's own functions (``utils.checks._quiz``); only where a test cell
has no such call does the grade compare with the solution's answer directly.
"""
from __future__ import annotations

import ast
import inspect
import io
import math
import operator
from contextlib import redirect_stdout

from ._parse import parse

MAX_INT_BITS = 4096
MAX_STR = 1000


class Unevaluable(Exception):
    """The answer uses something this evaluator does not know."""


_MATH = {n: getattr(math, n) for n in (
    "sqrt", "exp", "log", "log2", "log10", "log1p", "expm1", "sin", "cos", "tan", "asin", "acos", "atan", "atan2",
    "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "floor", "ceil", "fabs", "pow", "hypot", "degrees",
    "radians", "erf", "erfc", "gamma", "lgamma", "trunc", "copysign", "isqrt", "factorial", "comb", "perm",
    "pi", "e", "tau", "inf", "nan")}
_NUMPY = dict(_MATH, arcsin=math.asin, arccos=math.acos, arctan=math.atan, arctan2=math.atan2, abs=abs,
              absolute=abs, round=round, float64=float, float32=float, int64=int, int32=int)
_BUILTINS = {"abs": abs, "round": round, "min": min, "max": max, "float": float, "int": int, "pow": pow,
             "str": str, "len": len}
_MODULES = {"math": _MATH, "numpy": _NUMPY}
_BIN = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_STR_METHODS = {"strip", "lower", "upper", "lstrip", "rstrip", "casefold"}


def _bounded(value):
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise Unevaluable("an integer too large to be an answer")
    if isinstance(value, str) and len(value) > MAX_STR:
        raise Unevaluable("a string too long to be an answer")
    if isinstance(value, (int, float, str)):
        return value
    raise Unevaluable(f"a value of type {type(value).__name__}")


def _big_args(fn, args) -> bool:
    ints = [a for a in args if isinstance(a, int)]
    if fn in (math.factorial, math.comb, math.perm):
        return any(abs(a) > 1000 for a in ints)
    if fn is round and len(args) > 1:
        return not isinstance(args[1], int) or abs(args[1]) > 100
    if fn is pow or fn is math.pow:
        return _pow_too_big(*args[:2]) if len(args) >= 2 else False
    return False


def _pow_too_big(base, exp) -> bool:
    if isinstance(base, (int, float)) and isinstance(exp, (int, float)) and not isinstance(exp, bool):
        if isinstance(base, int) and isinstance(exp, int):
            return exp > 0 and max(abs(base), 2).bit_length() * exp > MAX_INT_BITS
        return False
    return True


class _Evaluator:
    def __init__(self):
        self.env: dict = {}

    def value(self, node, depth=0):
        if depth > 60:
            raise Unevaluable("an expression nested too deeply")
        d = depth + 1
        if isinstance(node, ast.Constant):
            if isinstance(node.value, (complex, bytes)) or node.value is Ellipsis:
                raise Unevaluable(f"a {type(node.value).__name__} literal")
            return _bounded(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = self.value(node.operand, d)
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                raise Unevaluable("a sign on something that is not a number")
            return -v if isinstance(node.op, ast.USub) else +v
        if isinstance(node, ast.BinOp) and type(node.op) in _BIN:
            a, b = self.value(node.left, d), self.value(node.right, d)
            if isinstance(node.op, ast.Pow) and _pow_too_big(a, b):
                raise Unevaluable("a power too large to be an answer")
            if isinstance(node.op, ast.Mult) and (isinstance(a, str) or isinstance(b, str)):
                n = b if isinstance(a, str) else a
                if not isinstance(n, int) or n * len(a if isinstance(a, str) else b) > MAX_STR:
                    raise Unevaluable("a string too long to be an answer")
            if isinstance(node.op, ast.Mod) and isinstance(a, str):
                raise Unevaluable("string formatting")
            return _bounded(_BIN[type(node.op)](a, b))
        if isinstance(node, ast.Name):
            if node.id in self.env:
                v = self.env[node.id]
                if isinstance(v, Unevaluable):
                    raise v
                return v
            if node.id in _BUILTINS:
                return _BUILTINS[node.id]
            raise Unevaluable(f"the name `{node.id}`")
        if isinstance(node, ast.Attribute):
            base = node.value
            if isinstance(base, ast.Name) and isinstance(self.env.get(base.id), _Module):
                table = self.env[base.id].table
                if node.attr in table:
                    return table[node.attr]
                raise Unevaluable(f"`{base.id}.{node.attr}`")
            raise Unevaluable(f"`{ast.unparse(node)[:40]}`")
        if isinstance(node, ast.Call):
            if node.keywords:
                raise Unevaluable("a call with keyword arguments")
            if isinstance(node.func, ast.Attribute) and node.func.attr in _STR_METHODS and not node.args:
                target = self.value(node.func.value, d)
                if isinstance(target, str):
                    return getattr(target, node.func.attr)()
            fn = self.value(node.func, d)
            if not callable(fn) or isinstance(fn, _Module):
                raise Unevaluable(f"a call of `{ast.unparse(node.func)[:40]}`")
            args = [self.value(a, d) for a in node.args]
            if any(isinstance(a, ast.Starred) for a in node.args) or _big_args(fn, args):
                raise Unevaluable(f"`{ast.unparse(node)[:40]}` with arguments this large")
            if fn in (min, max) and len(args) < 2:
                raise Unevaluable("min or max of one value")
            return _bounded(fn(*args))
        raise Unevaluable(f"`{ast.unparse(node)[:40]}`")


class _Module:
    def __init__(self, table):
        self.table = table


def evaluate_cell(src: str, target: str | None = None, prelude: list | None = None):
    """``(value, None)`` or ``(None, why)``: the value the answer cell gives ``target`` (or, when
    ``target`` is None, the last name it assigns), as the cell would when it runs. ``prelude``:
    import statements of earlier cells (``math`` imported there is known here)."""
    try:
        tree = parse(src)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None, "the answer cell does not parse"
    ev = _Evaluator()
    last = None
    for node in [*(prelude or []), *tree.body]:
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in _MODULES:
                    ev.env[a.asname or a.name] = _Module(_MODULES[a.name])
        elif isinstance(node, ast.ImportFrom) and node.module in _MODULES and not node.level:
            for a in node.names:
                if a.name in _MODULES[node.module]:
                    ev.env[a.asname or a.name] = _MODULES[node.module][a.name]
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            try:
                ev.env[name] = ev.value(node.value)
            except Unevaluable as err:
                ev.env[name] = err
            except (ArithmeticError, ValueError, TypeError, RecursionError, MemoryError) as err:
                ev.env[name] = Unevaluable(f"it raises {type(err).__name__}")
            last = name
        elif isinstance(node, ast.Raise):  # the release's `raise NotImplementedError()`: unanswered
            return None, "no answer was given (the cell still raises)"
        else:  # a statement that may (re)bind the answer in ways this evaluator does not follow
            for sub in ast.walk(node):
                if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                    ev.env[sub.id] = Unevaluable("an assignment inside a statement the grader does not run")
                    last = sub.id
    name = target or last
    if name is None or name not in ev.env:
        return None, "no answer was given"
    v = ev.env[name]
    if isinstance(v, Unevaluable):
        return None, (f"the grader could not evaluate the answer ({v}): write it as a value, e.g. answer_k = \"b\" "
                      "or answer_k = 0.25, or as arithmetic with math functions, e.g. math.log(2)")
    if v is None or v == "":
        return None, "no answer was given"
    return v, None


def visible_check(test_src: str):
    """The solution's visible quiz check, as ``(function, bound arguments)`` with the answer left
    out, or None when the test cell has no ``check_choice``/``check_number`` call with literal
    arguments."""
    from utils.checks import _quiz

    visible = test_src.split("### BEGIN HIDDEN TESTS")[0]
    try:
        tree = parse(visible)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("check_choice", "check_number"):
            fn = getattr(_quiz, node.func.id)
            try:
                args = [ast.literal_eval(a) for a in node.args[1:]]
                kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg}
                inspect.signature(fn).bind(None, *args, **kwargs)
            except (ValueError, TypeError, SyntaxError):
                return None
            return fn, args, kwargs
    return None


def visible_verdict(check, value) -> tuple[bool, str]:
    """Whether the visible check passes ``value``: (ok, the message it raises)."""
    from utils.checks._core import CheckFailure

    fn, args, kwargs = check
    try:
        with redirect_stdout(io.StringIO()):
            fn(value, *args, **kwargs)
        return True, ""
    except CheckFailure as err:
        return False, str(err).splitlines()[0][:300] if str(err) else "the answer is not correct"
