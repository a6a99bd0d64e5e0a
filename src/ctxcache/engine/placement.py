"""Placement: which tier holds each block, and how blocks move between tiers.

``Node.tier`` is the fastest tier holding a block: loads go there. Slower tiers may hold clean
copies (a block promoted out of a slow tier keeps its copy there, so demoting it again costs no
write); ``Node.tier == LOST`` marks a block whose payload failed to load: a miss until a store
repairs it. Each tier's policy tracks what that tier holds, copies included; persistent tiers may
also hold orphans, blocks the index does not know (left by an earlier run), which are evicted (or
written back) like any other block.

Room is made with logical byte counts (``Slot.used``): a tier's own count plus writes queued into
it minus blocks queued to leave it, so decisions never wait for the mover. Every event goes
through the tier's ``Slot`` (policy and counters) and the engine's ``Counters``; every method
runs under the engine's lock. Blocks persistent tiers hold that the index does not know are found
and indexed by ``discovery``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from ..errors import PayloadError
from ..index import Node, RadixIndex
from ..tiers import NO_META, BlockMeta
from .fairness import Fairness
from .mover import Move, Mover
from .refusals import adopt_kept, refused_again
from .slot import Counters, Slot

LOST = -1


def meta_of(node: Node) -> BlockMeta:
    parent = node.parent if isinstance(node.parent, bytes) else b""
    tenant = node.tag.encode() if isinstance(node.tag, str) else b""
    return BlockMeta(node.tokens, parent, node.depth, tenant)


class Placement:
    def __init__(
        self,
        slots: Sequence[Slot],
        index: RadixIndex,
        lock: threading.RLock,
        counters: Counters,
        *,
        promote: bool = True,
        write_buffer: int = 256 << 20,
        manual: bool = False,
    ) -> None:
        self.slots = list(slots)
        self.tiers = [s.tier for s in self.slots]
        self.index = index
        self.c = counters
        self.last = len(self.slots) - 1
        self.promote = promote
        self.write_buffer = write_buffer
        self.mover = Mover(self.slots, lock, self._moved, manual)
        self.persistent = [t for t, tier in enumerate(self.tiers) if tier.persistent]
        self.all_memory = not any(t.slow or t.persistent for t in self.tiers)
        self._can = [self._can_evict(t) for t in range(len(self.slots))]
        self.fairness: Fairness | None = None  # set by the engine when tenants are configured
        # Keys erased (tenant erasure, TTL, flush) -> the slow tiers whose delete of it has not
        # landed (a refused delete kept the erased blob there): never discovered there, and no
        # copy of a block stored anew (``copy_at``) until it lands or a new write overwrites it.
        # Over a restart: the tombstone journals (engine/tombstones.py, engine/journal.py).
        self.erased: dict[Hashable, set[int]] = {}
        # Bumped whenever a tier stops keeping an erased blob (``unmark_erased``): a lookup's
        # discovery that read storage with the lock released before then may hold an erased
        # payload that ``erased`` no longer names, so it attaches nothing (discovery.attach).
        self.erased_epoch = 0
        self.unverified: dict[bytes, set[int]] = {}  # tenant -> tiers its last erasure could not search

    def _can_evict(self, t: int) -> Callable[[Any], bool]:
        if self.all_memory:  # no copies, orphans or moves in flight: the index decides alone
            return self.index.is_evictable if t == self.last else self.index.is_unpinned
        pending, get, idx, last = self.mover.pending, self.index.get, self.index, t == self.last
        ram = not self.tiers[t].slow

        def can(key: Any) -> bool:
            m = pending.get(key)
            # In flight: it leaves once it has landed; but RAM keeps no block for a write-through
            # copy queued below it (demoted, it is served from that queue until the copy lands).
            if m is not None and not (ram and m.through):
                return False
            node = get(key)
            if node is None or node.tier != t:
                return True  # an orphan, or a copy of a block held by a faster tier
            return idx.is_evictable(key) if last else node.pins == 0

        return can

    # --- accounting ----------------------------------------------------------------------------------
    def used(self, t: int) -> int:
        return self.slots[t].used()

    def room(self, t: int, size: int, tenant: str | None = None) -> bool:
        """Make room for ``size`` bytes of ``tenant`` in tier ``t``; False if it cannot be made.
        A tenant at its quota in that tier makes room among its own blocks first."""
        slot = self.slots[t]
        quota = slot.quotas.get(tenant) if tenant is not None else None
        if quota is not None:
            over = slot.tenant_used(tenant) + size - quota  # type: ignore[arg-type]
            if size > quota or (over > 0 and not self.make_room(t, over, only=tenant)):
                return False
        free = slot.free()
        return size <= free or (size <= slot.capacity and self.make_room(t, size - free))

    def drain(self) -> None:
        """Bring every tier above its high watermark back down to its low one."""
        for t, slot in enumerate(self.slots):
            excess = slot.over_high()
            if excess:
                self.make_room(t, excess)

    # --- leaving a tier ------------------------------------------------------------------------------
    def make_room(self, t: int, nbytes: int, only: str | None = None) -> bool:
        """Demote or evict from tier ``t`` until ``nbytes`` are freed. False if it could not.

        With tenants, victims come in stages (``Fairness.stages``): blocks of tenants over their
        share first, then best-effort, then SLO blocks; class-0 blocks only once expired.
        ``only``: a tenant at its quota, which makes room among its own blocks. A block whose
        delete failed goes first (``Slot.victim``) and its bytes count as freed, as any victim's:
        should it fail again, its report frees them from other victims (``_moved``)."""
        slot = self.slots[t]
        if not slot.may_delete():
            return False  # its deletes keep failing: victims would only queue more (Slot.may_delete)
        watch = slot.watch
        if watch is None:
            return self._free(t, nbytes, only)
        watch.begin()  # the KV events: the pass's evictions in one record, not one each
        try:
            return self._free(t, nbytes, only)
        finally:
            watch.end()

    def _free(self, t: int, nbytes: int, only: str | None) -> bool:
        slot, can = self.slots[t], self._can[t]
        probe = slot.broken  # one victim asks whether the tier is back; the room waits for its answer
        # A quota counts the tenant's charges, which change only under the lock; the tier's bytes
        # also drop when the mover's deletes land (outside it), which would end the pass early.
        # Capacity counts ``Slot.used``, which the mover keeps still while its deletes land (it
        # settles a delete's outflow and the tier's charge together, under the lock, beforehand).
        used = slot.used if only is None else (lambda: slot.tenant_used(only))
        goal = used() - nbytes
        stages = [None] if self.fairness is None and only is None else self._stages(t, only)
        for allowed in stages:
            ok = can if allowed is None else (lambda k, a=allowed: a(k) and can(k))
            while used() > goal:
                key = slot.victim(ok)
                if key is None:
                    break
                why = self._leave(t, key, quota=only is not None)
                if not why:
                    slot.stayed(key)  # no room below and still needed: it stays
                    return False
                slot.evicted(key, why)
                if probe:
                    return False
            if used() <= goal:
                return True
        return False

    def _stages(self, t: int, only: str | None) -> list[Callable[[Any], bool] | None]:
        slot = self.slots[t]
        if only is not None:
            return [lambda k: slot.owner(k) == only]
        assert self.fairness is not None
        return self.fairness.stages(slot)

    def _leave(self, t: int, key: Hashable, quota: bool = False) -> str:
        """``key`` out of tier ``t``: "demoted" (the block is in ``t + 1`` now), "evicted" (gone
        from the cache, or a copy, or an orphan), or "" if it may not leave (the KV events' reason,
        as ``EngineWatch._reason`` would read it)."""
        node = self.index.get(key)
        if node is not None and node.tier == t:
            if t < self.last and self._demote(t, key, node):
                return "demoted"
            if not self.index.is_evictable(key):
                return ""
            self._drop(t, key)
            self.index.remove(key)
            self.c.evictions += 1
            self.c.quota_evictions += quota
            self.prune(node.parent)
            return "evicted"
        erased = t in self.erased.get(key, ())  # an erased blob a refused delete kept: deleted, never moved on
        if node is None and t < self.last and not erased and self._demote(t, key, None):
            return "evicted"  # an orphan, written back like any block: not in the index, it left the cache
        self._drop(t, key)  # a copy, or an orphan with nowhere to go
        if node is None:  # the orphan leaves the cache (a copy's block stays in a faster tier)
            self.c.evictions += 1
            self.c.quota_evictions += quota
        return "evicted"

    def _drop(self, t: int, key: Hashable, erase: bool = False) -> None:
        """Delete ``key`` from tier ``t``; call it while the slot still charges the key's owner.
        ``erase``: an erasure's or a TTL's (journaled if refused: engine/tombstones.py)."""
        tier = self.tiers[t]
        if tier.slow:
            owner = self.slots[t].owner(key)
            move = Move(key, t, None, NO_META, release=tier.nbytes(key), delete_src=True, owner=owner, erase=erase)
            self.mover.submit(move)
        else:
            tier.delete(key)

    def _demote(self, t: int, key: Hashable, node: Node | None) -> bool:
        """Move a block from tier ``t`` into ``t + 1`` (queued when that tier is slow)."""
        d = t + 1
        src, dst = self.tiers[t], self.tiers[d]
        if not dst.healthy:
            return False
        if self.copy_at(d, key):  # a clean copy is already there: nothing to write
            self._drop(t, key)
        else:
            payload: Any = None
            blob = None
            if src.slow:
                size = src.nbytes(key)  # same-codec estimate; the mover charges the real size
            elif src.codec and dst.codec and src.codec.same_format(dst.codec):
                blob = src.get_blob(key)
                size = len(blob) if blob is not None else 0
            else:
                payload = src.get(key)
                size = dst.size_of(payload) if payload is not None else 0
            owner = self.slots[t].owner(key)
            if (payload is None and blob is None and not src.slow) or not self.room(d, size, owner):
                return False
            meta = meta_of(node) if node is not None else NO_META
            if self.slots[d].owner(key) is not None:  # an erased blob kept there: rewritten, charged
                self.slots[d].drop(key)  # again (below) to this block's owner at its new size
            if dst.slow:
                held = 0 if src.slow else size
                if held and self.mover.buffered + held > self.write_buffer:
                    self.c.demotions_skipped += 1  # the write buffer is full: never wait for it
                    return False
                release = src.nbytes(key) if src.slow else 0
                self.mover.submit(
                    Move(key, t, d, meta, payload, blob, size, release, held, delete_src=src.slow, owner=owner)
                )
                if not src.slow:
                    src.delete(key)
            else:
                if blob is not None:
                    dst.put_blob(key, blob)
                else:
                    dst.put(key, payload, meta)
                src.delete(key)
            self.slots[d].admit(key, size, owner)
        if node is not None:
            node.tier = d
        self.c.demotions += 1
        return True

    def copy_at(self, t: int, key: Hashable) -> bool:
        """Whether tier ``t`` holds a clean copy of the indexed block ``key``: not an erased blob a
        refused delete kept there (``erased``), which a block stored anew under the key was
        demoted onto (nothing written) and then served from, with the erased payload. A write
        of the key queued there since (a store's write-through copy) is the new block's."""
        if not self.slots[t].holds(key):
            return False
        return t not in self.erased.get(key, ()) or any(m.dst == t for m in self.mover.outstanding(key, t))

    def mark_erased(self, key: Hashable, t: int) -> None:
        self.erased.setdefault(key, set()).add(t)

    def unmark_erased(self, key: Hashable, t: int) -> None:
        """Tier ``t`` no longer keeps an erased blob of ``key``: its delete landed, or a new write of
        the key landed over it with no delete queued behind (an erasure of the new block)."""
        ts = self.erased.get(key)
        if ts is not None and t in ts and not self.mover.deleting(key, t):
            ts.discard(t)
            self.erased_epoch += 1
            if not ts:
                del self.erased[key]

    # --- entering a tier -----------------------------------------------------------------------------
    def place(self, t: int, node: Node, payload: Any, size: int, blob: bytes | None = None) -> None:
        """Put a block into tier ``t`` (room already made): inline in RAM, queued for slow tiers.
        ``blob``: the payload already encoded with the tier's codec."""
        tier = self.tiers[t]
        if tier.slow:
            if self.slots[t].owner(node.key) is not None:  # a rewrite (kept or found there): the
                self.slots[t].drop(node.key)  # caller charges it again, to its writer, at its new size
            held = None if blob is not None else payload
            self.mover.submit(Move(node.key, None, t, meta_of(node), held, blob, size, 0, size))
        elif blob is not None:
            tier.put_blob(node.key, blob)
        else:
            tier.put(node.key, payload, meta_of(node))
        node.tier = t

    def promote_hit(self, node: Node, payload: Any, t: int) -> None:
        """Copy (slow tiers) or move (RAM tiers) a block that was just loaded from tier ``t`` into
        the top tier. Skipped when there is no room, the write buffer is full, or it is in flight."""
        if not self.promote or t == 0 or node.tier != t or node.key in self.mover.pending:
            return
        top = self.tiers[0]
        try:
            size = top.size_of(payload)
        except PayloadError:
            return
        tenant = node.tag if isinstance(node.tag, str) else None
        if (top.slow and self.mover.buffered + size > self.write_buffer) or not self.room(0, size, tenant):
            return
        self.place(0, node, payload, size)
        self.slots[0].admit(node.key, size, tenant)  # without tenancy owner_of says ORPHAN
        src = self.tiers[t]
        if not src.slow:
            src.delete(node.key)
            self.slots[t].drop(node.key)
        self.c.promotions += 1

    # --- losses --------------------------------------------------------------------------------------
    def lose(self, node: Node, t: int) -> None:
        """A load of ``node`` from tier ``t`` failed (missing, corrupt, unreachable)."""
        if node.tier != t or self.mover.queued(node.key, t):
            return  # already handled, or in flight there (the mover reports the outcome)
        self.slots[t].drop(node.key)
        self.tiers[t].forget(node.key)
        node.tier = LOST
        self.c.lost += 1
        self.prune(node.key)

    def prune(self, key: Hashable) -> None:
        """Remove lost blocks that have become unpinned leaves (they have nothing left to serve)."""
        while True:
            node = self.index.get(key)
            if node is None or node.tier != LOST or not self.index.is_evictable(key):
                return
            self.index.remove(key)
            if node.depth == 0:
                return
            key = node.parent

    def _moved(self, m: Move) -> None:
        """The mover's report, under the lock. Only failed writes and deletes need anything done."""
        if m.src is not None and m.delete_src and m.ok:  # a delete was sent: the tier's breaker learns how it went
            self.slots[m.src].deleted(refused=m.kept is not None)
            if m.kept is None:
                self.unmark_erased(m.key, m.src)  # the erased blob left that tier
        self.c.delete_errors += m.src is not None and m.kept is not None  # a delete from a slow tier raised
        # A delete that failed and left the block resident: tried first next time; failed again: see refused_again.
        if m.src is not None and self.slots[m.src].settled(m.key, refused=m.kept is not None and adopt_kept(self, m)):
            refused_again(self, m.src, m.key, m.kept or 0)
        if m.dst is not None and m.ok:
            self.unmark_erased(m.key, m.dst)  # a new blob written over an erased one
        if m.dst is None or m.ok:
            return
        self.c.write_errors += not m.gone  # gone: its source had lost it (corrupt), no write was tried
        dst, node = self.slots[m.dst], self.index.get(m.key)
        # A move of the key into or out of this tier queued behind (an erasure's delete, a store
        # after it) settles it there; a move elsewhere does not (a write-through copy into a
        # lower tier, queued with a store into a slow top tier: its refused write stayed charged).
        stays = self.mover.queued(m.key, m.dst)
        if not stays:
            owner = dst.owner(m.key)
            dst.drop(m.key)
            # A blob of the key the tier still charges is still stored: a rewrite's old one (a
            # failed write changes nothing there), valid as before: charged at its size, it serves.
            # Not an erased blob a refused delete kept there (the write was the block stored anew
            # over it): charged, still marked erased, it must never serve (seed 200129).
            if m.key in dst.tier:
                dst.admit(m.key, tenant=owner)
                stays = m.dst not in self.erased.get(m.key, ())
        src = self.slots[m.src] if m.src is not None else None
        if src is not None and src.slow and m.key in src.tier:  # still where it was: it stays there
            if not self.mover.deleting(m.key, src.pos):  # until a delete queued from there (an erasure's)
                src.admit(m.key, tenant=node.tag if node is not None and isinstance(node.tag, str) else m.owner)
            if node is not None and node.tier == m.dst and not stays:
                node.tier = m.src if m.src is not None else LOST
        elif node is not None and node.tier == m.dst and not stays:
            # A promotion (no src) keeps its slow source's copy: served from there again, not lost;
            # so does a store whose write-through copy below is still queued (served from the queue).
            below = [t for t in range(m.dst + 1, len(self.slots)) if self.slots[t].holds(m.key)]
            kept = below and (  # stored there, and not an erased blob; or still queued there
                (m.key in self.tiers[below[0]] and below[0] not in self.erased.get(m.key, ()))
                or self.mover.queued(m.key, below[0])
            )
            node.tier = below[0] if kept else LOST
            if node.tier == LOST:
                self.c.lost += 1
                self.prune(m.key)
