"""Write-through: a store also queues each new block to every slow tier whose write policy is
"through" (``Slot.write``), next to the top tier that keeps it.

Why: a block that only RAM holds is invisible to the other processes sharing a Redis tier, and a
SIGKILL (or vLLM's kill a few seconds after SIGTERM) loses it; demotion writes a block down only
when RAM needs its room, and ``close`` spills only on a clean exit. A write-through copy is queued
at once, off the request path (the mover writes it; the store never waits for it), and is a clean
copy like a promoted block's: the tier's policy holds it and its owner is charged there, so when
RAM later evicts the block, ``Placement._demote`` finds the copy and writes nothing again. Until
it lands, the block may still leave RAM: lookups then serve it from the mover's queue, which
carries its payload (``Placement._can_evict``).

A copy is bounded like any write into the tier: room is made for it within the tier's capacity
and the tenant's quota there (``Placement.room``: queued copies count as used at once), and its
payload counts in the write buffer. Where none can be made (everything there pinned or in
flight, the delete breaker open, the tier down, the buffer full) the copy is dropped and counted
in ``through_dropped``: the store succeeds and the block serves from RAM as before, reaching the
tier by demotion. A copy the tier refuses when it is written counts in ``write_errors``
(``Placement._moved`` drops it from the tier). Erasure and TTLs drop it as any copy: a delete
queued behind the unlanded write (mover.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import PayloadError
from ..index import Node
from .mover import Move
from .placement import Placement, meta_of


def tiers_of(pl: Placement) -> list[int]:
    """The slow tiers below the top one that take write-through copies, nearest first."""
    return [d for d in range(1, len(pl.slots)) if pl.slots[d].write == "through" and pl.tiers[d].slow]


def copy_down(
    pl: Placement, through: list[int], nodes: Sequence[Node], payloads: Sequence[Any],
    blobs: Sequence[bytes | None], first_block: int, tenant: str,
) -> None:  # fmt: skip
    """Under the lock, after a store placed ``nodes`` (payload ``payloads[n.depth - first_block]``,
    the top tier's blob where it encodes): queue a copy of each to every tier of ``through``.

    Deepest tier first: a key's latest queued move (``Mover.pending``, which lookups serve from and
    which a demotion out of RAM looks at) is then the copy into the nearest tier, the one RAM demotes
    onto; the queue runs in order, so the latest lands last. One tier's copies are queued together
    (parents first), so the mover writes them in one batch (up to ``mover.BATCH``)."""
    top = pl.slots[0].codec
    measured: dict[tuple[int, object], int] = {}  # (tier, payload layout) -> encoded bytes
    for d in reversed(through):
        slot, tier = pl.slots[d], pl.tiers[d]
        same = top is not None and tier.codec is not None and top.same_format(tier.codec)
        queued: list[tuple[Node, int]] = []
        for node in nodes:
            if pl.copy_at(d, node.key):
                continue  # a copy is there already (a repaired block's, found in storage)
            j = node.depth - first_block
            blob = blobs[j] if same else None
            payload = None if blob is not None else payloads[j]
            size = _room(pl, d, payload, blob, tenant, measured) if tier.healthy else None
            if size is None:
                pl.c.through_dropped += 1
                continue
            if slot.owner(node.key) is not None:  # an erased blob kept there: rewritten, charged anew
                slot.drop(node.key)
            pl.mover.submit(Move(node.key, None, d, meta_of(node), payload, blob, size, 0, size, through=True))
            slot.charge(node.key, tenant, size)  # at once: the next copy's room sees it in the quota
            queued.append((node, size))
        # Deepest first, as a store admits a chain: its ancestors look more recently used, so the
        # tier's policy takes leaves first (parents outlive children there too).
        slot.admit_chain([n.key for n, _ in reversed(queued)], [z for _, z in reversed(queued)], tenant)
        pl.c.through_writes += len(queued)


def _room(
    pl: Placement, d: int, payload: Any, blob: bytes | None, tenant: str, measured: dict[tuple[int, object], int]
) -> int | None:
    """The copy's bytes, if the write buffer and tier ``d`` (its capacity, the tenant's quota there)
    take it, room made as a demotion into it would make it; else None. Never waits."""
    try:
        size = len(blob) if blob is not None else _measure(pl.tiers[d].size_of, d, payload, measured)
    except PayloadError:
        return None  # a payload the tier's codec cannot encode
    if pl.mover.buffered + size > pl.write_buffer or not pl.room(d, size, tenant):
        return None
    return size


def _measure(size_of: Any, d: int, payload: Any, measured: dict[tuple[int, object], int]) -> int:
    """``size_of(payload)``, once per tier and payload layout in a store: measuring walks every
    array (0.5 ms for a Gemma 3 270M block of 36 tensors), under the lock, and a store's blocks
    share one layout (a 36-block prompt into disk and Redis: 72 walks, now 2)."""
    sig = _layout(payload)
    if sig is None:
        return int(size_of(payload))
    got = measured.get((d, sig))
    if got is None:
        got = measured[(d, sig)] = int(size_of(payload))
    return got


def _layout(payload: Any, depth: int = 0) -> object:
    """What a payload's encoded size depends on (arrays' shapes and dtypes, names, byte lengths),
    hashable; None for anything else (then it is measured each time)."""
    if isinstance(payload, (bytes, bytearray, memoryview)):
        return ("b", len(payload))
    shape, dtype = getattr(payload, "shape", None), getattr(payload, "dtype", None)
    if shape is not None and dtype is not None:
        return (shape, dtype)  # as they are: hashable (tuple, torch.Size; dtype objects), and no str()
    if depth > 1:
        return None
    if isinstance(payload, (list, tuple)):
        parts = [_layout(x, depth + 1) for x in payload]
        return None if None in parts else (type(payload).__name__, tuple(parts))
    if isinstance(payload, dict):
        items = [(k, _layout(v, depth + 1)) for k, v in payload.items()]
        return None if any(v is None for _, v in items) else ("d", tuple(items))
    return None
