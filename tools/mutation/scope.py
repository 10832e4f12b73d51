"""Which code an exercise's reference is made of, and the mutants of that code.

The scope of an exercise: its reference function, or every method of its reference class (only
the method named after the exercise when the exercise is one method of a class, as
``split_heads`` is of ``MultiHeadAttention``; the bases' methods when the class body has none, as
``TinyGPT`` is ``GPTModel``), and, transitively, the functions and classes they call that are
defined in the same module or in a helper module of ``utils`` (``utils.reference._common``,
``utils._gpt_model``). Another exercise's reference imported from another chapter is not mutated
(it has its own check). Everything here reads the public registry only: ``EXERCISES[name]``,
its ``reference`` and the reference's module.
"""
from __future__ import annotations

import ast
import hashlib
import importlib
import inspect
import io
import tokenize
from dataclasses import dataclass, field
from functools import lru_cache

from . import operators as ops

# modules whose code is never mutated (the checks, the guard, the clocks)
NOT_MUTATED = ("utils.checks", "utils._guard", "utils._clock", "utils._needs", "utils.measure",
               "utils.demo", "utils.plotting")


@dataclass
class ModuleInfo:
    name: str
    source: str
    tree: ast.Module
    defs: dict  # top-level name -> FunctionDef / ClassDef
    line_starts: list  # byte offset of each line in the UTF-8 source

    @property
    def data(self) -> bytes:
        return self.source.encode("utf-8")


@lru_cache(maxsize=None)
def module_info(name: str) -> ModuleInfo:
    mod = importlib.import_module(name)
    source = inspect.getsource(mod)
    tree = ast.parse(source)
    defs = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    starts, pos = [], 0
    for line in source.encode("utf-8").splitlines(keepends=True):
        starts.append(pos)
        pos += len(line)
    starts.append(pos)
    return ModuleInfo(name, source, tree, defs, starts)


@dataclass(frozen=True)
class Unit:
    module: str
    qualname: str
    node: ast.AST = field(compare=False, hash=False, repr=False)


@dataclass
class Mutant:
    exercise: str
    id: str
    op: str
    module: str
    unit: str
    line: int
    before: str
    after: str
    source: str = field(repr=False)  # the whole mutated module

    @property
    def diff(self) -> str:
        return f"L{self.line}: `{self.before}` → `{self.after}`"

    def to_task(self, probe: bool = False) -> dict:
        return {"exercise": self.exercise, "id": self.id, "module": self.module, "source": self.source,
                "probe": probe}


def _exercise_refs() -> set:
    from utils.checks import EXERCISES

    return {id(e.reference) for e in EXERCISES.values()}


def _helper_object(obj, here: str, refs: set):
    """(module, name) when ``obj``, seen from module ``here``, is code to mutate in another module."""
    mod = getattr(obj, "__module__", None)
    if not (inspect.isfunction(obj) or inspect.isclass(obj)) or not mod or mod == here:
        return None
    if not mod.startswith("utils.") or mod.startswith(NOT_MUTATED) or id(obj) in refs:
        return None
    # another exercise's reference, or a copy of it (``unguarded(MultiHeadAttention)``)
    chain = list(getattr(obj, "__mro__", ()))
    f = obj
    while f is not None and not inspect.isclass(f):
        chain.append(f)
        f = getattr(f, "__wrapped__", None)
    if any(id(o) in refs for o in chain):
        return None
    name = getattr(obj, "__name__", None)
    if name in module_info(mod).defs:
        return mod, name
    return None


def scope(exercise) -> list[Unit]:
    """The functions (as syntax nodes) whose mutants are this exercise's."""
    ref = exercise.reference
    refs = _exercise_refs()
    units: dict = {}
    queue: list = []

    def add_function(module: str, qualname: str, node):
        key = (module, qualname)
        if key not in units:
            units[key] = Unit(module, qualname, node)
            queue.append(units[key])

    def add_def(module: str, name: str, only_method: str | None = None):
        info = module_info(module)
        node = info.defs[name]
        if isinstance(node, ast.ClassDef):
            methods = [n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
            if only_method is not None:
                methods = [m for m in methods if m.name == only_method]
            for m in methods:
                add_function(module, f"{name}.{m.name}", m)
            if not methods or only_method is None:
                for base in node.bases:  # a class without methods of its own is its bases
                    if isinstance(base, ast.Name):
                        resolve(module, base.id, bases=not methods)
        else:
            add_function(module, name, node)

    def resolve(module: str, name: str, bases: bool = False):
        info = module_info(module)
        if name in info.defs:
            if (module, name) not in seen_defs:
                seen_defs.add((module, name))
                add_def(module, name)
            return
        obj = getattr(importlib.import_module(module), name, None)
        where = _helper_object(obj, module, refs)
        if where is not None and where not in seen_defs:
            seen_defs.add(where)
            add_def(*where)

    seen_defs: set = set()
    name, module = ref.__name__, ref.__module__
    info = module_info(module)
    node = info.defs[name]
    seen_defs.add((module, name))
    if isinstance(node, ast.ClassDef) and exercise.name != name and any(
            getattr(n, "name", None) == exercise.name for n in node.body):
        add_def(module, name, only_method=exercise.name)
    else:
        add_def(module, name)

    while queue:
        unit = queue.pop(0)
        for n in ast.walk(unit.node):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
                resolve(unit.module, n.id)
            elif (isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"
                  and "." in unit.qualname):
                cls = unit.qualname.split(".")[0]
                cnode = module_info(unit.module).defs.get(cls)
                for m in getattr(cnode, "body", []):
                    if isinstance(m, ast.FunctionDef) and m.name == n.attr:
                        add_function(unit.module, f"{cls}.{m.name}", m)
    return list(units.values())


# ----------------------------------------------------------------------------------------------
# walking a function and collecting its mutants
# ----------------------------------------------------------------------------------------------
def _is_guard(stmt) -> bool:
    """The reference guard's own plumbing (``if learner_is_running() ...: raise ForbiddenCall``)."""
    return any(isinstance(n, ast.Name) and n.id in ("learner_is_running", "ForbiddenCall")
               for n in ast.walk(stmt) if not isinstance(stmt, (ast.FunctionDef, ast.ClassDef)))


def _statements(body):
    for stmt in body:
        if _is_guard(stmt):
            continue
        yield stmt
        for fld in ("body", "orelse", "finalbody"):
            inner = getattr(stmt, fld, None)
            if isinstance(inner, list) and not isinstance(stmt, (ast.FunctionDef, ast.ClassDef)):
                yield from _statements(inner)
        for h in getattr(stmt, "handlers", []) or []:
            yield from _statements(h.body)


def _is_docstring(stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def _own_expressions(stmt):
    """The expression trees that belong to ``stmt`` itself (not to the statements nested in it)."""
    if isinstance(stmt, (ast.Raise, ast.Assert)):
        if isinstance(stmt, ast.Assert):
            yield stmt.test
        return
    for name, value in ast.iter_fields(stmt):
        if name in ("body", "orelse", "finalbody", "handlers", "decorator_list", "returns", "type_comment"):
            continue
        if isinstance(value, ast.expr):
            yield value
        elif isinstance(value, list):
            for v in value:
                if isinstance(v, ast.expr):
                    yield v
                elif isinstance(v, ast.withitem):
                    yield v.context_expr
                elif isinstance(v, ast.keyword):
                    yield v.value


def _expressions(root):
    """Every expression node under ``root``, skipping f-strings and string constants."""
    stack = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            continue
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
            node.operand._negated = True
        if isinstance(node, ast.expr):
            yield node
        stack.extend(reversed(list(ast.iter_child_nodes(node))))


def raw_mutations(unit: Unit):
    """(op, node, text) for every mutation of one function."""
    fn = unit.node
    found = list(ops.decorator_mutations(fn)) if "." not in unit.qualname else []
    info = module_info(unit.module)
    data = info.data

    def src(node):
        return _segment(info, data, node)

    for default in list(fn.args.defaults) + [d for d in fn.args.kw_defaults if d is not None]:
        for e in _expressions(default):
            found += ops.expression_mutations(e, src)
    body = fn.body[1:] if fn.body and _is_docstring(fn.body[0]) else fn.body
    for stmt in _statements(body):
        if isinstance(stmt, (ast.FunctionDef, ast.ClassDef)):
            continue
        found += ops.statement_mutations(stmt, src)
        for root in _own_expressions(stmt):
            for e in _expressions(root):
                if isinstance(getattr(e, "ctx", None), (ast.Store, ast.Del)) and isinstance(e, ast.Name):
                    continue
                found += ops.expression_mutations(e, src)
    return found


def _offsets(info: ModuleInfo, node) -> tuple[int, int]:
    return (info.line_starts[node.lineno - 1] + node.col_offset,
            info.line_starts[node.end_lineno - 1] + node.end_col_offset)


def _segment(info: ModuleInfo, data: bytes, node) -> str:
    a, b = _offsets(info, node)
    return data[a:b].decode("utf-8")


def _strip_comment(line: str) -> str:
    try:
        toks = list(tokenize.generate_tokens(io.StringIO(line).readline))
        for t in toks:
            if t.type == tokenize.COMMENT:
                return line[:t.start[1]].rstrip()
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    return line.rstrip()


def _one_line(text: str, limit: int = 200) -> str:
    parts = [_strip_comment(p).strip() for p in text.splitlines()]
    out = " ⏎ ".join(p for p in parts if p)
    return out if len(out) <= limit else out[:limit - 1] + "…"


def mutants_of(exercise) -> list[Mutant]:
    """Every mutant of an exercise, in a stable order, each once (by its mutated code)."""
    units = scope(exercise)
    rank = {op: i for i, op in enumerate(ops.ORDER)}
    candidates = []
    for unit in units:
        info = module_info(unit.module)
        for op, node, text in raw_mutations(unit):
            a, b = _offsets(info, node)
            candidates.append((unit, op, node, text, a, b))
    # the same mutated code from two operators counts once, named by the first in ORDER
    candidates.sort(key=lambda c: (c[0].module, c[4], c[5], rank[c[1]]))
    seen: set = set()
    out: list = []
    counts: dict = {}
    for unit, op, node, text, a, b in candidates:
        info = module_info(unit.module)
        data = info.data
        new = data[:a] + text.encode("utf-8") + data[b:]
        if new == data:
            continue
        key = (unit.module, new)
        if key in seen:
            continue
        seen.add(key)
        first_line, last_line = node.lineno, node.end_lineno
        line_a = info.line_starts[first_line - 1]
        line_b = info.line_starts[last_line]
        before_text = data[line_a:line_b].decode("utf-8")
        after_text = (data[line_a:a] + text.encode("utf-8") + data[b:line_b]).decode("utf-8")
        if isinstance(node, ast.stmt) and node.end_lineno > node.lineno:  # a block: its first line
            before_text = before_text.splitlines()[0] + " …"
        before, after = _one_line(before_text), _one_line(after_text)
        digest = hashlib.sha1(f"{unit.module}|{unit.qualname}|{before}|{after}".encode()).hexdigest()[:8]
        base = f"{unit.qualname}:{op}:{digest}"
        counts[base] = counts.get(base, 0) + 1
        mid = base if counts[base] == 1 else f"{base}#{counts[base] - 1}"
        out.append(Mutant(exercise.name, mid, op, unit.module, unit.qualname, first_line, before, after,
                          new.decode("utf-8")))
    return out


def all_mutants(names=None) -> dict:
    """{exercise name: [Mutant, ...]} for the given exercises (default: every exercise)."""
    from utils.checks import EXERCISES

    names = list(names) if names else list(EXERCISES)
    return {n: mutants_of(EXERCISES[n]) for n in names}
