"""The mover: a background thread that performs every write to and delete from slow tiers.

The engine decides what moves under its lock and queues a ``Move``; the mover encodes, writes and
deletes outside the lock, then reports back under the lock. So requests never wait on disk or
network writes, and a slow tier has one writer: moves run in queue order, so a delete and a
later rewrite of the same key can never swap.

Until a move completes, its block stays readable: a move that carries its payload (a demotion
out of RAM, a store into a slow top tier) serves lookups from the queue; a move between slow
tiers leaves the block in its source tier until the destination has it. Byte accounting follows
the logical state at once: each slot's ``inflow`` is reserved for writes queued into its tier,
``outflow`` for blocks queued to leave it (through ``Slot.reserve``, the slot's own accounting),
and ``buffered`` is the RAM the queued payloads hold, which the engine bounds (``write_buffer``).
A write of a key its tier already charges for (a rewrite) reserves the old bytes as outflow
(``Move.replaces``): they leave as the new bytes land. A delete queued behind a write of its key
that has not landed reserves the bytes that write will charge (``Move.behind``).
A reservation is settled when the move reports, except a delete's outflow, settled just before
the delete is sent, and a write's inflow, settled as the write lands: each together with the
tier's charge for the block, under the lock, so no write or delete landing outside the lock moves
``Slot.used``. The tier charges a landed write through the hook the mover sets (``Tier.landing``),
so it still holds (``len``, ``in``) only what has landed.

A delete that raises (an unlink refused, an I/O error, a Redis Cluster master down) leaves its
block in storage: the move carries the bytes the tier stopped charging for (``kept``) back to
placement, which charges them again and counts the failure; a write that landed is never taken
back for its source's delete. When a tier names the keys of a batch that failed
(``DeleteFailedError``), only those are kept: the others' deletes landed.

All fields are guarded by the engine's lock (``lock``), which the mover shares.
"""

from __future__ import annotations

import collections
import functools
import itertools
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from ..tiers import BlockMeta
from ..tiers.base import key_bytes
from . import moves as _moves
from . import tombstones
from .slot import Slot

BATCH = 32  # moves written in one call (one pipeline round trip for Redis)


@dataclass(eq=False, slots=True)
class Move:
    """Write ``key`` into tier ``dst`` (None: no write), then delete it from ``src`` when
    ``delete_src`` (a slow source keeps the block until the destination has it)."""

    key: Hashable
    src: int | None
    dst: int | None
    meta: BlockMeta
    payload: Any = None  # the block in RAM, or None: read it from src
    blob: bytes | None = None  # already encoded with dst's codec (warm RAM -> slow)
    reserve: int = 0  # bytes charged to the inflow of slot dst
    release: int = 0  # bytes charged to the outflow of slot src
    buffered: int = 0  # RAM held by payload/blob until done
    delete_src: bool = False
    owner: str | None = None  # the tenant charged for the block in src (charged again if its delete fails)
    ok: bool = False
    kept: int | None = None  # the delete from src raised: the bytes src charged for it, still stored
    queued_at: float = 0.0  # monotonic seconds, for the mover's lag
    replaces: int = 0  # bytes dst charged for the key when queued (a rewrite): its outflow until it lands
    behind: Move | None = None  # a delete's: the unlanded write of the key into src its ``release`` counts
    through: bool = False  # a write-through copy of a block a faster tier keeps (engine/through.py)
    ahead: Move | None = None  # a write's: the delete whose ``behind`` it is
    erase: bool = False  # an erasure's or a TTL's delete: journaled where refused (engine/tombstones.py)
    gone: bool = False  # its slow source no longer had the block (missing, corrupt): lost, not kept there


class Mover:
    def __init__(
        self, slots: Sequence[Slot], lock: threading.RLock, done: Callable[[Move], None], manual: bool = False
    ) -> None:
        self.slots = list(slots)
        self.tiers = [s.tier for s in slots]
        self.lock = lock
        self.done = done  # called under the lock with each finished move (ok set)
        self.queue: collections.deque[Move] = collections.deque()
        self.pending: dict[Hashable, Move] = {}  # latest queued move per key
        self._leaving: collections.Counter[tuple[Hashable, int]] = collections.Counter()  # (key, src): moves out
        self.buffered = 0
        self.busy = 0  # moves taken off the queue, not yet reported
        self._busy_since: float | None = None  # queued_at of the batch being written
        self.taken_at = 0.0  # when it was taken: its time so far bounds the pace (engine/write_lag.py)
        self._landing: list[tuple[bytes, Move]] = []  # the batch's writes that have not landed
        self._unreported: list[Move] = []  # the batch's moves (taken) whose report has not run, in order
        for pos, tier in enumerate(self.tiers):
            if tier.slow:
                tier.landing = functools.partial(self._landed, pos)
        self._work = threading.Condition(lock)
        self._idle = threading.Condition(lock)
        self._stopping = False
        self._thread: threading.Thread | None = None
        # A manual mover has no thread: its caller runs each batch (``step``; the deterministic
        # simulation interleaves them with requests), and waiting for it runs the queue in place.
        self.manual = manual
        self._stepping = False
        self.per_move = 0.0  # seconds a move takes the tiers, recent average (engine/write_lag.py)
        self.journal: Any = None  # the engine's ErasureJournal, if configured (engine/tombstones.py)

    def submit(self, move: Move) -> None:
        """Queue a move (caller holds the lock) and charge its bytes."""
        if move.dst is not None:
            move.replaces = self._held(move.dst, move.key)
            self.slots[move.dst].reserve(move.reserve, move.replaces)
        if move.src is not None:
            if move.delete_src and self._leaving[move.key, move.src]:
                move.release = 0  # a move of it out of the tier is outstanding: its release counts it
            move.release += self._unlanded(move)
            self.slots[move.src].reserve(0, move.release)
            self._leaving[move.key, move.src] += move.delete_src
        self.buffered += move.buffered
        move.queued_at = time.monotonic()
        self.queue.append(move)
        self.pending[move.key] = move
        if self._thread is None and not self.manual:
            self._thread = threading.Thread(target=self._run, name="ctxcache-mover", daemon=True)
            self._thread.start()
        self._work.notify()

    def _held(self, pos: int, key: Hashable) -> int:
        """Bytes tier ``pos`` charges for ``key`` that a write of it queued now will replace (a
        rewrite: a block a refused delete left there, or one an earlier run did), reserved as the
        slot's outflow. With only the new bytes reserved (inflow) while the tier still charged the
        old, the slot counted the block twice until it landed, and room made meanwhile evicted a
        block too many. When a move of the key into or out of that tier is outstanding the charge
        may be on its way out (a delete) or not landed yet: 0, so the block is never counted as
        gone (at worst twice). A move elsewhere (the copy into a lower tier a store queued first)
        leaves the charge here as it is: it is replaced."""
        return 0 if self.outstanding(key, pos) else self.tiers[pos].nbytes(key)

    def _unlanded(self, move: Move) -> int:
        """Bytes a delete queued behind a write of its key into its tier that has not landed (the
        erasure or TTL of a block just stored) adds to its ``release``: what the write will charge,
        less the old bytes it replaces (the tier charges those now: the caller counted them). The
        delete reserved only what the tier charged, 0 for a new block: ``Slot.used`` counted the
        block until the delete was sent. 0 when an earlier move of the key is queued too (the
        tier's charge may be on its way out), as in ``_held``: never counted gone twice."""
        w, src = self.pending.get(move.key), move.src
        if move.dst is not None or src is None or w is None:
            return 0
        if w.dst != src:  # a later move of the key is queued (an erasure's delete from a demotion's source)
            w = self.write_into(move.key, src)
        # The old bytes the delete counts (the tier's; none when a move out ahead of it counts
        # them, ``submit``) must be those the write replaces: then it adds what the write brings.
        if w is None or not w.reserve or w.ahead is not None or move.release != w.replaces:
            return 0  # (``ahead``: a delete queued behind it already counts those bytes)
        move.behind, w.ahead = w, move
        return w.reserve - w.replaces

    def write_into(self, key: Hashable, pos: int) -> Move | None:
        """The last queued or unlanded write of ``key`` into tier ``pos`` (a scan: rare; a lookup's
        when the key's latest move goes elsewhere, a copy queued after it: ``lookup.plan``)."""
        for m in itertools.chain(reversed(self.queue), (m for _, m in reversed(self._landing))):  # no copy
            if m.key == key and m.dst == pos:
                return m
        return None

    def deleting(self, key: Hashable, pos: int) -> bool:
        """Whether a delete of ``key`` from tier ``pos`` is queued, not sent yet (on failures only:
        a scan of the queue)."""
        return key in self.pending and any(m.key == key and m.src == pos and m.dst is None for m in self.queue)

    def queued(self, key: Hashable, pos: int) -> bool:
        return bool(self.outstanding(key, pos))

    def outstanding(self, key: Hashable, pos: int) -> list[Move]:
        """The moves of ``key`` into or out of tier ``pos`` that have not reported yet: queued, in
        the batch being written, or later in the batch being reported (on failures only: a scan
        of the queue). A key may have write-through copies queued for several tiers, so
        ``pending`` (its latest move) does not tell whether one concerns this tier."""
        if key not in self.pending:
            return []
        return [m for m in (*self._unreported, *self.queue) if m.key == key and pos in (m.src, m.dst)]

    def hand_on(self, m: Move) -> bool:
        """``m``'s delete was refused (``m.kept`` bytes still stored): the first move of the key into
        or out of that tier queued behind it, which reserved nothing for them (``submit``, ``_held``:
        ``m`` counted them), takes them: the tier charges them again and a delete's release counts
        them, or a rewrite replaces them (``replaces``; should it fail, the old blob stays charged
        and serves: ``Placement._moved``). Else the tier forgot a stored block: a delete sent then
        left ``Slot.used`` a block low, a failed rewrite an orphan. True if one took them."""
        src = m.src
        nxt = _moves.behind(self, m) if m.kept and src is not None and m.key not in self.tiers[src] else None
        if nxt is None or src is None or m.kept is None:
            return False
        self.tiers[src].adopt(m.key, m.kept)
        self.slots[src].reserve(0, m.kept)
        _moves.take_over(nxt, src, m.kept)
        return True

    def leaving_of(self, owner: str) -> list[Move]:
        """Moves out of a tier (deletes, demotions) of blocks charged there to ``owner``, not reported
        yet: a tenant's erasure follows them (one refused keeps the block, charged again)."""
        return [m for m in (*self._unreported, *self.queue) if m.delete_src and m.src is not None and m.owner == owner]

    def leaving(self, key: Hashable, pos: int) -> bool:
        """Whether a move of ``key`` out of tier ``pos`` (a demotion, a delete) has not reported yet."""
        return self._leaving[key, pos] > 0

    def wait_for(self, done: Callable[[], bool], timeout: float | None = None) -> bool:
        """Block until ``done()`` (checked under the lock after each batch) or ``timeout`` (False).
        The caller must not hold the lock. A manual mover runs its queue in place meanwhile."""
        if self.manual:
            while not done() and not self._stepping and self.step():
                pass
            return done()
        with self.lock:
            return self._idle.wait_for(done, timeout)

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until every queued move is done. The caller must not hold the lock."""
        return self.wait_for(lambda: not self.queue and not self.busy, timeout)

    def wait_buffer(self, limit: int, timeout: float | None = None) -> bool:
        """Block until queued payloads hold at most ``limit`` bytes (caller must not hold the lock)."""
        return self.wait_for(lambda: self.buffered <= limit or not self.queue, timeout)

    def stop(self, timeout: float = 10.0) -> None:
        """Finish the queue, then end the thread."""
        self.wait_idle(timeout)
        with self.lock:
            self._stopping = True
            self._work.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    def step(self) -> bool:
        """A manual mover's next batch, run in the caller's thread (not holding the lock); False
        when the queue is empty. A step never runs inside another (a request the simulation runs
        in the middle of a batch's I/O cannot reorder the queue)."""
        assert self.manual and not self._stepping, "step() is for a manual mover, one batch at a time"
        with self.lock:
            batch = self._take()
        if not batch:
            return False
        self._stepping = True
        try:
            self._run_batch(batch)
        finally:
            self._stepping = False
        return True

    # --- the thread ---------------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self.lock:
                self._work.wait_for(lambda: self.queue or self._stopping)
                if not self.queue:
                    return
                batch = self._take()
            self._run_batch(batch)

    def _take(self) -> list[Move]:
        """Under the lock: the next batch (moves of one kind, queue order), counted busy."""
        if not self.queue:
            return []
        batch = [self.queue.popleft()]
        head = batch[0]
        while self.queue and len(batch) < BATCH:
            nxt = self.queue[0]
            if (nxt.src, nxt.dst, nxt.delete_src) != (head.src, head.dst, head.delete_src):
                break
            batch.append(self.queue.popleft())
        self.busy += len(batch)
        self._busy_since, self.taken_at = head.queued_at, time.monotonic()
        self._unreported = list(batch)  # until each reports (``outstanding``)
        return batch

    def _run_batch(self, batch: list[Move]) -> None:
        t0 = time.monotonic()
        try:
            self._perform(batch)
        except Exception:  # noqa: BLE001 - a failing backend must not kill the writer
            for m in batch:
                m.ok = False
        per = (time.monotonic() - t0) / len(batch)
        with self.lock:
            self.per_move = per if not self.per_move else 0.8 * self.per_move + 0.2 * per
            for m in batch:
                self._unreported.pop(0)
                self._finish(m)
            self.busy -= len(batch)
            self._busy_since = None
            self._landing = []
            self._idle.notify_all()

    def lag_s(self) -> float:
        """Seconds the oldest unfinished move has waited (0 when idle); caller holds the lock.
        A growing lag means a slow tier cannot keep up (or hangs)."""
        oldest = [t for t in (self._busy_since, self.queue[0].queued_at if self.queue else None) if t is not None]
        return time.monotonic() - min(oldest) if oldest else 0.0

    def _finish(self, m: Move) -> None:
        if m.dst is not None:
            self.slots[m.dst].reserve(-m.reserve, -m.replaces)
            nxt = m.ahead
            if nxt is not None and nxt.behind is m:  # its bytes never landed: the delete behind frees the old ones
                self.slots[m.dst].reserve(0, m.replaces - m.reserve)
                nxt.release += m.replaces - m.reserve
                nxt.behind = None
        if m.src is not None:
            nxt = _moves.behind(self, m) if m.release and m.delete_src and not m.ok else None
            if nxt is not None:  # it never left (its write failed): the move queued behind, which
                _moves.take_over(nxt, m.src, m.release)  # reserved nothing for it (``submit``,
            else:  # ``_held``), counts its bytes now: a delete frees them, a rewrite replaces them
                self.slots[m.src].reserve(0, -m.release)
            self._leaving[m.key, m.src] -= m.delete_src
            if not self._leaving[m.key, m.src]:
                del self._leaving[m.key, m.src]
        self.buffered -= m.buffered
        if self.pending.get(m.key) is m:
            del self.pending[m.key]
        if m.dst is not None and m.ok:  # readable there now (the slot was told when it was queued)
            watch = self.slots[m.dst].watch
            if watch is not None:
                watch.landed(m.dst, m.key)
        self.done(m)

    def _perform(self, batch: list[Move]) -> None:
        head = batch[0]
        if head.dst is not None:
            dst = self.tiers[head.dst]
            src = None if head.src is None else self.tiers[head.src]
            items, movers, unread = [], [], []
            for m in batch:
                try:
                    blob = m.blob if m.blob is not None else _moves.blob_for(m, dst, src)
                except Exception:  # noqa: BLE001 - e.g. a payload the codec refuses: this move fails
                    blob = None
                if blob is not None:
                    items.append((m.key, blob))
                    movers.append(m)
                elif m.payload is None and src is not None and src.slow:
                    unread.append(m)
            gone = [m for m in unread if _moves.vanished(m, src)] if src is not None else []
            with self.lock:
                for m in gone:  # the source stopped charging it (outside the lock): its release follows now
                    self.slots[m.src].reserve(0, -m.release)  # type: ignore[index]
                    m.release, m.gone = 0, True
                self._landing = [(key_bytes(m.key), m) for m in movers]
            for m, good in zip(movers, dst.put_blobs(items) if items else []):
                m.ok = good
        else:
            for m in batch:
                m.ok = True
        if head.delete_src and head.src is not None:
            # Delete from the source only what reached its destination (or was a pure delete):
            # a failed write leaves the block where it was (the cache then keeps it there).
            gone = [m for m in batch if m.ok]
            if gone:
                sizes = self._settle_release(self.slots[head.src], gone)
                tombstones.delete(self, self.tiers[head.src], gone, sizes)

    def _settle_release(self, src: Slot, gone: list[Move]) -> list[int]:
        """Under the lock, before the deletes are sent: settle their outflow and have the tier stop
        charging for them, together, so ``Slot.used`` stays where it was and is right.

        Left to the delete itself (outside the lock) and to the report, the tier's bytes dropped
        first and ``Slot.used`` counted the block as gone twice meanwhile: room made against that
        (a capacity pass, ``room``'s free bytes) overfilled the tier by the block once the report
        came. Now no delete changes ``used`` outside the lock (as a quota counts only charges).
        Returns the bytes the tier charged for each, for a delete that fails."""
        sizes = []
        with self.lock:
            for m in gone:
                src.reserve(0, -m.release)
                sizes.append(src.tier.nbytes(m.key))
                src.tier.forget(m.key)  # bookkeeping only: the delete that follows does the I/O
                m.release = 0  # settled: the report has nothing left to settle
        return sizes

    def _landed(self, pos: int, kb: bytes, charge: Callable[[], object]) -> None:
        """Slow tier ``pos`` has written ``kb`` (it calls this, outside the lock): its charge for
        the block and the settling of the write's inflow, together, under the lock.

        Left to the write (outside the lock) and to the report, the tier's bytes grew first and
        ``Slot.used`` counted the block twice meanwhile: a store then was refused, or evicted a
        block too many. Charged before the write is sent instead, the tier would hold a block
        that is not stored yet. A write the mover did not send (not in the batch) is only charged."""
        with self.lock:
            charge()
            for i, (key, m) in enumerate(self._landing):
                if key == kb and m.dst == pos:
                    del self._landing[i]
                    self.slots[pos].reserve(-m.reserve, -m.replaces)
                    m.reserve = m.replaces = 0  # settled: the report has nothing left to settle
                    return
