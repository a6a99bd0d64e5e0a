"""``ctxcache_replication_*``: Prometheus series read from a replicator's or a follower's status
at scrape time (nothing is counted twice: the status is the one owner of every figure)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric


class ReplicatorCollector:
    """The replicator's series (``ctxcache replicate --metrics-port``)."""

    def __init__(self, status: Callable[[], dict[str, Any] | None]) -> None:
        self.status = status

    def describe(self) -> list[Metric]:
        return []  # collect() at registration would need a reachable Redis

    def collect(self) -> Iterator[Metric]:
        s = self.status()
        if s is None:
            return
        r = s["region"]
        lag = GaugeMetricFamily("ctxcache_replication_lag_seconds",
                                "origin stamp to delivery here, recent updates (origin wall clock: skew shows here)",
                                labels=["region", "quantile"])  # fmt: skip
        for q, k in (("0.5", "lag_p50_s"), ("0.99", "lag_p99_s")):
            if s.get(k) is not None:
                lag.add_metric([r, q], s[k])
        yield lag
        queued = GaugeMetricFamily("ctxcache_replication_queued",
                                   "updates of this region's log the peer has not acknowledged (the partition queue)",
                                   labels=["region", "peer"])  # fmt: skip
        for p, n in s.get("queued", {}).items():
            queued.add_metric([r, p], n)
        yield queued
        up = GaugeMetricFamily("ctxcache_replication_link_up", "1 if the peer's Redis answered the last pull",
                               labels=["region", "peer"])  # fmt: skip
        for p, v in s["peers"].items():
            up.add_metric([r, p], 1.0 if v["up"] else 0.0)
        yield up
        c = s["counters"]
        applied = CounterMetricFamily("ctxcache_replication_applied", "updates delivered here (local and remote)",
                                      labels=["region"])  # fmt: skip
        applied.add_metric([r], c.get("applied", 0) + c.get("local", 0))
        yield applied
        conflicts = CounterMetricFamily("ctxcache_replication_conflicts",
                                        "concurrent updates resolved, by the rule that decided", labels=["region", "rule"])  # fmt: skip
        for rule, n in s["conflicts"].items():
            conflicts.add_metric([r, rule], n)
        yield conflicts
        yield _gauge("ctxcache_replication_pending", "updates held until what they depend on arrives", r, s["pending"])
        yield _gauge("ctxcache_replication_head", "this region's log head seq", r, s["head"])
        errors = CounterMetricFamily("ctxcache_replication_events", "full syncs, link errors, refused entries, "
                                     "effect errors, duplicates, held updates", labels=["region", "kind"])  # fmt: skip
        for k, n in {**s["stats"], **{k: v for k, v in c.items() if k not in ("applied", "local")}}.items():
            errors.add_metric([r, k], n)
        yield errors


class FollowerCollector:
    """A worker's series: what it applied of its region's log."""

    def __init__(self, status: Callable[[], dict[str, Any] | None]) -> None:
        self.status = status

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        s = self.status()
        if s is None:
            return
        r = s["region"]
        applied = CounterMetricFamily("ctxcache_replication_follower_applied",
                                      "updates of the region's log applied to this worker", labels=["region"])  # fmt: skip
        applied.add_metric([r], s["applied"])
        yield applied
        errors = CounterMetricFamily("ctxcache_replication_follower_errors", "effects that raised (reported per update)",
                                     labels=["region"])  # fmt: skip
        errors.add_metric([r], s["errors"])
        yield errors
        sub = CounterMetricFamily("ctxcache_replication_submitted", "updates this worker submitted to its region",
                                  labels=["region"])  # fmt: skip
        sub.add_metric([r], s["submitted"])
        yield sub
        yield _gauge("ctxcache_replication_follower_seq", "the region log seq this worker has applied", r,
                     s["applied_seq"])  # fmt: skip
        yield _gauge("ctxcache_replication_caught_up", "1 once the worker applied what it missed while down", r,
                     1.0 if s["caught_up"] else 0.0)  # fmt: skip


def _gauge(name: str, doc: str, region: str, value: float) -> GaugeMetricFamily:
    g = GaugeMetricFamily(name, doc, labels=["region"])
    g.add_metric([region], value)
    return g
