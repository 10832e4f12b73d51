"""Mutation operators made for tensor code.

Each operator looks at one node of a function's syntax tree and proposes replacements for a piece
of the source: ``(operator, node, new text)``. The text replaces exactly the node's characters,
so the rest of the line (comments included) is kept and every mutant differs from the reference
in one place. The operators (the labels used in the report):

``dim``            another dim: ``dim=-1`` → ``-2`` / ``0``, ``dim=dim`` → ``-1``, the dim of
                   ``sum``/``amax``/``softmax``/``cat``/``unsqueeze``/``transpose``/``size`` ...,
                   ``x.shape[-2]`` → ``x.shape[-1]`` (so also: softmax over another axis)
``transpose``      a dropped transpose (``k.transpose(-2, -1)`` → ``k``, ``.mT``) or an added one
                   (``a @ b`` → ``(a @ b).transpose(-2, -1)``)
``mask_diag``      ``tril``/``triu`` with ``diagonal`` ± 1
``range_bound``    ``arange``/``range`` bounds ± 1
``slice_bound``    slice ends ± 1
``cmp_boundary``   ``<`` ↔ ``<=``, ``>`` ↔ ``>=``
``inplace``        the in-place variant: ``mul`` → ``mul_``, ``masked_fill`` → ``masked_fill_``,
                   ``torch.exp`` → ``torch.exp_``, ``x = x * s`` → ``x *= s``, ``inplace=True``
``fill``           another fill value: ``-inf`` ↔ ``-1e9`` ↔ ``0``, ``finfo.min`` → ``-inf``
``p_complement``   dropout's ``p`` → ``1 - p``
``drop_scale``     a dropped factor or divisor (``/ math.sqrt(d)`` removed, ``* scale`` removed)
``mul_div``        ``*`` ↔ ``/``
``sqrt``           ``sqrt(x)`` → ``x``
``dtype``          ``float64`` ↔ ``float32``, ``.float()`` ↔ ``.double()``, ``dtype=`` dropped,
                   ``.to(dtype)`` dropped
``keepdim``        ``keepdim=True`` dropped
``max_min``        ``max`` ↔ ``min`` (``amax``, ``maximum``, ``argmax``, ``clamp_min``, builtins)
``sum_mean``       ``sum`` ↔ ``mean``
``no_grad``        a dropped ``.detach()``, ``with torch.no_grad()`` or ``@torch.no_grad()``
``clamp``          a dropped clamp, or a dropped bound of ``clamp``
``swap_args``      the first two arguments swapped (``torch.where``: the two branches; not for
                   symmetric calls such as ``transpose(a, b)`` or ``maximum``), the operands of
                   ``@``, ``-``, ``/`` swapped
``add_sub``        ``+`` ↔ ``-``, a dropped unary minus
``cmp_flip``       a comparison negated (``<`` → ``>=``, ``==`` → ``!=``, ``is`` → ``is not``)
``logic``          ``and`` ↔ ``or``, ``&`` ↔ ``|``, a dropped ``~``/``not``, an ``if`` negated
``drop_call``      a dropped ``contiguous``/``clone``/``nan_to_num``/``squeeze``/``unsqueeze``
``const``          a number ± 1
``drop_stmt``      a statement replaced by ``pass``

Two operators that give the same mutated code count once (the first in ``ORDER`` names it).
"""
from __future__ import annotations

import ast
import inspect

import torch
import torch.nn as nn
import torch.nn.functional as F

ORDER = ("dim", "transpose", "mask_diag", "range_bound", "slice_bound", "cmp_boundary", "inplace",
         "fill", "p_complement", "dtype", "keepdim", "max_min", "sum_mean", "no_grad", "clamp",
         "drop_scale", "mul_div", "sqrt", "swap_args", "add_sub", "cmp_flip", "logic", "drop_call",
         "const", "drop_stmt")

MODULE_ALIASES = {"torch", "F", "nn", "math", "np", "functional", "special", "linalg"}
DIM_KW = {"dim", "dim0", "dim1", "start_dim", "end_dim", "axis"}
# methods whose first positional argument is a dim (all of them, for transpose/swapaxes)
DIM_METHOD = {"sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "cumsum", "cumprod",
              "squeeze", "unsqueeze", "flatten", "unflatten", "size", "softmax", "log_softmax", "var",
              "std", "logsumexp", "unfold", "unbind", "narrow", "select", "flip", "norm", "all", "any",
              "repeat_interleave"}
DIM_BOTH = {"transpose", "swapaxes", "swapdims"}
# torch.* / F.* functions whose second positional argument is a dim
DIM_FUNC = {"softmax", "log_softmax", "cat", "stack", "sum", "mean", "amax", "amin", "cumsum",
            "logsumexp", "squeeze", "unsqueeze", "flatten", "argmax", "argmin", "concat", "concatenate"}
MAX_MIN = {"amax": "amin", "amin": "amax", "max": "min", "min": "max", "maximum": "minimum",
           "minimum": "maximum", "argmax": "argmin", "argmin": "argmax", "clamp_min": "clamp_max",
           "clamp_max": "clamp_min", "fmax": "fmin", "fmin": "fmax"}
SUM_MEAN = {"sum": "mean", "mean": "sum", "nansum": "nanmean", "nanmean": "nansum"}
DROP_CALL = {"contiguous", "clone", "nan_to_num", "squeeze", "unsqueeze"}
NO_INPLACE = {"to", "type", "set", "resize", "requires_grad", "retain_grad", "share_memory",
              "copy", "fill", "zero", "index_put", "put", "scatter", "map", "apply", "random",
              "uniform", "normal", "bernoulli", "exponential", "geometric", "cauchy", "log_normal"}
NO_SWAP = {"isinstance", "getattr", "setattr", "hasattr", "print", "super", "type", "ValueError",
           "TypeError", "RuntimeError", "AssertionError", "format", "view", "reshape", "expand",
           "permute", "unflatten", "Linear", "Parameter", "Embedding", "zeros", "ones", "empty",
           "full", "randn", "rand", "eye", "enumerate", "zip", "register_buffer",
           "save_for_backward", "full_like", "new_full", "new_zeros", "view_as", "expand_as"}
# calls whose two first arguments may be swapped without changing anything (trivially equivalent
# mutants are not made): transpose(a, b) is transpose(b, a), maximum(a, b) is maximum(b, a), ...
SYMMETRIC = {"transpose", "swapaxes", "swapdims", "maximum", "minimum", "fmax", "fmin", "add", "mul",
             "multiply", "eq", "ne", "logical_and", "logical_or", "logical_xor", "hypot"}
SYMMETRIC_BUILTINS = {"max", "min"}
FLOAT_DTYPES = {"float64": "float32", "float32": "float64", "double": "float", "float": "double"}
NON_COMMUTATIVE = (ast.MatMult, ast.Sub, ast.Div, ast.Pow, ast.Mod, ast.FloorDiv)
_NEGATE = {ast.Lt: ast.GtE, ast.GtE: ast.Lt, ast.Gt: ast.LtE, ast.LtE: ast.Gt, ast.Eq: ast.NotEq,
           ast.NotEq: ast.Eq, ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In}
_BOUNDARY = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt}


# ----------------------------------------------------------------------------------------------
# small helpers on nodes
# ----------------------------------------------------------------------------------------------
def unparse(node: ast.AST) -> str:
    return ast.unparse(node)


def wrap(text: str, node: ast.AST | None = None) -> str:
    """``text`` in parentheses unless its root is atomic (a name, a call, an attribute, ...)."""
    try:
        root = ast.parse(text, mode="eval").body
    except SyntaxError:
        return f"({text})"
    atomic = (ast.Name, ast.Call, ast.Attribute, ast.Subscript, ast.List, ast.Dict, ast.Set, ast.ListComp)
    if isinstance(root, atomic):
        return text
    if isinstance(root, ast.Constant) and not (isinstance(root.value, (int, float)) and root.value < 0):
        return text
    return f"({text})"


def num_text(w, node: ast.AST) -> str:
    """The text of the number ``w`` in place of ``node``: parenthesised only where a minus sign
    appears that the original did not have (a negative original is already a unary minus)."""
    text = repr(w) if isinstance(w, int) else repr(float(w))
    negative_before = isinstance(node, ast.UnaryOp)
    return f"({text})" if w < 0 and not negative_before else text


def int_value(node: ast.AST):
    """The int a node spells (``3``, ``-1``), else None."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub)
            and isinstance(node.operand, ast.Constant) and type(node.operand.value) is int):
        return -node.operand.value
    return None


def num_value(node: ast.AST):
    """The int or float a node spells, else None (bools are not numbers here)."""
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub)
            and isinstance(node.operand, ast.Constant) and type(node.operand.value) in (int, float)):
        return -node.operand.value
    return None


def infinity(node: ast.AST):
    """+1 or -1 when the node spells ±inf (``float("-inf")``, ``-math.inf``, ``torch.inf``), else None."""
    sign = 1
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        sign, node = -1, node.operand
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "float"
            and len(node.args) == 1 and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)):
        text = node.args[0].value.strip().lower()
        if text in ("inf", "+inf", "infinity"):
            return sign
        if text in ("-inf", "-infinity"):
            return -sign
    if isinstance(node, ast.Attribute) and node.attr == "inf" and isinstance(node.value, ast.Name):
        return sign
    return None


def owner(call: ast.Call) -> str:
    """'method' for x.f(...), 'torch' / 'F' / 'nn' / 'math' for module functions, 'name' for f(...)."""
    f = call.func
    if isinstance(f, ast.Name):
        return "name"
    if isinstance(f, ast.Attribute):
        base = f.value
        while isinstance(base, ast.Attribute) and base.attr in MODULE_ALIASES | {"special", "linalg", "functional"}:
            base = base.value
        if isinstance(base, ast.Name) and base.id in MODULE_ALIASES:
            return base.id if base.id != "functional" else "F"
        return "method"
    return "other"


def call_name(call: ast.Call) -> str | None:
    f = call.func
    if isinstance(f, ast.Name):
        return f.id
    if isinstance(f, ast.Attribute):
        return f.attr
    return None


def renamed(call: ast.Call, name: str) -> ast.Call:
    new = _copy(call)
    if isinstance(new.func, ast.Name):
        new.func.id = name
    else:
        new.func.attr = name
    return new


def _copy(node):
    import copy

    return copy.deepcopy(node)


def _has_param(fn, name: str) -> bool:
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _resolve_function(call: ast.Call):
    """The torch / F / nn object a call names, when it is one (for its signature)."""
    f = call.func
    chain = []
    while isinstance(f, ast.Attribute):
        chain.append(f.attr)
        f = f.value
    if not isinstance(f, ast.Name):
        return None
    roots = {"torch": torch, "F": F, "nn": nn}
    obj = roots.get(f.id)
    if obj is None:
        return None
    for attr in reversed(chain):
        obj = getattr(obj, attr, None)
        if obj is None:
            return None
    return obj


# ----------------------------------------------------------------------------------------------
# the operators: each yields (operator, node to replace, new text)
# ----------------------------------------------------------------------------------------------
def expression_mutations(node: ast.AST, src):
    """Mutations of one expression node. ``src(node)`` is the node's original text."""
    out = []

    def add(op, target, text):
        out.append((op, target, text))

    if isinstance(node, ast.Call):
        name = call_name(node)
        own = owner(node)
        _call_mutations(node, name, own, src, add)
    elif isinstance(node, ast.Attribute):
        if node.attr in ("mT", "T", "mH", "H") and not (isinstance(node.value, ast.Name) and node.value.id in MODULE_ALIASES):
            add("transpose", node, wrap(src(node.value)))
        if isinstance(node.value, ast.Name) and node.value.id == "torch" and node.attr in FLOAT_DTYPES:
            add("dtype", node, f"torch.{FLOAT_DTYPES[node.attr]}")
        if (node.attr in ("min", "max") and isinstance(node.value, ast.Call)
                and call_name(node.value) in ("finfo", "iinfo")):
            sign = "-" if node.attr == "min" else ""
            add("fill", node, f'float("{sign}inf")')
            add("fill", node, f"{sign}1e9")
    elif isinstance(node, ast.Subscript):
        if isinstance(node.value, ast.Attribute) and node.value.attr == "shape":
            v = int_value(node.slice)
            if v is not None:
                for w in (v - 1, v + 1):
                    add("dim", node.slice, num_text(w, node.slice))
        _slice_mutations(node, src, add)
    elif isinstance(node, ast.BinOp):
        _binop_mutations(node, src, add)
    elif isinstance(node, ast.UnaryOp):
        if isinstance(node.op, ast.USub) and num_value(node) is None and infinity(node) is None:
            add("add_sub", node, wrap(src(node.operand)))
        if isinstance(node.op, (ast.Invert, ast.Not)):
            add("logic", node, wrap(src(node.operand)))
    elif isinstance(node, ast.BoolOp):
        new = _copy(node)
        new.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        add("logic", node, wrap(unparse(new)))
    elif isinstance(node, ast.Compare) and len(node.ops) == 1:
        op = type(node.ops[0])
        if op in _BOUNDARY:
            new = _copy(node)
            new.ops = [_BOUNDARY[op]()]
            add("cmp_boundary", node, wrap(unparse(new)))
        if op in _NEGATE:
            new = _copy(node)
            new.ops = [_NEGATE[op]()]
            add("cmp_flip", node, wrap(unparse(new)))

    # another fill value; a number ± 1
    sign = infinity(node)
    if sign is not None:
        add("fill", node, "-1e9" if sign < 0 else "1e9")
        add("fill", node, "0.0")
    else:
        v = num_value(node)
        if v is not None and not (isinstance(node, ast.Constant) and _is_negated(node)):
            if abs(v) >= 1e4 and isinstance(v, float):
                add("fill", node, 'float("-inf")' if v < 0 else 'float("inf")')
                add("fill", node, "0.0")
            for w in (v + 1, v - 1):
                add("const", node, num_text(w, node))
    return out


def _is_negated(node):
    return getattr(node, "_negated", False)


def _call_mutations(node: ast.Call, name, own, src, add):
    args = node.args
    kws = {k.arg: k for k in node.keywords if k.arg}
    base = node.func.value if isinstance(node.func, ast.Attribute) else None

    # dim: keywords
    for k in node.keywords:
        if k.arg in DIM_KW:
            v = int_value(k.value)
            if v is not None:
                for w in (v - 1, v + 1):
                    add("dim", k.value, num_text(w, k.value))
            elif isinstance(k.value, ast.Name):
                add("dim", k.value, "-1" if k.arg != "dim0" else "-2")
    # dim: positional
    positions = []
    if own == "method" and name in DIM_BOTH:
        positions = [0, 1]
    elif own == "method" and name in DIM_METHOD:
        positions = [0]
    elif own in ("torch", "F") and name in DIM_FUNC | DIM_BOTH:
        positions = [1, 2] if name in DIM_BOTH else [1]
    for p in positions:
        if p < len(args):
            v = int_value(args[p])
            if v is not None:
                for w in (v - 1, v + 1):
                    add("dim", args[p], num_text(w, args[p]))

    # transpose dropped
    if own == "method" and name in ("transpose", "swapaxes", "swapdims", "t") and base is not None:
        add("transpose", node, wrap(src(base)))
    if own == "torch" and name in ("transpose", "t") and args:
        add("transpose", node, wrap(src(args[0])))

    # tril / triu diagonal ± 1
    if name in ("tril", "triu", "tril_", "triu_"):
        if "diagonal" in kws:
            e = kws["diagonal"].value
            for d in ("+ 1", "- 1"):
                add("mask_diag", e, f"{wrap(src(e))} {d}")
        else:
            diag_pos = 0 if own == "method" else 1
            if len(args) > diag_pos:
                e = args[diag_pos]
                for d in ("+ 1", "- 1"):
                    add("mask_diag", e, f"{wrap(src(e))} {d}")
            else:
                for d in ("1", "-1"):
                    new = _copy(node)
                    new.keywords.append(ast.keyword(arg="diagonal", value=ast.parse(d, mode="eval").body))
                    add("mask_diag", node, unparse(new))

    # arange / range bounds ± 1 (start and end, not the step)
    if name in ("arange", "range") and own in ("torch", "name"):
        for e in args[:2]:
            for d in ("+ 1", "- 1"):
                add("range_bound", e, f"{wrap(src(e))} {d}")

    # in-place variants
    if own == "method" and name and not name.endswith("_") and name not in NO_INPLACE \
            and hasattr(torch.Tensor, name + "_") and callable(getattr(torch.Tensor, name + "_", None)):
        add("inplace", node, unparse(renamed(node, name + "_")))
    if own == "torch" and name and not name.endswith("_") and name not in NO_INPLACE \
            and hasattr(torch, name + "_") and args:
        add("inplace", node, unparse(renamed(node, name + "_")))
    if own in ("F", "nn") and "inplace" not in kws:
        fn = _resolve_function(node)
        if fn is not None and _has_param(fn, "inplace"):
            new = _copy(node)
            new.keywords.append(ast.keyword(arg="inplace", value=ast.Constant(True)))
            add("inplace", node, unparse(new))

    # dropout's p ↔ 1 - p
    if "p" in kws:
        e = kws["p"].value
        add("p_complement", e, f"1 - {wrap(src(e))}")
    elif name == "Dropout" and args:
        add("p_complement", args[0], f"1 - {wrap(src(args[0]))}")
    elif name == "dropout" and own in ("F", "torch") and len(args) > 1:
        add("p_complement", args[1], f"1 - {wrap(src(args[1]))}")

    # dtypes
    if own == "method" and name in ("float", "double") and not args:
        add("dtype", node, unparse(renamed(node, FLOAT_DTYPES[name])))
    if "dtype" in kws:
        new = _copy(node)
        new.keywords = [k for k in new.keywords if k.arg != "dtype"]
        add("dtype", node, unparse(new))
    if own == "method" and name == "to" and len(args) == 1 and not node.keywords and base is not None:
        a = args[0]
        if (isinstance(a, ast.Attribute) and (a.attr == "dtype" or a.attr in FLOAT_DTYPES)):
            add("dtype", node, wrap(src(base)))

    # keepdim dropped
    if "keepdim" in kws and isinstance(kws["keepdim"].value, ast.Constant) and kws["keepdim"].value.value is True:
        new = _copy(node)
        new.keywords = [k for k in new.keywords if k.arg != "keepdim"]
        add("keepdim", node, unparse(new))

    # max ↔ min, sum ↔ mean
    if name in MAX_MIN and (own != "name" or name in ("max", "min")):
        add("max_min", node, unparse(renamed(node, MAX_MIN[name])))
    if name in SUM_MEAN and own in ("method", "torch"):
        add("sum_mean", node, unparse(renamed(node, SUM_MEAN[name])))

    # a dropped .detach(); no_grad → enable_grad
    if own == "method" and name == "detach" and base is not None and not args:
        add("no_grad", node, wrap(src(base)))

    # clamp dropped, or one bound dropped
    if name in ("clamp", "clamp_min", "clamp_max", "clip") and own in ("method", "torch"):
        inner = base if own == "method" else (args[0] if args else None)
        if inner is not None:
            add("clamp", node, wrap(src(inner)))
        for bound in ("min", "max"):
            if bound in kws and len(node.keywords) > 1:
                new = _copy(node)
                new.keywords = [k for k in new.keywords if k.arg != bound]
                add("clamp", node, unparse(new))

    # sqrt dropped
    if name == "sqrt" and own in ("math", "torch") and len(args) == 1:
        add("sqrt", node, wrap(src(args[0])))
    if name in ("sqrt", "rsqrt") and own == "method" and base is not None and not args:
        add("sqrt", node, wrap(src(base)))

    # swapped arguments
    pos = [a for a in args if not isinstance(a, ast.Starred)]
    if len(pos) == len(args):
        if name == "where" and len(args) == 3:
            if src(args[1]) != src(args[2]):
                new = _copy(node)
                new.args[1], new.args[2] = new.args[2], new.args[1]
                add("swap_args", node, unparse(new))
        elif len(args) >= 2 and name not in NO_SWAP and src(args[0]) != src(args[1]) \
                and name not in SYMMETRIC and not (own == "name" and name in SYMMETRIC_BUILTINS):
            new = _copy(node)
            new.args[0], new.args[1] = new.args[1], new.args[0]
            add("swap_args", node, unparse(new))

    # a dropped reshaping / copying call
    if own == "method" and name in DROP_CALL and base is not None:
        add("drop_call", node, wrap(src(base)))


def _slice_mutations(node: ast.Subscript, src, add):
    slices = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    for s in slices:
        if isinstance(s, ast.Slice):
            for bound in (s.lower, s.upper):
                if bound is not None:
                    for d in ("+ 1", "- 1"):
                        add("slice_bound", bound, f"{wrap(src(bound))} {d}")


def _binop_mutations(node: ast.BinOp, src, add):
    left, right = src(node.left), src(node.right)
    op = node.op
    if isinstance(op, ast.MatMult):
        add("transpose", node, f"({src(node)}).transpose(-2, -1)")
    if isinstance(op, (ast.Mult, ast.Div)):
        add("drop_scale", node, wrap(left))
        if isinstance(op, ast.Mult):
            add("drop_scale", node, wrap(right))
        new = _copy(node)
        new.op = ast.Div() if isinstance(op, ast.Mult) else ast.Mult()
        add("mul_div", node, wrap(unparse(new)))
    if isinstance(op, (ast.Add, ast.Sub)):
        new = _copy(node)
        new.op = ast.Sub() if isinstance(op, ast.Add) else ast.Add()
        add("add_sub", node, wrap(unparse(new)))
    if isinstance(op, (ast.BitAnd, ast.BitOr)):
        new = _copy(node)
        new.op = ast.BitOr() if isinstance(op, ast.BitAnd) else ast.BitAnd()
        add("logic", node, wrap(unparse(new)))
    if isinstance(op, NON_COMMUTATIVE) and left != right:
        new = _copy(node)
        new.left, new.right = new.right, new.left
        add("swap_args", node, wrap(unparse(new)))


def statement_mutations(stmt: ast.stmt, src):
    """Mutations of one statement as a whole: dropped, an in-place update, a negated ``if``."""
    out = []
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
            and isinstance(stmt.value, ast.BinOp) and isinstance(stmt.value.left, ast.Name) \
            and stmt.value.left.id == stmt.targets[0].id \
            and isinstance(stmt.value.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
        aug = ast.AugAssign(target=ast.Name(stmt.targets[0].id, ast.Store()), op=stmt.value.op, value=stmt.value.right)
        out.append(("inplace", stmt, unparse(aug)))
    if isinstance(stmt, ast.AugAssign):
        new = _copy(stmt)
        swap = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult}
        if type(stmt.op) in swap:
            new.op = swap[type(stmt.op)]()
            out.append(("add_sub" if isinstance(stmt.op, (ast.Add, ast.Sub)) else "mul_div", stmt, unparse(new)))
    if isinstance(stmt, (ast.If, ast.While)) and not isinstance(stmt.test, (ast.Compare, ast.BoolOp, ast.UnaryOp)):
        out.append(("logic", stmt.test, f"not {wrap(src(stmt.test))}"))
    if isinstance(stmt, ast.With):
        for item in stmt.items:
            e = item.context_expr
            if isinstance(e, ast.Call) and call_name(e) in ("no_grad", "inference_mode"):
                out.append(("no_grad", e, "torch.enable_grad()"))
    droppable = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.If, ast.For, ast.While,
                 ast.With, ast.Raise, ast.Assert, ast.Delete)
    if isinstance(stmt, droppable) and not _is_super_init(stmt):
        out.append(("drop_stmt", stmt, "pass"))
    return out


def _is_super_init(stmt) -> bool:
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
        return False
    f = stmt.value.func
    return (isinstance(f, ast.Attribute) and f.attr == "__init__" and isinstance(f.value, ast.Call)
            and isinstance(f.value.func, ast.Name) and f.value.func.id == "super")


def decorator_mutations(fn: ast.FunctionDef):
    """A dropped ``@torch.no_grad()`` (the decorator becomes the identity)."""
    out = []
    for d in fn.decorator_list:
        if isinstance(d, ast.Call) and call_name(d) in ("no_grad", "inference_mode"):
            out.append(("no_grad", d, "(lambda f: f)"))
    return out
