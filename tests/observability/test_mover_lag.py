"""The mover's lag (``stats()["mover_lag_s"]``, exported as ctxcache_mover_lag_seconds): the age
of the oldest unfinished move, which grows while a slow tier hangs and is 0 once it catches up."""

from __future__ import annotations

import threading
import time

from prometheus_client import CollectorRegistry, generate_latest

from ctxcache import ContextCache
from ctxcache.observability.service import ObsConfig, Observability
from ctxcache.tiers.fake import FakeSlowTier, FakeTier


def test_mover_lag_grows_while_a_slow_tier_hangs_and_clears_after():
    gate = threading.Event()

    def hang(name, keys):
        if name == "put_blobs":
            assert gate.wait(10)

    cache = ContextCache(
        [FakeTier(100, high=1.0, low=1.0, name="ram"), FakeSlowTier(1 << 20, name="slow", on_call=hang)], block_size=4
    )
    obs = Observability(cache, registry := CollectorRegistry(), ObsConfig(log_every_s=3600))
    try:
        assert cache.stats()["mover_lag_s"] == 0.0
        for p in range(8):  # 32-byte payloads, three fit in RAM: the rest is demoted via the mover
            cache.store([p] * 4, [bytes(32)])
        time.sleep(0.3)
        s = cache.stats()
        assert s["pending_moves"] > 0 and s["mover_lag_s"] >= 0.3
        text = generate_latest(registry).decode()
        lag = next(
            float(line.split()[1]) for line in text.splitlines() if line.startswith("ctxcache_mover_lag_seconds ")
        )
        assert lag >= 0.3
        gate.set()
        assert cache.flush(10)
        assert cache.stats()["mover_lag_s"] == 0.0
    finally:
        gate.set()
        obs.close()
        cache.close()
