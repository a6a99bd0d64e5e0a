"""EngineWatch: the engine's ``Watcher`` (engine/slot.py) that turns placement changes into KV
events on an Emitter, and watches each tier's health (a tier lost, a tier back).

A write queued to a slow tier is announced when it lands (``landed``, from the mover), not when
queued: a consumer that reads "stored in redis" may fetch the block at once. Everything else is
announced as the slot records it (``admitted``, ``left``), under the engine's lock.

The engine thread only appends ``("a", pos, key)`` (stored; ``("c", pos, [key, ...])`` for the keys
a store charges to one tier in a row: ``begin``/``end``) or ``("x", pos, key, reason)``
(removed; the reason is read now, while the placement that explains it is current) to the
emitter's queue. Tier names, key bytes, the parent key, the size and the token ids are looked up
by ``resolve`` on the emitter's thread at flush, ``flush_s`` later: a block's parent and tokens
never change, and one that left meanwhile has its removal queued right after it (its size then
reads 0, its parent None if the index dropped it too: a consumer applies the pair as a no-op).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from .. import accel
from ..engine.placement import LOST
from ..tiers.base import key_bytes
from .emitter import Emitter
from .model import BlockStored, Event, RemoveReason, TierCleared

if TYPE_CHECKING:
    from ..engine.core import Engine


def _kb(key: Hashable | None) -> bytes | None:
    return None if key is None else key_bytes(key)


def _lookup(key: Any, nodes: list[dict[Any, Any]], owners: list[dict[Any, Any]]) -> tuple[Any, int]:
    """A stored block's parent (engine form; None at a namespace root or for an unknown key) and
    size, from the index's and the owners' shards read inline (shardmap.index_shard / owner_shard)."""
    node = nodes[key[-1] if key.__class__ is bytes and key else hash(key) % 251].get(key)
    got = owners[hash(key) % 239].get(key)
    return (node.parent if node is not None and node.depth > 0 else None), (got[1] if got else 0)


def _run_of(rec: tuple[Any, ...]) -> tuple[Sequence[Any], tuple[Sequence[Any], Sequence[int]] | None]:
    """A stored record's keys and, where it captured them, their parents and sizes: "a" one key;
    "c" a run of keys (with parents and sizes as ``_close`` and ``chain`` write it); "k" a chain in
    order, keys joined, one size each (``chain``)."""
    if rec[0] == "a":
        return (rec[2],), None
    if rec[0] == "c":
        return rec[2], (rec[3:5] if len(rec) >= 5 else None)
    _, _, blob, width, parent, size = rec
    keys = [blob[j : j + width] for j in range(0, len(blob), width)]
    return keys, ([parent, *keys[:-1]], [size] * len(keys))


class EngineWatch:
    def __init__(self, engine: Engine, emitter: Emitter, *, token_ids: bool = False) -> None:
        self.e, self.em, self.token_ids = engine, emitter, token_ids
        self.names = [s.name for s in engine.slots]
        self.slow = [s.slow for s in engine.slots]
        self._healthy = [s.tier.healthy for s in engine.slots]
        self.lost = self.recovered = 0
        self._add = emitter._add
        # A store's run of charged keys (``begin``/``end``): the engine thread's, under its lock.
        # The open run: the slot appends a key admitted to tier ``run_pos`` to it itself (Watcher).
        self._depth, self.run_pos = 0, 0
        self.run: list[Hashable] | None = None
        # The open run of removals (one tier, one reason: a room-making pass's evictions), as
        # ``("X", pos, keys, reason)``: a record per pass, not per block. Both runs may be open at
        # once (a store making room block by block): they close together, the removals first. A
        # key's own records keep their order that way (removals recorded before the stores they
        # preceded); a key stored in the open run that leaves closes both first (``_in_run``).
        self.xrun: list[Hashable] | None = None
        self.xrun_pos, self.xrun_reason = 0, ""
        self.xkey: tuple[int, str] | None = None  # (pos, reason) while slots may append to ``xrun`` (Watcher)
        self._run_keys: set[Hashable] = set()  # the open run's keys, its first ``_run_read`` of them
        self._run_read = 0
        self._xruns = True  # False: a record per removal (the tests' reference)
        self._nodes = engine.index.shards
        self._chains = False  # "c" records only where ``runs`` reads them (not with token ids)

    def attach(self) -> None:
        self.em.resolve = self.resolve
        if not self.token_ids:  # with token ids, each record goes through resolve
            self.em.runs = self.stored_run if accel.native is not None else self.stored_run_py
            self._chains = True
        with self.e.lock:
            for slot in self.e.slots:
                slot.watch = self
        self.em.ticks.append(self.check_health)

    def detach(self) -> None:
        with self.e.lock:
            for slot in self.e.slots:
                slot.watch = None

    # --- Watcher -------------------------------------------------------------------------------------
    def begin(self) -> None:
        """A store starts (under the engine's lock): the keys it charges to one tier in a row go
        to the emitter as one ``("c", pos, keys)`` record, at ``end`` or before any other record
        (so the records read in the same order), instead of an ``("a", pos, key)`` each."""
        self._depth += 1

    def end(self) -> None:
        self._depth -= 1
        if not self._depth:
            self._close()

    def _close(self) -> None:
        """The open run of removals as ``("X", pos, keys, reason)``; the open run of stores as
        ``("c", pos, keys, parents, sizes)``: what ``stored_run`` would look up
        for each key, read now, while it is in this thread's cache (on the emitter's thread those
        lookups were ~1 µs a block of cache misses). Nothing left since the keys were charged (a
        removal closes the run first), so the values are the same; a key removed before the flush
        has an "x" record after the run, and ``stored_run`` looks that one up at flush as before."""
        xrun = self.xrun
        if xrun is not None:
            self.xrun = self.xkey = None
            self._add(("X", self.xrun_pos, xrun, self.xrun_reason))
        run = self.run
        if run is not None:
            self.run = None
            self._run_keys.clear()
            self._run_read = 0
            pos = self.run_pos
            nodes, owners = self.e.index.shards, self.e.slots[pos].owners.shards
            native = accel.native
            if native is not None:
                parents, sizes = native.run_meta(run, nodes, owners)
            else:
                parents, sizes = [], []
                for key in run:
                    parent, size = _lookup(key, nodes, owners)
                    parents.append(parent)
                    sizes.append(size)
            self._add(("c", pos, run, parents, sizes))

    def chain(self, pos: int, keys: Sequence[Hashable], parents: Sequence[Hashable | None], sizes: list[int]) -> None:
        """A store's new chain, charged without telling (store_simple.py): the record ``_close``
        would write for its run, from what the store knows (``run_meta`` read it back: ~1.5 µs
        a 16-block store on the request thread)."""
        if self.run is not None or self.xrun is not None:
            self._close()
        if not self._chains:  # token ids: each block's record goes through ``resolve``
            for key in keys:
                self._add(("a", pos, key))
            return
        k0 = keys[0]
        if type(k0) is bytes and sizes.count(sizes[0]) == len(sizes):
            # The usual store (a model's blocks are one size): ("k", pos, keys joined, width, parent,
            # size), atomic values only. Its lists were three more objects for the cyclic GC a store,
            # and the emitter read them cold, a pointer per key (docs/events.md, "Where the CPU went").
            blob = b"".join(cast("list[bytes]", keys))
            if len(blob) == len(k0) * len(keys):
                self._add(("k", pos, blob, len(k0), parents[0], sizes[0]))
                return
        self._add(("c", pos, keys, parents, sizes))

    def admitted(self, pos: int, key: Hashable) -> None:
        run = self.run
        if run is not None and pos == self.run_pos:  # the hot path: a run is never a slow tier's
            run.append(key)
            return
        slow = self.slow[pos]
        if slow:
            m = self.e.placement.mover.pending.get(key)
            if m is not None and m.dst == pos:
                return  # announced when it lands
        if run is not None:
            self._close()
        if self._depth and self._chains and not slow:
            self.run, self.run_pos = [key], pos
            self.xkey = None  # a removal now may be of a key of this run: ``left`` looks
            return
        if self.xrun is not None:
            self._close()  # a lone record: the removals before it go first
        self._add(("a", pos, key))

    def landed(self, pos: int, key: Hashable) -> None:
        if key not in self.e.slots[pos].owners:
            return  # it left while its write was queued (erased, evicted): its removal was announced then
        if self.run is not None or self.xrun is not None:
            self._close()
        self._add(("a", pos, key))

    def left(self, pos: int, key: Hashable, why: str = "") -> None:
        reason = self.e.leaving or why  # an erasure's or expiry's, else a room-making pass's
        if not self.e.leaving:
            if not why:  # ``_reason``, the index's shard inlined (shardmap.index_shard)
                node = self._nodes[key[-1] if key.__class__ is bytes and key else hash(key) % 251].get(key)
                reason = "evicted" if node is None or node.tier < pos else self._reason(pos, key)
            xrun = self.xrun
            if xrun is not None and self.run is None and pos == self.xrun_pos and reason == self.xrun_reason:
                xrun.append(key)  # the hot path: one eviction of a room-making pass (a drain's)
                return
        if self.run is not None and self._in_run(pos, key):
            self._close()  # stored, now leaving: the store's record first
        xrun = self.xrun
        if xrun is not None:
            if pos == self.xrun_pos and reason == self.xrun_reason:
                xrun.append(key)  # the hot path: one eviction of a room-making pass
                return
            self.xrun = self.xkey = None
            self._add(("X", self.xrun_pos, xrun, self.xrun_reason))
        if self._depth and self._xruns:
            self.xrun, self.xrun_pos, self.xrun_reason = [key], pos, reason
            # Slots may append to it while nothing else can interleave: no store run open (a
            # removal of one of its keys must close it first) and no erasure's or expiry's reason.
            self.xkey = (pos, reason) if self.run is None and not self.e.leaving else None
            return
        if self.run is not None:
            self._close()
        self._add(("x", pos, key, reason))

    def _in_run(self, pos: int, key: Hashable) -> bool:
        """``key`` is in the open store run of tier ``pos`` (the slot appends to the run itself:
        the keys appended since the last look are read into the set now)."""
        run = self.run
        if run is None or pos != self.run_pos:
            return False
        if len(run) > self._run_read:
            self._run_keys.update(run[self._run_read :])
            self._run_read = len(run)
        return key in self._run_keys

    # --- the emitter's thread ------------------------------------------------------------------------
    def resolve(self, rec: tuple[Any, ...]) -> tuple[Any, ...]:
        """A deferred record as the emitter's "s" or "r" record (unlocked reads: dict lookups)."""
        if rec[0] == "x":
            return ("r", self.names[rec[1]], key_bytes(rec[2]), rec[3])
        if rec[0] == "X":  # a run of removals: "R", the keys as one "r" each
            return ("R", self.names[rec[1]], [k if k.__class__ is bytes else key_bytes(k) for k in rec[2]], rec[3])
        _, pos, key = rec
        node = self.e.index.get(key)
        parent = node.parent if node is not None and node.depth > 0 else None  # a root names the tenant's namespace
        got = self.e.slots[pos].owners.get(key)
        tokens = None
        if self.token_ids and node is not None:
            tokens = tuple(int(t) for t in np.frombuffer(node.tokens, "<i4"))
        pb = key_bytes(parent) if parent is not None else None
        return ("s", self.names[pos], key_bytes(key), pb, self.e.block_size, got[1] if got else 0, tokens)

    def _reason(self, pos: int, key: Hashable) -> RemoveReason:
        node = self.e.index.get(key)
        if node is None or node.tier < pos:
            return "evicted"  # left the cache, or a copy under a faster tier's block went
        if node.tier == LOST:
            return "lost"
        return "demoted" if node.tier > pos else "replaced"

    def stored_run(self, records: Sequence[tuple[Any, ...]], i: int, out: list[Event]) -> int:
        """``stored_run_py`` compiled (native/ctxcache_events.c): ~10x less CPU per block."""
        pos = records[i][1]
        assert accel.native is not None and isinstance(records, list)
        return cast(
            int,
            accel.native.stored_run(
                records, i, pos, self.e.index.shards, self.e.slots[pos].owners.shards,
                self.names[pos], self.e.block_size, BlockStored, key_bytes, out,
            ),
        )  # fmt: skip

    def stored_run_py(self, records: Sequence[tuple[Any, ...]], i: int, out: list[Event]) -> int:
        """The deferred stores ("a", and "c": a run of keys) from ``records[i]`` on, to one tier: one BlockStored per chain (grown
        at either end, as ``emitter._Chain``), in one loop. Returns the index after the run. The
        reference for the compiled ``stored_run`` and the fallback without it."""
        pos, n = records[i][1], len(records)
        # The index's and the owners' shards read inline (shardmap.index_shard / owner_shard): this
        # loop runs once per stored block, and was most of the events' CPU.
        nodes, owners, tier, bs = (
            self.e.index.shards,
            self.e.slots[pos].owners.shards,
            self.names[pos],
            self.e.block_size,
        )
        keys: deque[bytes] = deque()
        top: Any = None  # the chain's parent key and its last key (engine form)
        last: Any = None
        size = 0
        gone: set[Any] | None = None  # keys removed after a captured run: looked up at flush
        while i < n:
            rec = records[i]
            if rec[0] not in ("a", "c", "k") or rec[1] != pos:
                break
            i += 1
            run, meta = _run_of(rec)
            if meta is not None and gone is None:
                gone = {r[2] for r in records[i:] if r[0] == "x"}
                gone.update(k for r in records[i:] if r[0] == "X" for k in r[2])
            for j, key in enumerate(run):
                if meta is not None and key not in gone:  # type: ignore[operator]
                    parent, got = meta[0][j], meta[1][j]
                else:
                    parent, got = _lookup(key, nodes, owners)
                kb = key if key.__class__ is bytes else key_bytes(key)
                if keys and parent is not None and parent == last:
                    keys.append(kb)
                    last = key
                elif keys and top is not None and key == top:
                    keys.appendleft(kb)
                    top = parent
                else:
                    if keys:
                        out.append(BlockStored(tuple(keys), tier, _kb(top), bs, size))
                    keys, top, last, size = deque((kb,)), parent, key, 0
                size += got
        out.append(BlockStored(tuple(keys), tier, _kb(top), bs, size))
        return i

    # --- what the worker holds (the publisher's snapshot, a start) ------------------------------------
    def held(self) -> dict[str, list[bytes]]:
        """The blocks each tier holds as the events have told them so far (``_shard``), read shard
        by shard under the engine's lock, so a store waits for one shard's copy at most. The
        shards are read at different times, which a snapshot allows (the publisher takes its seq
        first: streams.py)."""
        out: dict[str, list[bytes]] = {}
        for pos, slot in enumerate(self.e.slots):
            if self._healthy[pos]:
                keys: list[bytes] = []
                for shard in slot.owners.shards:
                    with self.e.lock:
                        keys += self._shard(pos, shard)
                out[self.names[pos]] = keys
        return out

    def announce(self, only: int | None = None) -> None:
        """What the tiers hold (at start: a disk or Redis tier a restart found full; ``only``: a tier
        back from lost), so stream followers learn it as a snapshot reader does: a BlockStored per
        shard, parent unknown. Each shard is read and its event queued under the engine's lock, so
        a block that leaves meanwhile has its removal queued after it, never before."""
        for pos, slot in enumerate(self.e.slots):
            if (only is None or pos == only) and self._healthy[pos]:
                for shard in slot.owners.shards:
                    with self.e.lock:
                        keys = self._shard(pos, shard)
                        if keys:
                            self.em.emit(BlockStored(tuple(keys), self.names[pos], None, self.e.block_size, 0))

    def _shard(self, pos: int, shard: dict[Any, Any]) -> list[bytes]:
        """One owners shard's keys as announced (under the engine's lock): a slow tier's writes still
        queued are not (they are when they land)."""
        if self.slow[pos] and (pending := self.e.placement.mover.pending):
            run = [k for k in shard if (m := pending.get(k)) is None or m.dst != pos]
        else:
            run = list(shard)
        return run if all(k.__class__ is bytes for k in run) else [key_bytes(k) for k in run]

    # --- tier health (the emitter's thread) ------------------------------------------------------------
    def check_health(self) -> None:
        """A tier that stopped answering: everything this worker held there is unreachable
        (TierCleared "lost"). Back: what the slot still charges is announced again."""
        for pos, slot in enumerate(self.e.slots):
            now = slot.tier.healthy
            if now == self._healthy[pos]:
                continue
            self._healthy[pos] = now
            if not now:
                self.lost += 1
                self.em.emit(TierCleared(slot.name, "lost"))
                continue
            self.recovered += 1
            self.announce(pos)
