"""The opt-in memory trace (server/memtrace.py) and what it measures."""

from __future__ import annotations

import json
import sys
import time

import numpy as np
import pytest
import torch

from ctxcache import ContextCache
from ctxcache.server import memtrace
from ctxcache.server.memtrace import held_bytes, mallinfo, rss_parts, start_from_env, tier_report

linux = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc and glibc")


@linux
def test_rss_parts_and_mallinfo_are_read():
    r = rss_parts()
    assert r["rss"] > 0 and r["threads"] >= 1
    assert abs(r["rss_anon"] + r["rss_file"] - r["rss"]) <= r["rss"] * 0.05  # RssShmem is the rest
    m = mallinfo()
    assert m["uordblks"] > 0 and m["arena"] >= m["uordblks"] - m["hblkhd"]


def test_a_view_is_charged_its_whole_base():
    big = torch.zeros(1024, 256)
    seen: dict[int, int] = {}
    held_bytes([(big[:4], big[4:8])], seen)  # two views of one 1 MiB storage
    assert sum(seen.values()) == big.nbytes
    arr = np.zeros(4096, np.float32)
    seen = {}
    held_bytes({"a": arr[:16], "b": b"xyz"}, seen)
    assert sum(seen.values()) == arr.nbytes + 3
    blob = bytes(4096)  # a block read from disk: each array a view through its own memoryview of the blob
    seen = {}
    held_bytes([np.frombuffer(memoryview(blob), np.float32, 16, off) for off in (0, 64, 128)], seen)
    assert sum(seen.values()) == len(blob)


def test_tier_report_shows_a_payload_that_keeps_a_larger_tensor_alive():
    cache = ContextCache.from_config({"block_size": 4, "tiers": [{"kind": "memory", "capacity": "64MiB"}]})
    live = torch.zeros(1, 1, 1000, 64)  # a request's KV: a block stored as a slice would pin all of it
    cache.store([1, 2, 3, 4], [[(live[:, :, :4].clone(), live[:, :, 4:8].clone())]])
    exact = tier_report(cache)[0]
    assert exact["held"] == exact["accounted"] == 2 * 4 * 64 * 4
    cache.store([5, 6, 7, 8], [[(live[:, :, :4], live[:, :, 4:8])]])
    leaky = tier_report(cache)[0]
    assert leaky["accounted"] == 2 * exact["accounted"] and leaky["held"] == exact["held"] + live.nbytes


def test_the_trace_is_off_unless_asked(monkeypatch):
    monkeypatch.delenv("CTXCACHE_MEMTRACE", raising=False)
    assert start_from_env(ContextCache.from_config({"block_size": 4})) is None


@linux
def test_the_trace_writes_json_lines(monkeypatch, tmp_path):
    path = tmp_path / "trace.jsonl"
    monkeypatch.setenv("CTXCACHE_MEMTRACE", str(path))
    monkeypatch.setenv("CTXCACHE_MEMTRACE_EVERY", "0.05")
    monkeypatch.setenv("CTXCACHE_MEMTRACE_FRAMES", "2")
    cache = ContextCache.from_config({"block_size": 4, "tiers": [{"kind": "memory", "capacity": "1MiB"}]})
    trace = start_from_env(cache)
    assert isinstance(trace, memtrace.MemTrace)
    try:
        cache.store([1, 2, 3, 4], [b"x" * 100])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(path.read_text().splitlines() if path.exists() else []) < 2:
            time.sleep(0.05)
    finally:
        trace.stop()
        memtrace.tracemalloc.stop()
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert rows[-1]["rss"] > 0 and rows[-1]["tiers"][0]["accounted"] == 100 == rows[-1]["tiers"][0]["held"]
    assert {"uordblks", "threads", "write_buffer", "py_traced", "py_growth"} <= set(rows[-1])


def test_stop_waits_for_a_sample_in_progress(monkeypatch, tmp_path):
    """Stopping tracemalloc right after ``stop()`` (as a shutdown does) must not meet a sample still
    taking a snapshot: that raised "tracemalloc must be tracing" in the trace's thread."""
    import threading

    inside, finished = threading.Event(), threading.Event()
    real = memtrace.rss_parts

    def slow_rss_parts():
        inside.set()
        time.sleep(0.3)
        out = real()
        finished.set()
        return out

    monkeypatch.setattr(memtrace, "rss_parts", slow_rss_parts)
    cache = ContextCache.from_config({"block_size": 4})
    trace = memtrace.MemTrace(tmp_path / "trace.jsonl", cache, every_s=0.01)
    assert inside.wait(10)
    trace.stop()
    assert finished.is_set() and not trace._thread.is_alive()
