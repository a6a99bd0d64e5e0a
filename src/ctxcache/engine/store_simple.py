"""The store's fast path: one hot memory tier (``Engine.fast_store``), the counterpart of the
lookup's ``finish_simple``.

It covers the usual store: every block either cached already (valid) or new, the new ones
fitting in the tier's free bytes, the tenant without a quota there. The general path
(store.py) would then make no room, repair, reject or count a collision nowhere, and its pinned
tail would guard nothing, so what is left of it is: insert, put, charge each new block, admit
them deepest first, count (``store.counted``, both paths' one place), refresh TTLs, drain; the
pinned cap and the drain are the same calls, and the KV events get the chain in one call
(``Watcher.chain``: its parents and sizes are known here) where the general path opens a run.
Decided under the lock before anything changes, and handed to ``store.place_chain`` as it is otherwise: a quota in the
tier, room to make, a cached block lost, colliding or erased while in use, a parent block
absent or different (first_block > 0), a key twice in the chain. Engines with more tiers, a
warm tier, a tier subclass or a policy that watches the index never come here.
tests/engine/test_store_fast.py runs both paths side by side.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..keys import Prompt
from ..usage import Usage
from .erasure import ERASED_IN_USE
from .store import _check, _check_pinned, _refresh, counted, fits, place_chain

if TYPE_CHECKING:
    from ..tiers.memory import MemoryTier
    from .core import Engine


def store(e: Engine, prompt: Prompt, payloads: Sequence[Any], first_block: int = 0) -> Usage:
    n = prompt.n_blocks
    if (
        payloads.__class__ is not list or first_block.__class__ is not int or not 0 <= first_block <= n
        or len(payloads) != n - first_block
    ):  # fmt: skip
        _check(e, prompt, payloads, first_block)  # raises what the general path raises, or passes
    keys = prompt.keys()
    top = e.slots[0]
    tier: MemoryTier = top.tier  # type: ignore[assignment]  # Engine.fast_store: exactly a MemoryTier
    # bytes: what size_of would say (valid, its length) without the call
    sizes = [len(p) if p.__class__ is bytes else tier.size_of(p) for p in payloads]
    for size in sizes:
        if size > top.capacity:
            fits(top.capacity, top.name, sizes, first_block)  # raises as the general path's _measure
    ns = prompt.namespace
    tenant = ns.tenant
    with e.lock:
        if e.tenancy is not None:
            _check_pinned(e, tenant, sizes)
        if n == 1 and not first_block and not top.quotas and e.index.get(keys[0]) is None:
            # one new block, the usual store: _new_from's answer without its call
            new = 0 if sizes[0] <= top.capacity - (tier.used_bytes + top.inflow - top.outflow) else -1
        else:
            new = _new_from(e, prompt, keys, first_block, sizes, tenant)
        if new < 0:
            return place_chain(e, prompt, keys, payloads, [None] * len(payloads), sizes, first_block)
        buf, stride = prompt.buf, e.hasher._stride
        if n - new == 1:  # one new block (the loops below, unrolled: ~0.2 µs)
            key, size = keys[new], sizes[new - first_block]
            e.index.insert(key, keys[new - 1] if new else ns.root, buf[new * stride : n * stride], new, tenant)
            tier.put_measured(key, payloads[new - first_block], size)
            top.charge(key, tenant, size, False)
            top.admit(key, size, tenant)
        elif n > new:
            _insert_chain(e, prompt, keys, payloads, sizes, first_block, new)
        watch = top.watch
        if watch is not None and n > new:
            # The KV events' record of the chain, told whole: as the general path's run
            # (begin/charge/end) records it, without reading each block's parent and size back.
            watch.chain(0, keys[new:], [keys[new - 1] if new else None, *keys[new : n - 1]], sizes[new - first_block :])
        if e.tenancy is not None:
            _refresh(e, keys, tenant)
        counted(e, n - new)
        if tier.used_bytes + top.inflow - top.outflow > top.high * top.capacity:  # Slot.over_high
            e.placement.drain()
    created = (n - new) * e.block_size
    return Usage(0, created, 0, {top.name: created} if created else {})  # positional: as finish_simple


def _insert_chain(
    e: Engine, prompt: Prompt, keys: list[bytes], payloads: Sequence[Any], sizes: list[int], first_block: int, new: int
) -> None:
    """Blocks ``new``.. indexed, put and charged in chain order, then admitted deepest first (as
    ``store._place`` and ``admit_chain``: the quota sees the chain at once, ancestors stay newer)."""
    top, tenant, n = e.slots[0], prompt.namespace.tenant, prompt.n_blocks
    tier: MemoryTier = top.tier  # type: ignore[assignment]
    insert, buf, stride = e.index.insert, prompt.buf, e.hasher._stride
    parent = keys[new - 1] if new else prompt.namespace.root
    for i in range(new, n):
        key, j = keys[i], i - first_block
        insert(key, parent, buf[i * stride : (i + 1) * stride], i, tenant)
        tier.put_measured(key, payloads[j], sizes[j])
        top.charge(key, tenant, sizes[j], False)  # the watch is told the chain at once (store)
        parent = key
    for i in range(n - 1, new - 1, -1):
        top.admit(keys[i], sizes[i - first_block], tenant)


def _new_from(e: Engine, prompt: Prompt, keys: list[bytes], first_block: int, sizes: list[int], tenant: str) -> int:
    """Under the lock, changing nothing: the first block to store when the fast path covers this
    store (those before it cached and valid, it and those after it absent from the index, and
    room for all of them without evicting), else -1: the general path stores it."""
    top, get, n = e.slots[0], e.index.get, prompt.n_blocks
    if top.quotas.get(tenant) is not None:
        return -1  # a tenant at its quota makes room among its own blocks first (Placement.room)
    buf, stride = prompt.buf, e.hasher._stride
    erased = e.expiry.deadline  # ERASED_IN_USE, only where a deadline is set at all
    new = first_block
    if first_block:  # the parent must be cached (normally pinned by the caller's Match)
        node = get(keys[first_block - 1])
        if node is None or node.tokens != buf[(first_block - 1) * stride : first_block * stride]:
            return -1  # rejected, and counted so, by the general path
    while new < n:
        node = get(keys[new])
        if node is None:
            break
        if node.tier != 0 or node.tokens != buf[new * stride : (new + 1) * stride]:
            return -1  # lost (to repair) or a hash collision
        if erased and erased.get(node.key) == ERASED_IN_USE:
            return -1
        new += 1
    for i in range(new + 1, n):
        if get(keys[i]) is not None:  # under an absent block: only a colliding key
            return -1
    if n - new > 1 and len(set(keys[new:])) < n - new:  # one key twice in the chain: a collision too
        return -1
    free = top.capacity - (top.tier.used_bytes + top.inflow - top.outflow)  # Slot.free, inlined
    if new < n and sum(sizes[new - first_block :]) > free:  # room to make: the general path
        return -1
    return new
