"""What a demo cell needs to use a learner's module the way its check does (issue 26 §5).

A demo cell may use a learner's function only through what its check guarantees. A check loads
weights by the names the prompt gives (aliases allowed: a layer also held in an ``nn.ModuleDict``
or an ``nn.Sequential`` under another name) and counts each parameter once, so demo cells do too:

- ``load_weights(module, source)``: copy ``source``'s tensors (a module, e.g. the reference, or a
  state dict) into ``module`` by the prompt's names, whatever else the learner's module holds;
- ``count_parameters(module)``: the number of parameter elements, each parameter counted once
  however many names reach it.
"""
from __future__ import annotations

import torch
import torch.nn as nn

__all__ = ["load_weights", "count_parameters"]


def load_weights(module: nn.Module, source) -> nn.Module:
    """Copy ``source``'s parameters (and the buffers it names) into ``module`` by name, as the
    checks do (``utils.checks._core.load_state_strict``); returns ``module``."""
    from .checks._core import load_state_strict

    state = source.state_dict() if isinstance(source, nn.Module) else dict(source)
    load_state_strict(module, state, type(module).__name__)
    return module


def count_parameters(module: nn.Module) -> int:
    """Elements of ``module``'s parameters, each parameter once (by identity)."""
    seen, total = set(), 0
    for p in module.parameters(remove_duplicate=False) if _has_remove_duplicate() else module.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
    return total


def _has_remove_duplicate() -> bool:
    import inspect

    return "remove_duplicate" in inspect.signature(nn.Module.parameters).parameters
