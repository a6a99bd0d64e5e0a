# The compiled key walk (native/ctxcache_native.c); keys.py holds the pure-Python reference.
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

XXH_VERSION: str
BLAKE3_VERSION: str

def token_bytes(tokens: Sequence[int] | np.ndarray) -> bytes | None: ...
def chain(buf: bytes, stride: int, start: int, stop: int, parent: bytes, secret: bytes, kind: int) -> list[bytes]: ...
def walk(
    buf: bytes,
    stride: int,
    n: int,
    keys: list[bytes],
    root: bytes,
    secret: bytes,
    kind: int,
    shards: Sequence[Any] | None,
    get: Callable[[bytes], Any] | None,
) -> list[Any]: ...
