"""The open-addressing table under the router's index (see index.py for why this shape).

A slot is a block: its 16-byte key as two uint64 (``lo`` 0 marks an empty slot) and worker
bitmasks by tier rank. Keys are never deleted one by one (that would need tombstones): a slot
whose masks are all clear is dead, found again by its own key, and dropped at the next rehash.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType

import numpy as np

WINDOW = 16  # slots a lookup gathers at once: covers ~99 % of runs at load 0.8
PAD = 512  # slots past the end, so a run never wraps; one that would run off it grows the table
MAX_LOAD, GROWTH = 0.8, 1.5
_WINDOW = np.arange(WINDOW)


def key_arrays(keys: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """16-byte keys as (lo, hi) uint64 arrays; lo 0 (the empty mark) becomes 1."""
    if not keys:
        return np.empty(0, np.uint64), np.empty(0, np.uint64)
    raw = b"".join(keys)
    if len(raw) != 16 * len(keys):
        raise ValueError("block keys must be 16 bytes each")
    pair = np.frombuffer(raw, dtype="<u8").reshape(-1, 2)
    return np.maximum(pair[:, 0], np.uint64(1)), pair[:, 1]


class KeyTable:
    """Keys -> slots, with per-slot ``fast``/``slow`` worker masks and a ``shared`` flag."""

    def __init__(self, capacity: int, native: ModuleType | None = None) -> None:
        # ctxcache._native's table_upsert when built: inserts and rehashes in one serial C pass
        self._upsert = getattr(native, "table_upsert", None)
        self._alloc(max(1024, int(capacity)))

    def _alloc(self, cap: int) -> None:
        n = cap + PAD
        self._cap, self._cap_u = cap, np.uint64(cap)
        self.lo, self.hi = np.zeros(n, np.uint64), np.zeros(n, np.uint64)
        self.fast, self.slow = np.zeros(n, np.uint64), np.zeros(n, np.uint64)
        self.shared = np.zeros(n, np.uint8)
        self._used = 0  # slots holding a key, dead ones included

    def _home(self, lo: np.ndarray) -> np.ndarray:
        return (lo % self._cap_u).astype(np.intp)  # keys are uniform hashes already

    def find(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Slot of each key, -1 where absent. One window per key in a few numpy steps (each costs
        ~1 us whatever its size, so a 128-key request pays for steps, not keys)."""
        start = self._home(lo)
        idx = start[:, None] + _WINDOW  # home < capacity and PAD >= WINDOW: in bounds
        klo = self.lo[idx]
        hit = klo == lo[:, None]
        slot = start + hit.argmax(1)
        found = hit.any(1) & (self.hi[slot] == hi)
        clash = hit.any(1) & ~found  # another key with the same low word came first: match both words
        if clash.any():
            both = hit[clash] & (self.hi[idx[clash]] == hi[clash, None])
            found[clash] = both.any(1)
            slot[clash] = start[clash] + both.argmax(1)
        out = np.where(found, slot, -1)
        open_run = ~(found | (klo == 0).any(1))
        if open_run.any():  # a run longer than the window (rare at load <= 0.8)
            todo = np.flatnonzero(open_run)
            out[todo] = self._find_far(lo[todo], hi[todo], start[todo] + WINDOW)
        return out

    def _find_far(self, lo: np.ndarray, hi: np.ndarray, start: np.ndarray) -> np.ndarray:
        out = np.full(len(lo), -1, np.int64)
        todo = np.arange(len(lo))
        last = len(self.lo) - 1
        while todo.size:
            pos = start[todo]
            inside = pos <= last
            todo, pos = todo[inside], pos[inside]
            klo = self.lo[pos]
            found = (klo == lo[todo]) & (self.hi[pos] == hi[todo])
            out[todo[found]] = pos[found]
            start[todo] += 1
            todo = todo[~found & (klo != 0)]
        return out

    def _limit(self) -> int:
        return len(self.lo) - WINDOW - 1  # the last slot stays empty: index.py reads it as "absent"

    def insert(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Slot of each key, claiming free slots for new ones (growing the table first if needed)."""
        if self._upsert is not None:
            return self._insert_native(np.ascontiguousarray(lo, np.uint64), np.ascontiguousarray(hi, np.uint64))
        slots = self.find(lo, hi)
        new = np.flatnonzero(slots < 0)
        if new.size == 0:
            return slots
        # distinct by the whole key: two keys may share their low word
        pairs, inv = np.unique(np.stack([lo[new], hi[new]], axis=1), axis=0, return_inverse=True)
        ulo, uhi = np.ascontiguousarray(pairs[:, 0]), np.ascontiguousarray(pairs[:, 1])
        if self._used + ulo.size > MAX_LOAD * self._cap:
            self.rehash(ulo.size)  # moves every slot: look the keys up again
            return self.insert(lo, hi)
        placed = self._claim(ulo, uhi)
        if placed is None:  # a run reached the end of the padding: grow, then place them again
            self.rehash(ulo.size, grow=True)
            return self.insert(lo, hi)
        slots[new] = placed[inv.ravel()]
        return slots

    def _insert_native(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        slots = np.empty(lo.size, np.int64)
        while True:
            _, self._used, why = self._upsert(  # type: ignore[misc]
                lo, hi, self.lo, self.hi, self._cap, self._limit(), int(MAX_LOAD * self._cap), self._used, slots
            )
            if why == 0:
                return slots
            # full (1) or a run at the padding's end (2): rehash with room for the whole batch, then
            # place every key again. Room for all, not for the rest: the keys this call placed have
            # no worker yet, so the rehash drops them as dead and they are claimed anew.
            self.rehash(lo.size, grow=why == 2)

    def _claim(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray | None:
        """Write new (distinct, absent) keys into the first free slot of their runs; None when a
        run reaches the end of the padding. Keys racing for one slot: the first wins, the others
        look again from there."""
        if self._upsert is not None:  # distinct keys into a fresh table: one serial pass
            out = np.empty(lo.size, np.int64)
            lo, hi = np.ascontiguousarray(lo, np.uint64), np.ascontiguousarray(hi, np.uint64)
            _, self._used, why = self._upsert(
                lo, hi, self.lo, self.hi, self._cap, self._limit(), lo.size + self._used, self._used, out
            )
            return out if why == 0 else None
        pos = self._home(lo)
        out = np.empty(lo.size, np.int64)
        todo = np.arange(lo.size)
        limit = self._limit()
        while todo.size:
            p = pos[todo]
            if int(p.max()) > limit:
                return None
            free = self.lo[p[:, None] + _WINDOW] == 0
            has = free.any(1)
            p = np.where(has, p + free.argmax(1), p + WINDOW)
            pos[todo] = p
            cand = np.flatnonzero(has)
            taken, first = np.unique(p[cand], return_index=True)
            won = todo[cand[first]]
            self.lo[taken], self.hi[taken] = lo[won], hi[won]
            out[won] = taken
            self._used += taken.size
            keep = np.ones(todo.size, bool)
            keep[cand[first]] = False
            todo = todo[keep]
        return out

    def rehash(self, extra: int, *, grow: bool = False) -> None:
        """Rebuild with room for ``extra`` more keys, dropping dead slots (the only way they go)."""
        live = np.flatnonzero((self.lo != 0) & (((self.fast | self.slow) != 0) | (self.shared != 0)))
        old = (self.lo[live], self.hi[live], self.fast[live], self.slow[live], self.shared[live])
        cap = max(1024, int(self._cap * GROWTH) if grow else self._cap)
        while live.size + extra > MAX_LOAD * cap:
            cap = int(cap * GROWTH)
        while True:
            self._alloc(cap)
            slots = self._claim(old[0], old[1])
            if slots is not None:
                break
            cap = int(cap * GROWTH)
        self.fast[slots], self.slow[slots], self.shared[slots] = old[2], old[3], old[4]

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.lo, self.hi, self.fast, self.slow, self.shared))

    @property
    def capacity(self) -> int:
        return self._cap

    @property
    def used(self) -> int:
        return self._used
