"""The ``[events]`` config table and the running events of one worker: the emitter on its engine,
the Redis Streams publisher, and the consumer that feeds other workers' stores into this
worker's shared Redis tiers' Bloom filters (docs/events.md, "Config").
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ..errors import ConfigError
from .consumer import Consumer
from .emitter import Emitter, Sink
from .model import WorkerStarted
from .state import WorkerView
from .streams import PREFIX, StreamsPublisher, check_worker, connect
from .watch import EngineWatch
from .zmq_config import ZMQ_KEYS, build_zmq_sink, parse_zmq

if TYPE_CHECKING:
    from ..cache import ContextCache
    from ..tiers.bloom import KeyFilter

log = logging.getLogger("ctxcache.events")

# With events feeding the filter, its SCAN rebuild is only a safety net (it drops keys deleted
# since, which a Bloom filter cannot forget): hourly, not every 5 minutes (RedisTier's default
# without events).
EVENTS_BLOOM_REFRESH_S = 3600.0


@dataclass
class EventsConfig:
    enabled: bool | None = None  # None: on when a Redis tier is configured
    url: str | None = None  # default: the first Redis tier's
    cluster: bool | None = None  # default: that tier's
    prefix: str = PREFIX
    worker: str | None = None  # default: host:port under `serve`, host-pid otherwise
    maxlen: int = 10_000  # stream entries (batches) kept, approximately (MAXLEN ~)
    buffer: int = 10_000  # batches held while Redis is slow or down; more are dropped and counted
    flush_ms: float = 20.0
    heartbeat_s: float = 1.0
    missed_heartbeats: int = 3
    snapshot_every_s: float = 10.0
    timeout_s: float = 2.0  # socket timeout of the events' own Redis connections
    token_ids: bool = False  # opt-in: BlockStored carries the prompt tokens (every reader sees them)
    consume: bool = True  # feed other workers' stores into this worker's shared-tier filters
    zmq: str | None = None  # a ZMQ PUB endpoint in vLLM's format (events/zmq.py wires it)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> EventsConfig:
        d = dict(d or {})
        known = {f.name for f in fields(cls)}
        extra = {k for k in d if k not in known and k not in ZMQ_KEYS}
        if extra:
            raise ConfigError(f"unknown [events] keys {sorted(extra)}; known: {sorted(known | set(ZMQ_KEYS))}")
        cfg = cls(**{k: v for k, v in d.items() if k in known})
        cfg.extra = {k: v for k, v in d.items() if k in ZMQ_KEYS and k != "zmq"}
        cfg.check()
        parse_zmq(d)  # the zmq_* keys are checked at startup too, before any socket is bound
        return cfg

    extra: dict[str, Any] | None = None

    def check(self) -> None:
        for name in ("enabled", "cluster"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), bool):
                raise ConfigError(f"events.{name} must be true or false, got {getattr(self, name)!r}")
        for name in ("token_ids", "consume"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"events.{name} must be true or false, got {getattr(self, name)!r}")
        for name in ("maxlen", "buffer", "missed_heartbeats"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"events.{name} must be a positive integer, got {v!r}")
        for name in ("flush_ms", "heartbeat_s", "snapshot_every_s", "timeout_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 3600:
                raise ConfigError(f"events.{name} must be in (0, 3600], got {v!r}")
        if self.url is not None and (
            not isinstance(self.url, str) or urlsplit(self.url).scheme not in ("redis", "rediss", "unix")
        ):
            raise ConfigError(f"events.url must look like 'redis://host:port/db', got {self.url!r}")
        if not isinstance(self.prefix, str) or not self.prefix or "{" in self.prefix or "}" in self.prefix:
            raise ConfigError(f"events.prefix must be a non-empty string without braces, got {self.prefix!r}")
        if self.worker is not None:
            check_worker(self.worker)


def store_id(tier: Any) -> str:
    """What names a shared store across workers: its address, database and key prefix (no credentials)."""
    u = urlsplit(tier.url)
    db = u.path.lstrip("/") or "0"
    return f"{'cluster' if tier.cluster else u.scheme}://{u.hostname}:{u.port}/{db}#{tier.prefix.decode()}"


class FilterFeed:
    """Consumer listener: a block another worker stored in a store this worker shares is added to
    this worker's filter of that store at once (a hit here, not a miss until the next SCAN)."""

    def __init__(self, filters: dict[str, list[KeyFilter]]) -> None:
        self.filters = filters
        self.added = 0

    def stored(self, view: WorkerView, tier: str, keys: tuple[bytes, ...]) -> None:
        sid = view.store_of(tier)
        for f in self.filters.get(sid or "", ()):
            for k in keys:
                f.add(k)
            self.added += len(keys)

    def removed(self, view: WorkerView, tier: str, keys: tuple[bytes, ...]) -> None:
        pass  # a Bloom filter cannot forget: a stale "maybe" costs one round trip, and the SCAN clears it

    def forget(self, view: WorkerView) -> None:
        pass


class EventsRuntime:
    def __init__(self, cache: ContextCache, cfg: EventsConfig, worker: str, redis: list[Any]) -> None:
        self.cfg, self.worker = cfg, worker
        engine = cache._engine
        first = redis[0] if redis else None
        url = cfg.url or (first.url if first is not None else None)
        if url is None:
            raise ConfigError("[events] needs a url (no Redis tier to take it from)")
        cluster = (
            cfg.cluster if cfg.cluster is not None else bool(first is not None and first.cluster and cfg.url is None)
        )
        self.prefix = cfg.prefix
        self.publisher = StreamsPublisher(
            connect(url, cluster, cfg.timeout_s), worker, prefix=cfg.prefix, maxlen=cfg.maxlen,
            buffer=cfg.buffer, snapshot_every_s=cfg.snapshot_every_s,
        )  # fmt: skip
        sinks: list[Sink] = [self.publisher]
        if cfg.zmq is not None:
            sinks.append(_zmq_sink(cfg))
        self.emitter = Emitter(worker, sinks, flush_s=cfg.flush_ms / 1000, heartbeat_s=cfg.heartbeat_s)
        shared = tuple(t.name for t in redis)
        started = WorkerStarted(tuple(engine.slots[i].name for i in range(len(engine.slots))), shared,
                                engine.block_size, tuple(store_id(t) for t in redis))  # fmt: skip
        self.emitter.emit(started)
        self.watch = EngineWatch(engine, self.emitter, token_ids=cfg.token_ids)
        self.watch.attach()
        self.watch.announce()
        self.publisher.source = self.watch.held
        self.feed: FilterFeed | None = None
        self.consumer: Consumer | None = None
        filters: dict[str, list[KeyFilter]] = {}
        for t in redis:
            if t.filter is not None:
                filters.setdefault(store_id(t), []).append(t.filter)
                if not t.bloom_refresh_set:
                    t.bloom_refresh = EVENTS_BLOOM_REFRESH_S
        if cfg.consume and filters:
            self.feed = FilterFeed(filters)
            self.consumer = Consumer(
                connect(url, cluster, cfg.timeout_s), prefix=cfg.prefix, me=worker, listeners=[self.feed],
                heartbeat_s=cfg.heartbeat_s, missed=cfg.missed_heartbeats, cluster=cluster,
            )  # fmt: skip
            self.consumer.start()
        self.emitter.start()

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {"worker": self.worker, "epoch": self.emitter.epoch, "seq": self.emitter.seq}
        out["emitted"] = self.emitter.events
        out["publisher"] = self.publisher.stats()
        out["consumer"] = self.consumer.stats() if self.consumer is not None else None
        out["filter_adds"] = self.feed.added if self.feed is not None else 0
        return out

    def close(self) -> None:
        if self.consumer is not None:
            self.consumer.stop()
        self.watch.detach()
        self.emitter.close()


def _zmq_sink(cfg: EventsConfig) -> Sink:
    """The ZMQ publisher in vLLM's wire format (events/zmq.py, docs/events-vllm.md); pyzmq and
    msgspec are imported only here, so a worker without ZMQ needs neither."""
    settings = parse_zmq({**(cfg.extra or {}), "zmq": cfg.zmq, "token_ids": cfg.token_ids})
    assert settings is not None  # cfg.zmq is set
    return build_zmq_sink(settings)


def default_worker(port: int | None = None) -> str:
    host = socket.gethostname() or "localhost"
    return f"{host}:{port}" if port else f"{host}-{os.getpid()}"


def start_events(
    cache: ContextCache, table: Mapping[str, Any] | EventsConfig | None, worker: str | None = None
) -> EventsRuntime | None:
    """Start the events of ``cache`` as ``[events]`` says (None when they are off)."""
    cfg = table if isinstance(table, EventsConfig) else EventsConfig.from_dict(table)
    redis = [t for t in cache.tiers if t.kind == "redis"]
    enabled = cfg.enabled if cfg.enabled is not None else bool(redis)
    if not enabled:
        return None
    return EventsRuntime(cache, cfg, cfg.worker or worker or default_worker(), redis)
