"""Generic clues that need no mutant: what an error means, which sizes a shape names, which
transformation of the inputs or parameters explains a wrong output, where the differences lie.

Each clue is a fact about the learner's answer, checked on every failing case it speaks of:

* ``crash_clues``: an error the learner's code raised, said in the course's terms — the sizes
  that disagree, named by the case's arguments (``S_k``, ``num_heads``, ``S + 1``: the names that
  fit in *every* failing case), a dtype mismatch, an in-place change autograd saw, a name never
  assigned, the learner's own ``raise`` or ``assert`` refusing a valid case;
* ``shape_clues``: a wrong output (or parameter) shape, its sizes named the same way;
* ``transform_clues``: the reference, called on the case with one thing changed (a mask ignored
  or negated or shifted, two same-shaped inputs swapped, an integer argument ± 1, a flag flipped,
  a parameter zero, one, negated, transposed or swapped with its sibling), gives the learner's
  output in every failing case and stays right on the passing ones;
* ``where_clues``: the differences (or NaNs) lie exactly in the fully masked rows, or where the
  mask hides keys, or at one index of one dim;
* ``locate_submodule``: for a module, the first sub-module (by its attribute path) whose output
  differs from the reference's, with forward hooks on both models built from the same weights.
"""
from __future__ import annotations

import contextlib
import inspect
import math
import re
import time
from dataclasses import replace

import torch
import torch.nn as nn

from ._compare import compare
from ._model import Case, case_seed, reseed, tolerance

_IDENT = re.compile(r"^[A-Za-z_]\w*$")


# ----------------------------------------------------------------------------------------------
# Sizes, named by the case's arguments
# ----------------------------------------------------------------------------------------------
def _named_args(exercise, case: Case) -> list:
    """[(name, value)] of the case's call and constructor arguments (parameter tensors left out)."""
    from ._diagnose import _named_inputs

    return [(n, v) for n, v in _named_inputs(exercise, case) if "." not in str(n)]


def _dim_names(exercise) -> dict:
    contract = getattr(exercise, "contract", None)
    try:
        return contract.dims() if contract is not None and hasattr(contract, "dims") else {}
    except Exception:  # noqa: BLE001 - a declaration without dims
        return {}


def size_names(exercise, case: Case) -> dict:
    """{size: [names]}: the case's integer arguments and tensor dims, then simple combinations
    (n ± 1, n // 2, 2·n, a·b, a // b), most direct first."""
    dims = _dim_names(exercise)
    prim: list = []
    args = _named_args(exercise, case)
    has_tensor = any(isinstance(v, torch.Tensor) for _, v in args)
    for name, v in args:
        if isinstance(v, bool) or (name in ("dim", "axis") and (has_tensor or not isinstance(v, int) or v <= 0)):
            continue  # a dim index, not a size
        if isinstance(v, int):
            prim.append((name, v))
        elif isinstance(v, torch.Tensor) and v.dim() >= 1:
            labels = dims.get(name) or []
            for d in range(v.dim()):
                neg = d - v.dim()
                label = f"{name}.shape[{neg}]"
                if labels and "..." not in labels[neg:] and -len(labels) <= neg:
                    dn = labels[neg]
                    if _IDENT.match(dn or ""):
                        label = dn
                prim.append((label, int(v.shape[d])))
    seen, base = set(), []
    for n, v in prim:
        if n not in seen and v >= 1:
            seen.add(n)
            base.append((n, v))
    names: dict = {}

    def add(label, value):
        if isinstance(value, int) and value >= 0 and label not in names.setdefault(value, []):
            names[value].append(label)

    for n, v in base:
        add(n, v)
    for n, v in base:
        add(f"{n} + 1", v + 1)
        add(f"{n} − 1", v - 1)
        if v % 2 == 0:
            add(f"{n} // 2", v // 2)
        add(f"2·{n}", 2 * v)
        add(f"3·{n}", 3 * v)
        add(f"4·{n}", 4 * v)
    quotients = []
    for a, va in base:
        for b, vb in base:
            if a == b or vb < 2:
                continue
            if va % vb == 0 and va // vb >= 1:
                add(f"{a} // {b}", va // vb)
                quotients.append((f"{a} // {b}", va // vb, a, b))
            if a < b:
                add(f"{a}·{b}", va * vb)
    for q, vq, a, b in quotients:
        for c, vc in base:
            if c not in (a, b):
                add(f"{c}·({q})", vc * vq)
    for n, v in base:  # one off a half or a quotient: D // 2 + 1
        if v % 2 == 0:
            add(f"{n} // 2 + 1", v // 2 + 1)
            add(f"{n} // 2 − 1", v // 2 - 1)
    for q, vq, _, _ in quotients:
        add(f"{q} + 1", vq + 1)
        add(f"{q} − 1", vq - 1)
    raw = re.compile(r"\.shape\[")
    for v in names:  # the simplest first: fewer operations, then the contract's dim names over x.shape[d]
        names[v].sort(key=lambda n: (len(re.findall(r" // | \+ | − |·", n)), bool(raw.search(n))))
    return names


def _name_slots(numbers_per_case: list, names_per_case: list) -> list:
    """For each slot j: the names that fit numbers_per_case[i][j] in every case i. Only across two
    cases at least (one case names its sizes by coincidence too easily), and never a size below 3."""
    slots = []
    for j in range(len(numbers_per_case[0])):
        common, evidence = None, 0
        for nums, names in zip(numbers_per_case, names_per_case):
            if j >= len(nums) or nums[j] < 3:
                continue  # a size of 0, 1 or 2 says nothing: too many things have it
            here = names.get(nums[j], [])
            evidence += 1
            common = list(here) if common is None else [n for n in common if n in here]
        slots.append(common if common and evidence >= 2 and numbers_per_case[0][j] >= 3 else [])
    return slots


def _plain(names: list) -> list:
    """The names without combinations when a direct one (an argument, a dim) is among them."""
    direct = [n for n in names if not re.search(r"[ ·/+−]", n)]
    return direct or names


def _say_size(value, names: list) -> str:
    if not names:
        return f"{value}"
    shown = _plain(names)[:2]
    return f"{value} (= {' or '.join(shown)})"


def _off_by_one(a: list, b: list) -> bool:
    """True when one slot is named only as the other's ± 1 (no direct name of its own)."""
    for one, other in ((a, b), (b, a)):
        if one and _plain(one) == one and any(re.search(r"[ ·/+−]", n) for n in one):
            if any(x in (f"{y} + 1", f"{y} − 1") for x in one for y in _plain(other)):
                return True
    return False


# ----------------------------------------------------------------------------------------------
# Crashes: what the error means, at the learner's line
# ----------------------------------------------------------------------------------------------
_WHERE = re.compile(r" raised (\w+) \(at line (\d+): `(.*?)`\): ", re.S)


def _crash_parts(error: str, crashed) -> tuple:
    """(type, text, line number or None, code or '') of a crashed case."""
    m = _WHERE.search(error or "")
    msg = getattr(crashed, "message", "") or ""
    etype, _, text = msg.partition(": ")
    if m:
        return m.group(1), text or error[m.end():], int(m.group(2)), re.sub(r"\s+#.*$", "", m.group(3)).strip()
    return etype, text or (error or ""), None, ""


def _at(line, code) -> str:
    if line is None:
        return ""
    return f"at line {line} (`{code}`)" if code and len(code) <= 90 else f"at line {line}"


def _float_dtype(exercise, case) -> torch.dtype | None:
    for _, v in _named_args(exercise, case):
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            return v.dtype
    for v in case.kwargs.values():
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            return v.dtype
    return None


def _none_args(exercise, case) -> list:
    """Names of the arguments that are None in this case (given as None or left at a None default)."""
    from ._model import _input_names

    given = dict(zip(_input_names(exercise, len(case.args)), case.args)) | dict(case.kwargs)
    given |= {n: v for n, v in _named_args(exercise, case) if n not in given}
    targets = [exercise.reference.forward, exercise.reference.__init__] if exercise.kind == "class" else \
        [exercise.reference]
    params = {}
    for target in targets:
        try:
            params |= {n: p for n, p in inspect.signature(target).parameters.items() if n not in params}
        except (TypeError, ValueError):
            pass
    out = [n for n, v in given.items() if v is None]
    out += [n for n, p in params.items() if n not in given and n not in ("self", "ctx") and p.default is None]
    return out


def _nones_in(exercise, case, code: str) -> list:
    """The None arguments of the case that the learner's line names."""
    return [n for n in _none_args(exercise, case) if code and re.search(rf"\b{re.escape(n)}\b", code)]


def _matmul_cause(s: list) -> str:
    """What two named inner sizes of a matrix product that disagree say (nothing when unnamed)."""
    if _off_by_one(s[0], s[1]):
        return ": one of them is off by one (a range, slice or length)"
    if s[0] and s[1] and not set(s[0]) & set(s[1]):
        return ": a transpose is missing or extra, or the operands are in the wrong order"
    return ""


def _explain(exercise, case, etype: str, text: str, line, code: str):
    """(kind, numbers, render(slots) -> sentence) for one crash, or None when nothing is known."""
    at = _at(line, code)
    where = f" {at}" if at else ""
    t = text.strip()

    m = re.search(r"The size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\) at non-singleton "
                  r"dimension (\d+)", t)
    if m:
        a, b, d = int(m.group(1)), int(m.group(2)), int(m.group(3))

        def render(s):
            why = ""
            if _off_by_one(s[0], s[1]):
                why = ": one of them is off by one (a range, slice or length)"
            elif s[0] and s[1] and not set(s[0]) & set(s[1]):
                why = (": sizes that stand for different things meet, so one operand's dims are not where the line "
                       "expects them (a dim dropped or kept: keepdim, squeeze, unsqueeze; a transpose or view missing, "
                       "extra or on the wrong dims), or it is not the tensor meant")
            return (f"the two tensors combined element-wise{where} disagree in dim {d}: {_say_size(a, s[0])} "
                    f"against {_say_size(b, s[1])}{why}.")
        return ("broadcast", [a, b], render)

    m = re.search(r"mat1 and mat2 shapes cannot be multiplied \((\d+)x(\d+) and (\d+)x(\d+)\)", t)
    if m:
        n1, k1, k2, n2 = map(int, m.groups())

        def render(s):
            return (f"in the matrix product{where}, the left operand's last dim is {_say_size(k1, s[0])} but the "
                    f"right operand's first dim is {_say_size(k2, s[1])}; they must be equal (A (n, k) @ B (k, m))"
                    f"{_matmul_cause(s)}.")
        return ("matmul", [k1, k2], render)

    m = re.search(r"Expected size for first two dimensions of batch2 tensor to be: \[(\d+), (\d+)\] but got: "
                  r"\[(\d+), (\d+)\]", t)
    if m:
        b1, k1, b2, k2 = map(int, m.groups())
        if b1 == b2:
            def render(s):
                return (f"in the matrix product{where}, the left operand's last dim is {_say_size(k1, s[0])} but the "
                        f"right operand's dim -2 is {_say_size(k2, s[1])}; they must be equal (… (n, k) @ … (k, m))"
                        f"{_matmul_cause(s)}.")
            return ("bmm", [k1, k2], render)

        def render(s):
            return (f"in the matrix product{where}, the batch dims disagree: {_say_size(b1, s[0])} against "
                    f"{_say_size(b2, s[1])}.")
        return ("bmm batch", [b1, b2], render)

    m = re.search(r"size mismatch, got input \((\d+)\), mat \((\d+)x(\d+)\), vec \((\d+)\)", t)
    if m:
        k1, k2 = int(m.group(3)), int(m.group(4))

        def render(s):
            return (f"in the matrix-vector product{where}, the matrix has {_say_size(k1, s[0])} columns but the "
                    f"vector has {_say_size(k2, s[1])} entries.")
        return ("mv", [k1, k2], render)

    m = re.search(r"shape '\[([\d, -]*)\]' is invalid for input of size (\d+)", t)
    if m:
        shape = [int(x) for x in m.group(1).split(",") if x.strip()]
        total = int(m.group(2))

        def render(s):
            shown = ", ".join(_say_size(v, n) for v, n in zip(shape, s))
            prod = math.prod(v for v in shape if v >= 0)
            ratio = ""
            if prod and total % prod == 0 and total // prod > 1:
                ratio = f": the shape is missing a factor {total // prod}"
            elif prod and prod % max(total, 1) == 0 and total and prod // total > 1:
                ratio = f": the shape has an extra factor {prod // total}"
            return (f"the reshape (view){where} asks for shape [{shown}] of a tensor with {total} elements{ratio}.")
        return ("view", shape, render)

    m = re.search(r"unflatten: Provided sizes \[([\d, -]*)\] don't multiply up to the size of dim (-?\d+) \((\d+)\)", t)
    if m:
        sizes = [int(x) for x in m.group(1).split(",") if x.strip()]
        d, n = int(m.group(2)), int(m.group(3))

        def render(s):
            shown = ", ".join(_say_size(v, nm) for v, nm in zip(sizes, s))
            return (f"unflatten{where} splits dim {d}, of size {_say_size(n, s[-1])}, into [{shown}], which does not "
                    "multiply up to it: the dim or the sizes are wrong.")
        return ("unflatten", sizes + [n], render)

    if "view size is not compatible with input tensor's size and stride" in t:
        return ("view stride", [], lambda s: (
            f"view{where} needs a contiguous tensor, and this one is not (after a transpose or permute, or a "
            "non-contiguous input): use .reshape(...), or .contiguous().view(...)."))

    m = re.search(r"Dimension out of range \(expected to be in range of \[(-?\d+), (-?\d+)\], but got (-?\d+)\)", t)
    if m:
        lo, hi, got = map(int, m.groups())
        ndim = hi + 1
        return ("dim range", [], lambda s: (
            f"dim {got} is asked{where} of a tensor with only {ndim} dim{'s' if ndim != 1 else ''}: that tensor has "
            "fewer dims than the line expects (a dim dropped earlier, or the wrong dim number)."))

    m = re.search(r"index (-?\d+) is out of bounds for dimension (\d+) with size (\d+)", t)
    if m:
        idx, d, n = map(int, m.groups())
        return ("index", [n], lambda s: (
            f"index {idx} is used{where} along dim {d}, whose size is {_say_size(n, s[0])}: an index or a "
            "length is off."))

    m = re.search(r"too many indices for tensor of dimension (\d+)", t)
    if m:
        nd = int(m.group(1))
        return ("indices", [], lambda s: f"the tensor indexed{where} has only {nd} dims, fewer than the indices given.")

    if re.search(r"Expected reduction dim .* to have non-zero size|on tensor with no elements|"
                 r"numel\(\) == 0|cannot reshape tensor of 0 elements", t):
        return ("empty", [], lambda s: (
            f"an empty tensor is reduced{where}: a slice or a range there has no elements (its bounds are "
            "off, or a loop runs one step too far)."))

    if re.search(r"upper bound and lower bound inconsistent with step sign", t):
        return ("arange", [], lambda s: (
            f"torch.arange{where} got a start beyond its end: its bounds are swapped or off."))

    m = re.search(r"The expanded size of the tensor \((\d+)\) must match the existing size \((\d+)\) at "
                  r"non-singleton dimension (\d+)", t)
    if m:
        a, b, d = map(int, m.groups())
        return ("expand", [a, b], lambda s: (
            f"the tensor expanded{where} has {_say_size(b, s[1])} in dim {d}, where {_say_size(a, s[0])} is "
            "asked for."))

    m = re.search(r"Sizes of tensors must match except in dimension (\d+)\. Expected size (\d+) but got size (\d+)", t)
    if m:
        d, a, b = map(int, m.groups())
        return ("cat", [a, b], lambda s: (
            f"the tensors concatenated{where} disagree in a dim other than {d}: {_say_size(a, s[0])} against "
            f"{_say_size(b, s[1])}."))

    m = re.search(r"stack expects each tensor to be equal size, but got \[([\d, ]*)\] at entry (\d+) and "
                  r"\[([\d, ]*)\] at entry (\d+)", t)
    if m:
        return ("stack", [], lambda s: (
            f"the tensors stacked{where} have different shapes: [{m.group(1)}] and [{m.group(3)}]."))

    if re.search(r"(masked_fill_? only supports boolean masks|operator\.invert\) is only implemented on integer "
                 r"and Boolean|where expected condition to be a boolean tensor|argument 'condition' .*must be "
                 r"BoolTensor|expected.*mask.*bool)", t, re.I):
        return ("bool mask", [], lambda s: (
            f"a mask{where} is not a bool tensor (True/False): masks are dtype=torch.bool; build them with "
            "comparisons or dtype=torch.bool, not as 0/1 floats."))

    if re.search(r"(expected m1 and m2 to have the same dtype|expected scalar type (Double|Float) but found "
                 r"(Double|Float)|Found dtype (Double|Float) but expected (Double|Float)|expected both vectors to have "
                 r"same dtype|same dtype, but got|expected (mat1|self) and (mat2|vec) to have the same dtype|"
                 r"to have the same dtype)", t):
        dt = _float_dtype(exercise, case)
        inputs = f" This case's inputs are {str(dt).replace('torch.', '')}" if dt is not None else ""
        return ("dtype", [], lambda s: (
            f"float32 and float64 tensors meet{where}.{inputs}: a tensor created inside without dtype=... (torch.ones, "
            "torch.arange, torch.tensor, torch.full) is float32 (or int64); create it with the inputs' dtype "
            "(dtype=x.dtype)."))

    if re.search(r"could not infer output dtype\. Input dtype must be either a floating point|not implemented for "
                 r"'Long'|not implemented for 'Int'|result type Float can't be cast to the desired output type Long",
                 t):
        return ("long", [], lambda s: (
            f"an integer tensor reaches a floating-point operation{where}: torch.arange and torch.tensor of whole "
            "numbers are int64; give them a floating dtype (dtype=x.dtype) first."))

    m = re.search(r"modified by an inplace operation: \[torch\.(\w+) \[([\d, ]*)\]\], which is output (\d+) of "
                  r"(\w+?)(?:Backward\d*)?,", t)
    if m:
        op = m.group(4)
        return ("inplace autograd", [], lambda s: (
            f"in a gradient case, the output of {op} (shape [{m.group(2)}]) was changed in place after autograd "
            "saved it for the backward pass: an in-place op on it (masked_fill_, nan_to_num_, +=, *=, an indexed "
            "assignment, a function with inplace=True); write that step out of place."))

    if re.search(r"is a view and (is being|its base or another view of its base has been) modified inplace", t):
        return ("inplace view", [], lambda s: (
            f"in a gradient case, a view (a slice, transpose or reshape) is changed in place{where}: write that "
            "step out of place."))

    if "element 0 of tensors does not require grad and does not have a grad_fn" in t:
        return ("no grad", [], lambda s: (
            "in a gradient case, the output is cut off from the inputs: autograd cannot reach them (.detach(), "
            ".data, .item(), numpy, torch.tensor(...) of a result, or torch.no_grad() around the computation)."))

    if etype in ("NameError", "UnboundLocalError"):
        m = re.search(r"name '(\w+)' is not defined|local variable '(\w+)'", t)
        if m:
            var = m.group(1) or m.group(2)
            return (f"name {var}", [], lambda s: (
                f"`{var}` is read{where} but no assignment to it ran before: the line that assigns it is missing, "
                "misspelt, placed after this one or inside a branch that did not run."))

    if etype == "AttributeError":
        m = re.search(r"'(\w+)' object has no attribute '(\w+)'", t)
        if m:
            owner, attr = m.groups()
            if owner == "NoneType":
                nones = _nones_in(exercise, case, code)
                extra = f" (in this case {', '.join(nones)} {'is' if len(nones) == 1 else 'are'} None)" if nones else ""
                return ("none attr", [], lambda s: (
                    f"a value that is None is used{where} as an object{extra}: a None argument is not handled, "
                    "or a function returned nothing."))
            if re.search(rf"\bself\.{attr}\b", code):
                return (f"attr {attr}", [], lambda s: (
                    f"`{attr}` is read{where} from a {owner} that never set it: assign self.{attr} in __init__ (or "
                    "before this line), with that exact name."))
            return (f"attr {owner}.{attr}", [], lambda s: (
                f"a {owner} has no attribute `{attr}`{where}: the object used there is a {owner}, not the kind of "
                "object the line expects (or that attribute was never set)."))

    if etype == "TypeError":
        if "NoneType" in t:
            nones = _nones_in(exercise, case, code)
            extra = (f" In this case {', '.join(nones)} {'is' if len(nones) == 1 else 'are'} None (the signature "
                     "allows it): see how that value reaches this line." if nones else "")
            return ("none", [], lambda s: (
                f"None is used as a value{where} (a tensor or a number is needed there).{extra}"))
        if re.search(r"must be tuple of ints, but found element of type float|'float' object cannot be interpreted "
                     r"as an integer|slice indices must be integers|argument 'size'.*float|argument 'shape'.*float|"
                     r"type must be tuple of ints,\s*but got float", t):
            return ("float size", [], lambda s: (
                f"a size or an index is a float{where}: `/` always gives a float; sizes and indices need integer "
                "division `//` (or int(...))."))
        if "Boolean value of Tensor with more than one value is ambiguous" in t:
            return ("bool tensor", [], lambda s: (
                f"a tensor with several values is used{where} where Python needs one True/False (in if, and, or, "
                "not, or as a flag or a number argument)."))
        m = re.search(r"(\w+)\(\): argument '(\w+)' \(position (\d+)\) must be (\w+), not (\w+)", t)
        if m:
            fn, arg, pos, want, got = m.groups()
            return (f"arg {fn}", [], lambda s: (
                f"{fn}(){where} got a {got} for its argument '{arg}' (position {pos}), which must be a {want}: its "
                "arguments are in the wrong order or of the wrong kind."))
        m = re.search(r"(\w+)\(\) received an invalid combination of arguments - got \(([^)]*)\)", t)
        if m:
            fn, got = m.groups()
            return (f"combo {fn}", [], lambda s: (
                f"{fn}(){where} was called with arguments ({got}), a combination it does not accept: its arguments "
                "are in the wrong order or of the wrong kind."))
        m = re.search(r"cannot unpack non-iterable (\w+) object|(\w+) object is not iterable", t)
        if m:
            what = m.group(1) or m.group(2)
            return ("unpack", [], lambda s: (
                f"a {what} is unpacked{where} as if it held several values: the function called there returns one "
                "value (or nothing) where several are expected."))
        m = re.search(r"'(\w+)' object is not callable", t)
        if m:
            what = m.group(1)
            return ("callable", [], lambda s: (
                f"a {what} is called like a function{where}: a name that holds a value shadows the function or "
                "module meant, or the parentheses are misplaced."))
        m = re.search(r"(\w+)\(\) (missing \d+ required positional argument|takes \d+ positional arguments? but "
                      r"\d+ (were|was) given|got an unexpected keyword argument '\w+')", t)
        if m:
            return (f"call {m.group(1)}", [], lambda s: (
                f"the call{where} gives {m.group(1)}() another set of arguments than it takes ({m.group(2)})."))

    if etype == "ValueError":
        m = re.search(r"(too many|not enough) values to unpack \(expected (\d+)(?:, got (\d+))?\)", t)
        if m:
            return ("unpack n", [], lambda s: (
                f"unpacking{where} expects {m.group(2)} values but gets {m.group(3) or 'more'}: the value unpacked "
                "has another number of items (a tuple returned, a shape of another length)."))

    if etype == "ZeroDivisionError":
        return ("zero division", [], lambda s: f"a division by zero{where}: a size or a count is 0 there.")

    if code.startswith(("raise ", "assert ")) or (etype == "AssertionError" and code.startswith("assert")):
        what = "assert" if code.startswith("assert") else "raise"
        shown = ", ".join(f"{n}={v}" for n, v in _named_args(exercise, case) if isinstance(v, (int, float, bool)))
        args = f" ({shown})" if shown else ""
        return (f"own {what}", [], lambda s: (
            f"your own {'assert' if what == 'assert' else 'check'}{where} refuses this case{args}, which the "
            "contract allows: its condition is wrong."))
    return None


def crash_clues(exercise, cases: list, outputs: list, errors: list, failed: list) -> list:
    """One sentence about the error of the first crashed failing case, its sizes named by what
    they are in every failing case that raised the same error at the same line."""
    from ._diagnose import _Crashed

    crashed = [i for i in failed if isinstance(outputs[i], _Crashed)
               and not outputs[i].message.startswith("over budget")]
    if not crashed:
        return []
    found = []
    for i in crashed:
        etype, text, line, code = _crash_parts(errors[i], outputs[i])
        try:
            got = _explain(exercise, cases[i], etype, text, line, code)
        except Exception:  # noqa: BLE001 - a diagnosis never breaks a verdict
            got = None
        found.append((i, line, got))
    first = found[0] if found[0][2] is not None else None
    if first is None:
        return []
    i0, line0, (kind0, nums0, render0) = first
    group = [(i, g) for i, line, g in found if g is not None and g[0] == kind0 and line == line0
             and len(g[1]) == len(nums0)]
    slots, named_all = [[] for _ in nums0], True
    if nums0:
        try:
            slots = _name_slots([g[1] for _, g in group], [size_names(exercise, cases[i]) for i, _ in group])
            if not any(slots):
                named_all = False
        except Exception:  # noqa: BLE001
            pass
    if len(group) == 1:
        where = f"in case [{cases[i0].label}]"
    elif named_all:
        where = (f"in all {len(group)} failing cases that raised it" if len(group) == len(crashed) and len(group) > 2
                 else f"in {len(group)} failing cases that raised it")
    else:
        where = f"in case [{cases[i0].label}] (and {len(group) - 1} more that raised it at that line)"
    return [f"{where}, {render0(slots)}"]


# ----------------------------------------------------------------------------------------------
# Shapes: a wrong output (or parameter) shape, its sizes named
# ----------------------------------------------------------------------------------------------
_PARAM_SHAPE = re.compile(r"([\w.]+) has shape \(([\d, ]*)\), expected \(([\d, ]*)\)")


def _shape_clue(exercise, cases, items: list):
    """items: [(case index, what, got shape, expected shape)] for one tensor across cases."""
    i0, what, g0, e0 = items[0]
    if len(g0) != len(e0):
        return None
    bad = [d for d in range(len(e0)) if g0[d] != e0[d]]
    same = [it for it in items if len(it[2]) == len(e0) and [d for d in range(len(e0)) if it[2][d] != it[3][d]] == bad]
    if not bad:
        return None
    nums = [[it[2][d] for d in bad] + [it[3][d] for d in bad] for it in same]
    names = [size_names(exercise, cases[it[0]]) for it in same]
    slots = _name_slots(nums, names)
    k = len(bad)
    parts = []
    for j, d in enumerate(bad):
        got_names, exp_names = slots[j], slots[k + j]
        if not got_names and not exp_names:
            continue
        why = ": off by one" if _off_by_one(got_names, exp_names) else ""
        parts.append(f"dim {d} is {_say_size(g0[d], got_names)} where {_say_size(e0[d], exp_names)} is expected{why}")
    if not parts:
        return None
    where = (("in both failing cases" if len(same) == 2 else f"in all {len(same)} failing cases")
             if len(same) == len(items) else f"in {len(same)} failing cases")
    return f"{where}, {what} has shape {tuple(g0)} instead of {tuple(e0)}: {'; '.join(parts)}."


def shape_clues(exercise, cases: list, outputs: list, expected: list, errors: list, failed: list) -> list:
    from ._diagnose import _Crashed, _leaves
    from ._compare import name_paths

    per_path: dict = {}
    for i in failed:
        out = outputs[i]
        if isinstance(out, _Crashed):
            m = _PARAM_SHAPE.search(errors[i] or "")
            if m:
                g = [int(x) for x in m.group(2).split(",") if x.strip()]
                e = [int(x) for x in m.group(3).split(",") if x.strip()]
                per_path.setdefault(m.group(1), []).append((i, m.group(1), g, e))
            continue
        if cases[i].judge is not None or expected[i] is None:
            continue
        for path, e, g in _leaves(expected[i], out):
            if isinstance(e, torch.Tensor) and isinstance(g, torch.Tensor) and tuple(e.shape) != tuple(g.shape):
                name = name_paths(exercise, path)
                per_path.setdefault(name, []).append((i, f"your {name}", list(g.shape), list(e.shape)))
                break
    for path, items in per_path.items():
        try:
            clue = _shape_clue(exercise, cases, items)
        except Exception:  # noqa: BLE001
            clue = None
        if clue:
            return [clue]
    return []


# ----------------------------------------------------------------------------------------------
# Transformations: the reference on the case with one thing changed gives the learner's output
# ----------------------------------------------------------------------------------------------
_MISSING = object()


def _params_of(exercise) -> dict:
    target = exercise.reference.forward if exercise.kind == "class" else exercise.reference
    try:
        return {n: p for n, p in inspect.signature(target).parameters.items() if n not in ("self", "ctx")}
    except (TypeError, ValueError):
        return {}


def _get(exercise, case: Case, name: str):
    from ._model import _input_names

    names = _input_names(exercise, len(case.args))
    if name in names[:len(case.args)]:
        return case.args[names.index(name)]
    if name in case.kwargs:
        return case.kwargs[name]
    p = _params_of(exercise).get(name)
    return p.default if p is not None and p.default is not inspect.Parameter.empty else _MISSING


def _with(exercise, case: Case, name: str, value) -> Case:
    from ._model import _input_names

    names = _input_names(exercise, len(case.args))
    if name in names[:len(case.args)]:
        args = list(case.args)
        args[names.index(name)] = value
        return replace(case, args=tuple(args))
    return replace(case, kwargs={**case.kwargs, name: value})


def _left_out(exercise, case: Case, name: str) -> bool:
    return name not in case.kwargs and name not in _given_positional(exercise, case)


def _shift(m: torch.Tensor, s: int) -> torch.Tensor:
    """The mask moved by s positions along its last dim (the edge column repeated)."""
    if s > 0:
        return torch.cat([m[..., :1].expand(*m.shape[:-1], s), m[..., :-s]], dim=-1)
    return torch.cat([m[..., -s:], m[..., -1:].expand(*m.shape[:-1], -s)], dim=-1)


def _input_transforms(exercise, case: Case) -> list:
    """[(key, sentence, apply(case) -> case or None)] changing one argument of the call."""
    out = []
    params = _params_of(exercise)
    given = [(n, _get(exercise, case, n)) for n in params]
    given = [(n, v) for n, v in given if v is not _MISSING]
    for n, v in given:
        if isinstance(v, torch.Tensor) and v.dtype == torch.bool and v.numel() > 1:
            def on(fn, n=n):
                def apply(c):
                    m = _get(exercise, c, n)
                    return _with(exercise, c, n, fn(m)) if isinstance(m, torch.Tensor) and m.dtype == torch.bool else None
                return apply
            if params[n].default is None:
                out.append((f"{n} ignored", f"{n} is ignored (as if {n}=None)", lambda c, n=n: (
                    _with(exercise, c, n, None) if isinstance(_get(exercise, c, n), torch.Tensor) else None)))
            out.append((f"{n} negated", f"{n} is read the other way round (~{n}): True means \"may attend\"",
                        on(lambda m: ~m)))
            if v.dim() >= 2:
                out.append((f"{n} transposed", f"{n} is used transposed in its last two dims ({n}.mT)",
                            on(lambda m: m.mT)))
            if v.shape[-1] >= 2:
                for s in (1, -1):
                    out.append((f"{n} shifted {s}", f"{n} is shifted by one position along its last dim (towards "
                                f"{'higher' if s > 0 else 'lower'} key indices): an off-by-one",
                                on(lambda m, s=s: _shift(m, s) if m.shape[-1] >= 2 else None)))
    for n, p in params.items():
        d = p.default
        if d is inspect.Parameter.empty or isinstance(d, bool) or not isinstance(d, int) or _left_out(exercise, case, n) is False:
            continue
        others = sorted({d + 1, d - 1} | (set(range(-4, 4)) if "dim" in n else set()))
        for to in others:
            if to == d or (d >= 0 and to < 0 and "dim" not in n):
                continue
            out.append((f"default {n} {to}", f"{n}, left out, defaults to {to} instead of {d} (the signature's default)",
                        lambda c, n=n, to=to: _with(exercise, c, n, to) if _left_out(exercise, c, n) else None))
    floats = [(n, v) for n, v in given if isinstance(v, torch.Tensor) and v.is_floating_point()]
    for i, (a, va) in enumerate(floats):
        for b, vb in floats[i + 1:]:
            if va.shape == vb.shape and not torch.equal(va, vb):
                def swap(c, a=a, b=b):
                    x, y = _get(exercise, c, a), _get(exercise, c, b)
                    if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)) or x.shape != y.shape:
                        return None
                    return _with(exercise, _with(exercise, c, a, y), b, x)
                out.append((f"swap {a} {b}", f"{a} and {b} are used in each other's place", swap))
    for n, v in given:
        if isinstance(v, bool):
            out.append((f"flip {n}", None, lambda c, n=n: (
                _with(exercise, c, n, not _get(exercise, c, n)) if isinstance(_get(exercise, c, n), bool) else None)))
        elif isinstance(v, int):
            def moved(c, n=n, d=0, to=None):
                x = _get(exercise, c, n)
                if not isinstance(x, int) or isinstance(x, bool) or _left_out(exercise, c, n):
                    return None
                y = x + d if to is None else to
                if y == x or (x >= 0 and y < 0 and "dim" not in n):
                    return None
                return _with(exercise, c, n, y)
            for d in (1, -1):
                out.append((f"{n} {d:+d}", None, lambda c, n=n, d=d: moved(c, n, d)))
            if "dim" in n:  # another dim altogether
                for to in range(-4, 4):
                    out.append((f"{n} ={to}", None, lambda c, n=n, to=to: moved(c, n, to=to)))
    return out


def _say_input_transform(key: str, sentence, cases_used: list, exercise) -> str:
    if sentence:
        return sentence
    if key.startswith("flip "):
        n = key[5:]
        vals = {_get(exercise, c, n) for c in cases_used}
        if len(vals) == 1:
            v = vals.pop()
            return f"called with {n}={not v} instead of {v}: {n} is ignored or read the other way round"
        return f"{n} is read the other way round"
    n, d = key.rsplit(" ", 1)
    vals = [_get(exercise, c, n) for c in cases_used]
    given = all(n in c.kwargs or n in _given_positional(exercise, c) for c in cases_used)
    has = "the case has" if given else "the case leaves it at its default,"
    if d.startswith("="):
        return f"called with {n}={d[1:]} ({has} {vals[0]}): {n} is not used as given"
    eg = f"e.g. {n}={vals[0] + int(d)} where {has} {vals[0]}"
    return f"called with {n} {'+ 1' if d == '+1' else '− 1'} ({eg}): {n} is used off by one"


def _given_positional(exercise, case) -> list:
    from ._model import _input_names

    return _input_names(exercise, len(case.args))[:len(case.args)]


def _param_transforms(state: dict) -> list:
    """[(key, sentence, apply(state) -> state or None)] changing one parameter (or swapping two)."""
    out = []
    names = [n for n, t in state.items() if isinstance(t, torch.Tensor) and t.is_floating_point()]

    def change(n, fn):
        def apply(st):
            if n not in st:
                return None
            new = fn(st[n])
            return None if new is None else {**st, n: new}
        return apply

    singles = []
    for n in names:
        t = state[n]
        owner = n.rsplit(".", 1)[0] if "." in n else "the module"
        if t.dim() == 1 and n.endswith("bias"):
            singles.append((f"{n} zero", f"{n} is not added (as if {n} were zeros)", change(n, torch.zeros_like)))
            singles.append((f"{n} neg", f"{n} enters with the opposite sign (as if {n} were −{n})", change(n, torch.neg)))
        elif t.dim() == 1:
            singles.append((f"{n} ones", f"{n} is not applied (as if {n} were all ones)", change(n, torch.ones_like)))
            singles.append((f"{n} neg", f"{n} enters with the opposite sign", change(n, torch.neg)))
        elif t.dim() == 2:
            singles.append((f"{n} zero", f"{owner} contributes nothing (as if {n} were zeros): its output is dropped or "
                        "multiplied by 0", change(n, torch.zeros_like)))
            if t.shape[0] == t.shape[1]:
                singles.append((f"{n} eye", f"{owner} is not applied (as if {n} were the identity)",
                            change(n, lambda w: torch.eye(w.shape[0], dtype=w.dtype))))
                singles.append((f"{n} T", f"{n} is used transposed (x @ W where x @ W.T is meant, or the reverse)",
                            change(n, lambda w: w.t().contiguous())))
            singles.append((f"{n} neg", f"{owner}'s output enters with the opposite sign", change(n, torch.neg)))
    owners: dict = {}
    for n in names:
        owner, _, leaf = n.rpartition(".")
        owners.setdefault(owner, {})[leaf] = tuple(state[n].shape)
    groups = list(owners.items())
    for i, (oa, la_) in enumerate(groups):
        for ob, lb_ in groups[i + 1:]:
            if oa and ob and la_ == lb_ and len(la_) > 1 and oa.rpartition(".")[0] == ob.rpartition(".")[0]:
                def swap_modules(st, oa=oa, ob=ob, leaves=tuple(la_)):
                    new, swapped = dict(st), 0
                    for leaf in leaves:
                        a, b = f"{oa}.{leaf}", f"{ob}.{leaf}"
                        if (a in st) != (b in st):
                            return None
                        if a in st and st[a].shape == st[b].shape:
                            new[a], new[b] = st[b], st[a]
                            swapped += 1
                    return new if swapped else None
                out.append((f"swap {oa} {ob}", f"{oa} and {ob} are used in each other's place", swap_modules))
    for i, a in enumerate(names):
        pa, la = a.rsplit(".", 2)[0] if a.count(".") >= 2 else "", a.rsplit(".", 1)[-1]
        for b in names[i + 1:]:
            pb, lb = b.rsplit(".", 2)[0] if b.count(".") >= 2 else "", b.rsplit(".", 1)[-1]
            if pa == pb and la == lb and state[a].shape == state[b].shape:
                def swap(st, a=a, b=b):
                    if a not in st or b not in st:
                        return None
                    return {**st, a: st[b], b: st[a]}
                ma, mb = a.rsplit(".", 1)[0], b.rsplit(".", 1)[0]
                out.append((f"swap {a} {b}", f"{a} and {b} are used in each other's place", swap))
    return out + singles


def _forward_part(out):
    """A grad case's result without its gradients (a transformation is judged on the outputs)."""
    if isinstance(out, dict):
        return {k: v for k, v in out.items() if not str(k).startswith("dL/d")}
    return out


TRANSFORM_SECONDS = 0.6  # CPU time the transformations may take


def transform_clues(exercise, cases: list, outputs: list, expected: list, errors: list, failed: list,
                    deadline: float | None = None) -> list:
    """'your output equals the reference's with <one thing changed>' in every failing case, and
    the change leaves the passing cases right."""
    from .._guard import unguarded
    from ._diagnose import _Crashed

    compared = [i for i in failed if not isinstance(outputs[i], _Crashed) and cases[i].judge is None
                and expected[i] is not None]
    if not compared or len(compared) < len([i for i in failed if cases[i].judge is None]):
        return []  # every failing case must be explained: none may have crashed
    passing = [i for i, e in enumerate(errors) if not e and cases[i].judge is None and expected[i] is not None]
    ref = unguarded(exercise.reference)
    deadline = deadline if deadline is not None else time.process_time() + TRANSFORM_SECONDS

    def run(case, i):
        with torch.random.fork_rng():
            reseed(case_seed(i))
            return exercise.call(ref, case, observe=False)

    def matches(new_case, i, got) -> bool:
        try:
            out = run(new_case, i)
        except Exception:  # noqa: BLE001 - the reference cannot run the changed case
            return False
        return compare(_forward_part(out), _forward_part(got), *tolerance(exercise, cases[i])) is None

    first = cases[compared[0]]
    candidates = [("input", k, s, fn) for k, s, fn in _input_transforms(exercise, first)]
    state = first.init.get("state") if exercise.kind == "class" else None
    if isinstance(state, dict):
        def via_state(fn):
            def apply(c):
                st = c.init.get("state")
                new = fn(st) if isinstance(st, dict) else None
                return None if new is None else replace(c, init={**c.init, "state": new})
            return apply
        candidates += [("param", k, s, via_state(fn)) for k, s, fn in _param_transforms(state)]
    for what, key, sentence, apply in candidates:
        if time.process_time() > deadline:
            break
        ok = True
        for i in compared:
            try:
                new = apply(cases[i])
            except Exception:  # noqa: BLE001
                new = None
            if new is None or not matches(new, i, outputs[i]):
                ok = False
                break
        if not ok:
            continue
        for i in passing:  # the change must leave the passing cases right (where it applies)
            try:
                new = apply(cases[i])
            except Exception:  # noqa: BLE001
                new = None
            if new is not None and not matches(new, i, expected[i]):
                ok = False
                break
        if not ok:
            continue
        if what == "input":
            sentence = _say_input_transform(key, sentence, [cases[i] for i in compared], exercise)
        judged = len(compared) < len(failed)
        where = ("in both failing cases" if len(compared) == 2 and not judged else
                 f"in all {len(compared)} failing cases" + (" compared with the reference" if judged else "")
                 if len(compared) >= 2 else f"in case [{cases[compared[0]].label}]")
        return [f"{where}, your output equals the reference's when {sentence}."]
    return []


# ----------------------------------------------------------------------------------------------
# Where the differences lie: fully masked rows, hidden keys, one index of one dim
# ----------------------------------------------------------------------------------------------
def _bad(e: torch.Tensor, g: torch.Tensor, atol: float, rtol: float) -> torch.Tensor:
    e, g = e.detach().double(), g.detach().double()
    nan = torch.isnan(e) ^ torch.isnan(g)
    both = torch.isnan(e) & torch.isnan(g)
    same_inf = torch.isinf(e) & (e == g)
    err = (g - e).abs().nan_to_num(nan=0.0, posinf=math.inf)
    tol = atol + rtol * e.abs().nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)
    return nan | (~both & ~same_inf & ~nan & (err > tol))


def _masks(exercise, case: Case) -> list:
    return [(n, v) for n, v in _named_args(exercise, case) + list(case.kwargs.items())
            if isinstance(v, torch.Tensor) and v.dtype == torch.bool and v.dim() >= 1]


def _where_one(exercise, case: Case, e: torch.Tensor, g: torch.Tensor, path: str, atol: float, rtol: float):
    """(kind, sentence) saying where ``g`` differs from ``e``, or None."""
    bad = _bad(e, g, atol, rtol)
    if not bool(bad.any()) or bool(bad.all()):
        return None
    nan_only = bool((torch.isnan(g.detach()) & ~torch.isnan(e.detach()))[bad].all())
    what = "has NaN" if nan_only else "differs"
    for n, m in _masks(exercise, case):
        hidden_rows = ~m.any(-1)  # (..., S_q): query rows with no key to attend to
        if bool(hidden_rows.any()) and e.dim() >= 1:
            rows = bad.any(-1)
            try:
                target = torch.broadcast_to(hidden_rows, rows.shape) if hidden_rows.dim() <= rows.dim() else None
            except RuntimeError:
                target = None
            if target is not None and bool((rows == target).all()):
                exp_zero = bool((e.detach()[bad] == 0).all())
                tail = " (expected zeros there)" if exp_zero else ""
                return ("fully masked rows", f"your {path} {what} exactly in the rows whose {n} is all False (the fully "
                        f"masked query rows){tail} and is right everywhere else")
        try:
            hidden = torch.broadcast_to(~m, bad.shape)
        except RuntimeError:
            continue
        if bool((bad & ~hidden).any()) is False:
            return ("hidden keys", f"your {path} {what} only where {n} is False (the hidden keys) and is right "
                    "everywhere else")
    if e.dim() >= 1 and e.shape[-1] >= 2 and e.shape[-1] % 2 == 0:
        cols = bad.reshape(-1, e.shape[-1]).any(0)
        for parity, which in ((0, "even"), (1, "odd")):
            want = torch.arange(e.shape[-1]) % 2 == parity
            if bool((cols == want).all()):
                return (f"parity {which}", f"your {path} {what} only at the {which} indices of the last dim (the "
                        f"{'first' if parity == 0 else 'second'} element of each pair 2i, 2i + 1) and is right at the "
                        f"{'odd' if parity == 0 else 'even'} ones")
    for d in range(e.dim()):
        n = e.shape[d]
        if n < 3:
            continue
        per = bad.transpose(0, d).reshape(n, -1).any(-1)
        idx = per.nonzero().flatten().tolist()
        if len(idx) == 1:
            k = idx[0]
            which = "first" if k == 0 else "last" if k == n - 1 else f"index {k}"
            return (f"one index {d - e.dim()} {which}", f"your {path} {what} only at the {which} "
                    f"{'index' if which in ('first', 'last') else ''} along dim {d - e.dim()} (size {n}) and is right "
                    "everywhere else".replace("  ", " "))
        if len(idx) == n - 1:
            k = next(j for j in range(n) if j not in idx)
            which = "first" if k == 0 else "last" if k == n - 1 else None
            if which:
                return (f"all but {d - e.dim()} {which}", f"your {path} is right only at the {which} index along "
                        f"dim {d - e.dim()} (size {n})")
    return None


def where_clues(exercise, cases: list, outputs: list, expected: list, failed: list) -> list:
    from ._compare import name_paths
    from ._diagnose import _Crashed, _leaves

    found = []
    for i in failed:
        if isinstance(outputs[i], _Crashed) or cases[i].judge is not None or expected[i] is None:
            continue
        atol, rtol = tolerance(exercise, cases[i])
        hit = None
        for path, e, g in _leaves(expected[i], outputs[i]):
            if not (isinstance(e, torch.Tensor) and isinstance(g, torch.Tensor) and e.is_floating_point()
                    and g.is_floating_point() and e.shape == g.shape and e.numel() > 1):
                continue
            if compare(e, g, atol, rtol) is None:
                continue
            try:
                hit = _where_one(exercise, cases[i], e, g, name_paths(exercise, path), atol, rtol)
            except Exception:  # noqa: BLE001
                hit = None
            break
        found.append((i, hit))
    hits = [(i, h) for i, h in found if h is not None]
    kinds = {h[0] for _, h in hits}
    if not hits or len(kinds) != 1 or (len(hits) < len(found) and (len(hits) < 2 or 3 * len(hits) < 2 * len(found))):
        return []  # one pattern, in every failing case or in two thirds of them (the others showing none)
    i, (kind, sentence) = hits[0]
    if len(hits) < len(found):
        where = f"in {len(hits)} of the {len(found)} failing cases, e.g. [{cases[i].label}]"
    else:
        where = (f"in case [{cases[i].label}]" if len(found) == 1 else "in both failing cases" if len(found) == 2
                 else f"in all {len(found)} failing cases")
    return [f"{where}, {sentence}."]


# ----------------------------------------------------------------------------------------------
# Modules: the first sub-module whose output differs from the reference's
# ----------------------------------------------------------------------------------------------
def _first_tensor(x):
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, (tuple, list)) and x:
        return _first_tensor(x[0])
    return None


def _record_calls(exercise, impl, case: Case, i: int, learner: bool) -> list | None:
    """[[(name, input, output) in completion order] per top-level call] of the modules ``impl``
    builds for ``case``, named by their attribute paths from the root module."""
    from ._tripwires import learner_code

    events = []

    def hook(module, args, out):
        events.append((module, _first_tensor(args), _first_tensor(out)))

    handle = nn.modules.module.register_module_forward_hook(hook)
    try:
        with torch.no_grad(), torch.random.fork_rng():
            reseed(case_seed(i))
            with learner_code() if learner else contextlib.nullcontext():
                exercise.call(impl, case, observe=False)
    except Exception:  # noqa: BLE001 - the localisation never breaks a verdict
        return None
    finally:
        handle.remove()
    if not events:
        return None
    root = events[-1][0]  # a module's forward ends after its sub-modules': the last to end is the root
    names = {id(m): n for n, m in root.named_modules()}
    calls, current = [], []
    for m, x, y in events:
        if m is root:
            calls.append(current)
            current = []
        elif id(m) in names and next(m.parameters(), None) is not None:  # dropout, activations: not compared
            current.append((names[id(m)], x, y))
    return calls


def locate_submodule(exercise, impl, cases: list, outputs: list, expected: list, errors: list,
                     names=None) -> str | None:
    """In the first failing case a module runs on (not judged, no gradients), the first sub-module,
    by its attribute path, whose output differs from the reference's (the same weights loaded in
    both), and whether its input already differed. ``names(case)``: the sub-modules to compare
    (default: every one the reference calls)."""
    from .._guard import unguarded
    from ._diagnose import _Crashed

    if exercise.kind != "class":
        return None
    i = next((j for j, e in enumerate(errors) if e and not cases[j].grad and cases[j].judge is None
              and not isinstance(outputs[j], _Crashed) and cases[j].init.get("state") is not None), None)
    if i is None:
        return None
    case = cases[i]
    mine = _record_calls(exercise, impl, case, i, learner=True)
    theirs = _record_calls(exercise, unguarded(exercise.reference), case, i, learner=False)
    if not mine or not theirs or len(mine) != len(theirs):
        return None
    atol, rtol = (max(t, 1e-4) for t in tolerance(exercise, case))
    allowed = set(names(case)) if names is not None else None
    for c, (ours, refs) in enumerate(zip(mine, theirs)):
        got = {}
        for name, x, y in ours:
            got.setdefault(name, (x, y))
        last_ok, seen, skipped = None, set(), []
        for name, x, y in refs:
            if name in seen or (allowed is not None and name not in allowed):
                continue
            if name not in got:
                if name not in skipped:
                    skipped.append(name)  # the reference calls it, the learner's model never does
                continue
            seen.add(name)
            gx, gy = got[name]
            if y is None or gy is None or compare(y, gy, atol, rtol) is None:
                last_ok = name
                continue
            same_in = x is not None and gx is not None and compare(x, gx, atol, rtol) is None
            call = "" if len(refs) == 0 or len(theirs) == 1 else (
                " in the first forward call" if c == 0 else f" in forward call {c + 1} of {len(theirs)}")
            never = [n for n in skipped if not any(n.startswith(m + ".") for m in skipped if m != n)]
            if never and not same_in:
                shown = ", ".join(never[:3]) + (" …" if len(never) > 3 else "")
                where = (f"{name}, whose input already differs; before it, your model never called {shown}, which the "
                         "reference calls")
            elif same_in:
                where = f"{name}, whose input matches the reference's: the mistake is inside {name}"
            elif last_ok is not None:
                where = (f"{name}, whose input already differs although the output of {last_ok} matches: the mistake "
                         f"is in what happens between them")
            else:
                where = f"{name}, whose input already differs: the mistake is before it"
            return (f"in case [{case.label}], with forward hooks on your model's sub-modules and the reference's (the "
                    f"same weights in both){call}, the first whose output differs from the reference's is {where}.")
    return None


# ----------------------------------------------------------------------------------------------
# A number off by a factor made of the arguments
# ----------------------------------------------------------------------------------------------
def factor_clues(exercise, cases: list, outputs: list, expected: list, failed: list) -> list:
    """'your output is the expected one divided by num_layers·head_dim' in every failing case: the
    ratio of two numbers is a product of the case's integer arguments (and 2)."""
    import itertools

    from ._diagnose import _Crashed

    ratios = []
    for i in failed:
        e, g = expected[i], outputs[i]
        if isinstance(g, _Crashed) or cases[i].judge is not None:
            return []
        try:
            ev, gv = float(e), float(g)
        except (TypeError, ValueError, RuntimeError):
            return []
        if isinstance(e, bool) or ev == 0 or gv == 0 or not (math.isfinite(ev) and math.isfinite(gv)):
            return []
        ratios.append((i, gv / ev))
    if not ratios:
        return []
    params = list(_params_of(exercise))
    rows = [{n: _get(exercise, cases[i], n) for n in params} for i, _ in ratios]
    names = [n for n in params if all(isinstance(r[n], int) and not isinstance(r[n], bool) and r[n] >= 1 for r in rows)
             and any(r[n] >= 2 for r in rows)]
    if not names:
        return []
    ints = [[(n, r[n]) for n in names] for r in rows]
    for size in range(1, min(len(names), 4) + 1):
        for combo in itertools.combinations(range(len(names)), size):
            for two in (1, 2):
                for up in (True, False):
                    ok = True
                    for (i, r), row in zip(ratios, ints):
                        f = two * math.prod(row[j][1] for j in combo)
                        want = f if up else 1 / f
                        if abs(r - want) > 1e-9 * abs(want):
                            ok = False
                            break
                    if ok:
                        factor = "·".join((["2"] if two == 2 else []) + [names[j] for j in combo])
                        how = f"times {factor}: an extra factor" if up else f"divided by {factor}: a factor missing"
                        where = "in both failing cases" if len(ratios) == 2 else (
                            f"in all {len(ratios)} failing cases" if len(ratios) > 2 else f"in case [{cases[ratios[0][0]].label}]")
                        return [f"{where}, your output is the expected one {how}."]
    return []


def none_clues(exercise, cases: list, outputs: list, expected: list, failed: list) -> list:
    """'your code returned None' (the whole output or one part of it) in the failing cases."""
    from ._compare import name_paths
    from ._diagnose import _Crashed, _leaves

    hits = []
    for i in failed:
        out = outputs[i]
        if isinstance(out, _Crashed) or cases[i].judge is not None or expected[i] is None:
            continue
        if out is None:
            hits.append((i, "output"))
            continue
        for path, e, g in _leaves(expected[i], out):
            if g is None and e is not None:
                hits.append((i, name_paths(exercise, path)))
                break
    if not hits or len({p for _, p in hits}) != 1:
        return []
    i, path = hits[0]
    where = f"in case [{cases[i].label}]" if len(hits) == 1 else f"in {len(hits)} failing cases"
    if path == "output":
        return [f"{where}, your code returned None: a return statement is missing or not reached (a branch that "
                "falls through), or it returns the result of something that returns nothing."]
    return [f"{where}, your {path} is None: what is returned in its place holds None (a variable left at None, or "
            "the result of something that returns nothing)."]
