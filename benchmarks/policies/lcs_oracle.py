"""libcachesim as an external oracle for the benchmarks (GPL: imported here only, never from src/)."""

from __future__ import annotations

import time
from typing import Any

lcs: Any
try:  # optional: never a dependency of the package
    import libcachesim as lcs
except ImportError:
    lcs = None

# Our policy names -> libcachesim's class names.
LCS_CLASSES = {
    "lru": "LRU",
    "fifo": "FIFO",
    "lfu": "LFU",
    "arc": "ARC",
    "lirs": "LIRS",
    "2q": "TwoQ",
    "s3fifo": "S3FIFO",
    "sieve": "Sieve",
    "w-tinylfu": "WTinyLFU",
    "belady": "Belady",
}


def libcachesim_run(cls: str, ids: list[int], next_use: list[int], cap: int) -> tuple[int, float]:
    """Misses and seconds of one libcachesim cache over the stream via ``get()`` (construction untimed).

    hashpower=20: the default 2^24 buckets change speed (page faults), never results. Belady needs
    the absolute position of each block's next access (int64 max if none): libcachesim's default
    -2 silently makes it evict arbitrarily.
    """
    assert lcs is not None
    cache = getattr(lcs, cls)(cache_size=cap, hashpower=20)
    req = lcs.Request()
    req.obj_size = 1
    get = cache.get
    misses = 0
    t0 = time.perf_counter()
    if cls == "Belady":
        for b, nxt in zip(ids, next_use):
            req.obj_id = b
            req.next_access_vtime = nxt
            misses += not get(req)
    else:
        for b in ids:
            req.obj_id = b
            misses += not get(req)
    return misses, time.perf_counter() - t0
