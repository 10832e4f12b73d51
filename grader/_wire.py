"""The re-check's wire format: plain values and tensors, never pickle (issue 25 §1).

One message is ``MAGIC``, the length of a JSON header (8 bytes, little-endian), the header, then
the tensors' raw bytes. The header is ``{"value": V, "tensors": [meta, ...]}`` where V is JSON:
``null``, booleans, numbers (``NaN``/``Infinity`` too), strings, lists, and three tagged objects:
``{"d": {...}}`` a dict with string keys, ``{"t": [...]}`` a tuple, ``{"T": i}`` tensor ``i``.
A tensor's meta is its dtype, shape, strides and where its bytes are (``at``, ``nbytes``).

Decoding costs time and memory linear in the message's size, whatever it holds: the header is
read by ``json`` (linear; its size is capped, ``MAX_HEADER``), the value is walked once to a
bounded depth, every tensor's bytes must lie inside the data and the tensors' bytes must add up to
exactly the data (no tensor can claim more memory than the message carries, and nothing else is
in it: two messages written one after the other are refused), and with
``strided=False`` (what the grader uses for a child's results) a tensor must be dense: its
elements are exactly its bytes, so no tensor is larger in memory than its share of the message.
The grader's parent and the sandboxed child both import this file (the child's copy is bound
read-only beside ``utils``).
"""
from __future__ import annotations

import json
import math
import struct

import torch

MAGIC = b"GRW1"
MAX_HEADER = 2**20  # a result's header holds a few hundred bytes a tensor: this bounds its objects to ~50 MiB
MAX_DEPTH = 16
MAX_TENSORS = 100_000
MAX_DIMS = 16
DTYPES = {str(d).replace("torch.", ""): d for d in (
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16,
    torch.float32, torch.float64, torch.complex64, torch.complex128)}


class WireError(ValueError):
    """A message that is not a well-formed wire message (or a value that cannot be one)."""


# ----------------------------------------------------------------------------------- encoding
def encode(value, contiguous: bool = False) -> bytes:
    """``value`` as a wire message. ``contiguous``: every tensor is sent dense (what a result
    must be); otherwise its strides are kept (an expanded or transposed input stays one)."""
    metas, chunks, size = [], [], [0]

    def tensor(t: torch.Tensor) -> dict:
        if len(metas) >= MAX_TENSORS:
            raise WireError("too many tensors")
        t = t.detach()
        if type(t) is not torch.Tensor:
            t = t.as_subclass(torch.Tensor)
        if t.layout != torch.strided or t.is_quantized or t.is_nested or t.device.type != "cpu":
            raise WireError(f"a {t.layout} tensor on {t.device} is not plain data")
        name = str(t.dtype).replace("torch.", "")
        if name not in DTYPES:
            raise WireError(f"tensors of dtype {t.dtype} are not sent")
        if t.is_conj():
            t = t.resolve_conj()
        if t.is_neg():
            t = t.resolve_neg()
        if contiguous or any(s < 0 for s in t.stride()):
            t = t.contiguous()
        span = 0 if t.numel() == 0 else 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
        base = t.as_strided((span,), (1,), t.storage_offset())
        data = base.contiguous().view(torch.uint8).numpy().tobytes() if span else b""
        stride = _contiguous_strides(list(t.shape)) if t.is_contiguous() else list(t.stride())
        metas.append({"dtype": name, "shape": list(t.shape), "stride": stride, "at": size[0],
                      "nbytes": len(data)})
        chunks.append(data)
        size[0] += len(data)
        return {"T": len(metas) - 1}

    def walk(x, depth: int):
        if depth > MAX_DEPTH:
            raise WireError("nested too deeply")
        if isinstance(x, torch.Tensor):
            return tensor(x)
        if x is None or isinstance(x, bool):
            return x
        if isinstance(x, str):
            return str(x)
        if isinstance(x, int):
            return int(x)
        if isinstance(x, float):
            return float(x)
        if type(x) is tuple:  # a subclass (a check's own cache type) is not plain data
            return {"t": [walk(v, depth + 1) for v in x]}
        if type(x) is list:
            return [walk(v, depth + 1) for v in x]
        if type(x) is dict:
            if not all(isinstance(k, str) for k in x):
                raise WireError("a dict with keys that are not strings")
            return {"d": {k: walk(v, depth + 1) for k, v in x.items()}}
        raise WireError(f"a {type(x).__name__} is not plain data")

    header = json.dumps({"value": walk(value, 0), "tensors": metas}, allow_nan=True,
                        separators=(",", ":")).encode()
    if len(header) > MAX_HEADER:
        raise WireError("the header is too large")
    return b"".join([MAGIC, struct.pack("<Q", len(header)), header, *chunks])


# ----------------------------------------------------------------------------------- decoding
def _contiguous_strides(shape: list) -> list:
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(n, 1)
    return list(reversed(strides))


def decode(message: bytes, strided: bool = False):
    """The value of a wire message; raises WireError for anything else. Linear in ``len(message)``
    in time and memory (module docstring)."""
    if not isinstance(message, (bytes, bytearray)) or message[:4] != MAGIC or len(message) < 12:
        raise WireError("not a wire message")
    (n,) = struct.unpack("<Q", message[4:12])
    if n > MAX_HEADER or 12 + n > len(message):
        raise WireError("the header is too large or cut short")
    try:
        header = json.loads(bytes(message[12:12 + n]).decode("utf-8"))
    except (ValueError, RecursionError, UnicodeDecodeError) as err:
        raise WireError(f"the header is not JSON ({type(err).__name__})") from None
    if not isinstance(header, dict) or not isinstance(header.get("tensors"), list) or "value" not in header:
        raise WireError("the header is not a wire header")
    data = memoryview(message)[12 + n:]
    metas = header["tensors"]
    if len(metas) > MAX_TENSORS:
        raise WireError("too many tensors")
    total = 0
    checked = []
    for m in metas:
        if not isinstance(m, dict) or m.get("dtype") not in DTYPES:
            raise WireError("a tensor of an unknown dtype")
        shape, stride, at, nbytes = m.get("shape"), m.get("stride"), m.get("at"), m.get("nbytes")
        if not (isinstance(shape, list) and isinstance(stride, list) and len(shape) == len(stride) <= MAX_DIMS
                and all(type(v) is int and 0 <= v < 2**62 for v in shape + stride)
                and type(at) is int and type(nbytes) is int and 0 <= at and 0 <= nbytes and at + nbytes <= len(data)):
            raise WireError("a malformed tensor")
        dtype = DTYPES[m["dtype"]]
        item = torch.empty((), dtype=dtype).element_size()
        numel = math.prod(shape)
        span = 0 if numel == 0 else 1 + sum((d - 1) * s for d, s in zip(shape, stride))
        if nbytes != span * item:
            raise WireError("a tensor whose bytes do not match its shape")
        if not strided and numel and stride != _contiguous_strides(shape):
            raise WireError("a result tensor that is not dense")
        total += nbytes
        checked.append((dtype, shape, stride, at, nbytes))
    if total != len(data):  # nor fewer: a message is exactly its header and its tensors' bytes
        raise WireError("the tensors' bytes do not add up to the message's")
    tensors = []
    for dtype, shape, stride, at, nbytes in checked:
        if nbytes:
            raw = torch.frombuffer(bytearray(data[at:at + nbytes]), dtype=torch.uint8)
            flat = (raw != 0) if dtype is torch.bool else raw.view(dtype)  # a bool is 0 or 1, whatever was sent
            tensors.append(flat.as_strided(shape, stride))
        else:
            tensors.append(torch.empty(shape, dtype=dtype))

    def walk(x, depth: int):
        if depth > MAX_DEPTH:
            raise WireError("nested too deeply")
        if x is None or isinstance(x, (bool, int, float, str)):
            return x
        if isinstance(x, list):
            return [walk(v, depth + 1) for v in x]
        if isinstance(x, dict) and len(x) == 1:
            (tag, inner), = x.items()
            if tag == "T" and type(inner) is int and 0 <= inner < len(tensors):
                return tensors[inner]
            if tag == "t" and isinstance(inner, list):
                return tuple(walk(v, depth + 1) for v in inner)
            if tag == "d" and isinstance(inner, dict):
                return {k: walk(v, depth + 1) for k, v in inner.items()}
        raise WireError("a malformed value")

    return walk(header["value"], 0)
