"""Codec internals: turning payloads into typed arrays and back (dtype codes, fp16 and int8
storage, rebuilding the payload's shape). No I/O, no headers: ``codec.py`` frames these."""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np

from .errors import CorruptBlockError, PayloadError

ALIGN = 64
MODES: tuple[str, ...] = ("raw", "fp16", "k16v8", "int8")
BYTES, LIST, DICT, PAIRS = 0, 1, 2, 3
_BF16 = 4  # stored as raw 16-bit words; numpy has no bfloat16
_DTYPES: dict[int, np.dtype[Any]] = {
    1: np.dtype("<f2"), 2: np.dtype("<f4"), 3: np.dtype("<f8"), _BF16: np.dtype("<u2"),
    5: np.dtype("i1"), 6: np.dtype("u1"), 7: np.dtype("<i2"), 8: np.dtype("<u2"),
    9: np.dtype("<i4"), 10: np.dtype("<u4"), 11: np.dtype("<i8"), 12: np.dtype("<u8"), 13: np.dtype("?"),
}  # fmt: skip
_CODES = {dt: c for c, dt in reversed(_DTYPES.items())}  # u2 maps to 8, not bf16
_F16, _I8 = 1, 5
_FLOATS = {1, 2, 3, _BF16}


_SUPPORTED = "use bytes, or a list/tuple/dict of numpy arrays or CPU torch tensors, or (K, V) pairs of them"


def _as_array(x: Any) -> tuple[np.ndarray, int]:
    """A C-contiguous little-endian array viewing (or copying) ``x``, and its dtype code."""
    if type(x).__module__.startswith("torch") and hasattr(x, "numpy"):
        t = x.detach().cpu().contiguous()
        if str(t.dtype) == "torch.bfloat16":  # numpy has no bfloat16: carry the 16-bit words
            return t.view(sys.modules["torch"].int16).numpy().view(np.uint16), _BF16
        x = t.numpy()
    if not isinstance(x, (np.ndarray, np.generic)):
        raise PayloadError(f"cannot encode a payload item of type {type(x).__name__}: {_SUPPORTED}")
    x = np.asarray(x)
    dt = x.dtype.newbyteorder("<") if x.dtype.byteorder == ">" else x.dtype
    if dt not in _CODES:
        raise PayloadError(f"cannot encode arrays of dtype {x.dtype}")
    # Not ascontiguousarray: it turns 0-d arrays into 1-d ones.
    x = x if x.flags.c_contiguous and x.dtype == dt else np.array(x, dtype=dt, order="C")
    return x, _CODES[dt]


def _flatten(payload: Any) -> tuple[int, list[tuple[str, np.ndarray, int]]]:
    """(payload kind, [(name, array, dtype code)])."""
    if isinstance(payload, (bytes, bytearray, memoryview)):
        return BYTES, [("", np.frombuffer(payload, dtype=np.uint8), 6)]
    if isinstance(payload, Mapping):
        if not all(isinstance(k, str) for k in payload):
            raise PayloadError("array names (dict keys) must be str")
        return DICT, [(k, *_as_array(v)) for k, v in payload.items()]
    if isinstance(payload, (list, tuple)):
        if payload and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in payload):
            return PAIRS, [("", *_as_array(a)) for pair in payload for a in pair]
        return LIST, [("", *_as_array(a)) for a in payload]
    raise PayloadError(f"cannot encode a payload of type {type(payload).__name__}: {_SUPPORTED}")


def _quantize(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """int8 values and one float16 scale per row (last axis), with |x - q*s| <= s/2 per element."""
    x32 = x.astype(np.float32, copy=False)
    amax = np.max(np.abs(x32), axis=-1, keepdims=True, initial=0.0)
    if not np.isfinite(amax).all():
        raise PayloadError("cannot quantize non-finite values (nan/inf) to int8")
    scale = (amax / 127.0).astype(np.float16)
    if not np.isfinite(scale).all():
        raise PayloadError("values too large for int8 with float16 scales (|x| > 8.3e6)")
    # Rounding the scale to float16 may shrink it; bump those rows so q never leaves [-127, 127].
    low = scale.astype(np.float32) * 127.0 < amax
    scale[low] = np.nextafter(scale[low], np.float16(np.inf))
    s32 = scale.astype(np.float32)
    inv = np.divide(1.0, s32, out=np.zeros_like(s32), where=s32 > 0)
    q = np.clip(np.rint(x32 * inv), -127, 127).astype(np.int8)
    return q, scale.reshape(x.shape[:-1])


def _to_f16(x: np.ndarray, code: int) -> np.ndarray:
    src = (x.astype(np.uint32) << 16).view(np.float32) if code == _BF16 else x
    big = np.abs(src) > 65504.0  # checked on the source: isfinite on float16 is a slow scalar loop
    if big.any() and np.isfinite(src[big]).any():
        raise PayloadError("values exceed the float16 range (|x| > 65504): use mode 'raw'")
    return src.astype(np.float16)


# float16 -> float32 by table lookup: exact, and about twice as fast as numpy's scalar cast loop.
_F16_TO_F32 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)


def _array(
    raw: Any, raw_len: int, scode: int, code: int, shape: tuple[int, ...], quant: int, off: int, n: int, soff: int,
    sn: int, mode: int,
) -> np.ndarray:  # fmt: skip
    dt = _DTYPES[scode]
    count = math.prod(shape)
    if off % ALIGN or off + n > raw_len or count * dt.itemsize != n:
        raise CorruptBlockError("array buffer out of bounds or of the wrong length")
    if quant:
        valid = scode == _I8 and code in _FLOATS and MODES[mode] in ("k16v8", "int8")
    else:
        valid = scode == code or (scode == _F16 and code in _FLOATS and MODES[mode] != "raw")
    if not valid:
        raise CorruptBlockError("stored and original dtypes do not match the mode")
    # frombuffer refuses an offset at the very end of the buffer, which an empty array may have.
    a = np.frombuffer(raw, dtype=dt, count=count, offset=off).reshape(shape) if count else np.empty(shape, dt)
    if quant:
        rows = shape[:-1] if shape else None
        if rows is None or soff % ALIGN or soff + sn > raw_len or math.prod(rows) * 2 != sn:
            raise CorruptBlockError("scale buffer out of bounds or of the wrong length")
        scale = np.frombuffer(raw, dtype="<f2", count=math.prod(rows), offset=soff).reshape(*rows, 1)
        if not np.isfinite(scale).all():
            raise CorruptBlockError("non-finite quantization scale")
        a = a.astype(np.float32) * scale.astype(np.float32)
    elif scode == _BF16:
        return (a.astype(np.uint32) << 16).view(np.float32)
    target = np.dtype(np.float32) if code == _BF16 else _DTYPES[code]
    if a.dtype == target:
        return a
    if scode == _F16 and target == np.float32:
        return np.take(_F16_TO_F32, a.view(np.uint16))
    return a.astype(target)


def _rebuild(kind: int, arrays: list[tuple[str, np.ndarray]]) -> Any:
    if kind == BYTES:
        if len(arrays) != 1 or arrays[0][1].dtype != np.uint8 or arrays[0][1].ndim != 1:
            raise CorruptBlockError("a bytes block holds exactly one uint8 vector")
        return arrays[0][1].tobytes()
    if kind == DICT and len({n for n, _ in arrays}) == len(arrays):
        return dict(arrays)
    if kind == PAIRS and len(arrays) % 2 == 0:
        return [(arrays[i][1], arrays[i + 1][1]) for i in range(0, len(arrays), 2)]
    if kind == LIST:
        return [a for _, a in arrays]
    raise CorruptBlockError(f"payload kind {kind} does not fit its {len(arrays)} arrays")
