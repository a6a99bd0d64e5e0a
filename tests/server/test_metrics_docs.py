"""docs/metrics.md and grafana/ctxcache.json name only series that /metrics really serves, and
every served series is documented."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ctxcache.observability.exporter import CacheCollector

from .conftest import chat
from .test_observability import serve

ROOT = Path(__file__).resolve().parents[2]
NAME = re.compile(r"\bctxcache_[a-z][a-z0-9_]*")
ADMIN_HEADING = "## Per-tenant series (admin key only)"
REDIS_ONLY = {"ctxcache_tier_reconnects_total", "ctxcache_tier_errors_total"}  # tiers without a backend lack them
CLUSTER_ONLY = {"ctxcache_tier_masters_down"}  # only a Redis Cluster tier has masters
EVENTS_ONLY = {  # only a server with KV events on (a Redis tier) serves them: see the last test
    "ctxcache_events_published_total", "ctxcache_events_dropped_total", "ctxcache_events_publish_errors_total",
    "ctxcache_events_snapshots_written_total", "ctxcache_events_queued_batches", "ctxcache_events_consumed_total",
    "ctxcache_events_consumer_lag_seconds", "ctxcache_events_replays_total", "ctxcache_events_snapshots_loaded_total",
    "ctxcache_events_gaps_total", "ctxcache_events_epochs_total", "ctxcache_events_silent_workers_total",
    "ctxcache_events_workers",
}  # fmt: skip


def _names(text: str) -> set[str]:
    return {s.name for fam in text_string_to_metric_families(text) for s in fam.samples}


def served(monkeypatch) -> tuple[set[str], set[str]]:
    """Series names a server with one memory tier (and a semantic cache) serves after two requests (histograms with their
    _bucket/_sum/_count, counters with _total): on the public /metrics, and on the admin-only
    /v1/admin/metrics. No public sample may carry a tenant label."""
    monkeypatch.setenv("CTXCACHE_ADMIN_KEY", "adm-docs-test")
    with serve(semantic={"tenants": "*", "embedder": "hashing", "store": {"kind": "memory"}}) as c:
        for _ in range(2):  # the second is a hit: series labelled by serving tier appear
            assert c.post("/v1/chat/completions", json=chat("hello " * 30)).status_code == 200
        public = c.get("/metrics").text
        admin = c.get("/v1/admin/metrics", headers={"Authorization": "Bearer adm-docs-test"}).text
    labels = {k for fam in text_string_to_metric_families(public) for s in fam.samples for k in s.labels}
    assert "tenant" not in labels, "the public /metrics carries a tenant label"
    return _names(public), _names(admin)


def _bases(names: set[str]) -> set[str]:
    return {re.sub(r"_(bucket|sum|count)$", "", n) for n in names}  # a histogram by its name


def test_docs_and_grafana_name_only_served_series_and_docs_cover_them_all(monkeypatch):
    public, admin = served(monkeypatch)
    public = (
        {n for n in public if not n.endswith("_created")} | REDIS_ONLY | CLUSTER_ONLY | EVENTS_ONLY
    )  # _created: bookkeeping
    admin = {n for n in admin if not n.endswith("_created")}
    assert admin and not admin & public, "per-tenant series must be served only on the admin route"
    have = public | admin
    docs = (ROOT / "docs" / "metrics.md").read_text()
    dash = json.loads((ROOT / "grafana" / "ctxcache.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    assert len(exprs) >= 14 and all(p["datasource"]["uid"] == "${DS_PROMETHEUS}" for p in dash["panels"])
    documented = set(NAME.findall(docs))
    in_dash = {n for e in exprs for n in NAME.findall(e)}
    assert in_dash - have == set(), "the Grafana dashboard queries series that no endpoint serves"
    assert documented - have - _bases(have) == set(), "docs/metrics.md names series that no endpoint serves"
    undocumented = {n for n in _bases(have) if n not in documented}
    assert undocumented == set(), "served but not in docs/metrics.md"
    section = docs.split(ADMIN_HEADING, 1)[1].split("\n## ", 1)[0]
    assert _bases(admin) <= set(NAME.findall(section)), f"admin-only series belong under {ADMIN_HEADING!r}"
    elsewhere = set(NAME.findall(docs.replace(section, "")))
    assert not _bases(admin) & elsewhere, "an admin-only series is documented as public"


def test_the_series_only_some_tier_kinds_export_are_the_exempted_ones():
    """The exemptions above stay true: a Redis Cluster tier's stats give exactly those series beyond a memory tier's."""
    memory = {"kind": "memory", "blocks": 1, "bytes": 2, "capacity": 3, "healthy": True, "hits": 0, "corrupt": 0}
    cluster = {**memory, "kind": "redis", "cluster": True, "masters_down": [], "reconnects": 0, "errors": 0}
    names = [_names(generate_latest(_registry({"m": ts})).decode()) for ts in (memory, cluster)]
    assert names[1] - names[0] == REDIS_ONLY | CLUSTER_ONLY
    single = {**cluster, "cluster": False}
    assert _names(generate_latest(_registry({"r": single})).decode()) - names[0] == REDIS_ONLY


def _registry(tiers: dict[str, dict[str, object]]) -> CollectorRegistry:
    reg = CollectorRegistry()
    reg.register(CacheCollector(lambda: {"tiers": tiers}))
    return reg


def test_the_events_collector_serves_exactly_the_exempted_events_series():
    from ctxcache.observability.events import EventsCollector

    class Running:
        def stats(self):
            return {"publisher": {"published": 3}, "consumer": {"applied": 2, "lag_s": 0.01}}

    for runtime, want in ((None, set()), (Running(), EVENTS_ONLY)):
        reg = CollectorRegistry()
        reg.register(EventsCollector(lambda r=runtime: r))
        assert {n for n in _names(generate_latest(reg).decode()) if not n.endswith("_created")} == want
