"""Prometheus export of the KV events (``ctxcache_events_*``, docs/metrics.md), read from the
running events' ``stats()`` at scrape time; nothing while events are off."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

# (section of stats(), key) -> (name without _total, help)
_COUNTERS = {
    ("publisher", "published"): ("ctxcache_events_published", "events written to this worker's Redis stream"),
    ("publisher", "dropped"): ("ctxcache_events_dropped", "events dropped: the publish buffer was full (Redis down or slow)"),
    ("publisher", "errors"): ("ctxcache_events_publish_errors", "failed writes to the event stream (each retried)"),
    ("publisher", "snapshots"): ("ctxcache_events_snapshots_written", "snapshots of this worker's blocks written"),
    ("consumer", "applied"): ("ctxcache_events_consumed", "other workers' events applied by this worker's consumer"),
    ("consumer", "replays"): ("ctxcache_events_replays", "times the consumer read again from its last stream ids"),
    ("consumer", "snapshots"): ("ctxcache_events_snapshots_loaded", "worker views rebuilt from a snapshot (late join, gap, trim)"),
    ("consumer", "gaps"): ("ctxcache_events_gaps", "sequence gaps seen in other workers' streams"),
    ("consumer", "epochs"): ("ctxcache_events_epochs", "worker restarts seen (a new epoch: the old blocks forgotten)"),
    ("consumer", "silent"): ("ctxcache_events_silent_workers", "workers forgotten after missed heartbeats"),
}  # fmt: skip
_GAUGES = {
    ("publisher", "queued"): ("ctxcache_events_queued_batches", "event batches waiting for Redis"),
    ("consumer", "lag_s"): ("ctxcache_events_consumer_lag_seconds", "publish-to-apply delay of the latest batch"),
    ("consumer", "workers"): ("ctxcache_events_workers", "other workers this worker follows"),
}  # fmt: skip


def _num(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) else 0.0


class EventsCollector(Collector):
    def __init__(self, runtime: Callable[[], Any]) -> None:
        self.runtime = runtime

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        rt = self.runtime()
        if rt is None:
            return
        s = rt.stats()
        for (part, key), (name, doc) in _COUNTERS.items():
            yield CounterMetricFamily(name, doc, value=_num((s.get(part) or {}).get(key)))
        for (part, key), (name, doc) in _GAUGES.items():
            yield GaugeMetricFamily(name, doc, value=_num((s.get(part) or {}).get(key)))
