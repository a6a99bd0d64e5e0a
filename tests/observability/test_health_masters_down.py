"""Readiness with a Redis Cluster tier that has a master down: the tier still serves the other
masters' blocks (``healthy``), so the server stays ready, and the check names the down masters."""

from __future__ import annotations

from ctxcache.observability.health import readiness


def test_a_cluster_with_a_master_down_is_ready_and_names_it():
    tiers = {"redis": {"kind": "redis", "healthy": True, "corrupt": 0, "masters_down": ["127.0.0.1:7001"]}}
    ok, body = readiness(model_loaded=True, worker_running=True, busy_since=None, stall_s=60, tiers=tiers)
    assert ok and body["problems"] == []
    assert body["checks"]["tiers"]["redis"] == {
        "ok": True,
        "kind": "redis",
        "corrupt_blocks": 0,
        "masters_down": ["127.0.0.1:7001"],
    }


def test_every_master_down_is_an_unreachable_tier():
    tiers = {"redis": {"kind": "redis", "healthy": False, "masters_down": ["a:1", "b:2", "c:3"]}}
    ok, body = readiness(model_loaded=True, worker_running=True, busy_since=None, stall_s=60, tiers=tiers)
    assert not ok and body["problems"] == ["tier redis (redis) is unreachable"]
