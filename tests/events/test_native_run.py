"""The compiled stored_run (native/ctxcache_events.c) against its reference, EngineWatch.stored_run_py,
on random runs of deferred records: chains in order and reversed (a store admits deepest first),
interleaved chains, unknown keys, removals and other tiers cutting runs."""

from __future__ import annotations

import random

import pytest

from ctxcache import accel
from ctxcache.cache import ContextCache
from ctxcache.events.emitter import Emitter, ListSink, coalesce
from ctxcache.events.model import BlockRemoved, BlockStored
from ctxcache.events.watch import EngineWatch, _lookup, _run_of

pytestmark = pytest.mark.skipif(accel.native is None, reason="ctxcache._native not built")


def _setup(equal: bool = False) -> tuple[EngineWatch, list[list[bytes]]]:
    """``equal``: every block one size (as a model's), so whole chains can be "k" records."""
    cache = ContextCache.from_config(
        {"block_size": 4, "tiers": [{"kind": "memory", "capacity": "64MiB"}, {"kind": "memory", "capacity": "64MiB"}]}
    )
    for p in range(12):
        n = 1 + p % 7
        tokens = [p * 1000 + t for t in range(4 * n)]
        cache.store(tokens, [bytes([p]) * (10 if equal else 10 + p + i) for i in range(n)])
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


def _grouped(rng: random.Random, recs: list[tuple], watch: EngineWatch) -> list[tuple]:
    """The same records with runs of stores to one tier folded into "c" records at random, as
    EngineWatch.begin/end hands a store's keys over; half of them with the parents and sizes
    captured (EngineWatch._close: what the lookups give now, as nothing changes the state here)."""
    out: list[tuple] = []
    for rec in recs:
        prev = out[-1] if out else None
        if rec[0] == "a" and prev is not None and prev[0] == "c" and prev[1] == rec[1] and rng.random() < 0.8:
            prev[2].append(rec[2])
        elif rec[0] == "a" and rng.random() < 0.6:
            out.append(("c", rec[1], [rec[2]]))
        else:
            out.append(rec)
    e = watch.e
    for j, rec in enumerate(out):
        if rec[0] == "c" and rng.random() < 0.5:
            nodes, owners = e.index.shards, e.slots[rec[1]].owners.shards
            meta = [_lookup(k, nodes, owners) for k in rec[2]]
            keys, parents, sizes = rec[2], [m[0] for m in meta], [m[1] for m in meta]
            in_order = all(parents[i] == keys[i - 1] for i in range(1, len(keys)))
            if in_order and len(set(sizes)) == 1 and rng.random() < 0.6:  # as EngineWatch.chain folds a chain
                out[j] = ("k", rec[1], b"".join(keys), len(keys[0]), parents[0], sizes[0])
            else:
                out[j] = (*rec, parents, sizes)
    return out


@pytest.mark.parametrize("equal", [False, True])
def test_chain_records_read_as_their_keys_one_by_one_both_ways(equal):
    watch, chains = _setup(equal)
    rng = random.Random(11)
    folded = 0
    for _ in range(400):
        recs = _records(rng, chains)
        want = coalesce(recs, watch.resolve, watch.stored_run_py)
        grouped = _grouped(rng, recs, watch)
        folded += sum(1 for r in grouped if r[0] == "k" and len(r[2]) > r[3])
        assert coalesce(grouped, watch.resolve, watch.stored_run_py) == want, grouped
        assert coalesce(grouped, watch.resolve, watch.stored_run) == want, grouped
    assert folded > 20 or not equal  # "k" records of several keys were read


def test_a_store_hands_its_chain_over_in_one_record_with_the_same_events():
    cache = ContextCache.from_config({"block_size": 4, "tiers": [{"kind": "memory", "capacity": "64MiB"}]})
    watch = EngineWatch(cache._engine, Emitter("w", [ListSink()]))
    watch.attach()
    cache.store(list(range(16)), [b"a" * 10] * 4)
    cache.store(list(range(24)), [b"a" * 10] * 6)  # extends the first: 2 new blocks
    recs = list(watch.em._records)  # the store's fast path: its chain's keys joined (EngineWatch.chain)
    assert [r[0] for r in recs] == ["k", "k"] and [len(_run_of(r)[0]) for r in recs] == [4, 2]
    per_block = [("a", r[1], k) for r in recs for k in _run_of(r)[0]]
    got = coalesce(recs, watch.resolve, watch.stored_run)
    assert got == coalesce(per_block, watch.resolve, watch.stored_run_py)
    assert [len(ev.keys) for ev in got] == [6]  # one chain, grown at its end, as block by block


def _one_by_one(rec: tuple) -> list[tuple]:
    """A run's records as one per block: "a" for each stored key, "x" for each removed one."""
    if rec[0] in "ck":
        return [("a", rec[1], k) for k in _run_of(rec)[0]]
    if rec[0] == "X":
        return [("x", rec[1], k, rec[3]) for k in rec[2]]
    return [rec]


def test_a_captured_run_whose_blocks_left_before_the_flush_reads_them_at_flush():
    """Store 1's blocks are evicted by store 2 within one batch: their "x" records follow store 1's
    run, so its events show what a lookup at flush shows (no size, no parent), as block by block."""
    for runs in ("stored_run", "stored_run_py"):
        cache = ContextCache.from_config({"block_size": 4, "tiers": [{"kind": "memory", "capacity": "2KiB"}]})
        watch = EngineWatch(cache._engine, Emitter("w", [ListSink()]))
        watch.attach()
        cache.store(list(range(16)), [b"a" * 300] * 4)
        cache.store(list(range(100, 116)), [b"b" * 300] * 4)
        recs = list(watch.em._records)
        kinds = [r[0] for r in recs]
        assert kinds[0] == "k" and "c" in kinds and kinds.index("X") > 0  # store 1's removals after it
        per_block = [x for r in recs for x in _one_by_one(r)]
        got = coalesce(recs, watch.resolve, getattr(watch, runs))
        assert got == coalesce(per_block, watch.resolve, watch.stored_run_py)
        assert any(getattr(ev, "size", None) == 0 for ev in got)  # the evicted blocks: read at flush


def _histories(events) -> tuple[dict, dict]:
    """A batch as each (tier, key)'s own history, in order ("s" with its parent, "r" with its
    reason), and the bytes stored per tier: what a consumer can tell apart. Runs may order the
    records of different keys otherwise than one by one (a store's removals before its run)."""
    per: dict = {}
    size: dict = {}
    for ev in events:
        if isinstance(ev, BlockStored):
            size[ev.tier] = size.get(ev.tier, 0) + ev.size
            for j, k in enumerate(ev.keys):
                per.setdefault((ev.tier, k), []).append(("s", ev.keys[j - 1] if j else ev.parent))
        elif isinstance(ev, BlockRemoved):
            for k in ev.keys:
                per.setdefault((ev.tier, k), []).append(("r", ev.reason))
        else:
            per.setdefault(("", ""), []).append(ev)
    return per, size


def _workload(chains: bool, native: bool) -> list:
    cache = ContextCache.from_config(
        {
            "block_size": 4,
            "tiers": [
                {"kind": "memory", "capacity": "3KiB", "name": "hot"},
                {"kind": "memory", "capacity": "6KiB", "name": "warm"},
            ],
        }
    )
    sink = ListSink()
    em = Emitter("w", [sink], epoch="e", clock=lambda: 0.0)
    watch = EngineWatch(cache._engine, em)
    watch.attach()
    watch._chains = watch._xruns = chains  # False: a record per block, as before runs
    if not native:
        em.runs = watch.stored_run_py
    rng = random.Random(5)
    for i in range(300):
        base = rng.randrange(12) * 1000
        n = rng.randint(1, 6)
        toks = list(range(base, base + 4 * n))
        if rng.random() < 0.3:
            cache.release(cache.lookup(toks))
        else:
            cache.store(toks, [bytes([i % 251]) * rng.randint(100, 400) for _ in range(n)])
        if rng.random() < 0.2:
            em.flush()
    em.flush()
    return [(b.seq, _histories(b.events)) for b in sink.batches]


def test_runs_give_the_per_block_events_batch_by_batch_under_evictions_and_demotions():
    want = _workload(False, True)
    reasons = {h[1] for _, (per, _) in want for hs in per.values() for h in hs if h[0] == "r"}
    assert sum(len(per) for _, (per, _) in want) > 100 and {"evicted", "demoted"} <= reasons
    assert want == _workload(True, True) == _workload(True, False) == _workload(False, False)
