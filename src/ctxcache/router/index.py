"""The router's view of the fleet: which worker holds which block, in which tier.

Fed by KV events (events/model.py) and queried once per request with the request's block keys.
A fleet holds tens of millions of (block, worker) pairs, so nothing here is a Python object per
block (a dict of 16-byte ``bytes`` keys costs 86 B an entry, measured, for no faster lookups:
docs/routing.md has the figures). Instead, one open-addressing table in numpy arrays (table.py):

* a slot is a block: its 16-byte key as two uint64 (``lo`` = 0 marks an empty slot) and worker
  bitmasks, one uint64 per tier rank: ``fast`` (each worker's first tier, its RAM), ``slow``
  (its other local tiers) and a ``shared`` byte: bit s set when the block is on shared store s
  (``WorkerStarted.stores``: up to 8 distinct stores per index), which every worker attached to
  that store reads: 33 bytes a slot.
* a key's home slot is its low word modulo the capacity (keys are already uniform hashes), so
  the capacity need not be a power of two and grows by 1.5x: the load stays in [0.5, 0.8], 41-66
  bytes per block, less per (block, worker) pair once blocks are on several workers.
* linear probing, looked up in batches: every key of a request gathers a window of ``WINDOW``
  slots in one numpy step; the rare key whose run is longer continues in a loop.
* keys are never deleted one by one (a tombstone would be needed); a block whose masks are all
  clear is dead, reused by its own key, and dropped at the next rehash.
* the prefix query (prefix.py) runs in C when ctxcache._native is built, else in numpy.

At most 64 workers per index (the masks are uint64); a larger fleet runs one index per 64.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .. import accel
from ..events.model import BlockRemoved, BlockStored, EventBatch, Heartbeat, TierCleared, WorkerStarted
from .prefix import FAST, NONE, SHARED, SLOW, PrefixMatch, WorkerPrefix, native_prefix, numpy_prefix
from .table import KeyTable, key_arrays

__all__ = ["FAST", "NONE", "SHARED", "SLOW", "BlockIndex", "IndexFullError", "PrefixMatch", "WorkerPrefix"]

MAX_WORKERS = 64
MAX_STORES = 8  # distinct shared stores: the bits of a slot's ``shared`` byte
_SHARED_HINTS = ("redis", "valkey", "shared")


class IndexFullError(RuntimeError):
    """More than MAX_WORKERS live workers, or more than MAX_STORES shared stores."""


@dataclass
class WorkerState:
    name: str
    bit: int
    epoch: str
    seq: int = 0
    last_seen: float = 0.0
    tiers: tuple[str, ...] = ()
    shared: tuple[str, ...] = ()
    stores: tuple[str, ...] = ()  # the store behind each of ``shared`` (WorkerStarted.stores)
    gaps: int = 0  # batches missed (a seq jump): the entries may be stale until a resync
    batches: int = 0

    @property
    def mask(self) -> np.uint64:
        return np.uint64(1 << self.bit)

    def store_of(self, tier: str) -> str:
        """What names the shared store behind ``tier``: its WorkerStarted.stores entry; without one
        (an older worker, or no WorkerStarted seen) the one unnamed store every such worker shares."""
        if tier in self.shared:
            i = self.shared.index(tier)
            if i < len(self.stores) and self.stores[i]:
                return self.stores[i]
        return ""

    def rank(self, tier: str) -> int:
        if tier in self.shared:
            return SHARED
        if self.tiers:
            return FAST if tier == self.tiers[0] else SLOW
        # Before its WorkerStarted (a consumer that joined mid-epoch): guess from the name.
        if any(h in tier.lower() for h in _SHARED_HINTS):
            return SHARED
        return FAST if tier.lower() in ("memory", "ram", "hot", "gpu", "cpu") else SLOW


class BlockIndex:
    """Block key -> worker bitmasks by tier, applied from EventBatches (or, under ``ctxcache route
    --redis``, from the events consumer through router/feed.py), queried by prefix.

    Thread-safe: the consumer's thread writes while the router's event loop reads (a rehash swaps
    every array, so a reader must never see half of one)."""

    def __init__(
        self, capacity: int = 1 << 16, *, worker_ttl_s: float = 30.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.worker_ttl_s = worker_ttl_s
        self._clock = clock
        self._workers: dict[str, WorkerState] = {}
        self._free_bits = list(range(MAX_WORKERS - 1, -1, -1))
        self._stores: dict[str, int] = {}  # shared store id -> its bit in ``shared``
        self._readers = np.zeros(MAX_STORES, np.uint64)  # per store bit: workers attached to it
        self.ignored = 0  # batches dropped: duplicates, or from an epoch older than the current one
        self._t = KeyTable(capacity, accel.native)
        self._lock = threading.RLock()
        # chosen once, as a hasher's key walk is (accel.py); a module built before it had none
        self._native = accel.native if hasattr(accel.native, "table_prefix") else None
        # the live workers' names, bits and masks as a query takes them: kept until one comes or goes
        self._live: tuple[list[str], bytes, dict[str, np.uint64]] | None = None

    # --- events --------------------------------------------------------------------------------------
    def apply(self, batch: EventBatch) -> bool:
        """Apply one worker's batch; False when it was ignored (a duplicate or an older epoch).

        A new epoch forgets everything the worker's older epochs stored; a seq gap is counted on
        the worker (``gaps``) and the batch applied anyway (the consumer replays or resyncs)."""
        with self._lock:
            w = self._worker_for(batch)
            if w is None:
                self.ignored += 1
                return False
            self._advance(w, batch)
            for ev in batch.events:
                self._apply_event(w, ev)
            return True

    def apply_many(self, batches: Sequence[EventBatch]) -> int:
        """Apply batches in order, as ``apply`` would, with consecutive stores coalesced into one
        table insert (a replay or a snapshot of 1 M blocks: ~15x faster than batch by batch).
        Stores commute with each other; anything else flushes them first. Returns batches applied."""
        pending: dict[tuple[str, str], list[bytes]] = {}

        def flush() -> None:
            for (name, tier), keys in pending.items():
                self._store(self._workers[name], keys, tier)
            pending.clear()

        applied = 0
        with self._lock:
            for batch in batches:
                known = self._workers.get(batch.worker)
                if known is None or known.epoch != batch.epoch:
                    flush()  # a new epoch forgets the worker: its pending stores go first
                w = self._worker_for(batch)
                if w is None:
                    self.ignored += 1
                    continue
                self._advance(w, batch)
                applied += 1
                for ev in batch.events:
                    if isinstance(ev, BlockStored):
                        pending.setdefault((w.name, ev.tier), []).extend(ev.keys)
                    else:
                        flush()
                        self._apply_event(w, ev)
            flush()
        return applied

    def _advance(self, w: WorkerState, batch: EventBatch) -> None:
        if batch.seq > w.seq + 1 and w.seq:
            w.gaps += batch.seq - w.seq - 1
        w.seq, w.last_seen = batch.seq, self._clock()
        w.batches += 1

    def _worker_for(self, batch: EventBatch) -> WorkerState | None:
        w = self._workers.get(batch.worker)
        if w is not None and w.epoch == batch.epoch:
            return w if batch.seq > w.seq else None
        if w is not None:
            if _epoch_order(batch.epoch) < _epoch_order(w.epoch):
                return None  # a late batch of a process that has since restarted
            self._forget(w)  # the worker restarted: what its old process held is gone
        return self._new_worker(batch.worker, batch.epoch)

    def _new_worker(self, name: str, epoch: str) -> WorkerState:
        if not self._free_bits:
            raise IndexFullError(f"this index tracks at most {MAX_WORKERS} workers")
        w = WorkerState(name, self._free_bits.pop(), epoch, last_seen=self._clock())
        self._workers[name] = w
        self._live = None
        return w

    def _apply_event(self, w: WorkerState, ev: object) -> None:
        if isinstance(ev, BlockStored):
            self._store(w, ev.keys, ev.tier)
        elif isinstance(ev, BlockRemoved):
            self._remove(w, ev.keys, ev.tier)
        elif isinstance(ev, TierCleared):
            self._clear(w, ev.tier, ev.reason)
        elif isinstance(ev, WorkerStarted):
            self._started(w, ev)
        elif not isinstance(ev, Heartbeat):
            raise TypeError(f"not a KV event: {type(ev).__name__}")

    def _started(self, w: WorkerState, ev: WorkerStarted) -> None:
        for bit in range(MAX_STORES):
            self._readers[bit] &= ~w.mask
        w.tiers, w.shared, w.stores = tuple(ev.tiers), tuple(ev.shared), tuple(ev.stores)
        for tier in w.shared:  # attached to its stores from the start, before it stores anything
            self._readers[self._store_bit(w.store_of(tier))] |= w.mask

    def _store_bit(self, store: str) -> int:
        bit = self._stores.get(store)
        if bit is None:
            if len(self._stores) >= MAX_STORES:
                raise IndexFullError(f"this index tracks at most {MAX_STORES} shared stores")
            bit = self._stores[store] = len(self._stores)
        return bit

    def _store(self, w: WorkerState, keys: Sequence[bytes], tier: str) -> None:
        rank = w.rank(tier)
        slots = self._t.insert(*key_arrays(keys))
        if rank == SHARED:
            bit = self._store_bit(w.store_of(tier))
            self._t.shared[slots] |= np.uint8(1 << bit)
            self._readers[bit] |= w.mask
        else:
            arr = self._t.fast if rank == FAST else self._t.slow
            arr[slots] |= w.mask

    def _remove(self, w: WorkerState, keys: Sequence[bytes], tier: str) -> None:
        rank = w.rank(tier)
        slots = self._t.find(*key_arrays(keys))
        slots = slots[slots >= 0]
        if rank == SHARED:
            self._t.shared[slots] &= np.uint8(~(1 << self._store_bit(w.store_of(tier))) & 0xFF)
        else:
            arr = self._t.fast if rank == FAST else self._t.slow
            arr[slots] &= ~w.mask

    def _clear(self, w: WorkerState, tier: str, reason: str) -> None:
        rank = w.rank(tier)
        if rank == SHARED:
            bit = self._store_bit(w.store_of(tier))
            if reason == "lost":  # this worker cannot reach the store; the others still may
                self._readers[bit] &= ~w.mask
            else:
                self._t.shared &= np.uint8(~(1 << bit) & 0xFF)
            return
        arr = self._t.fast if rank == FAST else self._t.slow
        arr &= ~w.mask

    def _forget(self, w: WorkerState) -> None:
        self._t.fast &= ~w.mask
        self._t.slow &= ~w.mask
        self._readers &= ~w.mask
        del self._workers[w.name]
        self._live = None
        self._free_bits.append(w.bit)

    # --- fed by a consumer that owns ordering (router/feed.py) ----------------------------------------
    def attach(self, name: str, epoch: str, started: WorkerStarted | None) -> None:
        """Track ``name`` (epoch ``epoch``) with the tiers ``started`` names; a new epoch forgets
        the old one first. Ordering, gaps and silence are the caller's: nothing here is sequenced."""
        with self._lock:
            w = self._workers.get(name)
            if w is not None and w.epoch != epoch:
                self._forget(w)
                w = None
            if w is None:
                w = self._new_worker(name, epoch)
            if started is not None:
                self._started(w, started)

    def stored(self, name: str, tier: str, keys: Sequence[bytes]) -> None:
        with self._lock:
            self._store(self._workers[name], keys, tier)

    def removed(self, name: str, tier: str, keys: Sequence[bytes]) -> None:
        with self._lock:
            self._remove(self._workers[name], keys, tier)

    def cleared(self, name: str, tier: str, reason: str) -> None:
        with self._lock:
            self._clear(self._workers[name], tier, reason)

    def expire(self, now: float | None = None) -> list[str]:
        """Forget workers silent (no batch, not even a heartbeat) for ``worker_ttl_s``."""
        with self._lock:
            now = self._clock() if now is None else now
            gone = [w for w in self._workers.values() if now - w.last_seen > self.worker_ttl_s]
            for w in gone:
                self._forget(w)
            return [w.name for w in gone]

    def remove_worker(self, name: str) -> None:
        with self._lock:
            w = self._workers.get(name)
            if w is not None:
                self._forget(w)

    # --- queries -------------------------------------------------------------------------------------
    def prefix(self, keys: Sequence[bytes]) -> PrefixMatch:
        """Per live worker, the longest run of ``keys`` from the first one that it can read, and
        how many of those blocks are in its RAM, on its disk, only on a shared store it reads."""
        with self._lock:
            return self._prefix(keys)

    def _prefix(self, keys: Sequence[bytes]) -> PrefixMatch:
        n = len(keys)
        if n == 0 or not self._workers:
            return PrefixMatch(n, {name: WorkerPrefix(0, 0, 0, 0) for name in self._workers})
        if self._native is not None:
            live, bits, masks = self._live_workers()
            return native_prefix(self._native, self._t, self._readers, live, bits, masks, keys)
        live, bits, masks = self._live_workers()
        return numpy_prefix(self._t, self._readers, list(self._stores.values()), live, bits, masks, keys)

    def _live_workers(self) -> tuple[list[str], bytes, dict[str, np.uint64]]:
        if self._live is None:
            live = list(self._workers.values())
            self._live = [w.name for w in live], bytes(w.bit for w in live), {w.name: w.mask for w in live}
        return self._live

    def lookup_slots(self, keys: Sequence[bytes]) -> np.ndarray:
        """Slots of ``keys`` (-1: not indexed): the raw batch lookup the benchmark times."""
        with self._lock:
            return self._t.find(*key_arrays(keys))

    @property
    def workers(self) -> dict[str, WorkerState]:
        with self._lock:
            return dict(self._workers)

    def stats(self) -> dict[str, int | float]:
        with self._lock:
            live = (self._t.fast | self._t.slow) != 0
            entries = int(np.bitwise_count(self._t.fast | self._t.slow).sum())
            entries += int(np.bitwise_count(self._t.shared).sum())
            nbytes = self._t.nbytes
            blocks = int(np.count_nonzero(live | (self._t.shared != 0)))
            return {
                "blocks": blocks,
                "entries": entries,
                "capacity": self._t.capacity,
                "bytes": nbytes,
                "bytes_per_entry": nbytes / entries if entries else 0.0,
                "load": self._t.used / self._t.capacity,
                "workers": len(self._workers),
                "shared_stores": len(self._stores),
            }


def _epoch_order(epoch: str) -> tuple[int, str]:
    """Epochs from ``new_epoch`` start with the hex wall time of the process start."""
    try:
        return int(epoch.split("-", 1)[0], 16), epoch
    except ValueError:
        return 0, epoch
