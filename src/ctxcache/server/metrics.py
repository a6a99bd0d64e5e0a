"""Prometheus metrics for the server, in a registry of their own (one per app, so tests can build many)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from ..usage import Usage

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_TTFT_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)


class Metrics:
    def __init__(self, cache_stats: Callable[[], dict[str, Any]], queue_depth: Callable[[], int]) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter("ctxcache_requests", "HTTP API requests", ["api", "status"], registry=r)
        self.prompt_tokens = Counter("ctxcache_prompt_tokens", "prompt tokens of completed requests", registry=r)
        self.hit_tokens = Counter("ctxcache_cache_hit_tokens", "prompt tokens served from the cache", registry=r)
        self.prefilled_tokens = Counter("ctxcache_prefilled_tokens", "prompt tokens prefilled by the model", registry=r)
        self.created_tokens = Counter("ctxcache_cache_created_tokens", "prompt tokens written to the cache", registry=r)
        self.generated_tokens = Counter("ctxcache_generated_tokens", "completion tokens generated", registry=r)
        self.ttft = Histogram(
            "ctxcache_ttft_seconds",
            "request arrival to first token, queueing included",
            buckets=_TTFT_BUCKETS,
            registry=r,
        )
        self.queue_wait = Histogram(
            "ctxcache_queue_wait_seconds",
            "time a request waited for the model worker",
            buckets=_TTFT_BUCKETS,
            registry=r,
        )
        Gauge("ctxcache_queue_depth", "requests waiting for the model worker", registry=r).set_function(
            lambda: float(queue_depth())
        )
        Gauge("ctxcache_cache_blocks", "blocks in the context cache", registry=r).set_function(
            lambda: float(cache_stats()["blocks"])
        )
        Gauge("ctxcache_cache_bytes", "payload bytes in the context cache", registry=r).set_function(
            lambda: float(cache_stats()["bytes"])
        )

    def observe(self, usage: Usage, completion_tokens: int, ttft_s: float | None, queued_s: float) -> None:
        self.prompt_tokens.inc(usage.cache_read_tokens + usage.uncached_tokens)
        self.hit_tokens.inc(usage.cache_read_tokens)
        self.prefilled_tokens.inc(usage.uncached_tokens)
        self.created_tokens.inc(usage.cache_creation_tokens)
        self.generated_tokens.inc(completion_tokens)
        if ttft_s is not None:
            self.ttft.observe(ttft_s)
        self.queue_wait.observe(queued_s)

    def render(self) -> bytes:
        return generate_latest(self.registry)
