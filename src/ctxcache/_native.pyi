# The compiled key walk (native/ctxcache_native.c); keys.py holds the pure-Python reference.
# table_prefix, table_upsert: the router index's prefix query and inserts (native/ctxcache_table.c; router/index.py's numpy path is the reference).
# stored_run: the KV events' per-block loop (native/ctxcache_events.c; events/watch.py's stored_run_py is the reference).
# Order: the LRU/FIFO order (native/ctxcache_order.c; policies/base.py's OrderedPolicy is the reference).
from collections.abc import Callable, Hashable, Iterable, Sequence
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
def shard_get_many(shards: list[Any], keys: Iterable[Hashable], p: int) -> list[Any]: ...
def table_prefix(
    keys: bytes,
    lo: np.ndarray,
    hi: np.ndarray,
    fast: np.ndarray,
    slow: np.ndarray,
    shared: np.ndarray,
    readers: np.ndarray,
    cap: int,
    bits: bytes,
) -> tuple[list[tuple[int, int, int]], bytes, bytes]: ...
def table_upsert(
    lo_keys: np.ndarray,
    hi_keys: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    cap: int,
    limit: int,
    max_used: int,
    used: int,
    out: np.ndarray,
) -> tuple[int, int, int]: ...
def stored_run(
    records: list[Any],
    i: int,
    pos: int,
    nodes: list[Any],
    owners: list[Any],
    tier: str,
    block_size: int,
    cls: type,
    kb: Callable[[Any], bytes],
    out: list[Any],
) -> int: ...

class Order:
    move_on_hit: bool
    def on_insert(self, key: Hashable, /) -> None: ...
    def on_hit(self, key: Hashable, /) -> None: ...
    def on_hits(self, keys: Iterable[Hashable], /) -> None: ...
    def on_remove(self, key: Hashable, /) -> None: ...
    def evict(self, can_evict: Callable[[Any], bool] | None = None, /) -> Any: ...
    def peek(self, can_evict: Callable[[Any], bool] | None = None, /) -> Any: ...
    def order_keys(self) -> list[Any]: ...
    def __contains__(self, key: object, /) -> bool: ...
    def __len__(self) -> int: ...
