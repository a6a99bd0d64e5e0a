"""The store's fast path tells the KV events a new chain in one call (``Watcher.chain``, with the
parents and sizes it knows) where the general path opens a run and reads them back
(``EngineWatch._close``): the events must be the same, batch by batch, parent and size included."""

from __future__ import annotations

import random

from ctxcache.cache import ContextCache
from ctxcache.events import ListSink
from ctxcache.events.emitter import Emitter
from ctxcache.events.watch import EngineWatch


def _workload(fast: bool, chains: bool, capacity: str) -> list:
    cache = ContextCache.from_config({"block_size": 4, "tiers": [{"kind": "memory", "capacity": capacity}]})
    engine = cache._engine
    assert engine.fast_store
    engine.fast_store = fast
    sink = ListSink()
    em = Emitter("w", [sink], epoch="e", clock=lambda: 0.0)
    watch = EngineWatch(engine, em)
    watch.attach()
    watch._chains = chains  # False: a record per block (as with token ids)
    rng = random.Random(7)
    for i in range(400):
        base = rng.randrange(60) * 1000
        n = rng.randint(1, 6)
        toks = list(range(base, base + 4 * n))
        if rng.random() < 0.25:
            cache.release(cache.lookup(toks))
        elif rng.random() < 0.2:  # extends a cached prefix: only the new tail is stored
            m = cache.lookup(toks)
            try:
                got = m.n_blocks
                cache.store(toks, [bytes([i % 251]) * rng.randint(100, 400) for _ in range(n - got)], first_block=got)
            finally:
                cache.release(m)
        else:
            cache.store(toks, [bytes([i % 251]) * rng.randint(100, 400) for _ in range(n)])
        if rng.random() < 0.2:
            em.flush()
    em.flush()
    cache.close()
    return [(b.seq, b.events) for b in sink.batches]


def test_the_fast_path_tells_a_chain_as_the_general_path_records_it():
    for capacity, chains in (("1MiB", True), ("4KiB", True), ("4KiB", False)):
        want = _workload(False, chains, capacity)
        stored = [e for _, evs in want for e in evs if type(e).__name__ == "BlockStored"]
        assert len(stored) > 40 and any(e.parent is not None for e in stored)
        assert _workload(True, chains, capacity) == want, (capacity, chains)
