"""The emitter: KV events from one worker, batched, numbered and handed to every sink.

The engine calls it (through ``EngineWatch``, the engine's ``Watcher``) under its lock, where
placement changes; each call appends one small record to a deque and returns: no lock, no lookup,
and a wake-up only for the first record of a batch (the request thread pays ~0.2 µs a block).
A thread of its own, ``flush_s`` after the first record of a batch, resolves what the watcher
deferred (tier names, key bytes, parents, sizes: ``resolve``) and turns the records into events
(consecutive blocks of one chain into one ``BlockStored``, consecutive removals from one tier
for one reason into one ``BlockRemoved``),
numbers the batch (``seq`` from 1 per epoch, without gaps) and hands it to every sink. A worker
quiet for ``heartbeat_s`` sends a ``Heartbeat`` batch, so consumers can tell quiet from dead.

The sink seam (docs/events.md, "Sinks"): any object with ``publish(batch)`` and ``close()``.
``publish`` must not block and must not raise for a transport fault: a sink owns its bounded
buffer and its thread (events/streams.py for Redis Streams, events/zmq.py for vLLM's format).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from .model import BlockRemoved, BlockStored, Event, EventBatch, Heartbeat, RemoveReason, new_epoch

log = logging.getLogger("ctxcache.events")

FLUSH_S = 0.02  # records wait at most this long for their batch: inside the 50 ms goal; 5 ms cost 2x the CPU a store
MAX_RECORDS = 4096  # records that start a batch before the flush interval is up
IDLE_S = 0.25  # an idle emitter's wake-ups (tier health ticks, heartbeat checks)


class Sink(Protocol):
    def publish(self, batch: EventBatch) -> None: ...

    def close(self) -> None: ...


class ListSink:
    """A sink that keeps every batch in memory: the fleet simulator's workers and the tests."""

    def __init__(self) -> None:
        self.batches: list[EventBatch] = []

    def publish(self, batch: EventBatch) -> None:
        self.batches.append(batch)

    def close(self) -> None:
        pass


# A record: ("s", tier, key, parent, block_size, size, tokens) | ("r", tier, key, reason) | ("e", event),
# or one the emitter's ``resolve`` turns into an "s" or "r" at flush time (EngineWatch's "a" and "x":
# what the engine thread deferred), or a run of stores ``runs`` turns into events ("a", and "c": a
# chain's keys in one record).
Record = tuple[Any, ...]
Resolve = Callable[[Record], Record]
Runs = Callable[[Sequence[Record], int, list[Event]], int]  # events of the run at i appended; next i


class _Chain:
    """Blocks of one tier stored in one run: grows at either end (the store admits a chain
    deepest first; the mover lands it in chain order)."""

    __slots__ = ("tier", "keys", "parent", "block_size", "size", "tokens")

    def __init__(self, rec: Record) -> None:
        _, self.tier, key, self.parent, self.block_size, self.size, tokens = rec
        self.keys: deque[bytes] = deque((key,))
        self.tokens: deque[tuple[int, ...]] | None = None if tokens is None else deque((tokens,))

    def take(self, rec: Record) -> bool:
        _, tier, key, parent, block_size, size, tokens = rec
        if tier != self.tier or block_size != self.block_size or (tokens is None) != (self.tokens is None):
            return False
        if parent is not None and parent == self.keys[-1]:
            self.keys.append(key)
            if self.tokens is not None:
                self.tokens.append(tokens)
        elif self.parent is not None and key == self.parent:
            self.keys.appendleft(key)
            self.parent = parent
            if self.tokens is not None:
                self.tokens.appendleft(tokens)
        else:
            return False
        self.size += size
        return True

    def event(self) -> BlockStored:
        toks = None if self.tokens is None else tuple(t for run in self.tokens for t in run)
        return BlockStored(tuple(self.keys), self.tier, self.parent, self.block_size, self.size, toks)


def coalesce(records: Sequence[Record], resolve: Resolve | None = None, runs: Runs | None = None) -> list[Event]:
    """Records in order, as few events as keep that order. ``runs`` turns a run of deferred
    stores ("a", "c", "k") into events at once; ``resolve`` turns any other deferred record into an "s"/"r"."""
    out: list[Event] = []
    chain: _Chain | None = None
    gone: tuple[str, str, list[bytes]] | None = None

    def close() -> None:
        nonlocal chain, gone
        if chain is not None:
            out.append(chain.event())
        if gone is not None:
            out.append(BlockRemoved(tuple(gone[2]), gone[0], gone[1]))  # type: ignore[arg-type]
        chain = gone = None

    i, n = 0, len(records)
    while i < n:
        rec = records[i]
        kind = rec[0]
        if (kind == "a" or kind == "c" or kind == "k") and runs is not None:
            close()
            i = runs(records, i, out)
            continue
        i += 1
        if resolve is not None and kind not in "sre":
            rec = resolve(rec)
            kind = rec[0]
        if kind == "s":
            if chain is None or not chain.take(rec):
                close()
                chain = _Chain(rec)
        elif kind == "r" or kind == "R":  # "R": a run of removals, its keys as so many "r"s
            if gone is None or gone[0] != rec[1] or gone[1] != rec[3]:
                close()
                gone = (rec[1], rec[3], [])
            if kind == "r":
                gone[2].append(rec[2])
            else:
                gone[2].extend(rec[2])
        else:
            close()
            out.append(rec[1])
    close()
    return out


class Emitter:
    def __init__(
        self,
        worker: str,
        sinks: Sequence[Sink],
        *,
        flush_s: float = FLUSH_S,
        heartbeat_s: float = 1.0,
        clock: Callable[[], float] = time.time,
        epoch: str | None = None,
    ) -> None:
        self.worker, self.epoch = worker, epoch or new_epoch()
        self.sinks = list(sinks)
        self.flush_s, self.heartbeat_s, self.clock = flush_s, heartbeat_s, clock
        self.seq = 0
        self.events = 0  # events handed to the sinks
        self.sink_errors = 0
        self.ticks: list[Callable[[], None]] = []  # called by the thread each round (tier health)
        self.resolve: Resolve | None = None  # set by the watcher whose deferred records it resolves
        self.runs: Runs | None = None
        # Appended by the engine thread without a lock (deque.append and popleft are atomic), drained
        # by flush: a lock per record was a fifth of the events' cost to a store.
        self._records: deque[Record] = deque()
        self._lock = threading.Lock()  # one flush at a time: batches numbered in order
        # The engine thread rings for a batch's first record. A C queue, not a threading.Event: an
        # Event's set and wait run Python code (a Condition) on both threads, for every batch.
        self._bell: queue.SimpleQueue[None] = queue.SimpleQueue()
        # While records keep coming the thread sleeps flush_s between batches and nobody rings: a
        # ring and the sleep after it were two wake-ups a batch, each a GIL hand-off with a busy
        # request thread (~100 µs of CPU a batch between them).
        self._polling = False
        self._stop = threading.Event()
        self._last = time.monotonic()
        self._thread: threading.Thread | None = None

    # --- called under the engine's lock: append and return ------------------------------------------
    def stored(
        self, tier: str, key: bytes, parent: bytes | None, block_size: int, size: int, tokens: tuple[int, ...] | None
    ) -> None:
        self._add(("s", tier, key, parent, block_size, size, tokens))

    def removed(self, tier: str, key: bytes, reason: RemoveReason) -> None:
        self._add(("r", tier, key, reason))

    def emit(self, event: Event) -> None:
        self._add(("e", event))

    def _add(self, rec: Record) -> None:
        q = self._records
        q.append(rec)
        n = len(q)
        if (n == 1 and not self._polling) or n == MAX_RECORDS:  # the first record starts a batch's flush_s
            self._bell.put(None)

    # --- the thread ----------------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="ctxcache-events", daemon=True)
            self._thread.start()

    def flush(self) -> int:
        """Hand what was recorded to the sinks as one batch (the thread's; tests call it). Events sent."""
        with self._lock:
            q = self._records
            records = [q.popleft() for _ in range(len(q))]  # what came in meanwhile waits for the next batch
            if not records:
                return 0
            events = tuple(coalesce(records, self.resolve, self.runs))
            self.seq += 1
            batch = EventBatch(self.worker, self.epoch, self.seq, events, self.clock())
            self._publish(batch)
        return len(events)

    def _publish(self, batch: EventBatch) -> None:
        for sink in self.sinks:
            try:
                sink.publish(batch)
            except Exception:  # noqa: BLE001 - one broken sink must not stop the others, nor the worker
                self.sink_errors += 1
                log.exception("events: sink %r failed to take a batch", sink)
        self.events += len(batch.events)
        self._last = time.monotonic()

    def _run(self) -> None:
        # Idle, the thread wakes only for ticks and heartbeats (IDLE_S); a first record wakes it,
        # and its batch goes out flush_s later with whatever followed.
        while not self._stop.is_set():
            if self._polling:
                time.sleep(self.flush_s)
            else:
                try:
                    self._bell.get(timeout=min(IDLE_S, self.heartbeat_s))
                    if len(self._records) < MAX_RECORDS and not self._stop.is_set():
                        time.sleep(self.flush_s)
                except queue.Empty:
                    pass
            for tick in self.ticks:
                try:
                    tick()
                except Exception:  # noqa: BLE001 - a failing probe must not end the events
                    log.exception("events: tick failed")
            sent = self.flush()
            # Back to the bell after an empty round; a record that came before this line was
            # appended without a ring, so it is looked for after it (it keeps the polling on).
            self._polling = bool(sent)
            if not sent:
                self._polling = bool(self._records)
                if time.monotonic() - self._last >= self.heartbeat_s:
                    self.emit(Heartbeat())
                    self.flush()

    def close(self) -> None:
        self._stop.set()
        self._bell.put(None)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self.flush()
        for sink in self.sinks:
            try:
                sink.close()
            except Exception:  # noqa: BLE001 - closing the rest matters more
                log.exception("events: sink %r failed to close", sink)
