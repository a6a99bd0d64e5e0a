"""The mover's own contract, seen from outside: what its write buffer holds while writes wait,
how long the oldest one has waited, that its thread is a named daemon that ``close`` ends, and
that a block moved between slow tiers of different formats is re-encoded under its own key.
Mutation testing found each of these unchecked (tests only ever saw an idle mover)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from typing import Any

import numpy as np

from ctxcache import ContextCache
from ctxcache.engine.mover import Move, Mover
from ctxcache.engine.slot import Slot
from ctxcache.policies import make_policy
from ctxcache.tiers import NO_META
from ctxcache.tiers.fake import FakeSlowTier

from .gates import Gate

BS = 4


def blocks(first: int, n: int) -> list[list[np.ndarray]]:
    return [[np.full(16, first + i, np.float32)] for i in range(n)]


def toks(i: int, n_blocks: int) -> list[int]:
    return [i * 1000 + j for j in range(n_blocks * BS)]


def test_queued_writes_are_counted_in_the_write_buffer_and_the_lag():
    gate = Gate()
    tier = FakeSlowTier(1 << 20, on_call=gate)
    cache = ContextCache([tier], block_size=BS)
    try:
        cache.store(toks(1, 1), blocks(10, 1), "default", 0)
        assert gate.entered.wait(10)  # the mover holds the first write
        cache.store(toks(2, 2), blocks(20, 2), "default", 0)  # two more wait in the queue
        time.sleep(0.05)
        waiting = cache.stats()
    finally:
        gate.open.set()
    assert cache.flush(10)
    s = cache.stats()
    assert (s["pending_moves"], s["write_buffer_bytes"], s["mover_lag_s"]) == (0, 0, 0.0)
    assert waiting["pending_moves"] == 3 and waiting["mover_lag_s"] >= 0.05  # the oldest waited that long
    assert waiting["write_buffer_bytes"] == tier.used_bytes > 0  # all three blobs, held until written
    with cache.lookup(toks(2, 2)) as m:
        assert m.n_blocks == 2
    cache.close()


def test_wait_buffer_returns_once_the_buffer_holds_at_most_the_limit():
    gate = Gate()
    slot = Slot(0, FakeSlowTier(1 << 20, on_call=gate), make_policy("lru"))
    lock = threading.RLock()
    mover = Mover([slot], lock, lambda m: None)
    with lock:
        mover.submit(Move(b"a" * 8, None, 0, NO_META, blob=b"x" * 10, reserve=10, buffered=10))
    assert gate.entered.wait(10)
    with lock:  # queued behind the write the mover is stuck in
        mover.submit(Move(b"b" * 8, None, 0, NO_META, blob=b"y" * 10, reserve=10, buffered=10))
    try:
        assert mover.wait_buffer(20, timeout=5)  # 20 bytes held, 20 allowed: no wait
        assert not mover.wait_buffer(19, timeout=0.05)  # still 20 held, one write still queued
        assert slot.inflow == 20
    finally:
        gate.open.set()
    assert mover.wait_idle(10)
    assert mover.buffered == 0 and slot.inflow == 0
    mover.stop()


def test_the_mover_is_a_named_daemon_thread_that_close_ends():
    before = set(threading.enumerate())
    cache = ContextCache([FakeSlowTier(1 << 20)], block_size=BS)
    cache.store(toks(1, 1), blocks(1, 1), "default", 0)  # the first queued write starts the thread
    new = set(threading.enumerate()) - before
    cache.close()
    assert [t.name for t in new] == ["ctxcache-mover"]  # named, so thread dumps say whose it is
    assert all(t.daemon for t in new)  # never keeps the interpreter from exiting
    assert not any(t.is_alive() for t in new)


def test_an_unclosed_cache_does_not_keep_the_process_alive():
    code = textwrap.dedent(
        """
        import numpy as np
        from ctxcache import ContextCache
        from ctxcache.tiers.fake import FakeSlowTier
        cache = ContextCache([FakeSlowTier(1 << 20)], block_size=4)
        cache.store(list(range(4)), [[np.zeros(4, np.float32)]], "default", 0)
        cache.flush(10)
        print("stored")
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 0 and "stored" in proc.stdout, proc.stderr


def _slow_pair(**kw: Any) -> tuple[ContextCache, FakeSlowTier, FakeSlowTier]:
    top = FakeSlowTier(5 * 256, **kw)  # room for about four raw blocks of these payloads
    below = FakeSlowTier(1 << 20, compression="zstd")  # another format: blocks are re-encoded
    return ContextCache([top, below], block_size=BS), top, below


def test_a_block_demoted_between_slow_tiers_of_different_formats_is_readable_below():
    cache, top, below = _slow_pair()
    for i in range(4):
        cache.store(toks(i, 2), blocks(10 * i, 2), "default", 0)
        cache.flush(10)  # written: blocks in flight are never demoted
    s = cache.stats()
    assert s["demotions"] > 0 and s["write_errors"] == 0 and len(below) > 0
    with cache.lookup(toks(0, 2)) as m:  # the oldest prompt: demoted, read back from below
        assert m.n_blocks == 2
        assert [float(np.asarray(p[0])[0]) for p in m.payloads] == [0.0, 1.0]
    assert cache.stats()["lost"] == 0
    cache.close()
