"""Prometheus export of a ContextCache: a custom collector that reads the cache at scrape time.

The cache owns its counters; this module only translates ``cache.stats()`` (and the observer's
indicators) into metric families when Prometheus scrapes, so no counter has a second owner and
an idle server does no metrics work. Request-level series (by A/B group, phase histograms) are
owned by ``RequestMetrics`` and changed in one place, ``observe``; their per-tenant breakdown is
``TenantCollector``, which only the admin registry holds (the public /metrics names no tenant).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..sim.costmodel import CostModel
from .observer import CacheObserver

REASONS = ("capacity", "ttl", "quota", "erasure", "corrupt")

_PHASE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

# cache.stats() key -> (metric name without _total, help)
_COUNTERS = {
    "lookups": ("ctxcache_lookups", "cache lookups"),
    "lookup_tokens": ("ctxcache_lookup_tokens", "prompt tokens looked up in the cache"),
    "hit_tokens": ("ctxcache_lookup_hit_tokens", "looked-up tokens found cached (prefill saved)"),
    "hits": ("ctxcache_lookup_hit_blocks", "blocks found cached by lookups"),
    "misses": ("ctxcache_lookup_miss_blocks", "full blocks looked up and not found"),
    "stores": ("ctxcache_stores", "store calls"),
    "stored_blocks": ("ctxcache_stored_blocks", "blocks written into the cache"),
    "promotions": ("ctxcache_promotions", "blocks copied up to a faster tier on a hit"),
    "demotions": ("ctxcache_demotions", "blocks moved down to a slower tier under pressure"),
    "lost": ("ctxcache_lost_blocks", "indexed blocks whose payload could not be loaded"),
    "unavailable_misses": (
        "ctxcache_unavailable_miss_blocks",
        "indexed blocks missed because their tier was unreachable (kept, not lost)",
    ),
    "demotions_skipped": ("ctxcache_demotions_skipped", "demotions given up (no room below, or a slow tier down)"),
    "repaired": ("ctxcache_repaired_blocks", "lost blocks stored again"),
    "write_errors": ("ctxcache_write_errors", "failed writes to a tier"),
    "through_writes": ("ctxcache_write_through_blocks", "write-through copies of stored blocks queued for slow tiers"),
    "through_dropped": (
        "ctxcache_write_through_dropped_blocks",
        "write-through copies not queued (tier full, over quota or down; write buffer full)",
    ),
    "write_lag_waits": (
        "ctxcache_write_lag_waits",
        "stores that waited for write-through copies older than write_lag to land",
    ),
    "write_lag_overruns": (
        "ctxcache_write_lag_overruns",
        "stores that stopped waiting with write-through copies still older than write_lag",
    ),
    "delete_errors": ("ctxcache_delete_errors", "deletes a slow tier refused (the block stays stored and charged)"),
    "collisions": ("ctxcache_hash_collisions", "key collisions caught by token verification"),
    "rejected": ("ctxcache_rejected_blocks", "blocks not stored (no room, or parent gone)"),
    "discovered": ("ctxcache_discovered_blocks", "blocks found in shared tiers that the index lacked"),
}


def _num(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) else 0.0  # bools too: healthy -> 1/0


def _tier_families(tiers: Mapping[str, Mapping[str, Any]]) -> Iterator[Metric]:
    lab = ["tier", "kind"]
    fam: dict[str, Metric] = {
        "blocks": GaugeMetricFamily("ctxcache_tier_blocks", "blocks held by the tier", labels=lab),
        "bytes": GaugeMetricFamily("ctxcache_tier_bytes", "bytes held by the tier", labels=lab),
        "capacity": GaugeMetricFamily("ctxcache_tier_capacity_bytes", "the tier's capacity", labels=lab),
        "healthy": GaugeMetricFamily("ctxcache_tier_up", "1 if the tier's backend is reachable", labels=lab),
        "hits": CounterMetricFamily("ctxcache_tier_hit_blocks", "blocks served by the tier", labels=lab),
        "corrupt": CounterMetricFamily(
            "ctxcache_corrupt_blocks", "blocks that failed verification in the tier (dropped)", labels=lab
        ),
        "reconnects": CounterMetricFamily("ctxcache_tier_reconnects", "backend reconnections", labels=lab),
        "errors": CounterMetricFamily("ctxcache_tier_errors", "backend errors", labels=lab),
    }
    fam["evictions"] = CounterMetricFamily(
        "ctxcache_tier_evictions", "blocks pushed out of the tier (demoted to a slower one, or dropped)", labels=lab
    )
    fam["deletes_paused"] = GaugeMetricFamily(
        "ctxcache_tier_deletes_paused",
        "1 while the tier's delete breaker is open (its deletes keep failing)",
        labels=lab,
    )
    fam["delete_refusals_in_a_row"] = GaugeMetricFamily(
        "ctxcache_tier_delete_refusals_in_a_row", "deletes the tier refused since one last landed", labels=lab
    )
    fam["next_probe_in_s"] = GaugeMetricFamily(
        "ctxcache_tier_next_delete_probe_seconds",
        "seconds until an open delete breaker's next probe (0: closed)",
        labels=lab,
    )
    masters = GaugeMetricFamily(
        "ctxcache_tier_masters_down", "Redis Cluster masters marked down (their keys miss)", labels=lab
    )
    for name, ts in tiers.items():
        labels = [name, str(ts.get("kind", ""))]
        for key, f in fam.items():
            if key in ts:
                f.add_metric(labels, _num(ts[key]))  # type: ignore[attr-defined]
        if ts.get("cluster") and isinstance(ts.get("masters_down"), list):  # a single server has no masters
            masters.add_metric(labels, float(len(ts["masters_down"])))
    yield from fam.values()
    yield masters


def evictions_by_reason(s: Mapping[str, Any]) -> dict[str, int]:
    """Blocks that left the cache, by reason, from the cache's own counters. A cache that counts
    reasons reports ``evictions_by_reason``; otherwise every eviction is a capacity one and the
    corrupt blocks dropped by its tiers are the corrupt ones."""
    given = s.get("evictions_by_reason")
    out = dict.fromkeys(REASONS, 0)
    if isinstance(given, Mapping):
        out.update({str(k): int(_num(v)) for k, v in given.items()})
        return out
    out["capacity"] = int(_num(s.get("evictions", 0)))
    out["corrupt"] = int(_num(s.get("corrupt", 0)))
    return out


class CacheCollector(Collector):
    """Reads ``stats()`` and the observer on every scrape."""

    def __init__(self, stats: Callable[[], dict[str, Any]], observer: CacheObserver | None = None) -> None:
        self.stats, self.observer = stats, observer

    def describe(self) -> list[Metric]:
        return []  # unchecked: families depend on the tiers configured

    def collect(self) -> Iterator[Metric]:
        s = self.stats()
        for key, (name, doc) in _COUNTERS.items():
            if key in s:
                yield CounterMetricFamily(name, doc, value=_num(s[key]))
        yield GaugeMetricFamily("ctxcache_index_blocks", "blocks in the index, all tiers", value=_num(s.get("blocks")))
        yield GaugeMetricFamily("ctxcache_index_bytes", "bytes held, all tiers", value=_num(s.get("bytes")))
        yield GaugeMetricFamily(
            "ctxcache_mover_queue_depth", "moves waiting for the mover thread", value=_num(s.get("pending_moves"))
        )
        yield GaugeMetricFamily(
            "ctxcache_mover_buffered_bytes", "bytes queued for slow tiers", value=_num(s.get("write_buffer_bytes"))
        )
        if "mover_lag_s" in s:
            yield GaugeMetricFamily(
                "ctxcache_mover_lag_seconds", "age of the oldest queued move", value=_num(s["mover_lag_s"])
            )
        ev = CounterMetricFamily("ctxcache_evictions", "blocks that left the cache, by reason", labels=["reason"])
        for reason, n in evictions_by_reason(s).items():
            ev.add_metric([reason], float(n))
        yield ev
        tiers = s.get("tiers")
        if isinstance(tiers, Mapping):
            yield from _tier_families(tiers)
        if self.observer is not None:
            yield from self._indicators(s)

    def _indicators(self, s: Mapping[str, Any]) -> Iterator[Metric]:
        obs = self.observer
        assert obs is not None
        obs.sample(int(_num(s.get("hit_tokens"))), int(_num(s.get("lookup_tokens"))))
        snap = obs.snapshot()
        w = f" over the last {snap.window_s:g} s"
        yield GaugeMetricFamily(
            "ctxcache_hit_rate_slope_percent_per_minute",
            "least-squares slope of the token hit ratio" + w,
            value=snap.hit_rate_slope_pct_per_min,
        )
        yield GaugeMetricFamily(
            "ctxcache_eviction_entropy_ratio",
            "normalised Shannon entropy of evictions over tenants" + w + " (1 = even, 0 = one tenant)",
            value=snap.eviction_entropy,
        )
        yield GaugeMetricFamily(
            "ctxcache_context_age_skewness", "sample skewness (G1) of resident block ages", value=snap.context_age_skew
        )
        yield GaugeMetricFamily(
            "ctxcache_context_age_mean_seconds", "mean age of resident blocks", value=snap.mean_age_s
        )
        yield GaugeMetricFamily(
            "ctxcache_eviction_window_rate", "evictions per second" + w, value=snap.eviction_rate_per_s
        )


@dataclass
class TenantTotals:
    requests: int = 0
    prompt_tokens: int = 0
    hit_tokens: int = 0
    completion_tokens: int = 0
    saved_s: float = 0.0


class RequestMetrics(Collector):
    """Per-request series: tokens by tenant and A/B group, by serving tier, phase histograms,
    prefill seconds saved. ``observe`` is the only writer; the totals are exported at scrape."""

    def __init__(self, registry: CollectorRegistry, cost: CostModel) -> None:
        self.cost = cost
        self.totals: dict[tuple[str, str], TenantTotals] = {}
        self.hit_by_tier: dict[str, int] = {}
        self._lock = threading.Lock()
        self.phase = Histogram(
            "ctxcache_phase_seconds", "time per request phase", ["phase"], buckets=_PHASE_BUCKETS, registry=registry
        )
        self.load = Histogram(
            "ctxcache_load_seconds",
            "time loading cached KV, by the slowest tier that served the request",
            ["tier"],
            buckets=_PHASE_BUCKETS,
            registry=registry,
        )
        self.ttft = Histogram(
            "ctxcache_ab_ttft_seconds",
            "time to first token by A/B group",
            ["ab_group"],
            buckets=_PHASE_BUCKETS,
            registry=registry,
        )
        registry.register(self)

    def observe(self, rec: Mapping[str, Any]) -> None:
        """``rec`` is one request record (see observability.service.request_record)."""
        prompt, hit = rec["prompt_tokens"], rec["cached_tokens"]
        with self._lock:
            tot = self.totals.setdefault((rec["tenant"], rec["ab_group"]), TenantTotals())
            tot.requests += 1
            tot.prompt_tokens += prompt
            tot.hit_tokens += hit
            tot.completion_tokens += rec["completion_tokens"]
            tot.saved_s += self.cost.saved_s(prompt, hit)
            for tier, n in rec["cached_by_tier"].items():
                self.hit_by_tier[tier] = self.hit_by_tier.get(tier, 0) + n
        t = rec["timings"]
        for phase in ("lookup", "prefill", "store", "decode", "queue"):
            if f"{phase}_s" in t:
                self.phase.labels(phase).observe(t[f"{phase}_s"])
        if rec["cached_by_tier"] and "load_s" in t:
            self.load.labels(rec["slowest_tier"]).observe(t["load_s"])
        if rec.get("ttft_s") is not None:
            self.ttft.labels(rec["ab_group"]).observe(rec["ttft_s"])

    def snapshot(self) -> tuple[dict[tuple[str, str], TenantTotals], dict[str, int]]:
        with self._lock:
            return {k: TenantTotals(**vars(v)) for k, v in self.totals.items()}, dict(self.hit_by_tier)

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        """The public series: request totals by A/B group only. A tenant label here would let any
        scraper of /metrics read and count other tenants' traffic (see ``TenantCollector``)."""
        totals, by_tier = self.snapshot()
        groups: dict[str, TenantTotals] = {}
        for (_, group), tot in totals.items():
            g = groups.setdefault(group, TenantTotals())
            for key in vars(g):
                setattr(g, key, getattr(g, key) + getattr(tot, key))
        fams = _families(_PUBLIC, ["ab_group"], self.cost.name)
        for group, tot in sorted(groups.items()):
            for key, fam in fams.items():
                fam.add_metric([group], float(getattr(tot, key)))
        yield from fams.values()
        tiers = CounterMetricFamily(
            "ctxcache_request_hit_tokens_by_tier", "cached prompt tokens by the tier that served them", labels=["tier"]
        )
        for tier, n in sorted(by_tier.items()):
            tiers.add_metric([tier], float(n))
        yield tiers


# TenantTotals field -> (metric name without _total, help); public by A/B group, admin by tenant too
_PUBLIC = {
    "requests": ("ctxcache_served_requests", "completed chat requests"),
    "prompt_tokens": ("ctxcache_ab_prompt_tokens", "prompt tokens"),
    "hit_tokens": ("ctxcache_ab_hit_tokens", "prompt tokens from the cache"),
    "saved_s": ("ctxcache_prefill_saved_seconds_estimated", "prefill seconds saved by cache hits"),
}
_TENANT = {
    "requests": ("ctxcache_tenant_requests", "completed chat requests"),
    "prompt_tokens": ("ctxcache_tenant_prompt_tokens", "prompt tokens"),
    "hit_tokens": ("ctxcache_tenant_hit_tokens", "prompt tokens from the cache"),
    "saved_s": ("ctxcache_tenant_prefill_saved_seconds_estimated", "prefill seconds saved by cache hits"),
}


def _families(spec: Mapping[str, tuple[str, str]], labels: list[str], cost: str) -> dict[str, CounterMetricFamily]:
    return {
        key: CounterMetricFamily(name, doc + (f" (cost model {cost})" if key == "saved_s" else ""), labels=labels)
        for key, (name, doc) in spec.items()
    }


class TenantCollector(Collector):
    """Per-tenant series, for the admin registry only (``GET /v1/admin/metrics``): request totals
    by tenant and A/B group, and the bytes each tenant holds in each tier."""

    def __init__(self, requests: RequestMetrics, stats: Callable[[], dict[str, Any]]) -> None:
        self.requests, self.stats = requests, stats

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        totals, _ = self.requests.snapshot()
        fams = _families(_TENANT, ["tenant", "ab_group"], self.requests.cost.name)
        for (tenant, group), tot in sorted(totals.items()):
            for key, fam in fams.items():
                fam.add_metric([tenant, group], float(getattr(tot, key)))
        yield from fams.values()
        held = GaugeMetricFamily(
            "ctxcache_tenant_tier_bytes", "bytes a tenant holds in a tier", labels=["tenant", "tier"]
        )
        tiers = self.stats().get("tiers")
        for tier, ts in sorted(tiers.items() if isinstance(tiers, Mapping) else []):
            by_tenant = ts.get("tenants") if isinstance(ts, Mapping) else None
            for tenant, n in sorted(by_tenant.items() if isinstance(by_tenant, Mapping) else []):
                held.add_metric([str(tenant) or "(unknown)", tier], _num(n))
        yield held


# SemanticCache.stats() key -> (metric name, without _total for counters, help)
_SEMANTIC_COUNTERS = {
    "hits": ("ctxcache_semantic_hits", "requests answered from the semantic cache"),
    "misses": ("ctxcache_semantic_misses", "semantic lookups that found no close, verified, live entry"),
    "bypassed": ("ctxcache_semantic_bypassed", "requests that skipped the semantic cache (temperature, tools...)"),
    "stored": ("ctxcache_semantic_stored", "responses stored in the semantic cache"),
    "evicted": ("ctxcache_semantic_evicted", "semantic entries evicted for room"),
    "expired": ("ctxcache_semantic_expired", "semantic entries dropped at their TTL"),
    "vetoed": ("ctxcache_semantic_vetoed", "candidates above the threshold that the verifier refused"),
    "corrupt": ("ctxcache_semantic_corrupt", "stored semantic entries that failed to decode (dropped)"),
    "erased": ("ctxcache_semantic_erased", "semantic entries erased by this process"),
    "erased_elsewhere": (
        "ctxcache_semantic_erased_elsewhere",
        "entries dropped from memory: another process erased them",
    ),
    "failed_deletes": ("ctxcache_semantic_failed_deletes", "record deletes that may not have landed (kept for retry)"),
    "retried_deletes": ("ctxcache_semantic_retried_deletes", "kept deletes that landed on a retry"),
    "dropped_deletes": (
        "ctxcache_semantic_dropped_deletes",
        "kept deletes given up (over max_pending): records may come back",
    ),
}
_SEMANTIC_GAUGES = {
    "entries": ("ctxcache_semantic_entries", "entries held by the semantic cache"),
    "bytes": ("ctxcache_semantic_bytes", "bytes held by the semantic cache (stored record + vector)"),
    "pending_deletes": ("ctxcache_semantic_pending_deletes", "record deletes not yet confirmed: erasure unverified while > 0"),
    "tombstones": ("ctxcache_semantic_tombstones", "erasures published in Redis for other processes, at the last read"),
}  # fmt: skip


class SemanticCollector(Collector):
    """The semantic response cache's counters, read from ``stats()`` at scrape time like ``CacheCollector``."""

    def __init__(self, stats: Callable[[], dict[str, Any]]) -> None:
        self.stats = stats

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        s = self.stats()
        for key, (name, doc) in _SEMANTIC_COUNTERS.items():
            yield CounterMetricFamily(name, doc, value=_num(s.get(key)))
        for key, (name, doc) in _SEMANTIC_GAUGES.items():
            yield GaugeMetricFamily(name, doc, value=_num(s.get(key)))
