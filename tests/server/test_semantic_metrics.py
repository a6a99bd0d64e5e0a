"""The semantic cache's counters on the public /metrics: its failed-delete state (pending, failed,
retried, dropped) included, so an alert can watch erasures that are not yet verified."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from ctxcache.server.testing import LiveServer

from .test_semantic import ADMIN, ask
from .test_semantic_redis import redis_semantic_app

ERASE = "/v1/admin/semantic/tenants/team-a/entries"


def scrape(c: httpx.Client) -> dict[str, float]:
    text = c.get("/metrics").text
    return {s.name: s.value for fam in text_string_to_metric_families(text) for s in fam.samples if not s.labels}


def test_metrics_export_the_semantic_cache_and_its_pending_deletes(redis_factory, tmp_path, monkeypatch):
    monkeypatch.setenv("CTXCACHE_HOME", str(tmp_path / "home"))
    server = redis_factory()
    app = redis_semantic_app(server.url, "met:")
    assert app.state.semantic._store.tier.wait_ready(5)
    with LiveServer(app) as url, httpx.Client(base_url=url, timeout=30) as c:
        for _ in range(2):  # a miss, then a hit
            ask(c, "What is the capital of France?")
        m = scrape(c)
        assert (m["ctxcache_semantic_misses_total"], m["ctxcache_semantic_hits_total"]) == (1, 1)
        assert (m["ctxcache_semantic_entries"], m["ctxcache_semantic_stored_total"]) == (1, 1)
        assert m["ctxcache_semantic_pending_deletes"] == 0 and m["ctxcache_semantic_failed_deletes_total"] == 0
        server.client().execute_command("ACL", "SETUSER", "default", "-del")  # Redis answers but will not delete
        assert c.delete(ERASE, headers=ADMIN).json()["verified"] is False
        m = scrape(c)
        assert m["ctxcache_semantic_pending_deletes"] == 1 and m["ctxcache_semantic_failed_deletes_total"] == 1
        assert m["ctxcache_semantic_erased_total"] == 1 and m["ctxcache_semantic_entries"] == 0
        assert m["ctxcache_semantic_tombstones"] == 1  # published for the other processes on met:
        server.client().execute_command("ACL", "SETUSER", "default", "+del")
        assert c.delete(ERASE, headers=ADMIN).json()["verified"] is True
        m = scrape(c)
        assert m["ctxcache_semantic_pending_deletes"] == 0 and m["ctxcache_semantic_retried_deletes_total"] == 1
        assert m["ctxcache_semantic_dropped_deletes_total"] == 0
        assert scrape(c)["ctxcache_semantic_failed_deletes_total"] == m["ctxcache_semantic_failed_deletes_total"]
