"""Keep the server's RSS near what it holds: model weights + cache tiers + a working set.

Measured with benchmarks/serving/soak.py (see docs/serving.md): without these settings the RSS of a
busy server kept climbing far past the bytes the cache held. Python objects were not the cause
(tracemalloc stayed flat); glibc's allocator was:
- every thread that allocates (event loop, model worker, tokenizer lanes, torch's intra-op pool)
  gets its own malloc arena, up to 8 per core, and freed memory in one arena is never reused by
  another;
- the mmap threshold adapts upwards after large frees (up to 32 MiB), so the prefill's transient
  tensors (several MiB each) end up inside arenas and are not returned to the OS when freed;
- a freed region in the middle of a heap is only given back by malloc_trim.
So: two arenas, a fixed 1 MiB mmap threshold (large transients are unmapped on free), and a
malloc_trim after jobs, at most once per ``trim_every_s``. No-ops off glibc.
``CTXCACHE_MALLOC_TUNING=0`` turns all of it off (to measure the difference).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import time
from collections.abc import Callable

log = logging.getLogger("ctxcache.server")

_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter numbers (malloc.h)
_M_ARENA_MAX = -8
MMAP_THRESHOLD = 1 << 20
ARENAS = 2


def _libc() -> ctypes.CDLL | None:
    if os.environ.get("CTXCACHE_MALLOC_TUNING", "1") == "0":
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt  # noqa: B018 - glibc only: musl and macOS have no mallopt/malloc_trim
        libc.malloc_trim  # noqa: B018
    except (OSError, AttributeError):
        return None
    return libc


def tune_allocator() -> bool:
    """Set the arena count and mmap threshold; call before the model loads. True if applied."""
    libc = _libc()
    if libc is None:
        return False
    ok = bool(libc.mallopt(_M_ARENA_MAX, ARENAS)) and bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    log.debug("malloc tuning: arenas=%d, mmap threshold=%d: %s", ARENAS, MMAP_THRESHOLD, ok)
    return ok


def trimmer(trim_every_s: float = 2.0, clock: Callable[[], float] = time.monotonic) -> Callable[[], None]:
    """A callable for the end of each job: malloc_trim(0), at most once per ``trim_every_s``."""
    libc = _libc()
    last = [float("-inf")]

    def trim() -> None:
        now = clock()
        if libc is None or now - last[0] < trim_every_s:
            return
        last[0] = now
        libc.malloc_trim(0)

    return trim
