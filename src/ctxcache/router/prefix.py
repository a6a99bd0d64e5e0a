"""The router index's prefix query: per live worker, the longest consecutive run of a request's
block keys it can read, and how many of those blocks are in its RAM, on its disk, only on a
shared store (index.py owns the table and the workers; this is the read over them).

Two paths, the same answers (tests/router/test_index_native.py): the numpy one looks every key up
in a few array steps and AND-accumulates the masks (~25 numpy calls a request whatever its
length: 330 us at 10 M blocks on the loaded 2-core machine, under the 1 M blocks/s goal); the C
one (ctxcache._native.table_prefix, native/ctxcache_table.c) probes the keys in order, a few ahead
with prefetches, and stops at the first block no worker can read. The numpy path is the
reference and the fallback (no compiler at install, or CTXCACHE_NO_NATIVE=1).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

from .table import key_arrays

if TYPE_CHECKING:
    from .table import KeyTable

FAST, SLOW, SHARED, NONE = 0, 1, 2, -1  # tier ranks of a block on a worker


@dataclass(slots=True)
class WorkerPrefix:
    """One worker's longest consecutive cached prefix of a request: ``blocks`` in all, of which
    ``fast`` in its RAM, ``slow`` on its disk, ``shared`` only on the shared store."""

    blocks: int
    fast: int
    slow: int
    shared: int


@dataclass
class PrefixMatch:
    n_keys: int
    workers: dict[str, WorkerPrefix]
    _fast: np.ndarray | None = field(default=None, repr=False)
    _slow: np.ndarray | None = field(default=None, repr=False)
    _masks: dict[str, np.uint64] = field(default_factory=dict, repr=False)

    def best(self) -> int:
        return max((p.blocks for p in self.workers.values()), default=0)

    def tiers(self, worker: str) -> np.ndarray:
        """The tier of each block of ``worker``'s prefix: FAST, SLOW or SHARED (int8)."""
        p = self.workers[worker]
        out = np.full(p.blocks, SHARED, np.int8)
        if self._fast is None or self._slow is None or not p.blocks:
            return out
        m = self._masks[worker]
        out[(self._slow[: p.blocks] & m) != 0] = SLOW
        out[(self._fast[: p.blocks] & m) != 0] = FAST
        return out


def numpy_prefix(t: KeyTable, readers: np.ndarray, store_bits: list[int], names: list[str], bits: bytes,
                 masks: dict[str, np.uint64], keys: Sequence[bytes]) -> PrefixMatch:  # fmt: skip
    n = len(keys)
    slots = t.find(*key_arrays(keys))
    hit = np.where(slots >= 0, slots, len(t.lo) - 1)  # the last pad slot is always empty: masks 0
    fast, slow = t.fast[hit], t.slow[hit]
    on = t.shared[hit]
    shared = np.zeros(n, np.uint64)
    for bit in store_bits:  # usually one store: one numpy step
        shared |= np.where(on & np.uint8(1 << bit), readers[bit], np.uint64(0))
    run = np.bitwise_and.accumulate(fast | slow | shared)  # bit w: blocks 0..i all readable by w
    wbits = np.frombuffer(bits, np.uint8).astype(np.uint64)
    rows = np.stack([run, run & fast, run & slow & ~fast])  # (3, n): in the prefix / RAM / disk
    counts = ((rows[:, :, None] >> wbits) & np.uint64(1)).sum(1).T.tolist()  # per worker: 3 counts
    out = {w: WorkerPrefix(b, f, sl, b - f - sl) for w, (b, f, sl) in zip(names, counts)}
    return PrefixMatch(n, out, fast, slow, masks)


def native_prefix(native: ModuleType, t: KeyTable, readers: np.ndarray, names: list[str], bits: bytes,
                  masks: dict[str, np.uint64], keys: Sequence[bytes]) -> PrefixMatch:  # fmt: skip
    raw = b"".join(keys)
    if len(raw) != 16 * len(keys):
        raise ValueError("block keys must be 16 bytes each")
    counts, fm, sm = native.table_prefix(raw, t.lo, t.hi, t.fast, t.slow, t.shared, readers, t.capacity, bits)
    out = {w: WorkerPrefix(b, f, sl, b - f - sl) for w, (b, f, sl) in zip(names, counts)}
    return PrefixMatch(len(keys), out, np.frombuffer(fm, np.uint64), np.frombuffer(sm, np.uint64), masks)
