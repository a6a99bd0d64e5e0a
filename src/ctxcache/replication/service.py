"""``ctxcache replicate``: the one replicator of a region, a small long-running process.

It holds the region's claim (a key with a TTL on the region's Redis) so two replicators of one
region never both write its log: a second one waits, and takes over when the first stops
renewing. SIGTERM finishes the step under way and exits 0.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from ..errors import ConfigError
from .log import PREFIX, LinkDown, RedisLog
from .ops import check_region
from .replicator import Effects, Replicator

log = logging.getLogger("ctxcache.replication")
CLAIM_MS = 10_000


def parse_peers(items: list[str]) -> dict[str, str]:
    """``NAME=redis://host:port/db`` each; names unique."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, url = item.partition("=")
        if not sep or not name or not url:
            raise ConfigError(f"--peer takes NAME=URL (e.g. us=redis://10.0.0.2:6379/0), got {item!r}")
        check_region(name)
        if urlsplit(url).scheme not in ("redis", "rediss", "unix"):
            raise ConfigError(f"--peer {name}: the URL must look like 'redis://host:port/db', got {url!r}")
        if name in out:
            raise ConfigError(f"--peer {name} given twice")
        out[name] = url
    return out


class Service:
    def __init__(
        self,
        region: str,
        url: str,
        peers: Mapping[str, str],
        effects: Effects | None = None,
        *,
        prefix: str = PREFIX,
        timeout: float = 2.0,
        interval: float = 0.05,
        owner: str | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        check_region(region)
        if not peers:
            raise ConfigError("a replicator needs at least one --peer NAME=URL")
        if region in peers:
            raise ConfigError(f"region {region} lists itself as a --peer")
        self.own = RedisLog(url, region, prefix=prefix, timeout=timeout)
        logs = {p: RedisLog(u, p, prefix=prefix, timeout=timeout) for p, u in peers.items()}
        self.replicator = Replicator(region, self.own, logs, effects, wall=wall)
        self.interval = interval
        self.owner = owner or f"{socket.gethostname()}-{os.getpid()}"
        self.holding = False
        self._lock = threading.Lock()  # a scrape's status() must not read dicts a step is resizing

    def _claim(self) -> bool:
        try:
            held = self.own.claim(self.owner, CLAIM_MS)
        except LinkDown as exc:
            log.warning("region %s: own Redis unreachable: %s", self.replicator.region, exc)
            held = False
        if held and not self.holding:
            log.info("region %s: replicator %s holds the region", self.replicator.region, self.owner)
            self.replicator.loaded = False  # another may have written meanwhile: read the log again
        elif not held and self.holding:
            log.warning("region %s: lost the claim; waiting", self.replicator.region)
        self.holding = held
        return held

    def run(self, stop: threading.Event) -> None:
        renew = 0.0
        while not stop.is_set():
            now = time.monotonic()
            if now >= renew:
                renew = now + CLAIM_MS / 3000.0
                if not self._claim():
                    stop.wait(min(1.0, CLAIM_MS / 3000.0))
                    renew = 0.0
                    continue
            try:
                with self._lock:
                    busy = self.replicator.step()
            except LinkDown as exc:
                log.warning("region %s: own Redis unreachable: %s", self.replicator.region, exc)
                busy = 0
                stop.wait(1.0)
            if not busy:
                stop.wait(self.interval)
        if self.holding:
            with contextlib.suppress(LinkDown):  # else it expires on its own
                self.own.release(self.owner)
            self.holding = False

    def status(self, digest: bool = True) -> dict[str, Any] | None:
        """The replicator's status (what metrics and the log line read); None before its first step."""
        if not self.replicator.loaded:
            return None
        with self._lock:
            s = self.replicator.status(digest)
        s["holding"] = self.holding
        return s
