"""Consumer: follows every worker's stream and keeps a WorkerView of each (the router's index and
the in-worker Bloom-filter feed are listeners on it).

Per worker it remembers (epoch, seq, stream id). An entry of the epoch it follows with the next
seq is applied; an older seq is skipped (a replay after a snapshot); a jump (entries dropped by the
publisher, or trimmed from the stream before this consumer read them) rebuilds the view from the
worker's snapshot and continues from the snapshot's stream id. A new epoch starting at seq 1
forgets the old one's blocks (the worker restarted); any other unknown epoch rebuilds from the
snapshot. A worker with no entry (not even a heartbeat) for ``missed`` heartbeats is forgotten,
counted only while this consumer itself reads fine: an outage of its own Redis forgets nobody.
Stopped and started again, the consumer replays from each worker's last stream id.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from .codec import EventDecodeError, decode_events
from .model import BlockRemoved, BlockStored, Event, TierCleared
from .state import WorkerView, decode_snapshot
from .streams import PREFIX, registry_key, snapshot_key, stream_key

log = logging.getLogger("ctxcache.events")

DISCOVER_S = 1.0  # how often the registry is read for new workers
RESYNC_S = 0.2  # a snapshot that is not new enough yet is asked again after this long


class Listener(Protocol):
    """Told of every change to a worker's view, in order (from the consumer's thread).

    Two optional methods, called when a listener has them: ``cleared(view, tier, reason)`` on a
    TierCleared, and ``tick(views)`` once per round with every followed view (the router's index
    feed attaches late-mapped workers there, in this thread, where the views are not moving)."""

    def stored(self, view: WorkerView, tier: str, keys: tuple[bytes, ...]) -> None: ...

    def removed(self, view: WorkerView, tier: str, keys: tuple[bytes, ...]) -> None: ...

    def forget(self, view: WorkerView) -> None: ...


class _Followed:
    __slots__ = ("view", "last_id", "seen", "resync_at", "lag", "need")

    def __init__(self, worker: str, now: float) -> None:
        self.view = WorkerView(worker)
        self.last_id = "0-0"
        self.seen = now
        self.resync_at = 0.0  # 0: in sync; else when to ask for the snapshot again
        self.lag = 0.0
        self.need: tuple[str, int] | None = None  # (epoch, seq) a snapshot must reach to close a gap


class Consumer:
    def __init__(
        self,
        client: Any,
        *,
        prefix: str = PREFIX,
        me: str | None = None,
        listeners: list[Listener] | None = None,
        heartbeat_s: float = 1.0,
        missed: int = 3,
        cluster: bool = False,
        count: int = 1000,
        block_ms: int = 50,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client, self.prefix, self.me = client, prefix, me
        self.listeners = list(listeners or [])
        self.silent_after = heartbeat_s * missed
        self.cluster, self.count, self.block_ms, self.clock = cluster, count, block_ms, clock
        self.followed: dict[str, _Followed] = {}
        self.applied = self.replays = self.snapshots = self.gaps = self.epochs = 0
        self.silent = self.bad_entries = self.errors = 0
        self._discover_at = 0.0
        self._read_ok_at = clock()
        self._failed = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def workers(self) -> dict[str, WorkerView]:
        return {w: f.view for w, f in self.followed.items()}

    def lag_s(self) -> float:
        """Publish-to-apply delay of the latest batch, the largest over workers (wall clocks)."""
        return max((f.lag for f in self._follows()), default=0.0)

    def _follows(self) -> list[_Followed]:
        # Read by the metrics thread while this consumer's thread adds and forgets workers: list()
        # copies in one step under the GIL, a generator over the live dict could see it resize.
        return list(self.followed.values())

    # --- one round -----------------------------------------------------------------------------------
    def poll(self) -> int:
        """Discover workers, read what is new, apply it, forget silent workers. Events applied.
        Raises redis-py errors (the thread counts them and retries)."""
        now = self.clock()
        if now >= self._discover_at:
            self._discover(now)
        n = 0
        for worker, entries in self._read():
            f = self.followed.get(worker)
            if f is not None:
                for eid, fields in entries:
                    got = self._entry(f, eid.decode() if isinstance(eid, bytes) else eid, fields)
                    if got < 0:
                        break  # rebuilt from a snapshot: the next read starts at its stream id
                    n += got
        self._read_ok_at = now = self.clock()
        for worker, f in list(self.followed.items()):
            if f.resync_at and now >= f.resync_at:
                self._resync(f)
            if now - f.seen > self.silent_after:
                self.silent += 1
                log.info("events: worker %s silent for %.1f s: its blocks forgotten", worker, now - f.seen)
                self._forget(f)
                del self.followed[worker]
        for li in self.listeners:
            tick = getattr(li, "tick", None)
            if tick is not None:
                tick(self.workers)
        return n

    def _discover(self, now: float) -> None:
        self._discover_at = now + DISCOVER_S
        fresh = time.time() - self.silent_after
        for raw in self.client.zrangebyscore(registry_key(self.prefix), fresh, "+inf"):
            worker = raw.decode()
            if worker != self.me and worker not in self.followed:
                f = self.followed[worker] = _Followed(worker, now)
                self._resync(f)  # a newcomer starts from the snapshot (or from the stream's start)

    def _read(self) -> list[tuple[str, list[tuple[Any, dict[bytes, bytes]]]]]:
        if not self.followed:
            self._stop.wait(self.block_ms / 1000)
            return []
        streams = {stream_key(self.prefix, w): f.last_id for w, f in self.followed.items()}
        cut = len(self.prefix) + 1
        if not self.cluster:  # one blocking read over every stream
            got = self.client.xread(streams, count=self.count, block=self.block_ms) or []
        else:  # streams live on different masters: one read each, no blocking
            got = []
            for key, last in streams.items():
                got += self.client.xread({key: last}, count=self.count) or []
            if not got:
                self._stop.wait(0.005)
        out = []
        for key, entries in got:
            name = key.decode() if isinstance(key, bytes) else key
            out.append((name[cut:-3], entries))
        return out

    def _entry(self, f: _Followed, eid: str, fields: dict[bytes, bytes]) -> int:
        """Events applied; -1 when the view was rebuilt from a snapshot (its position moved)."""
        f.last_id = eid
        f.seen = self.clock()
        view = f.view
        try:
            seq, epoch = int(fields[b"q"]), fields[b"e"].decode()
            if epoch == view.epoch and seq <= view.seq:
                return 0  # in the snapshot already
            events = decode_events(fields[b"v"])
            ts = float(fields[b"t"])
        except (KeyError, ValueError, EventDecodeError) as exc:
            self.bad_entries += 1
            log.warning("events: unreadable entry %s of %s (%s): resync from its snapshot", eid, view.worker, exc)
            return -1 if self._resync(f, (view.epoch, view.seq + 1)) else 0
        if f.resync_at:
            return 0  # waiting for a snapshot that covers the gap
        if epoch != view.epoch:
            if seq != 1:  # joined (or came back) mid-epoch
                return -1 if self._resync(f, (epoch, seq - 1)) else 0
            if view.epoch:
                self.epochs += 1
            self._forget(f)
            f.view = view = WorkerView(view.worker, epoch)
        elif seq != view.seq + 1:
            self.gaps += 1
            return -1 if self._resync(f, (epoch, seq - 1)) else 0
        self._apply(f, events)
        view.seq = seq
        f.lag = max(0.0, time.time() - ts)
        return len(events)

    def _apply(self, f: _Followed, events: tuple[Event, ...]) -> None:
        view = f.view
        view.apply(events)
        self.applied += len(events)
        if not self.listeners:
            return
        for ev in events:
            if isinstance(ev, BlockStored):
                for li in self.listeners:
                    li.stored(view, ev.tier, ev.keys)
            elif isinstance(ev, BlockRemoved):
                for li in self.listeners:
                    li.removed(view, ev.tier, ev.keys)
            elif isinstance(ev, TierCleared):
                for li in self.listeners:
                    cleared = getattr(li, "cleared", None)
                    if cleared is not None:
                        cleared(view, ev.tier, ev.reason)

    def _forget(self, f: _Followed) -> None:
        for li in self.listeners:
            li.forget(f.view)

    def _resync(self, f: _Followed, need: tuple[str, int] | None = None) -> bool:
        """Rebuild ``f`` from its worker's snapshot, once the snapshot covers ``need`` (epoch, seq);
        until then entries are skipped and the snapshot asked again every RESYNC_S. A newcomer
        (``need`` None) without a snapshot reads the stream from its start."""
        if need is not None:
            f.need = need
        blob = self.client.get(snapshot_key(self.prefix, f.view.worker))
        view: WorkerView | None = None
        if blob is not None:
            try:
                view, stream_id = decode_snapshot(f.view.worker, blob)
            except EventDecodeError as exc:
                self.bad_entries += 1
                log.warning("events: unreadable snapshot of %s (%s)", f.view.worker, exc)
        want = f.need
        if view is None or (want is not None and view.epoch == want[0] and view.seq < want[1]):
            if want is None and view is None:
                f.resync_at, f.last_id = 0.0, "0-0"
            else:
                f.resync_at = self.clock() + RESYNC_S  # the publisher writes a newer one after a drop
            return False
        self.snapshots += 1
        self._forget(f)
        f.view, f.last_id, f.resync_at, f.need = view, stream_id, 0.0, None
        for tier, keys in view.tiers.items():
            if keys:
                for li in self.listeners:
                    li.stored(view, tier, tuple(keys))
        return True

    # --- the thread ----------------------------------------------------------------------------------
    def start(self) -> None:
        """Follow the streams from a thread; started again after ``stop``, it replays from each
        worker's last stream id."""
        if self._thread is not None and self._thread.is_alive():
            return
        if self._thread is not None:
            self.replays += len(self.followed)
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="ctxcache-events-consumer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll()
                if self._failed:
                    self._failed = False
                    self.replays += len(self.followed)  # read again from each last id
                    log.info("events: consumer reads again")
            except Exception as exc:  # noqa: BLE001 - redis-py and socket errors alike
                self.errors += 1
                if not self._failed:
                    self._failed = True
                    log.warning("events: consumer cannot read (%s); retrying", exc)
                self._hold_silence()
                self._stop.wait(0.25)

    def _hold_silence(self) -> None:
        """While this consumer cannot read, nobody's silence counts: push every ``seen`` along."""
        now = self.clock()
        for f in self.followed.values():
            f.seen = max(f.seen, now - self.silent_after / 2)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def stats(self) -> dict[str, Any]:
        return {
            "workers": len(self.followed), "applied": self.applied, "replays": self.replays,
            "snapshots": self.snapshots, "gaps": self.gaps, "epochs": self.epochs, "silent": self.silent,
            "bad_entries": self.bad_entries, "errors": self.errors, "lag_s": self.lag_s(),
            "blocks": sum(f.view.blocks() for f in self._follows()),
        }  # fmt: skip
