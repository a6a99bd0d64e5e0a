"""Blocks that persistent tiers hold but the index does not know (written before a restart, or by
another process): found for a request's prompt with the lock released (``discover``), then
indexed and charged under it (``attach``), as a lookup does when its prefix ends early.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from typing import Any

from ..codec import Block
from ..index import Node
from ..keys import Prompt
from .placement import LOST, Placement

DISCOVER_BATCH = 32  # blocks probed per round trip when looking for blocks the index lacks


def vanished(pl: Placement, t: int, key: Hashable) -> None:
    """Under the lock, after a read of ``key`` from slow tier ``t`` came back empty (missing,
    corrupt): a tier that found its block gone stops charging it itself, during the read, outside
    the lock. Whatever still counted those bytes follows now: the slot's charge for the key (none
    is left when a move of it into or out of this tier is outstanding: the mover reports that
    one) and the bytes those moves reserved as leaving (a delete's or demotion's ``release``, a
    rewrite's ``replaces``), which would otherwise hold ``Slot.used`` one block low until sent.
    A move of the key between other tiers only (a kept copy's delete from the disk below) leaves
    this tier's charge to be dropped here: left, ``Slot.used`` stayed a block high for good."""
    tier, slot = pl.tiers[t], pl.slots[t]
    if key in tier:
        return  # still charged: a miss for other reasons (its tokens differ), or rewritten since
    moves = pl.mover.outstanding(key, t)
    for m in moves:  # in queue order: those up to the first write into this tier count the old bytes
        if m.src == t and m.release:
            slot.reserve(0, -m.release)
            m.release = 0
        if m.dst == t:
            if m.replaces:
                slot.reserve(0, -m.replaces)
                m.replaces = 0
            break  # a delete behind the write counts its new bytes, which still land (seed 200050)
    if not moves and key in slot.owners:
        node = pl.index.get(key)
        if node is not None and node.tier == t:  # indexed there (an expired block discovery read)
            pl.lose(node, t)
        else:
            slot.drop(key)


def discover(
    pl: Placement, prompt: Prompt, start: int, missed: list[tuple[int, Hashable]] | None = None
) -> list[tuple[int, Block]]:
    """Lock released: blocks ``start``.. that persistent tiers hold but the index does not know
    (written before a restart, or by another process); ``missed``: where the (tier, key) of each
    read that came back empty is added, for ``vanished``. Keys come from the request's prompt
    (hashed once per request); each tier's filter skips sure misses without I/O; each block's
    stored tokens must match."""
    keys = prompt.keys()[start:]
    blocks = [prompt.block(i) for i in range(prompt.n_blocks)]
    tiers = [t for t in pl.persistent if pl.tiers[t].healthy]
    out: list[tuple[int, Block]] = []
    for b0 in range(0, len(keys), DISCOVER_BATCH):
        ks = keys[b0 : b0 + DISCOVER_BATCH]
        toks = blocks[start + b0 : start + b0 + len(ks)]
        maybe = {t: pl.tiers[t].might_contain_many(ks) for t in tiers}
        # Past the first block no tier may hold, nothing can extend the prefix.
        limit = next((j for j in range(len(ks)) if not any(m[j] for m in maybe.values())), len(ks))
        got: list[tuple[int, Block] | None] = [None] * limit
        for t in tiers:  # fastest first; a false positive falls through to the next tier
            ask = [j for j in range(limit) if got[j] is None and maybe[t][j]]
            if not ask:
                continue
            away: set[int] = set()  # out of reach (a Cluster master down): no miss for ``vanished``
            for i, (j, block) in enumerate(
                zip(ask, pl.tiers[t].load_many([ks[j] for j in ask], [toks[j] for j in ask], away))
            ):
                if block is not None:
                    got[j] = (t, block)
                elif missed is not None and i not in away:
                    missed.append((t, ks[j]))
        run = next((j for j, g in enumerate(got) if g is None), limit)
        out.extend(g for g in got[:run] if g is not None)
        if run < len(ks):
            break
    return out


def attach(
    pl: Placement, found: list[tuple[int, Block]], parent: Hashable, depth: int, tag: Any,
    expired: Callable[[Hashable], bool] = lambda key: False, since: int | None = None,
) -> Iterator[tuple[Node, Any, int]]:  # fmt: skip
    """Under the lock: index discovered blocks under ``parent`` (pinned by the caller), pin
    each, and yield (node, payload, tier). Stops where the chain no longer fits, or at a block
    whose TTL has run out (the lookup's walk cut the prefix there; storage still holds it until
    the sweeper comes, and served from there it would outlive its TTL).

    ``since``: ``Placement.erased_epoch`` when the lookup released the lock to read. If an erased
    blob's delete landed meanwhile (the deletes a restart queues for tombstoned blocks, an
    erasure's), a block read before it may be that erased blob, no longer marked ``erased`` and no
    longer leaving: nothing is attached (a miss; the next lookup discovers again). Without this,
    the first lookup after a restart could serve, and index, an erased tenant's block."""
    if since is not None and pl.erased_epoch != since:
        return
    for t, block in found:
        key = block.key
        if expired(key) or t in pl.erased.get(key, ()) or t in pl.unverified.get(block.tenant, ()):
            return  # expired, erased (a refused delete kept it), or of a tenant erased unverified
        if pl.mover.leaving(key, t):
            # Being deleted from that tier, or moved out of it (a slow-to-slow demotion of an
            # orphan): charged there again, it was counted both ways (the move's release and
            # the charge) and, once the move deleted it, charged with nothing stored.
            return
        node = pl.index.get(key)
        if node is not None and node.tokens != block.tokens:
            return
        here = node is None or node.tier in (t, LOST)  # served from tier t from now on
        charge = here and not pl.slots[t].holds(key)
        tenant = tag if isinstance(tag, str) else None
        if charge and not pl.room(t, block.nbytes, tenant):
            return  # charged like a block placed there: within the tenant's quota and the capacity
        if node is None:
            node = pl.index.insert(key, parent, block.tokens, depth, tag=tag)
        if here:
            node.tier = t
        if charge:
            pl.slots[t].admit(key, block.nbytes, tenant)
            pl.tiers[t].adopt(key, block.nbytes)
        pl.index.pin([node])
        pl.c.discovered += 1
        yield node, block.payload, t
        parent, depth = key, depth + 1
