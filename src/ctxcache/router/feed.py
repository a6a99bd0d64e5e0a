"""The KV events feeding the router's index: a listener on the events consumer (events/consumer.py).

The consumer owns the order of each worker's stream (epochs, seqs, gaps, snapshots, silence) and
its WorkerView; the index owns the blocks (as worker bitmasks). This adapter owns only which
router worker (a ``--worker`` URL) each event worker id is, and passes the changes through:
``stored``/``removed``/``cleared`` in place, ``forget`` (a restart, a resync from a snapshot, a
silent worker) drops the worker's entries. A view whose id is not (yet) mapped is skipped; the
consumer thread's ``tick`` attaches it as soon as it maps, stores and all (the view has them).

Mapping (docs/routing.md, "KV events"): the id a worker's ``/readyz`` reports as
``events_worker`` (router/pool.py records it), else the URL whose port is the id's ``:port``
suffix (``ctxcache serve`` names itself ``host:port`` by default), if exactly one URL has it.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from ..errors import ConfigError
from ..events.consumer import Consumer
from ..events.state import WorkerView
from .index import BlockIndex


def port_of(url: str) -> int | None:
    u = urlsplit(url)
    try:
        return u.port or (443 if u.scheme == "https" else 80)
    except ValueError:
        return None


class WorkerMap:
    """Event worker id -> router worker URL: what ``/readyz`` reported, else a unique port match."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = [u.rstrip("/") for u in urls]
        self._reported: dict[str, str] = {}  # id -> url, from /readyz
        self.version = 0  # bumped on every change, so the consumer thread re-checks its views
        self._lock = threading.Lock()

    def report(self, url: str, worker_id: str | None) -> None:
        """``url``'s /readyz said its events go out as ``worker_id`` (None: events off)."""
        with self._lock:
            old = [k for k, v in self._reported.items() if v == url]
            if old == ([worker_id] if worker_id else []):
                return
            for k in old:
                del self._reported[k]
            if worker_id:
                self._reported[worker_id] = url
            self.version += 1

    def resolve(self, worker_id: str) -> str | None:
        with self._lock:
            url = self._reported.get(worker_id)
            if url is not None:
                return url
            claimed = set(self._reported.values())
        _, sep, tail = worker_id.rpartition(":")
        if not sep or not tail.isdigit():
            return None
        hits = [u for u in self.urls if port_of(u) == int(tail) and u not in claimed]
        return hits[0] if len(hits) == 1 else None


class IndexFeed:
    """Consumer listener (events.Listener, plus the optional ``cleared`` and ``tick``)."""

    def __init__(self, index: BlockIndex, workers: WorkerMap) -> None:
        self.index, self.map = index, workers
        self._attached: dict[str, tuple[str, str]] = {}  # event worker id -> (url, epoch)
        self._version = -1
        self.unmapped: set[str] = set()  # event worker ids seen that map to no --worker URL

    def _url(self, view: WorkerView) -> str | None:
        got = self._attached.get(view.worker)
        if got is not None and got[1] == view.epoch:
            return got[0]
        return self._attach(view)

    def _attach(self, view: WorkerView) -> str | None:
        """Map ``view`` to its URL and give the index all it holds; None if it maps to none."""
        old = self._attached.pop(view.worker, None)
        if old is not None:
            self.index.remove_worker(old[0])
        url = self.map.resolve(view.worker)
        if url is None:
            self.unmapped.add(view.worker)
            return None
        self.unmapped.discard(view.worker)
        self.index.attach(url, view.epoch, view.started)
        for tier, keys in view.tiers.items():
            if keys:
                self.index.stored(url, tier, tuple(keys))
        self._attached[view.worker] = (url, view.epoch)
        return url

    # --- Listener ------------------------------------------------------------------------------------
    def stored(self, view: WorkerView, tier: str, keys: tuple[bytes, ...]) -> None:
        url = self._url(view)
        if url is not None:
            self.index.stored(url, tier, keys)

    def removed(self, view: WorkerView, tier: str, keys: tuple[bytes, ...]) -> None:
        url = self._url(view)
        if url is not None:
            self.index.removed(url, tier, keys)

    def cleared(self, view: WorkerView, tier: str, reason: str) -> None:
        url = self._url(view)
        if url is not None:
            self.index.cleared(url, tier, reason)

    def forget(self, view: WorkerView) -> None:
        self.unmapped.discard(view.worker)
        old = self._attached.pop(view.worker, None)
        if old is not None:
            self.index.remove_worker(old[0])

    def tick(self, views: dict[str, WorkerView]) -> None:
        """Each consumer round (its thread): attach views that hold nothing yet (a worker that
        only started: it still reads the shared store) or that a new mapping now resolves."""
        remap = self._version != self.map.version
        self._version = self.map.version
        for worker, view in views.items():
            got = self._attached.get(worker)
            if got is None:
                if (view.started is not None or view.tiers) and (remap or worker not in self.unmapped):
                    self._attach(view)
            elif remap and self.map.resolve(worker) != got[0]:
                self._attach(view)

    def stats(self) -> dict[str, object]:
        # Called from the event loop while the consumer's thread may change these: copied in
        # one C-level step each (atomic under the GIL), then read.
        attached, unmapped = dict(self._attached), set(self.unmapped)
        return {"mapped": {w: u for w, (u, _) in attached.items()}, "unmapped": sorted(unmapped)}


class RouterEvents:
    """The events consumer of ``ctxcache route --redis``, its feed and its worker map."""

    def __init__(self, consumer: Consumer, feed: IndexFeed) -> None:
        self.consumer, self.feed = consumer, feed

    @classmethod
    def connect(cls, url: str, index: BlockIndex, urls: list[str], events: Mapping[str, Any]) -> RouterEvents:
        """Follow the streams at ``url`` as the workers' ``[events]`` table (prefix, cluster,
        heartbeats) publishes them."""
        from ..events.runtime import EventsConfig
        from ..events.streams import connect

        if urlsplit(url).scheme not in ("redis", "rediss", "unix"):
            raise ConfigError(f"--redis must look like 'redis://host:port/db', got {url!r}")
        cfg = EventsConfig.from_dict(events)
        cluster = bool(cfg.cluster)
        feed = IndexFeed(index, WorkerMap(urls))
        consumer = Consumer(connect(url, cluster, cfg.timeout_s), prefix=cfg.prefix, listeners=[feed],
                            heartbeat_s=cfg.heartbeat_s, missed=cfg.missed_heartbeats, cluster=cluster)  # fmt: skip
        return cls(consumer, feed)

    def start(self) -> None:
        self.consumer.start()

    def stop(self) -> None:
        self.consumer.stop()

    def stats(self) -> dict[str, Any]:
        for _ in range(3):  # the consumer's own stats iterate its dicts: its thread may resize one
            try:
                return {**self.consumer.stats(), **self.feed.stats()}
            except RuntimeError:
                continue
        return {"lag_s": self.consumer.lag_s(), "applied": self.consumer.applied, **self.feed.stats()}
