"""Observability of one served cache: indicators, exporters, request log, spans, history, health.

The server builds one ``Observability`` per app. Per request it gets one record (built on the
model thread from what the request measured) and fans it out: request metrics, the request log
line, spans, the recent-requests window. A ticker (``tick``, every ``log_every_s``) samples the
cache, writes the periodic hit-rate line (also the feature rows ``ctxcache analyze`` reads),
warns when a tier goes down or up or corrupt blocks appear, and appends a dashboard history point.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry

from ..errors import ConfigError
from ..sim.costmodel import get_cost_model
from .ab import ABConfig, _pct, group_of
from .exporter import CacheCollector, RequestMetrics, TenantCollector, evictions_by_reason
from .hooks import attach
from .logging import emit
from .observer import CacheObserver
from .tracing import EXPORTERS, Tracing

log = logging.getLogger("ctxcache.requests")
stats_log = logging.getLogger("ctxcache.stats")
health_log = logging.getLogger("ctxcache.health")


@dataclass
class ObsConfig:
    window_s: float = 600.0  # indicator window
    log_every_s: float = 10.0  # periodic stats line and dashboard point
    history_points: int = 720
    trace_exporter: str = field(default_factory=lambda: os.environ.get("CTXCACHE_TRACE_EXPORTER", "none"))
    # Deprecated (a warning at server start): opens only the dashboard's tenant table; the admin keys
    # of /v1/admin ([admin] key, [cache.tenancy] admin_keys) open it too (server/routes_obs.is_admin).
    admin_key: str | None = field(default_factory=lambda: os.environ.get("CTXCACHE_ADMIN_KEY") or None)
    worker_stall_s: float = 120.0  # readiness fails if one job has run longer than this
    cost_model: str = "gemma3-270m-cpu"
    ab: ABConfig = field(default_factory=ABConfig)
    enabled: bool = True  # False: no cache hooks, collectors, request records or spans (a baseline)

    def __post_init__(self) -> None:
        for name in ("window_s", "log_every_s", "worker_stall_s"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not v > 0:
                raise ValueError(f"observability {name} must be > 0, got {v!r}")


_OBS_KEYS = {"window_s", "log_every_s", "history_points", "trace_exporter", "admin_key", "worker_stall_s", "cost_model"}


def obs_config_from(table: Mapping[str, Any]) -> ObsConfig:
    """An ``[observability]`` TOML table (with an optional ``[observability.ab]``) as an ObsConfig;
    unknown keys and bad values raise ConfigError naming them."""
    if not isinstance(table, Mapping):
        raise ConfigError("[observability] must be a table")
    bad = set(table) - _OBS_KEYS - {"ab"}
    if bad:
        raise ConfigError(f"unknown [observability] keys {sorted(bad)}; known: {sorted(_OBS_KEYS | {'ab'})}")
    ab = table.get("ab", {})
    if not isinstance(ab, Mapping) or set(ab) - {"fraction", "salt", "cache"}:
        raise ConfigError("[observability.ab] takes fraction, salt and cache (a [cache]-shaped table)")
    if table.get("trace_exporter", "none") not in EXPORTERS:
        raise ConfigError(f"observability.trace_exporter must be one of {', '.join(EXPORTERS)}")
    try:
        cfg = ObsConfig(**{k: v for k, v in table.items() if k != "ab"}, ab=ABConfig(**ab))
        get_cost_model(cfg.cost_model)
    except (TypeError, ValueError, KeyError) as exc:
        raise ConfigError(f"[observability]: {exc}") from None
    if cfg.ab.cache:
        from ..config import load_config

        load_config(dict(cfg.ab.cache))  # group b's cache fails at startup, not at its first request
    return cfg


def _slowest(cached_by_tier: Mapping[str, int], order: list[str]) -> str | None:
    used = [t for t in order if cached_by_tier.get(t)]
    return used[-1] if used else None


class Observability:
    def __init__(
        self,
        cache: Any,
        registry: CollectorRegistry,
        cfg: ObsConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cfg = cfg or ObsConfig()
        self.cache, self.clock = cache, clock
        self.tier_order = [t.name for t in cache.tiers]
        self.policy = "+".join(str(s.policy.name) for s in cache.slots)
        self.observer = CacheObserver(clock, self.cfg.window_s, age_sample_mask=3)  # ages of 1 block in 4
        if self.cfg.enabled:
            attach(cache, self.observer)
            registry.register(CacheCollector(self.stats, self.observer))
        self.requests = RequestMetrics(
            registry if self.cfg.enabled else CollectorRegistry(), get_cost_model(self.cfg.cost_model)
        )
        # Per-tenant series live apart from ``registry`` (the public /metrics): only the admin
        # route renders them, so no tenant can read or count another's traffic.
        self.admin_registry = CollectorRegistry()
        if self.cfg.enabled:
            self.admin_registry.register(TenantCollector(self.requests, self.stats))
        self.tracing = Tracing(self.cfg.trace_exporter if self.cfg.enabled else "none")
        self.recent: deque[dict[str, Any]] = deque(maxlen=5000)
        self.history: deque[dict[str, Any]] = deque(maxlen=self.cfg.history_points)
        self._lock = threading.Lock()
        self._last: dict[str, Any] = {}
        self._ids = 0
        self.alt_caches: dict[str, Any] = {}

    def stats(self) -> dict[str, Any]:
        return dict(self.cache.stats())

    @contextlib.contextmanager
    def cache_for(self, lm: Any, group: str) -> Iterator[None]:
        """Serve one job from its A/B group's cache. Only on the single model thread: it swaps
        ``lm.cache`` for the job's duration."""
        if group == "a":
            yield
            return
        alt = self.alt_caches.get(group)
        if alt is None:
            from ..cache import ContextCache

            alt = ContextCache.from_config(dict(self.cfg.ab.cache))
            if alt.block_size != self.cache.block_size:
                alt.close()
                raise ConfigError(f"ab.cache block_size {alt.block_size} != the main cache's {self.cache.block_size}")
            self.alt_caches[group] = alt
        main, lm.cache = lm.cache, alt
        try:
            yield
        finally:
            lm.cache = main

    def close(self) -> None:
        for c in self.alt_caches.values():
            c.close()
        self.alt_caches.clear()
        self.tracing.shutdown()

    # --- per request ---------------------------------------------------------------------------------
    def group_for(self, session: str) -> str:
        return group_of(session, self.cfg.ab.fraction, self.cfg.ab.salt)

    def request_done(self, tenant: str, group: str, out: Any, arrived_perf: float) -> dict[str, Any]:
        """Record one finished request (``out`` is the server's Outcome). Returns the record."""
        if not self.cfg.enabled:
            return {}
        with self._lock:
            self._ids += 1
            rid = self._ids
        usage = out.usage
        t = dict(out.generation.timings.to_dict())
        t.update(queue_s=round(out.queued_s, 6), tokenize_s=round(out.tokenize_s, 6))
        by_tier = {k: int(v) for k, v in usage.by_tier.items()}
        rec: dict[str, Any] = {
            "id": rid,
            "tenant": tenant,
            "ab_group": group,
            "prompt_tokens": usage.cache_read_tokens + usage.uncached_tokens,
            "cached_tokens": usage.cache_read_tokens,
            "created_tokens": usage.cache_creation_tokens,
            "completion_tokens": out.generation.completion_tokens,
            "cached_by_tier": by_tier,
            "slowest_tier": _slowest(by_tier, self.tier_order),
            "ttft_s": None if out.ttft_s is None else round(out.ttft_s, 6),
            "timings": t,
            "at": self.clock(),
        }
        self.requests.observe(rec)
        self.tracing.request(rec, arrived_perf, self.policy)
        self.recent.append(rec)
        emit(log, logging.INFO, "request", **{k: v for k, v in rec.items() if k != "at"})
        return rec

    # --- periodic ------------------------------------------------------------------------------------
    def tick(self) -> dict[str, Any]:
        """Sample, log the stats line, warn on tier changes; returns the history point."""
        if not self.cfg.enabled:
            return {}
        s = self.stats()
        now = self.clock()
        self.observer.sample(int(s.get("hit_tokens", 0)), int(s.get("lookup_tokens", 0)))
        snap = self.observer.snapshot()
        last = self._last or {"t": now, "hit_tokens": 0, "lookup_tokens": 0, "evictions": 0, "load_s": 0.0, "n": 0}
        looked = int(s.get("lookup_tokens", 0)) - last["lookup_tokens"]
        span = max(now - last["t"], 1e-9)
        recent = [r for r in list(self.recent) if r["at"] > last["t"]] if self._last else list(self.recent)
        ttfts = [r["ttft_s"] for r in recent if r["ttft_s"] is not None]
        loads = [float(r["timings"].get("load_s", 0.0)) for r in recent]
        evictions = sum(evictions_by_reason(s).values())
        point: dict[str, Any] = {
            "t": time.time(),
            "requests": len(recent),
            "hit_ratio": (int(s.get("hit_tokens", 0)) - last["hit_tokens"]) / looked if looked > 0 else None,
            "eviction_rate": (evictions - last["evictions"]) / span if self._last else 0.0,
            "eviction_entropy": snap.eviction_entropy,
            "age_skew": snap.context_age_skew,
            "hit_rate_slope": snap.hit_rate_slope_pct_per_min,
            "load_latency_s": sum(loads) / len(loads) if loads else 0.0,
            "ttft_p50_s": _pct(ttfts, 0.5) if ttfts else None,
            "ttft_p95_s": _pct(ttfts, 0.95) if ttfts else None,
            "tiers": {
                n: {"bytes": ts.get("bytes", 0), "capacity": ts.get("capacity", 0)}
                for n, ts in s.get("tiers", {}).items()
            },
            "evictions_by_reason": evictions_by_reason(s),
        }
        tiers_state = self._warn_tiers(s)
        self._last = {
            "tiers": tiers_state,
            "t": now,
            "hit_tokens": int(s.get("hit_tokens", 0)),
            "lookup_tokens": int(s.get("lookup_tokens", 0)),
            "evictions": evictions,
        }
        with self._lock:
            self.history.append(point)
        if point["requests"] or point["eviction_rate"]:
            fields = {k: v for k, v in point.items() if k not in ("tiers", "t")}
            hr = float(point["hit_ratio"] or 0.0)
            fields["hit_ratio"] = hr
            emit(stats_log, logging.INFO, f"hit rate {100 * hr:.1f}% over the last {span:.0f} s", **fields)
        return point

    def _warn_tiers(self, s: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
        prev = self._last.get("tiers", {})
        cur: dict[str, dict[str, Any]] = {}
        for name, ts in s.get("tiers", {}).items():
            up, corrupt = bool(ts.get("healthy", True)), int(ts.get("corrupt", 0))
            cur[name] = {"up": up, "corrupt": corrupt}
            p = prev.get(name, {"up": True, "corrupt": 0})
            if p["up"] != up:
                lvl = logging.INFO if up else logging.WARNING
                emit(health_log, lvl, f"tier {name} is {'up again' if up else 'DOWN'}", tier=name, up=up)
            if corrupt > p["corrupt"]:
                emit(health_log, logging.WARNING, f"tier {name}: {corrupt - p['corrupt']} corrupt block(s) dropped",
                     tier=name, corrupt_new=corrupt - p["corrupt"], corrupt_total=corrupt)  # fmt: skip
        return cur
