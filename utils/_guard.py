"""The guard on ``utils.reference``: learner code may not call the reference it re-implements.

Kept apart from ``utils.checks`` so ``utils.reference`` can import it without a cycle.
"""
import inspect
import threading


_learner_depth = threading.local()


def learner_is_running() -> bool:
    return getattr(_learner_depth, "n", 0) > 0


class ForbiddenCall(Exception):
    def __init__(self, label: str, func_name: str):
        super().__init__(label, func_name)
        self.label = label
        self.func_name = func_name


def _reference_guard(fn):
    """Wraps every public function of ``utils.reference``: it may not be called by learner code."""

    def guarded(*args, **kwargs):
        if learner_is_running():
            raise ForbiddenCall("utils.reference", fn.__name__)
        return fn(*args, **kwargs)

    guarded.__wrapped__ = fn
    guarded.__name__ = fn.__name__
    guarded.__qualname__ = fn.__qualname__
    guarded.__doc__ = fn.__doc__
    guarded.__module__ = fn.__module__
    guarded.__signature__ = inspect.signature(fn)
    return guarded


def guard_reference_class(cls):
    """Make a reference class refuse to be built while learner code runs."""
    original_init = cls.__init__

    def __init__(self, *args, **kwargs):
        if learner_is_running():
            raise ForbiddenCall("utils.reference", cls.__name__)
        original_init(self, *args, **kwargs)

    __init__.__signature__ = inspect.signature(original_init)
    cls.__init__ = __init__
    cls._reference_init = original_init
    return cls


def unguarded(obj):
    """The reference without its guard: for mutants and tests that build on the reference.

    A function: the plain function. A class: a subclass of the same name whose ``__init__`` is
    the reference's own (mutant classes subclass this, never the guarded class).
    """
    if isinstance(obj, type):
        init = obj.__dict__.get("_reference_init") or obj._reference_init
        return type(obj.__name__, (obj,), {"__init__": init, "__module__": obj.__module__,
                                           "__qualname__": obj.__qualname__})
    return getattr(obj, "__wrapped__", obj)


def reference(obj):
    """Decorator for ``utils.reference``: functions and classes refuse to serve learner code."""
    if isinstance(obj, type):
        return guard_reference_class(obj)
    return _reference_guard(obj)


