"""The compiled stored_run (native/ctxcache_events.c) against its reference, EngineWatch.stored_run_py,
on random runs of deferred records: chains in order and reversed (a store admits deepest first),
interleaved chains, unknown keys, removals and other tiers cutting runs."""

from __future__ import annotations

import random

import pytest

from ctxcache import accel
from ctxcache.cache import ContextCache
from ctxcache.events.emitter import Emitter, ListSink, coalesce
from ctxcache.events.watch import EngineWatch

pytestmark = pytest.mark.skipif(accel.native is None, reason="ctxcache._native not built")


def _setup() -> tuple[EngineWatch, list[list[bytes]]]:
    cache = ContextCache.from_config(
        {"block_size": 4, "tiers": [{"kind": "memory", "capacity": "64MiB"}, {"kind": "memory", "capacity": "64MiB"}]}
    )
    for p in range(12):
        n = 1 + p % 7
        tokens = [p * 1000 + t for t in range(4 * n)]
        cache.store(tokens, [bytes([p]) * (10 + p + i) for i in range(n)])
    e = cache._engine
    nodes = [n for shard in e.index.shards for n in shard.values()]
    by_parent: dict[object, list[bytes]] = {}
    for node in nodes:
        by_parent.setdefault(node.parent, []).append(node.key)
    roots = [n.key for n in nodes if n.depth == 0]
    out = []
    for r in roots:  # every chain from its root, following the (single) child
        chain, k = [r], r
        while by_parent.get(k):
            k = by_parent[k][0]
            chain.append(k)
        out.append(chain)
    return EngineWatch(e, Emitter("w", [ListSink()])), out


def _records(rng: random.Random, chains: list[list[bytes]]) -> list[tuple]:
    recs: list[tuple] = []
    for _ in range(rng.randint(1, 8)):
        chain = rng.choice(chains)
        a = rng.randrange(len(chain))
        part = chain[a : rng.randint(a + 1, len(chain))]
        if rng.random() < 0.5:
            part = part[::-1]  # deepest first, as a store admits
        pos = 0 if rng.random() < 0.8 else 1
        for k in part:
            r = rng.random()
            if r < 0.05:
                recs.append(("a", pos, bytes(rng.randrange(256) for _ in range(16))))  # not indexed
            elif r < 0.08:
                recs.append(("x", pos, k, "evicted"))
            elif r < 0.10:
                recs.append(("a", 1 - pos, k))
            recs.append(("a", pos, k))
    return recs


def test_compiled_run_matches_the_reference_on_random_runs():
    watch, chains = _setup()
    assert sum(len(c) for c in chains) > 20 and max(len(c) for c in chains) > 3
    rng = random.Random(7)
    for _ in range(400):
        recs = _records(rng, chains)
        want = coalesce(recs, watch.resolve, watch.stored_run_py)
        got = coalesce(recs, watch.resolve, watch.stored_run)
        assert got == want, recs


def test_str_keys_go_through_key_bytes_and_bad_keys_raise_as_the_reference():
    watch, _ = _setup()
    recs = [("a", 0, "k1"), ("a", 0, "k2")]
    assert coalesce(recs, watch.resolve, watch.stored_run) == coalesce(recs, watch.resolve, watch.stored_run_py)
    bad = [("a", 0, 17)]
    with pytest.raises(Exception) as ref:
        coalesce(bad, watch.resolve, watch.stored_run_py)
    with pytest.raises(type(ref.value)):
        coalesce(bad, watch.resolve, watch.stored_run)
