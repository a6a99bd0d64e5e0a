"""The ``[replication]`` table of a worker's config, and a worker's running replication.

A worker never talks to other regions: it follows its own region's log (effects on its RAM and
disk, which the region's replicator cannot reach) and submits the updates its admin API makes
to the region's inbox. ``ctxcache replicate`` (replication/service.py) is the one process per
region that talks to peers.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any
from urllib.parse import urlsplit

from ..errors import ConfigError
from .effects import CacheEffects, Follower
from .log import PREFIX, LinkDown, RedisLog
from .ops import check_region, check_value, key_for

log = logging.getLogger("ctxcache.replication")


@dataclass
class ReplicationConfig:
    region: str = ""
    url: str | None = None  # the region's Redis; default: the first Redis tier's
    cluster: bool | None = None  # default: that tier's
    prefix: str = PREFIX
    worker: str | None = None  # default: host:port under `serve`
    poll_ms: float = 50.0
    timeout_s: float = 2.0

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> ReplicationConfig | None:
        """None when the table is absent or empty: replication is opt-in."""
        if not d:
            return None
        known = {f.name for f in fields(cls)}
        extra = set(d) - known
        if extra:
            raise ConfigError(f"unknown [replication] keys {sorted(extra)}; known: {sorted(known)}")
        cfg = cls(**dict(d))
        cfg.check()
        return cfg

    def check(self) -> None:
        if not self.region:
            raise ConfigError('[replication] needs region = "<this region\'s name>"')
        try:
            check_region(self.region)
        except ConfigError as exc:
            raise ConfigError(f"replication.region: {exc}") from None
        if self.url is not None and (
            not isinstance(self.url, str) or urlsplit(self.url).scheme not in ("redis", "rediss", "unix")
        ):
            raise ConfigError(f"replication.url must look like 'redis://host:port/db', got {self.url!r}")
        if self.cluster is not None and not isinstance(self.cluster, bool):
            raise ConfigError(f"replication.cluster must be true or false, got {self.cluster!r}")
        if not isinstance(self.prefix, str) or not self.prefix or "{" in self.prefix or "}" in self.prefix:
            raise ConfigError(f"replication.prefix must be a non-empty string without braces, got {self.prefix!r}")
        if self.worker is not None and (not isinstance(self.worker, str) or not 0 < len(self.worker) <= 128):
            raise ConfigError(f"replication.worker must be a string of 1-128 characters, got {self.worker!r}")
        for name, hi in (("poll_ms", 60_000.0), ("timeout_s", 3600.0)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v <= hi:
                raise ConfigError(f"replication.{name} must be in (0, {hi:g}], got {v!r}")


class Unreachable(Exception):
    """The region's Redis did not take a submission: the caller answers 503 (retrying is safe)."""


class WorkerReplication:
    """A worker's follower and its submissions; started before the worker serves."""

    def __init__(self, cache: Any, cfg: ReplicationConfig, worker: str, semantic: Any | None = None) -> None:
        redis = [t for t in cache.tiers if t.kind == "redis"]
        url = cfg.url or (redis[0].url if redis else None)
        if url is None:
            raise ConfigError("[replication] needs a url (no Redis tier to take it from)")
        cluster = cfg.cluster if cfg.cluster is not None else bool(redis and redis[0].cluster and cfg.url is None)
        self.cfg, self.worker, self.url = cfg, worker, url
        self.log = RedisLog(url, cfg.region, prefix=cfg.prefix, timeout=cfg.timeout_s, cluster=cluster)
        self.follower = Follower(self.log, cfg.region, worker, CacheEffects(cache, semantic))
        self.submitted = 0
        self._ready = threading.Event()

    def start(self) -> None:
        """Catch up now (updates missed while down apply before serving); if the region's Redis is
        down, serve anyway and catch up in the follower's thread when it returns."""
        try:
            n = self.follower.catch_up()
            log.info("replication: region %s, worker %s caught up (%d updates)", self.cfg.region, self.worker, n)
            self._ready.set()
        except LinkDown as exc:
            log.error("replication: region %s's Redis unreachable at start (%s); catching up later",
                      self.cfg.region, exc)  # fmt: skip
        self.follower.start(self.cfg.poll_ms / 1000.0, caught_up=self._ready.is_set())

    def submit(self, kind: str, target: str | bytes, value: Any = None) -> None:
        """Queue an update for the region's replicator (checked here: a bad one is a 4xx, not a stamp)."""
        t = target.hex() if isinstance(target, bytes) else target
        key_for(kind, t)
        check_value(kind, value)
        try:
            self.follower.submit(kind, t, value)
        except LinkDown as exc:
            raise Unreachable(str(exc)) from None
        self.submitted += 1

    def status(self) -> dict[str, Any]:
        out = self.follower.status()
        out.update(region=self.cfg.region, submitted=self.submitted, caught_up=self.follower.caught_up)
        return out

    def results(self, key: str | None = None) -> dict[str, dict[str, Any]]:
        """The region's per-process results of applied updates (``verified`` per process), as
        "<origin>/<counter>/<key> <process>": of one key's updates ("t:<tenant>", "p:<hex>") or all."""
        got = self.log.results()
        return {k: v for k, v in got.items() if key is None or k.rsplit(" ", 1)[0].split("/", 2)[-1] == key}

    def close(self) -> None:
        self.follower.close()
