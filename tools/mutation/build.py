"""A mutant as an implementation: its mutated module executed afresh, the exercise's object taken
from it without the reference guard.

The mutated module runs as a new module object that is never put in ``sys.modules``, with the real
module's name and package (so its relative imports work). When the mutation is in a helper module
(``utils.reference._common``, ``utils._gpt_model``), that module is executed mutated first, and the
exercise's module is executed afresh with its imports of the helper answered by the mutated copy.
Nothing of the real modules changes: the checks, the references and every other exercise keep
theirs. The mutated source is registered in ``linecache`` under a name of its own, so a traceback
(and a check's "at line N: `code`") shows the mutated line.
"""
from __future__ import annotations

import builtins
import importlib
import importlib.util
import linecache
import types

from .scope import module_info


class Stillborn(Exception):
    """The mutant does not compile, or its module does not execute, or it has no such object."""


def _importer(overrides: dict):
    real = builtins.__import__

    def __import__(name, globals=None, locals=None, fromlist=(), level=0):  # noqa: A001
        if overrides:
            package = (globals or {}).get("__package__")
            try:
                absolute = importlib.util.resolve_name("." * level + name, package) if level else name
            except (ImportError, ValueError):
                absolute = name
            if absolute in overrides and fromlist:
                return overrides[absolute]
        return real(name, globals, locals, fromlist, level)

    return __import__


def execute(module_name: str, source: str, overrides: dict | None = None, tag: str = "") -> types.ModuleType:
    """Run ``source`` as a fresh copy of module ``module_name`` (not registered anywhere)."""
    real = importlib.import_module(module_name)
    filename = f"<mutant {module_name}{' ' + tag if tag else ''}>"
    try:
        code = compile(source, filename, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as err:
        raise Stillborn(f"does not compile: {err}") from None
    lines = source.splitlines(keepends=True)
    linecache.cache[filename] = (len(source), None, lines, filename)
    mod = types.ModuleType(module_name, real.__doc__)
    own_builtins = dict(builtins.__dict__)
    own_builtins["__import__"] = _importer(overrides or {})
    mod.__dict__.update({"__package__": real.__package__, "__file__": filename, "__builtins__": own_builtins,
                         "__spec__": None, "__loader__": None})
    try:
        exec(code, mod.__dict__)
    except Exception as err:  # noqa: BLE001 - any failure to build is a stillborn mutant
        raise Stillborn(f"its module does not execute: {type(err).__name__}: {err}") from None
    return mod


def build(exercise, module_name: str, source: str, tag: str = ""):
    """The exercise's implementation with ``module_name`` replaced by ``source`` (unguarded)."""
    from utils._guard import unguarded

    ref = exercise.reference
    target = ref.__module__
    overrides = {}
    if module_name != target:
        overrides[module_name] = execute(module_name, source, tag=tag)
        target_source = module_info(target).source
        mod = execute(target, target_source, overrides, tag=f"{tag} via {module_name}")
    else:
        mod = execute(target, source, tag=tag)
    obj = getattr(mod, ref.__name__, None)
    if obj is None:
        raise Stillborn(f"the mutated module has no {ref.__name__}")
    try:
        return unguarded(obj)
    except Exception as err:  # noqa: BLE001
        raise Stillborn(f"cannot be unguarded: {type(err).__name__}: {err}") from None


def reference_copy(exercise):
    """The reference built the same way from its unmutated source (the tool's own control)."""
    ref = exercise.reference
    return build(exercise, ref.__module__, module_info(ref.__module__).source, tag="control")

