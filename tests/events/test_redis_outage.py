"""Redis killed for 30 s under load: no request fails, the events that did not fit the buffer are
dropped and counted, and once Redis is back every consumer converges on the worker's real state."""

from __future__ import annotations

import threading
import time

import redis

from ctxcache.cache import ContextCache
from ctxcache.events.consumer import Consumer
from ctxcache.events.runtime import start_events

BS = 4
OUTAGE_S = 30.0


def _cache(url: str) -> ContextCache:
    tiers = [{"kind": "memory", "capacity": "256KiB"},
             {"kind": "redis", "capacity": "64MiB", "url": url, "prefix": "ro:", "retry_interval": 0.2}]  # fmt: skip
    return ContextCache.from_config({"block_size": BS, "tiers": tiers})


def test_redis_down_30s_under_load_no_client_error_drops_counted_consumers_converge(redis_factory):
    server = redis_factory()
    a, b = _cache(server.url), _cache(server.url)
    cfg = {"prefix": "ro:ev:", "heartbeat_s": 0.5, "buffer": 64, "snapshot_every_s": 1.0, "timeout_s": 0.5}
    ra, rb = start_events(a, {**cfg, "worker": "A"}), start_events(b, {**cfg, "worker": "B"})
    watcher = Consumer(redis.Redis.from_url(server.url, socket_timeout=0.5), prefix="ro:ev:", heartbeat_s=0.5)
    watcher.start()
    errors: list[BaseException] = []
    done = {"requests": 0}
    stop = threading.Event()

    def load() -> None:
        i = 0
        while not stop.is_set():
            toks = list(range(10_000 * (i % 500), 10_000 * (i % 500) + 8 * BS))
            try:
                m = a.lookup(toks)
                a.release(m)
                if m.hit_tokens < len(toks):
                    a.store(toks, [bytes([i % 251, j]) * 96 for j in range(8)])
                done["requests"] += 1
            except BaseException as exc:  # noqa: BLE001 - any failure is what this test counts
                errors.append(exc)
            i += 1
            time.sleep(0.001)

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    time.sleep(2.0)
    before = done["requests"]
    server.kill()
    time.sleep(OUTAGE_S)
    during = done["requests"] - before
    server.start()  # same port, empty (no persistence): the streams and snapshots are gone too
    time.sleep(3.0)
    stop.set()
    thread.join(10)
    assert errors == [], f"{len(errors)} requests failed: {errors[:3]}"
    assert during > 1000, f"only {during} requests during the outage: requests stalled"
    assert ra.publisher.stats()["dropped"] > 0 and ra.publisher.stats()["errors"] > 0

    def held(tiers) -> dict[str, set[bytes]]:
        return {t: set(keys) for t, keys in tiers.items() if keys}

    def converged() -> bool:  # on what A's engine holds (the snapshots' source), at A's last seq
        view = watcher.workers.get("A")
        peer = rb.consumer.workers.get("A") if rb.consumer is not None else None
        seq, want = ra.publisher.view.seq, held(ra.watch.held())
        return all(v is not None and v.seq == seq and held(v.tiers) == want for v in (view, peer))

    deadline = time.monotonic() + 20
    while not converged():
        assert time.monotonic() < deadline, (watcher.stats(), ra.publisher.stats())
        time.sleep(0.05)
    assert watcher.snapshots >= 2  # at the start and after the outage
    for rt in (ra, rb):
        rt.close()
    watcher.stop()
    a.close()
    b.close()
