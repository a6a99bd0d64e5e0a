"""Codec internals: typed arrays in storage form and back (fp16 and int8 storage, rebuilding the
payload's shape). Payload kinds, dtype codes and ``flatten`` live in ``payload.py`` (shared with the
memory tiers' check). No I/O, no headers: ``codec.py`` frames these."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .errors import CorruptBlockError, PayloadError
from .payload import _BF16, _DTYPES, ARRAY, BYTES, DICT, LIST, PAIRS

ALIGN = 64
MODES: tuple[str, ...] = ("raw", "fp16", "k16v8", "int8")
_F16, _I8 = 1, 5
_FLOATS = {1, 2, 3, _BF16}


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
    if kind == ARRAY and len(arrays) == 1:
        return arrays[0][1]
    raise CorruptBlockError(f"payload kind {kind} does not fit its {len(arrays)} arrays")
