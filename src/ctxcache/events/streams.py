"""Redis Streams transport: a sink that publishes a worker's batches to its own stream.

Layout (docs/events.md, "Stream layout"), ``P`` the prefix (default ``ctxcache:ev:``):

    P{<worker>}:s     the worker's stream: one entry per batch, fields q (seq), e (epoch),
                      t (publish time), v (events, events/codec.py); XADD MAXLEN ~ ``maxlen``
    P{<worker>}:snap  the worker's snapshot (events/state.py): its blocks per tier at a seq
    Pworkers          sorted set: worker -> wall time of its last write (consumers discover here)

The hash tag ``{<worker>}`` puts a worker's stream and snapshot in one Cluster slot and spreads
the workers over the masters.

``publish`` never blocks on Redis: it notes the batch's seq (and, with no ``source``, applies it
to the publisher's own view of the worker), then queues it, or, with ``buffer`` batches already waiting (Redis down or slow), drops it and counts
its events. The publisher thread writes the queue in pipelines; after a drop or a connection
error (a restarted Redis lost the stream and the snapshot) it writes a fresh snapshot, so
consumers that see the gap rebuild from it.

A snapshot's blocks come from ``source`` when one is set (the events runtime sets the engine's:
``EngineWatch.held``), read after the seq it carries is taken: every batch up to that seq is
then in it, and a consumer that replays the later entries over it ends where one that followed
the stream does, since each event sets a block's presence and the last one read wins. It is
right after dropped batches too. Without a source the publisher mirrors every batch in a set of
every block: ~180 ns a key of cache misses on the events' thread, a third of their CPU per store
before the engine became the source (docs/events.md).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Mapping
from typing import Any, cast

from ..errors import ConfigError, MissingDependencyError
from .codec import encode_events
from .fastlane import MAX_INFLIGHT, REAP_S, FastLane, LaneError
from .model import EventBatch, WorkerStarted
from .state import WorkerView, encode_snapshot

log = logging.getLogger("ctxcache.events")

PREFIX = "ctxcache:ev:"
WORKER_ID = re.compile(r"^[A-Za-z0-9._:@/-]{1,128}$")
PIPELINE = 64  # batches per XADD pipeline
RETRY_S = 0.5  # between reconnect attempts while Redis is down
REGISTER_S = 0.25  # the registry's time for this worker is refreshed at most this often (consumers
# forget a worker after missed heartbeats, seconds): not once per batch, which cost a command each


def _flat(fields: dict[str, Any]) -> list[Any]:
    return [x for kv in fields.items() for x in kv]


def check_worker(worker: str) -> str:
    if not isinstance(worker, str) or not WORKER_ID.match(worker):
        raise ConfigError(f"events worker id must be 1-128 of [A-Za-z0-9._:@/-], got {worker!r}")
    return worker


def stream_key(prefix: str, worker: str) -> str:
    return f"{prefix}{{{worker}}}:s"


def snapshot_key(prefix: str, worker: str) -> str:
    return f"{prefix}{{{worker}}}:snap"


def registry_key(prefix: str) -> str:
    return f"{prefix}workers"


def connect(url: str, cluster: bool, timeout: float) -> Any:
    """A redis-py client for the events (not the tier's: its 50 ms timeouts suit requests, not
    16 MB snapshots). Lazy: no round trip until the first command."""
    try:
        import redis
        from redis.cluster import RedisCluster
    except ImportError:
        raise MissingDependencyError(
            "KV events on Redis Streams need redis-py: pip install 'ctxcache[redis]'"
        ) from None
    kw: dict[str, Any] = {"socket_timeout": timeout, "socket_connect_timeout": timeout}
    if cluster:
        return RedisCluster.from_url(url, **kw)
    return redis.Redis.from_url(url, retry_on_timeout=False, **kw)


class StreamsPublisher:
    def __init__(
        self,
        client: Any,
        worker: str,
        *,
        prefix: str = PREFIX,
        maxlen: int = 10_000,
        buffer: int = 10_000,
        snapshot_every_s: float = 10.0,
    ) -> None:
        self.client, self.worker, self.prefix = client, check_worker(worker), prefix
        kw = getattr(getattr(client, "connection_pool", None), "connection_kwargs", {})
        self._timeout = float(kw.get("socket_timeout") or 2.0)  # the lane waits this long for a reply
        self.maxlen, self.buffer, self.snapshot_every_s = maxlen, buffer, snapshot_every_s
        self.stream, self.snap = stream_key(prefix, worker), snapshot_key(prefix, worker)
        self.view = WorkerView(worker)
        # The worker's blocks per tier, read when a snapshot is due (module docstring); None: mirror.
        self.source: Callable[[], Mapping[str, Collection[bytes]]] | None = None
        self.published = self.dropped = self.errors = self.snapshots = 0  # events, events, faults, writes
        self.queued = 0
        self.last_id = "0-0"
        self._q: deque[EventBatch] = deque()
        self._cond = threading.Condition()
        self._resync = True  # the first snapshot goes out with the first write
        self._snap_at = 0.0
        self._registered = 0.0  # monotonic time of the last registry write
        self._down_since: float | None = None
        self._stop = False
        # The direct XADD path (``_xadd``): only for redis-py's single-node client, whose pool it uses.
        self._direct = hasattr(client, "connection_pool") and type(client).__name__ == "Redis"
        self._conn: Any = None
        # The fast lane (events/fastlane.py): XADDs sent from ``publish`` itself while all is well.
        self._lane = FastLane(client, self.stream, maxlen, registry_key(prefix), worker) if self._direct else None
        self._thread = threading.Thread(target=self._run, name=f"ctxcache-events-{worker}", daemon=True)
        self._thread.start()

    # --- Sink -------------------------------------------------------------------------------------
    def publish(self, batch: EventBatch) -> None:
        with self._cond:
            view = self.view
            if batch.epoch != view.epoch:
                view = self.view = WorkerView(self.worker, batch.epoch)
            if self.source is None:
                view.apply(batch.events)
            else:
                for ev in batch.events:
                    if ev.__class__ is WorkerStarted:
                        view.started = ev
            view.seq = batch.seq
            if len(self._q) >= self.buffer:
                self.dropped += len(batch.events)
                self._resync = True
                return
            if self._fast(batch):
                return
            self._q.append(batch)
            self._cond.notify()

    def _fast(self, batch: EventBatch) -> bool:
        """Send ``batch`` on the fast lane if all is well (under the lock): True if sent."""
        lane = self._lane
        if (
            lane is None or self._q or self._resync or self._stop or self._down_since is not None
            or len(lane.inflight) >= MAX_INFLIGHT
        ):  # fmt: skip
            return False
        now = time.monotonic()
        register = now - self._registered >= REGISTER_S
        try:
            self._answered(lane.send(batch, register))
        except LaneError as exc:
            self._lane_failed(exc)
            return False
        except Exception:  # noqa: BLE001 - the encoder refused it: the thread's way, as before the lane
            return False
        if register:
            self._registered = now
        return True

    def _answered(self, replies: list[tuple[EventBatch | None, Any]]) -> None:
        for b, reply in replies:
            if b is not None:
                self.published += len(b.events)
                self.last_id = (
                    reply.decode()
                )  # no notify: close() polls, and a wake-up per batch is what the lane saves

    def _lane_failed(self, exc: Exception) -> None:
        """The lane is closed: its unanswered batches count as dropped, and a snapshot follows."""
        assert self._lane is not None
        lost = self._lane.close()
        self.errors += 1
        self.dropped += sum(len(b.events) for b in lost)
        self._resync = True
        log.info("events: the fast lane failed (%s); %d batches unanswered", exc, len(lost))

    def _reap(self, wait: bool) -> bool:
        """The publisher's thread: read the lane's outstanding replies (``wait``: for up to the
        socket's timeout, without the lock). True when none is outstanding."""
        lane = self._lane
        if lane is None:
            return True
        with self._cond:
            oldest = lane.oldest()
        if oldest is None:
            return True
        if wait or time.monotonic() - oldest >= REAP_S:
            deadline = oldest + (self._timeout if wait else REAP_S)
            lane.wait(max(0.0, deadline - time.monotonic()))
            with self._cond:
                try:
                    self._answered(lane.reap())
                except LaneError as exc:
                    self._lane_failed(exc)
                if wait and lane.inflight and time.monotonic() >= oldest + self._timeout:
                    self._lane_failed(LaneError("no reply within the socket timeout"))
                return not lane.inflight
        return False

    def close(self, timeout: float = 2.0) -> None:
        """Write what is queued (for ``timeout`` at most: Redis may be down), then stop."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while (self._q or self._lane_busy()) and time.monotonic() < deadline and self._down_since is None:
                self._cond.wait(0.05)
            self._stop = True
            self._cond.notify_all()
        self._thread.join(timeout)

    def _lane_busy(self) -> bool:
        return self._lane is not None and bool(self._lane.inflight)

    def stats(self) -> dict[str, Any]:
        queued = len(self._q) + (sum(b is not None for b, _ in list(self._lane.inflight)) if self._lane else 0)
        return {
            "published": self.published, "dropped": self.dropped, "errors": self.errors,
            "snapshots": self.snapshots, "queued": queued, "down": self._down_since is not None,
        }  # fmt: skip

    # --- the thread -------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._loop()
        finally:
            if self._conn is not None:
                self.client.connection_pool.release(self._conn)
                self._conn = None
            if self._lane is not None:
                with self._cond:
                    self._lane.close()

    def _loop(self) -> None:
        while True:
            with self._cond:
                due = self._snap_due()
                while not self._q and not self._stop and not due:
                    self._cond.wait(REAP_S if self._lane_busy() else 0.2)
                    if self._lane_busy():
                        break  # its replies are read below, outside the lock
                    due = self._snap_due()
                if self._stop and not self._q and not self._lane_busy():
                    return
                todo = list(self._q)[:PIPELINE]
            # The lane's replies first: the queue's entries go after its (a snapshot may lag: its
            # stream id is older than its seq, and consumers skip the entries its view holds).
            if todo or self._stop:
                if not self._reap(wait=True):
                    continue
            else:
                self._reap(wait=False)
            if not todo and not due:
                continue
            try:
                if todo:
                    self._write(todo)
                elif due:
                    self._snapshot()
                if self._down_since is not None:
                    log.info("events: Redis answers again after %.1f s", time.monotonic() - self._down_since)
                    self._down_since = None
            except Exception as exc:  # noqa: BLE001 - redis-py and socket errors alike
                self.errors += 1
                with self._cond:
                    self._resync = True  # a restarted Redis has lost the stream and the snapshot
                if self._down_since is None:
                    self._down_since = time.monotonic()
                    log.warning("events: Redis unreachable (%s); batches wait in a buffer of %d", exc, self.buffer)
                with self._cond:
                    if not self._stop:
                        self._cond.wait(RETRY_S)
                    elif self._down_since is not None:
                        return  # closing with Redis down: what is queued is lost, as a drop would be

    def _snap_due(self) -> bool:
        if self._q:
            return False  # after the queue: the snapshot's stream id then covers every queued batch
        return self._resync or (self.view.seq > 0 and time.monotonic() >= self._snap_at)

    def _write(self, todo: list[EventBatch]) -> None:
        now = time.monotonic()
        register = now - self._registered >= REGISTER_S
        if len(todo) == 1 and not register:  # the common case under steady load: one command, no pipeline
            b = todo[0]
            fields = {"q": b.seq, "e": b.epoch, "t": repr(b.ts), "v": encode_events(b.events)}
            if self._direct:
                ids = [self._xadd(fields)]
            else:
                ids = [self.client.xadd(self.stream, fields, maxlen=self.maxlen, approximate=True)]
        else:
            pipe = self.client.pipeline(transaction=False)
            for b in todo:
                fields = {"q": b.seq, "e": b.epoch, "t": repr(b.ts), "v": encode_events(b.events)}
                pipe.xadd(self.stream, fields, maxlen=self.maxlen, approximate=True)
            if register:
                pipe.zadd(registry_key(self.prefix), {self.worker: time.time()})
            ids = pipe.execute()
            if register:
                self._registered = now
        with self._cond:
            for _ in todo:
                self._q.popleft()
            self.published += sum(len(b.events) for b in todo)
            self.last_id = ids[len(todo) - 1].decode()
            self._cond.notify_all()

    def _xadd(self, fields: dict[str, Any]) -> bytes:
        """XADD on a connection this thread keeps, past redis-py's per-command machinery (pool,
        retries, callbacks, tracing): that was ~100 µs of CPU per batch hot and ~400 µs cold,
        a raw XADD ~20 (docs/events.md, "Benchmark"). A single-node client only: a Cluster
        client routes each command (``_direct`` False). Any error drops the connection; the
        caller's retry takes a new one."""
        conn = self._conn
        if conn is None:
            conn = self._conn = self.client.connection_pool.get_connection()
        try:
            conn.send_command("XADD", self.stream, "MAXLEN", "~", self.maxlen, "*", *_flat(fields), check_health=False)
            reply = conn.read_response()
        except BaseException:
            self._conn = None
            conn.disconnect()
            self.client.connection_pool.release(conn)
            raise
        if isinstance(reply, Exception):  # an error reply (redis-py returns some instead of raising)
            raise reply
        return cast(bytes, reply)

    def _snapshot(self) -> None:
        source = self.source
        with self._cond:
            view, last_id = self.view, self.last_id  # at view.seq: stream entries after last_id are newer
            self._resync = False
            if source is None:
                blob = encode_snapshot(view, last_id)
            else:
                view = WorkerView(self.worker, view.epoch, view.seq, started=view.started)
        if source is not None:  # read after the seq was taken, outside the lock (the engine's is taken)
            blob = encode_snapshot(view, last_id, source())
        try:
            self.client.set(self.snap, blob)
            self.client.zadd(registry_key(self.prefix), {self.worker: time.time()})
        except Exception:
            with self._cond:
                self._resync = True
            raise
        self.snapshots += 1
        self._snap_at = time.monotonic() + self.snapshot_every_s
