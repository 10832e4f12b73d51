"""``%%needs fn1 fn2``: a demo cell that waits for the learner's exercises.

Written as the first line of a demo cell in a notebook::

    %%needs attention_entropy
    entropies = attention_entropy(weights)  # (B, H, S_q)
    plot_lines(...)

While any named function or class is still the release's stub (its body only raises
``NotImplementedError``) or not defined yet, the cell is skipped and prints one line saying what
it waits for; otherwise the cell runs exactly as if the first line were not there (its last
expression is displayed, errors are raised as usual). It is an IPython input transformer, so the
cell is never nested inside another execution. Registered when ``utils`` is imported in an IPython
kernel; the grader strips the line (demo cells run only their definitions there).
"""
from __future__ import annotations

import inspect

MAGIC = "%%needs"


def is_stub(obj) -> bool:
    """True when ``obj`` is still a stub: a function whose body (after its docstring) only raises
    NotImplementedError, or a class with such a method. Decided from the code object, so it needs
    no source."""
    if inspect.isclass(obj):
        for value in vars(obj).values():
            fn = getattr(value, "__func__", value)  # staticmethod / classmethod
            if inspect.isfunction(fn) and is_stub(fn):
                return True
        return False
    code = getattr(obj, "__code__", None)
    if code is None:
        return False
    return "NotImplementedError" in code.co_names and set(code.co_names) <= {"NotImplementedError"}


def waiting_for(names: list, namespace: dict) -> list:
    """The names, out of ``names``, that are missing from ``namespace`` or still stubs."""
    return [n for n in names if n not in namespace or is_stub(namespace[n])]


def _message(waiting: list, namespace: dict) -> str:
    missing = [n for n in waiting if n not in namespace]
    stubs = [n for n in waiting if n in namespace]
    parts = []
    if stubs:
        parts.append(", ".join(f"`{n}`" for n in stubs) + " (not implemented yet)")
    if missing:
        parts.append(", ".join(f"`{n}`" for n in missing) + " (not defined yet: run its exercise cell)")
    return f"⏳ This cell waits for {' and '.join(parts)}: it runs once that exercise is done."


def _parse(line: str) -> list:
    return [n for n in line[len(MAGIC):].replace(",", " ").split() if n.isidentifier()]


def transformer(lines: list, namespace_of=None) -> list:
    """IPython cleanup transformer: rewrite a ``%%needs`` cell before it runs."""
    if not lines or not lines[0].startswith(MAGIC):
        return lines
    names = _parse(lines[0])
    ns = namespace_of() if namespace_of else {}
    waiting = waiting_for(names, ns)
    if waiting:
        return [f"print({_message(waiting, ns)!r})\n"]
    return [f"# needs {' '.join(names)}\n"] + lines[1:]  # same line numbers as the cell


def register(ip) -> None:
    """Install the transformer (and a cell magic of the same name, for frontends that bypass
    transformers) in the IPython shell ``ip``; idempotent."""
    if getattr(ip, "_attention_course_needs", False):
        return

    def transform(lines):
        return transformer(lines, lambda: ip.user_ns)

    ip.input_transformers_cleanup.insert(0, transform)

    def needs(line, cell):
        waiting = waiting_for(_parse(MAGIC + " " + line), ip.user_ns)
        if waiting:
            print(_message(waiting, ip.user_ns))
            return None
        ip.run_cell(cell)
        return None

    ip.register_magic_function(needs, magic_kind="cell", magic_name="needs")
    ip._attention_course_needs = True
