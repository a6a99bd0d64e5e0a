"""RedisHealth: the connection half of RedisTier (redis.py): connecting, marking the tier unhealthy
at the first connection error, and the background thread that reconnects, probes the Cluster
masters marked down and rebuilds the Bloom filter by SCAN.

A mixin over the tier's own state (set in RedisTier.__init__), so the tier's attributes, logs and
stats are what they were before the split.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any

from .bloom import KeyFilter
from .redis_cluster import DOWN as _DOWN
from .redis_cluster import Masters, NoBackoff, RedisCluster, Retry, log
from .redis_cluster import redis_py as _redis


class RedisHealth:
    # set by RedisTier.__init__ (name by Tier, _sizes by BlobTier)
    name: str
    url: str
    prefix: bytes
    timeout: float
    bulk_timeout: float
    retry_interval: float
    bloom_refresh: float
    filter: KeyFilter | None
    errors: int
    reconnects: int
    _client: Any
    _bulk: Any
    _healthy: bool
    _scan_failed: bool
    _stop: threading.Event
    _wake: threading.Event
    _health: threading.Lock
    _masters: Masters | None
    _sizes: dict[bytes, int]

    # --- connection and health -------------------------------------------------------------------
    def _connect(self) -> bool:
        opts = {
            "socket_timeout": self.timeout,
            "socket_connect_timeout": self.timeout,
            "retry": Retry(NoBackoff(), 0),  # one attempt: the tier degrades instead of waiting
        }
        client: Any = None
        try:
            if self._masters is not None:
                client = RedisCluster.from_url(self.url, **opts)
                self._masters.check(client)  # some masters answering is enough: the others are marked down
            else:
                client = _redis.Redis.from_url(self.url, **opts)
                client.ping()
        except Exception:  # noqa: BLE001 - any failure to connect means "not yet"
            if client is not None:
                client.close()
            return False
        bulk = self._bulk_client(opts)
        (old, self._client), (old_bulk, self._bulk) = (self._client, client), (self._bulk, bulk)
        for c in (old, old_bulk):
            if c is not None:
                c.close()
        self._healthy = True
        return True

    def _bulk_client(self, opts: dict[str, Any]) -> Any:
        """A second client of the same server(s) for multi-MB pipelines (redis.py, BULK_BYTES): its
        reads and writes may wait ``bulk_timeout``, its connects only ``timeout``. None if it cannot
        be made now: those pipelines then use the main client."""
        if self.bulk_timeout <= self.timeout:
            return None
        opts = {**opts, "socket_timeout": self.bulk_timeout}
        try:
            if self._masters is not None:
                return RedisCluster.from_url(self.url, **opts)
            return _redis.Redis.from_url(self.url, **opts)  # connects at its first pipeline
        except Exception:  # noqa: BLE001
            return None

    def _fail(self, exc: BaseException) -> None:
        self.errors += 1
        with self._health:
            if not isinstance(exc, _DOWN) or not self._healthy:
                return
            self._healthy = False
        log.warning(
            "redis tier %r unhealthy (%s: %s): every call answers at once (misses, refused writes, failed deletes) "
            "until it reconnects (tried every %.1f s)", self.name, type(exc).__name__, exc, self.retry_interval,
        )  # fmt: skip
        self._wake.set()

    def _run(self) -> None:
        """Reconnect while unhealthy, probe the Cluster masters marked down; rebuild the Bloom filter
        after each (re)connect, when a master is back, and periodically (not while one is down: the
        SCAN would fail)."""
        rebuild_due = 0.0
        while not self._stop.is_set():
            if not self._healthy:
                if self._stop.wait(self.retry_interval):
                    break
                if not self._connect():
                    continue
                self.reconnects += 1
                log.info("redis tier %r reconnected (masters still down: %s)", self.name, self.masters_down or "none")
                rebuild_due = 0.0
            elif self._masters is not None and self._masters.probe(self._client):
                rebuild_due = 0.0
            down = bool(self.masters_down)
            if not down and (time.monotonic() >= rebuild_due or self._full()):
                self._rebuild_filter()
                rebuild_due = time.monotonic() + self.bloom_refresh
            pause = self.retry_interval if down else max(0.01, rebuild_due - time.monotonic())
            self._wake.wait(min(self.bloom_refresh, pause))
            self._wake.clear()

    def _rebuild_filter(self) -> None:
        if self.filter is None or not self._healthy:
            return
        pattern = self._pattern()
        n = len(self.prefix)
        try:
            self.filter.rebuild((k[n:] for k in self._client.scan_iter(match=pattern, count=1000)), len(self._sizes))
            self._scan_failed = False
        except Exception as exc:  # noqa: BLE001
            self._scan_failed = True  # e.g. SCAN refused by an ACL: only the periodic refresh retries
            self._fail(exc)

    def _full(self) -> bool:
        """The filter holds more keys than it was sized for and a rebuild may fix that now."""
        return self.filter is not None and self.filter.saturated and not self._scan_failed

    def _pattern(self) -> bytes:
        return re.sub(rb"([*?\[\]\\])", rb"\\\1", self.prefix) + b"*"

    def wait_ready(self, timeout: float = 5.0) -> bool:
        """Block until the tier is healthy, no Cluster master is down and the Bloom filter is built."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._healthy and not self.masters_down and (self.filter is None or self.filter.ready):
                return True
            time.sleep(0.005)
        return False

    @property
    def healthy(self) -> bool:
        """False while the server (a Cluster: every master) is unreachable. A Cluster with some
        masters down is healthy: the engine keeps reading, finding and writing blocks on the others,
        and the down masters' keys miss, refuse writes and fail deletes at once (``masters_down``)."""
        return self._healthy

    @property
    def masters_down(self) -> list[str]:
        """The Cluster masters ("host:port") marked down, re-probed every ``retry_interval``."""
        return self._masters.down() if self._masters is not None else []
