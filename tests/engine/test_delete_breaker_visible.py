"""The delete breaker (``Slot.may_delete``) as operators see it: its state per tier in the cache's
stats and as Prometheus gauges, one WARNING when it opens and one INFO when it closes, however many
passes it turns away in between. Before, an open breaker showed only as rising rejected stores."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from ctxcache.engine.slot import BREAK_AFTER, FIRST_BACKOFF
from ctxcache.observability.exporter import CacheCollector
from tests.conftest import FakeClock

from .test_delete_breaker import _dead
from .test_delete_errors import Refuse, _full_tier, store


def _gauges(stats: dict[str, Any]) -> dict[str, float]:
    names = ("ctxcache_tier_deletes_paused", "ctxcache_tier_delete_refusals_in_a_row")
    names += ("ctxcache_tier_next_delete_probe_seconds",)
    fams = {f.name: f for f in CacheCollector(lambda: stats).collect() if f.name in names}
    return {n: next(s.value for s in fams[n].samples if s.labels["tier"] == "fake-slow") for n in names}


def test_the_breaker_state_is_in_the_tier_stats_and_gauges_and_logged_once_each_way(caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.INFO, logger="ctxcache.engine")
    clock = FakeClock()
    cache, tier, _, blob = _full_tier(4, clock)
    closed = cache.stats()["tiers"]["fake-slow"]
    assert (closed["deletes_paused"], closed["delete_refusals_in_a_row"], closed["next_probe_in_s"]) == (False, 0, 0.0)
    refuse = Refuse()
    tier.on_call = refuse
    _dead(cache, tier, refuse, range(4, 84), clock, step=0.0)  # 80 stores, every pass turned away but none probes
    s = cache.stats()
    ts = s["tiers"]["fake-slow"]
    assert ts["deletes_paused"] and ts["delete_refusals_in_a_row"] >= BREAK_AFTER
    assert 0 < ts["next_probe_in_s"] <= FIRST_BACKOFF
    assert _gauges(s) == {
        "ctxcache_tier_deletes_paused": 1.0,
        "ctxcache_tier_delete_refusals_in_a_row": float(ts["delete_refusals_in_a_row"]),
        "ctxcache_tier_next_delete_probe_seconds": ts["next_probe_in_s"],
    }
    clock.advance(0.2)
    assert cache.stats()["tiers"]["fake-slow"]["next_probe_in_s"] == pytest.approx(ts["next_probe_in_s"] - 0.2)
    _dead(cache, tier, refuse, range(84, 124), clock)  # probes come and are refused: still open, no new line
    refuse.on = False  # the disk recovers: the next probe lands
    for i in range(124, 164):
        clock.advance(1.0)
        store(cache, i)
        assert cache.flush(10)
    s = cache.stats()
    assert (s["tiers"]["fake-slow"]["deletes_paused"], s["tiers"]["fake-slow"]["next_probe_in_s"]) == (False, 0.0)
    assert _gauges(s)["ctxcache_tier_deletes_paused"] == 0.0
    lines = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "ctxcache.engine"]
    assert [level for level, _ in lines] == [logging.WARNING, logging.INFO]
    assert "fake-slow" in lines[0][1] and "paused" in lines[0][1] and "resumed" in lines[1][1]
    cache.close()
