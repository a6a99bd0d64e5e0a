"""Opt-in memory tracing for a running server: where the RSS goes, sampled over time.

``CTXCACHE_MEMTRACE=/path/trace.jsonl`` starts a daemon thread that appends one JSON line every
``CTXCACHE_MEMTRACE_EVERY`` seconds (default 10): RSS split into anonymous and file-backed pages,
glibc's allocator view (mallinfo2: bytes in use, free inside arenas, mmapped), the thread count,
each tier's accounted bytes next to the bytes its payloads really keep alive (a view keeps its
whole base buffer), and the write buffer. ``CTXCACHE_MEMTRACE_FRAMES=N`` also runs tracemalloc
(N frames; it slows the server) and adds the Python heap and the top growth by traceback since
the first sample. benchmarks/serving/soak.py sets these with ``--memtrace``. Diagnostics only: nothing
reads the trace back into the server.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import json
import os
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

from ..tiers import MemoryTier

_MALLINFO2 = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in _MALLINFO2]


def mallinfo() -> dict[str, int]:
    """glibc's allocator totals (empty off glibc 2.33+): uordblks in use, fordblks free in arenas,
    hblkhd in mmapped chunks, arena the heap bytes obtained with brk/mmap for arenas."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn = libc.mallinfo2
    except (OSError, AttributeError):
        return {}
    fn.restype = _MallInfo2
    info = fn()
    return {k: int(getattr(info, k)) for k in ("arena", "hblkhd", "uordblks", "fordblks", "keepcost")}


def rss_parts() -> dict[str, int]:
    """RSS and its anonymous / file-backed parts in bytes (Linux; empty elsewhere)."""
    out: dict[str, int] = {}
    try:
        text = Path("/proc/self/status").read_text()
    except OSError:
        return out
    names = {"VmRSS": "rss", "RssAnon": "rss_anon", "RssFile": "rss_file", "Threads": "threads"}
    for line in text.splitlines():
        head, _, rest = line.partition(":")
        if head in names:
            value = int(rest.split()[0])
            out[names[head]] = value if head == "Threads" else value * 1024
    return out


def held_bytes(obj: Any, seen: dict[int, int]) -> None:
    """Add to ``seen`` (keyed by buffer address) the bytes each array/tensor in ``obj`` keeps
    alive: the whole storage or base buffer, not the view's own extent."""
    if isinstance(obj, (list, tuple)):
        for v in obj:
            held_bytes(v, seen)
    elif isinstance(obj, dict):
        for v in obj.values():
            held_bytes(v, seen)
    elif isinstance(obj, (bytes, bytearray)):
        seen[id(obj)] = len(obj)
    elif hasattr(obj, "untyped_storage"):  # a torch tensor
        st = obj.untyped_storage()
        seen[st.data_ptr()] = st.nbytes()
    elif hasattr(obj, "base") and hasattr(obj, "nbytes"):  # a numpy array: walk to the owner
        root = obj
        while True:  # array -> its base ...; a memoryview -> the object it exports (many views share it)
            nxt = getattr(root, "base", None) if not isinstance(root, memoryview) else root.obj
            if nxt is None:
                break
            root = nxt
        seen[id(root)] = len(root) if isinstance(root, (bytes, bytearray)) else int(root.nbytes)


def tier_report(cache: Any) -> list[dict[str, Any]]:
    """Per tier: accounted bytes, and for in-process tiers the bytes their payloads hold."""
    out = []
    for tier in cache._engine.tiers:
        row: dict[str, Any] = {"name": tier.name, "kind": tier.kind, "accounted": tier.used_bytes}
        if isinstance(tier, MemoryTier):
            seen: dict[int, int] = {}
            values = tier.payloads()
            for v in values:
                held_bytes(v, seen)
            row["held"], row["blocks"] = sum(seen.values()), len(values)
        out.append(row)
    return out


class MemTrace:
    def __init__(self, path: Path, cache: Any, every_s: float = 10.0, frames: int = 0) -> None:
        self.path, self.cache, self.every_s, self.frames = path, cache, every_s, frames
        self.t0 = time.monotonic()
        self._first: tracemalloc.Snapshot | None = None
        self._stop = threading.Event()
        if frames and not tracemalloc.is_tracing():
            tracemalloc.start(frames)
        self._thread = threading.Thread(target=self._loop, name="ctxcache-memtrace", daemon=True)
        self._thread.start()

    def sample(self) -> dict[str, Any]:
        row: dict[str, Any] = {"t": round(time.monotonic() - self.t0, 1), **rss_parts(), **mallinfo()}
        row["tiers"] = tier_report(self.cache)
        row["write_buffer"] = self.cache._engine.placement.mover.buffered
        row["gc_objects"] = len(gc.get_objects())
        if self.frames and tracemalloc.is_tracing():  # the host may have stopped it
            snap = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
            row["py_traced"] = tracemalloc.get_traced_memory()[0]
            if self._first is None:
                self._first = snap
            diff = snap.compare_to(self._first, "traceback")[:12]
            row["py_growth"] = [
                {
                    "bytes": d.size_diff,
                    "count": d.count_diff,
                    "where": [f"{f.filename}:{f.lineno}" for f in d.traceback],
                }
                for d in diff
            ]
        return row

    def _loop(self) -> None:
        with self.path.open("a") as f:
            while not self._stop.wait(self.every_s):
                f.write(json.dumps(self.sample()) + "\n")
                f.flush()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop sampling and wait for a sample in progress: once this returns, the trace is no
        longer reading tracemalloc or the cache, so a caller may stop tracemalloc or close the cache."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)


def start_from_env(cache: Any) -> MemTrace | None:
    """Start tracing if CTXCACHE_MEMTRACE names a file (see the module docstring)."""
    path = os.environ.get("CTXCACHE_MEMTRACE")
    if not path:
        return None
    every = float(os.environ.get("CTXCACHE_MEMTRACE_EVERY", "10"))
    return MemTrace(Path(path), cache, every, int(os.environ.get("CTXCACHE_MEMTRACE_FRAMES", "0")))
