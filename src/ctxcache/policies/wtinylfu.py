"""W-TinyLFU (Einziger, Friedman & Manes, TOS'17): an LRU window, a segmented-LRU main cache, and a
frequency sketch that decides whether a window victim may displace the main cache's victim.

The defaults reproduce libCacheSim's ``WTinyLFU`` (main "SLRU"), so miss ratios cross-check:

- Window W = int(window * C) keys (at least 1; libCacheSim's is empty below C = 100); main
  Mn = C - W keys, an SLRU with probation Mn * 1 // 5 and protected Mn * 4 // 5 (``slru``).
- Sketch: a counting Bloom filter for Mn entries at error 0.001: int(14.38 * Mn) + 1 counters and
  10 hashes, (a + i * b) mod 2**32 mod width with a, b the low 32 bits of XXH64 of the key (ints as
  8 little-endian bytes) under two fixed seeds. An add bumps all 10 counters; the estimate is their
  minimum; all are halved after every 32 * Mn main hits. Adds come on insert, on a main hit (not a
  window hit), and for each window victim eviction looks at, after its comparison.
- Eviction takes the window's LRU key. While main has room it moves there; otherwise it enters
  main only if its estimate beats the main victim's (LRU of the lowest non-empty segment), which
  then leaves; on a tie the window key leaves.
- SLRU: an insert goes to the first segment with room (else probation: the truncated segments may
  sum to Mn - 1); a main hit promotes a probation key, protected's overflow demotes its LRU key,
  and libCacheSim evicts probation's overflow on the spot. Only the owner frees room here, so that
  key is "doomed" and ``evict`` returns it next.

``doorkeeper=True`` puts the paper's doorkeeper, a Bloom filter cleared on every halving, in front
of the sketch: a key's first add only sets its bits, later adds reach the counters, and its
estimate gets +1. One-hit wonders then stay out of the counters.
"""

from __future__ import annotations

import copy
import math
from collections import OrderedDict
from collections.abc import Hashable, Iterable
from typing import Any

import numpy as np
import xxhash

from ..errors import ConfigError
from . import wtinylfu_replay
from .base import CanEvict, Key, Policy
from .registry import register

_SEED_A, _SEED_B, _M32, _M64 = 0x12345678, 0x12344321, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF
_LN2, _LN2_SQ = 0.693147180559945, 0.480453013918201  # libbloom's literals: they fix the width
_P1, _P2, _P3 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9  # XXH64's primes
_P4, _P5 = 0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5
_BLOCK = 256
_xxh64 = xxhash.xxh64_intdigest
_UNDECIDED: Hashable = object()  # _evict_fast's answer when the common step does not apply


def _key_bytes(key: Key) -> bytes:
    if isinstance(key, int):
        return (key & _M64).to_bytes(8, "little")  # libCacheSim's uint64 id
    if isinstance(key, bytes):
        return key
    return key.encode() if isinstance(key, str) else repr(key).encode()


def xxh64_u64(keys: np.ndarray, seed: int) -> np.ndarray:
    """XXH64 of each uint64 as 8 little-endian bytes, vectorised (= xxhash.xxh64_intdigest)."""
    u = np.uint64
    k = keys.astype(u) * u(_P2)
    k = ((k << u(31)) | (k >> u(33))) * u(_P1)
    h = u((seed + _P5 + 8) & _M64) ^ k
    h = ((h << u(27)) | (h >> u(37))) * u(_P1) + u(_P4)
    h ^= h >> u(33)
    h *= u(_P2)
    h ^= h >> u(29)
    h *= u(_P3)
    h ^= h >> u(32)
    return h


@register
class WTinyLFU(Policy):
    name = "w-tinylfu"
    needs_capacity = True

    def __init__(
        self,
        capacity: int | None = None,
        window: float = 0.01,
        slru: tuple[int, int] = (1, 4),
        error: float = 0.001,
        doorkeeper: bool = False,
        **kw: Any,
    ) -> None:
        super().__init__(**kw)
        if capacity is not None and capacity < 2:
            raise ConfigError(f"w-tinylfu: capacity must be >= 2 blocks, got {capacity!r}")
        if not 0 < window < 1 or not 0 < error < 1:
            raise ConfigError("w-tinylfu: window and error must lie in (0, 1)")
        if len(slru) != 2 or min(slru) < 1:
            raise ConfigError(f"w-tinylfu: slru must be two weights >= 1 (probation, protected), got {slru!r}")
        self.capacity, self.window, self.error = capacity, float(window), float(error)
        self.slru, self.doorkeeper = (int(slru[0]), int(slru[1])), bool(doorkeeper)
        self._win: OrderedDict[Key, None] = OrderedDict()  # LRU first, like every queue here
        self._prob: OrderedDict[Key, None] = OrderedDict()
        self._prot: OrderedDict[Key, None] = OrderedDict()
        self._doomed: OrderedDict[Key, None] = OrderedDict()
        self._idx: dict[Key, list[int]] = {}  # every resident key -> its sketch counters
        # Without a capacity, queues are sized from the resident count at each eviction and the
        # sketch for a nominal 4096 main keys.
        self._fixed = self._sizes_for(capacity) if capacity is not None else None
        mn = self._fixed[0] if self._fixed is not None else 4096
        bpe = -math.log(self.error) / _LN2_SQ
        self._width, self._depth = int(mn * bpe) + 1, math.ceil(_LN2 * bpe)
        self._counts = [0] * self._width
        self._door = bytearray(self._width) if doorkeeper else None
        self._main_hits, self._halve_at = 0, 32 * mn
        self._fast = self._depth == 10 and not doorkeeper
        # A lower bound on the main victim's estimate (counters only grow between halvings): most
        # window keys lose to it, and then it need not be read again.
        self._mv: tuple[Key, int] | None = None
        # Traces number blocks densely in order of first use, so the counters of the 256 ids around
        # a new one are computed at once in numpy (3x cheaper per id); the last 4 such runs are
        # kept. Ids that jump ahead (sparse) switch this off.
        self._blocks: dict[int, list[list[int]]] = {}  # id >> 8 -> counters of those 256 ids
        self._top, self._strikes = -1, 0
        self._block_steps = np.arange(self._depth, dtype=np.uint64)

    def params(self) -> dict[str, Any]:
        return {
            "capacity": self.capacity,
            "window": self.window,
            "slru": list(self.slru),
            "error": self.error,
            "doorkeeper": self.doorkeeper,
        }

    def _sizes_for(self, cap: int) -> tuple[int, int, int]:
        """Main capacity and the probation and protected limits for a cache of ``cap`` keys."""
        mn = cap - max(1, int(self.window * cap))
        prob, prot = self.slru
        return mn, max(1, mn * prob // (prob + prot)), mn * prot // (prob + prot)

    def _sizes(self) -> tuple[int, int, int]:
        return self._fixed or self._sizes_for(max(2, len(self._idx)))

    # -- sketch ---------------------------------------------------------------------------------
    def _indices(self, key: Key) -> list[int]:
        if type(key) is int and 0 <= key < _M64 - _BLOCK:
            n = key >> 8
            if n > self._top and self._strikes < 8:
                self._strikes += n > self._top + 1 and self._top >= 0
                self._top, lo, m32 = n, n << 8, np.uint64(_M32)
                ks = np.arange(lo, lo + _BLOCK, dtype=np.uint64)
                va = (xxh64_u64(ks, _SEED_A) & m32)[:, None]
                vb = (xxh64_u64(ks, _SEED_B) & m32)[:, None]
                block: list[list[int]] = (((va + self._block_steps * vb) & m32) % np.uint64(self._width)).tolist()
                self._blocks[n] = block
                if len(self._blocks) > 4:
                    del self._blocks[next(iter(self._blocks))]
                return block[key - lo]
            data = key.to_bytes(8, "little")
        else:
            data = _key_bytes(key)
        a, b, w = _xxh64(data, _SEED_A) & _M32, _xxh64(data, _SEED_B) & _M32, self._width
        out = [a % w]
        for _ in range(self._depth - 1):
            a = (a + b) & _M32  # libbloom's unsigned 32-bit a + i * b
            out.append(a % w)
        return out

    def _add(self, idx: list[int]) -> None:
        door = self._door
        if door is not None and not all(door[i] for i in idx):
            for i in idx:
                door[i] = 1
            return
        c = self._counts
        for i in idx:
            c[i] += 1

    def _estimate(self, idx: list[int]) -> int:
        est = min(map(self._counts.__getitem__, idx))
        door = self._door
        return est + 1 if door is not None and all(door[i] for i in idx) else est

    def estimate(self, key: Key) -> int:
        """The sketch's frequency estimate for a key (resident or not)."""
        return self._estimate(self._idx.get(key) or self._indices(key))

    # -- events ---------------------------------------------------------------------------------
    def on_insert(self, key: Key) -> None:
        if type(key) is int and (block := self._blocks.get(key >> 8)) is not None:
            idx = self._idx[key] = block[key & 255]
        else:
            idx = self._idx[key] = self._indices(key)
        self._win[key] = None
        if not self._fast:
            self._add(idx)
            return
        c = self._counts  # unrolled and inlined: CPython's loop and call overhead was half the cost
        i0, i1, i2, i3, i4, i5, i6, i7, i8, i9 = idx
        c[i0] += 1
        c[i1] += 1
        c[i2] += 1
        c[i3] += 1
        c[i4] += 1
        c[i5] += 1
        c[i6] += 1
        c[i7] += 1
        c[i8] += 1
        c[i9] += 1

    def on_hit(self, key: Key) -> None:
        if key in self._win:
            self._win.move_to_end(key)
            return
        prot = self._prot
        if key in prot:
            prot.move_to_end(key)
        elif self._prob.pop(key, 0) is None:
            prot[key] = None
            _, prob_max, prot_max = self._sizes()
            if len(prot) > prot_max:
                prob = self._prob
                prob[prot.popitem(last=False)[0]] = None
                if len(prob) > prob_max:
                    self._doomed[prob.popitem(last=False)[0]] = None
        elif self._doomed.pop(key, 0) is None:
            # libCacheSim dropped it already, so there this use is a miss that re-enters the window.
            self._win[key] = None
            self._add(self._idx[key])
            return
        else:
            return
        self._add(self._idx[key])
        self._main_hits += 1
        if self._main_hits >= self._halve_at:
            self._main_hits, self._mv = 0, None
            self._counts = [v >> 1 for v in self._counts]
            if self._door is not None:
                self._door = bytearray(self._width)

    def on_remove(self, key: Key) -> None:
        if self._idx.pop(key, None) is not None:
            for q in (self._win, self._prob, self._prot, self._doomed):
                if q.pop(key, 0) is None:
                    return

    def __len__(self) -> int:
        return len(self._idx)

    def __contains__(self, key: object) -> bool:
        return key in self._idx

    def segment_of(self, key: Key) -> str | None:
        """Where a resident key is: "window", "probation", "protected" or "doomed"."""
        for name, q in (("window", self._win), ("probation", self._prob), ("protected", self._prot)):
            if key in q:
                return name
        return "doomed" if key in self._doomed else None

    def replay_object(self, requests: Iterable[Any], capacity: int, clock: Any) -> int:
        """The compiled loop for a fresh instance, else the reference (policies/wtinylfu_replay.py)."""
        return wtinylfu_replay.replay(self, WTinyLFU, requests, capacity, clock)

    # -- eviction -------------------------------------------------------------------------------
    def _to_main(self, key: Key) -> None:
        _, prob_max, prot_max = self._fixed or self._sizes()
        if len(self._prob) < prob_max or len(self._prot) >= prot_max:
            self._prob[key] = None
        else:
            self._prot[key] = None

    def _main_victim(self, can_evict: CanEvict) -> Key | None:
        """LRU key of the lowest non-empty segment that ``can_evict`` allows."""
        prob, prot = self._prob, self._prot
        prot_max = (self._fixed or self._sizes())[2]
        # Refused, so in use: promoted as on a hit (without counting one), which takes it out of
        # the way for a whole protected round instead of rescanning it on every call. Demotions
        # feed probation from protected's LRU end, so n steps pass every main key.
        for _ in range(len(prob) + len(prot)):
            if not prob:
                break
            key = next(iter(prob))
            if can_evict is None or can_evict(key):
                return key
            del prob[key]
            prot[key] = None
            if len(prot) > prot_max:
                prob[prot.popitem(last=False)[0]] = None
        for _ in range(len(prot)):
            key = next(iter(prot))
            if can_evict is None or can_evict(key):
                return key
            prot.move_to_end(key)
        return None

    def evict(self, can_evict: CanEvict = None) -> Key | None:
        mn = (self._fixed or self._sizes())[0]
        if self._fast and not self._doomed:
            key = self._evict_fast(can_evict, mn)
            if key is not _UNDECIDED:
                return key
        return self._evict_general(can_evict, mn)

    def _evict_fast(self, can_evict: CanEvict, mn: int) -> Key | None:
        """The common step (window head against main's head, both evictable), or _UNDECIDED."""
        win, prob, prot, idx = self._win, self._prob, self._prot, self._idx
        while win and len(prob) + len(prot) < mn:  # main has room: window keys move over
            wkey = next(iter(win))
            self._add(idx[wkey])
            del win[wkey]
            self._to_main(wkey)
        if win:
            wkey, seg = next(iter(win)), prob or prot
            mkey = next(iter(seg))
            if can_evict is None or (can_evict(wkey) and can_evict(mkey)):
                # Unrolled for 10 counters; _evict_general's loop gives the same answer.
                c = self._counts
                i0, i1, i2, i3, i4, i5, i6, i7, i8, i9 = idx[wkey]
                west = min(c[i0], c[i1], c[i2], c[i3], c[i4], c[i5], c[i6], c[i7], c[i8], c[i9])
                mv = self._mv
                admit = mv is None or mv[0] != mkey or west > mv[1]
                if admit:
                    j0, j1, j2, j3, j4, j5, j6, j7, j8, j9 = idx[mkey]
                    mest = min(c[j0], c[j1], c[j2], c[j3], c[j4], c[j5], c[j6], c[j7], c[j8], c[j9])
                    self._mv = (mkey, mest)
                    admit = west > mest
                # The window key's add comes after the comparison, as in libCacheSim.
                c[i0] += 1
                c[i1] += 1
                c[i2] += 1
                c[i3] += 1
                c[i4] += 1
                c[i5] += 1
                c[i6] += 1
                c[i7] += 1
                c[i8] += 1
                c[i9] += 1
                del win[wkey]
                if admit:
                    del seg[mkey], idx[mkey]
                    self._to_main(wkey)
                    return mkey
                del idx[wkey]
                return wkey
        return _UNDECIDED

    def _evict_general(self, can_evict: CanEvict, mn: int) -> Key | None:
        win, prob, prot, idx = self._win, self._prob, self._prot, self._idx
        while self._doomed:
            key = self._doomed.popitem(last=False)[0]
            if can_evict is None or can_evict(key):
                del idx[key]
                return key
            prob[key] = None  # refused, so in use: back to probation rather than rescanned
        refused = 0
        while win and refused <= len(win):
            wkey = next(iter(win))
            if len(prob) + len(prot) < mn:
                self._add(idx[wkey])
                del win[wkey]
                self._to_main(wkey)
                continue
            mkey = self._main_victim(can_evict)
            # A refused window key is in use (pinned, or the parent of newer blocks): it cannot
            # leave, so it is admitted without a contest when main has a victim to give up.
            w_ok = can_evict is None or can_evict(wkey)
            admit = mkey is not None and (not w_ok or self._estimate(idx[wkey]) > self._estimate(idx[mkey]))
            self._add(idx[wkey])
            if admit:
                (prob if mkey in prob else prot).pop(mkey)
                del win[wkey], idx[mkey]
                self._to_main(wkey)
                return mkey
            if w_ok:
                del win[wkey], idx[wkey]
                return wkey
            win.move_to_end(wkey)  # nothing in main may go: it goes round like a window hit
            refused += 1
        mkey = self._main_victim(can_evict)
        if mkey is not None:
            (prob if mkey in prob else prot).pop(mkey)
            del idx[mkey]
        return mkey

    def peek(self, can_evict: CanEvict = None) -> Key | None:
        """Runs ``evict`` on a copy (O(n)): its choice depends on the sketch updates on the way."""
        twin = copy.copy(self)
        for attr in ("_win", "_prob", "_prot", "_doomed", "_idx", "_counts", "_door"):
            setattr(twin, attr, copy.copy(getattr(self, attr)))
        return twin.evict(can_evict)
