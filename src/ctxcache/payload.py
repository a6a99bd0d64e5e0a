"""What a block's payload may be, in every tier: the kinds, the dtypes, and one check.

Kinds: bytes; one numpy array or CPU torch tensor; a list, tuple or dict (str keys) of them; a list
of (K, V) pairs of them. The codec encodes exactly these (``flatten``); a hot memory tier keeps
live objects but refuses anything else with the same error (``check_payload``), so a payload a
RAM tier took never fails later when it is spilled to disk or Redis.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import numpy as np

from .errors import PayloadError

BYTES, LIST, DICT, PAIRS, ARRAY = 0, 1, 2, 3, 4  # ARRAY: one bare array or tensor
_BF16 = 4  # stored as raw 16-bit words; numpy has no bfloat16
_DTYPES: dict[int, np.dtype[Any]] = {
    1: np.dtype("<f2"), 2: np.dtype("<f4"), 3: np.dtype("<f8"), _BF16: np.dtype("<u2"),
    5: np.dtype("i1"), 6: np.dtype("u1"), 7: np.dtype("<i2"), 8: np.dtype("<u2"),
    9: np.dtype("<i4"), 10: np.dtype("<u4"), 11: np.dtype("<i8"), 12: np.dtype("<u8"), 13: np.dtype("?"),
}  # fmt: skip
_CODES = {dt: c for c, dt in reversed(_DTYPES.items())}  # u2 maps to 8, not bf16


SUPPORTED = "use bytes, a numpy array, a CPU torch tensor, a list/tuple/dict of them, or (K, V) pairs of them"


def is_tensor(x: Any) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "numpy")


def _as_array(x: Any) -> tuple[np.ndarray, int]:
    """A C-contiguous little-endian array viewing (or copying) ``x``, and its dtype code."""
    if is_tensor(x):
        t = x.detach().cpu().contiguous()
        if str(t.dtype) == "torch.bfloat16":  # numpy has no bfloat16: carry the 16-bit words
            return t.view(sys.modules["torch"].int16).numpy().view(np.uint16), _BF16
        x = t.numpy()
    if not isinstance(x, (np.ndarray, np.generic)):
        raise PayloadError(f"cannot encode a payload item of type {type(x).__name__}: {SUPPORTED}")
    x = np.asarray(x)
    dt = x.dtype.newbyteorder("<") if x.dtype.byteorder == ">" else x.dtype
    if dt not in _CODES:
        raise PayloadError(f"cannot encode arrays of dtype {x.dtype}")
    # Not ascontiguousarray: it turns 0-d arrays into 1-d ones.
    x = x if x.flags.c_contiguous and x.dtype == dt else np.array(x, dtype=dt, order="C")
    return x, _CODES[dt]


def flatten(payload: Any) -> tuple[int, list[tuple[str, np.ndarray, int]]]:
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
    if isinstance(payload, np.ndarray) or is_tensor(payload):
        return ARRAY, [("", *_as_array(payload))]
    raise PayloadError(f"cannot encode a payload of type {type(payload).__name__}: {SUPPORTED}")


_TORCH_DTYPES = frozenset(
    f"torch.{n}"
    for n in [
        "float16",
        "float32",
        "float64",
        "bfloat16",
        "int8",
        "uint8",
        "int16",
        "uint16",
        "int32",
        "uint32",
        "int64",
        "uint64",
        "bool",
    ]
)


def _check_item(x: Any) -> None:
    if is_tensor(x):
        if str(x.dtype) not in _TORCH_DTYPES:
            raise PayloadError(f"cannot encode arrays of dtype {x.dtype}")
        return
    if not isinstance(x, (np.ndarray, np.generic)):
        raise PayloadError(f"cannot encode a payload item of type {type(x).__name__}: {SUPPORTED}")
    dt = x.dtype.newbyteorder("<") if x.dtype.byteorder == ">" else x.dtype
    if dt not in _CODES:
        raise PayloadError(f"cannot encode arrays of dtype {x.dtype}")


def check_payload(payload: Any) -> None:
    """Raise the PayloadError ``flatten`` would, without converting or copying anything."""
    if isinstance(payload, (bytes, bytearray, memoryview)):
        return
    if isinstance(payload, Mapping):
        if not all(isinstance(k, str) for k in payload):
            raise PayloadError("array names (dict keys) must be str")
        items = list(payload.values())
    elif isinstance(payload, (list, tuple)):
        pairs = payload and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in payload)
        items = [a for pair in payload for a in pair] if pairs else list(payload)
    elif isinstance(payload, np.ndarray) or is_tensor(payload):
        items = [payload]
    else:
        raise PayloadError(f"cannot encode a payload of type {type(payload).__name__}: {SUPPORTED}")
    for x in items:
        _check_item(x)
