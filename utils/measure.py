"""Measuring time and memory in the notebooks, the same way in every chapter.

- ``best_time(fn, *args)``: CPU seconds of the best of ``repeats`` calls after a warm-up, with
  torch on one thread, read from ``time.thread_time`` (other programs on the machine hardly
  inflate it). Report ratios, or name the machine: absolute times vary between machines.
- ``below(value, bound)``: assert that a residual (a float, or a tensor's largest absolute entry)
  is below ``bound`` and return the text to print, ``"< 1e-6"``. A residual's own digits (``3.6e-07``
  here, ``2.4e-07`` there) depend on the processor's vector instructions; the bound is what the
  notebook guarantees, so it is what the notebook prints (issue 23).
- ``peak_tensor_bytes(fn, *args)``: the peak of the bytes held by tensors that ``fn`` creates and
  that are alive at the same time, as seen by PyTorch's dispatcher (the inputs are not counted).
  Deterministic, unlike the process's resident memory. It sees every tensor a Python
  implementation creates. A fused C++ kernel (such as ``F.scaled_dot_product_attention``) is one
  dispatcher call: only its outputs are seen, not the buffers it allocates inside, so measure your
  own code with it, and report a fused kernel's memory as "not visible" (chapters 10, 11, 15).
"""
from __future__ import annotations

import time
import weakref

import torch

from ._clock import DispatchMode

__all__ = ["best_time", "peak_tensor_bytes", "below", "bound_text"]


def best_time(fn, *args, repeats: int = 7, **kwargs) -> float:
    """CPU seconds of the best of ``repeats`` calls of ``fn(*args, **kwargs)`` after a warm-up."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        fn(*args, **kwargs)
        times = []
        for _ in range(repeats):
            start = time.thread_time()
            fn(*args, **kwargs)
            times.append(time.thread_time() - start)
    finally:
        torch.set_num_threads(threads)  # leave the kernel as we found it
    return min(times)


class _LiveBytes(DispatchMode):
    def __init__(self):
        super().__init__()
        self.live = 0
        self.peak = 0
        self.refs: dict = {}  # storage address -> [bytes, number of live tensors on it]

    def _release(self, ptr):
        entry = self.refs.get(ptr)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            self.live -= entry[0]
            del self.refs[ptr]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if not isinstance(t, torch.Tensor) or t.device.type == "meta":
                continue
            storage = t.untyped_storage()
            ptr = storage.data_ptr()
            if ptr == 0:
                continue
            entry = self.refs.get(ptr)
            if entry is None:
                entry = self.refs[ptr] = [storage.nbytes(), 0]
                self.live += entry[0]
                self.peak = max(self.peak, self.live)
            entry[1] += 1
            weakref.finalize(t, self._release, ptr)
        return out


def peak_tensor_bytes(fn, *args, **kwargs) -> int:
    """Peak bytes of the tensors ``fn(*args, **kwargs)`` creates that are alive at once."""
    mode = _LiveBytes()
    with torch.no_grad(), mode:
        result = fn(*args, **kwargs)
    del result
    return mode.peak


def bound_text(bound: float) -> str:
    """``1e-06`` written as ``1e-6``, ``2.5e-05`` as ``2.5e-5``, ``0.01`` as ``0.01``."""
    if bound >= 1e-3:
        return f"{bound:g}"
    mantissa, exponent = f"{bound:.1e}".split("e")
    mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{int(exponent)}"


def below(value, bound: float, what: str = "") -> str:
    """Assert ``value < bound`` and return ``"< bound"`` for printing.

    ``value``: a number, or a tensor (its largest absolute entry); NaN fails. ``what`` names the
    quantity in the assert's message. Print the result, not the value: only the bound holds on
    every processor.
    """
    if isinstance(value, torch.Tensor):
        value = value.detach().abs().max().item() if value.numel() else 0.0
    value = float(value)
    assert value < bound, f"{what or 'residual'} = {value:.3g}, expected below {bound_text(bound)}"
    return f"< {bound_text(bound)}"
