# The compiled key walk (native/ctxcache_native.c); keys.py holds the pure-Python reference.
# table_prefix, table_upsert: the router index's prefix query and inserts (native/ctxcache_table.c; router/index.py's numpy path is the reference).
# stored_run: the KV events' per-block loop (native/ctxcache_events.c; events/watch.py's stored_run_py is the reference).
# Order: the LRU/FIFO order (native/ctxcache_order.c; policies/base.py's OrderedPolicy is the reference).
# BlockTable: blocks by slot id (native/ctxcache_blocks*.c; blocktable.py's PyBlockTable is the reference).
# replay_*: the simulator's object-semantics loops (native/ctxcache_replay*.c; each policy's reference is
# Policy.replay_object, policies/replay.py): each fills the fresh policy's empty containers it is given.
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

import numpy as np
from typing_extensions import Buffer

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

class BlockTable:
    """Blocks by slot id: key, token bytes, node fields, a key -> slot map and an LRU list.

    native/ctxcache_blocks*.c; blocktable.py's PyBlockTable is the reference.
    """

    key_width: int
    token_bytes: int
    slots_used: int
    def __init__(self, key_width: int = 16, token_bytes: int = 64) -> None: ...
    def insert(self, key: bytes, parent: bytes | None, tokens: Buffer, depth: int, tag: int = 0, /) -> int: ...
    def get(self, key: bytes, /) -> int: ...
    def remove(self, key: bytes, /) -> None: ...
    def match(
        self, keys: Sequence[bytes], tokens: Buffer, /, *, touch: bool = False, slots: list[int] | None = None
    ) -> int: ...
    def key(self, slot: int, /) -> bytes: ...
    def tokens(self, slot: int, /) -> bytes: ...
    def parent(self, slot: int, /) -> int: ...
    def parent_key(self, slot: int, /) -> bytes | None: ...
    def depth(self, slot: int, /) -> int: ...
    def children(self, slot: int, /) -> int: ...
    def pins(self, slot: int, /) -> int: ...
    def tier(self, slot: int, /) -> int: ...
    def tag(self, slot: int, /) -> int: ...
    def set_tier(self, slot: int, tier: int, /) -> None: ...
    def pin(self, slot: int, /) -> int: ...
    def unpin(self, slot: int, /) -> int: ...
    def lru_touch(self, slot: int, /) -> None: ...
    def lru_front(self) -> int: ...
    def lru_next(self, slot: int, /) -> int: ...
    def memory_bytes(self) -> int: ...
    def __contains__(self, key: object, /) -> bool: ...
    def __len__(self) -> int: ...

def replay_2q(
    requests: list[Any], capacity: int, kin: int, kout: int, ain: Any, aout: Any, am: Any, /
) -> int | None: ...
def replay_arc(
    requests: list[Any], capacity: int, c: int, p: float, t1: Any, t2: Any, b1: Any, b2: Any, /
) -> tuple[int, float] | None: ...
def replay_lfu(
    requests: list[Any], capacity: int, count: dict[Any, int], buckets: dict[int, Any], bucket_type: type, /
) -> tuple[int, int] | None: ...
def replay_s3fifo(
    requests: list[Any],
    capacity: int,
    limits: tuple[int, int, int],
    move_threshold: int,
    max_freq: int,
    small: Any,
    main: Any,
    ghost: Any,
    freq: dict[Any, int],
    /,
) -> tuple[int, bool] | None: ...
def replay_lirs(
    requests: list[Any], capacity: int, lir_limit: int, s_limit: int, s: Any, q: Any, nh: Any, status: dict[Any, int], /
) -> tuple[int, int] | None: ...
def replay_belady(
    requests: list[Any], capacity: int, future: list[int], seq0: int, entry: dict[Any, int], /
) -> tuple[int, list[tuple[int, int, Any]], int, int] | None: ...
def replay_lfu_decay(
    requests: list[Any],
    capacity: int,
    decay: float,
    seq0: int,
    entry: dict[Any, int],
    s: dict[Any, float],
    t0: float | None,
    now: float,
    growth: float,
    /,
) -> tuple[int, list[tuple[float, int, Any]], int, float | None, float, float] | None: ...
def replay_wtinylfu(
    requests: list[Any],
    capacity: int,
    sizes: tuple[int, int, int],
    width: int,
    depth: int,
    halve_at: int,
    fast: bool,
    doorkeeper: bool,
    win: Any,
    prob: Any,
    prot: Any,
    doomed: Any,
    idx: dict[Any, list[int]],
    /,
) -> tuple[int, list[int], bytearray | None, int, tuple[Any, int] | None, dict[int, Any], int, int] | None: ...
def replay_prefix_aware(
    requests: list[Any],
    capacity: int,
    params: tuple[Any, ...],
    classes: int,
    mid: list[float],
    seq0: int,
    meta: dict[Any, list[Any]],
    ghost: Any,
    /,
) -> tuple[int, tuple[Any, ...]] | None: ...
