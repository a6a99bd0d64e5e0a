"""The publisher's snapshot comes from the engine (``EngineWatch.held``), not from a mirror of every
batch: a snapshot taken at seq S plus the batches after S must end where a consumer that followed
every batch does, mid-run too (slow writes still queued, evictions, demotions, erasure); and what a
restart finds in a persistent tier is announced, so followers and snapshot readers agree."""

from __future__ import annotations

import random
import time

import redis

from ctxcache.cache import ContextCache
from ctxcache.events import ListSink, WorkerView
from ctxcache.events.consumer import Consumer
from ctxcache.events.runtime import start_events

BS = 4


def _present(tiers) -> dict[str, set[bytes]]:
    return {t: set(keys) for t, keys in tiers.items() if keys}


def _follow(batches, view: WorkerView | None = None, after: int = 0) -> WorkerView:
    view = view or WorkerView("w")
    for b in batches:
        if b.seq > after:
            view.apply(b.events)
    return view


def _start(cache: ContextCache, url: str, worker: str):
    cfg = {"enabled": True, "url": url, "worker": worker, "consume": False, "prefix": f"{worker}:ev:"}
    rt = start_events(cache, cfg)
    assert rt is not None
    sink = ListSink()
    rt.emitter.sinks.append(sink)
    return rt, sink


def test_a_snapshot_plus_the_later_batches_is_what_a_follower_holds(redis_url, tmp_path):
    tiers = [
        {"kind": "memory", "capacity": "6KiB"},
        {"kind": "disk", "path": str(tmp_path), "capacity": "24KiB", "fsync": False, "write": "through"},
        {"kind": "redis", "capacity": "64MiB", "url": redis_url, "prefix": "ss:"},
    ]
    cache = ContextCache.from_config({"block_size": BS, "tiers": tiers})
    rt, sink = _start(cache, redis_url, "snap")
    rng = random.Random(7)
    taken: list[tuple[int, dict[str, list[bytes]]]] = []
    queued = []  # slow writes still queued when a snapshot was read: the case held() must leave out
    for i in range(400):
        toks = [rng.randrange(6) for _ in range(2)] + list(range(1000 * (i % 40), 1000 * (i % 40) + 4 * BS))
        tenant = rng.choice(["a", "b"])
        if rng.random() < 0.3:
            m = cache.lookup(toks, tenant)
            cache.release(m)
        else:
            cache.store(toks, [bytes([i % 251, j]) * 100 for j in range(len(toks) // BS)], tenant)
        if i == 250:
            cache.erase_tenant("b")
        if i % 50 == 25:  # as the publisher does: the last seq handed to the sinks, then the engine's blocks
            with rt.emitter._lock:
                seq = rt.emitter.seq
            queued.append(len(cache._engine.placement.mover.pending))
            taken.append((seq, rt.watch.held()))
    cache.flush()
    time.sleep(0.2)
    rt.emitter.flush()
    final = _present(rt.watch.held())
    follower = _follow(sink.batches)
    assert _present(follower.tiers) == final and len(final) == 3  # all three tiers held blocks
    for seq, snap in taken:
        rebuilt = _follow(sink.batches, WorkerView("w", tiers={t: set(k) for t, k in snap.items()}), after=seq)
        assert _present(rebuilt.tiers) == final, f"the snapshot at seq {seq} does not converge"
    assert max(queued) > 0
    rt.close()
    cache.close()


def test_a_restart_announces_what_the_persistent_tier_holds(redis_url, tmp_path):
    """A worker restarted on its disk tier: a consumer following its stream forgets the old epoch
    and then learns the disk's blocks from the start announcement, as a snapshot reader would."""

    def make() -> ContextCache:
        disk = {"kind": "disk", "path": str(tmp_path), "capacity": "1MiB", "fsync": False}
        return ContextCache.from_config({"block_size": BS, "tiers": [{"kind": "memory", "capacity": "1MiB"}, disk]})

    watcher = Consumer(redis.Redis.from_url(redis_url, socket_timeout=1), prefix="again:ev:", heartbeat_s=0.5)
    watcher.start()
    try:
        first = make()
        rt, _ = _start(first, redis_url, "again")
        toks = list(range(100, 100 + 6 * BS))
        first.store(toks, [bytes([j]) * 64 for j in range(6)])
        keys = set(first.hasher.keys(toks, first.namespace()))
        _until(lambda: _tiers(watcher).get("memory") == keys)
        old_epoch = watcher.workers["again"].epoch
        rt.close()
        first.close()  # spills RAM to disk
        cache = make()
        rt, sink = _start(cache, redis_url, "again")
        _until(lambda: watcher.workers["again"].epoch != old_epoch and _tiers(watcher) == {"disk": keys})
        rt.emitter.flush()
        assert _present(_follow(sink.batches).tiers) == _present(rt.watch.held()) == {"disk": keys}
        rt.close()
        cache.close()
    finally:
        watcher.stop()


def _tiers(watcher: Consumer) -> dict[str, set[bytes]]:
    view = watcher.workers.get("again")
    return {} if view is None else _present(view.tiers)


def _until(cond, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
