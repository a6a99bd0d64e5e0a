"""The router's Prometheus series (GET /metrics on the router), in their own registry."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

PREFIX = "ctxcache_router"


class RouterMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter(f"{PREFIX}_requests", "Requests sent to each worker, by API and outcome",
                                ["worker", "api", "outcome"], registry=r)  # fmt: skip
        self.prompt_tokens = Counter(
            f"{PREFIX}_prompt_tokens", "Prompt tokens routed to each worker", ["worker"], registry=r
        )
        self.predicted = Counter(f"{PREFIX}_predicted_cached_tokens", "Cached prompt tokens the router predicted, per worker",
                                 ["worker"], registry=r)  # fmt: skip
        self.reported = Counter(f"{PREFIX}_reported_cached_tokens", "Cached prompt tokens the workers reported in usage",
                                ["worker"], registry=r)  # fmt: skip
        self.decisions = Counter(f"{PREFIX}_decisions", "Routing decisions by reason", ["reason"], registry=r)
        self.retries = Counter(f"{PREFIX}_retries", "Requests retried on another worker before their first byte",
                               ["api"], registry=r)  # fmt: skip
        self.stream_errors = Counter(f"{PREFIX}_stream_errors", "Streams that broke after their first byte",
                                     ["worker"], registry=r)  # fmt: skip
        self.ejections = Counter(
            f"{PREFIX}_ejections", "Workers ejected (failed checks or requests)", ["worker"], registry=r
        )
        self.healthy = Gauge(f"{PREFIX}_worker_healthy", "1 while the worker takes requests", ["worker"], registry=r)
        self.in_flight = Gauge(f"{PREFIX}_in_flight", "Requests in flight to each worker", ["worker"], registry=r)
        self.index_blocks = Gauge(f"{PREFIX}_index_blocks", "Blocks in the router's index", registry=r)
        self.index_entries = Gauge(f"{PREFIX}_index_entries", "(block, worker) entries in the router's index "
                                   "(a block on a shared store: one per store)", registry=r)  # fmt: skip
        self.index_bytes = Gauge(f"{PREFIX}_index_bytes", "Memory of the router's index arrays", registry=r)
        self.event_lag = Gauge(f"{PREFIX}_event_lag_seconds", "KV events: publish-to-apply delay of the latest "
                               "batch, the largest over workers (--redis only)", registry=r)  # fmt: skip
        self.event_workers = Gauge(f"{PREFIX}_event_workers", "Workers whose KV events feed the index "
                                   "(mapped to a --worker URL)", registry=r)  # fmt: skip
        self.event_unmapped = Gauge(f"{PREFIX}_event_unmapped_workers", "Event worker ids on the streams that "
                                    "map to no --worker URL (their events are ignored)", registry=r)  # fmt: skip
        self.events_applied = Gauge(f"{PREFIX}_events_applied", "KV events applied since the router started",
                                    registry=r)  # fmt: skip
        self.overhead = Histogram(f"{PREFIX}_overhead_seconds", "Router time per request before it is sent: parse, "
                                  "tokenize, keys, index, score", registry=r,
                                  buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5))  # fmt: skip

    def observe_index(self, stats: dict[str, Any]) -> None:
        self.index_blocks.set(stats["blocks"])
        self.index_entries.set(stats["entries"])
        self.index_bytes.set(stats["bytes"])

    def observe_events(self, stats: dict[str, Any]) -> None:
        self.event_lag.set(stats["lag_s"])
        self.event_workers.set(len(stats["mapped"]))
        self.event_unmapped.set(len(stats["unmapped"]))
        self.events_applied.set(stats["applied"])
