"""The store: place payloads for a prompt's full blocks into the top tier, making room below.

Blocks before ``first_block`` must already be cached (normally: pinned by a Match). Blocks that
are already cached are kept as they are; a cached block whose payload was lost (failed
verification) is repaired. Storing stops at the first block that cannot be placed (no room, or a
hash collision), since later blocks would be unreachable without it.

Everything that can fail on a payload (measuring it, encoding it for a serialized top tier) runs
before the lock is taken, so a bad payload stores nothing and the lock is never held for a copy.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import PayloadError
from ..index import Node
from ..keys import Prompt
from ..usage import Usage
from . import write_lag
from .erasure import ERASED_IN_USE
from .placement import LOST
from .tenancy import PinnedQuotaError
from .through import copy_down

if TYPE_CHECKING:
    from .core import Engine


def store(e: Engine, prompt: Prompt, payloads: Sequence[Any], first_block: int = 0) -> Usage:
    _check(e, prompt, payloads, first_block)
    keys = prompt.keys()
    blobs = _encode(e, prompt, payloads, first_block)
    sizes = _measure(e, payloads, blobs, first_block)
    return place_chain(e, prompt, keys, payloads, blobs, sizes, first_block)


def place_chain(
    e: Engine, prompt: Prompt, keys: list[bytes], payloads: Sequence[Any], blobs: list[bytes | None],
    sizes: list[int], first_block: int,
) -> Usage:  # fmt: skip
    """The store once its payloads are measured (and encoded): every configuration's path, and
    where the fast one (store_simple.py) hands over what it does not cover."""
    top, pl, tenant = e.slots[0], e.placement, prompt.namespace.tenant
    with e.lock:
        _check_pinned(e, tenant, sizes)
        watch = top.watch
        if watch is not None:  # the KV events: the chain's keys in one record, not one each
            watch.begin()
        try:
            got = _place(e, prompt, keys, payloads, blobs, sizes, first_block)
            if got is None:
                counted(e, 0)  # a store also when its parent block is gone (ctxcache_stores_total, seed 309031)
                return Usage()
            placed, walked = got
            deepest_first = placed[::-1]  # a placed block's depth is its place in the chain
            top.admit_chain(
                [n.key for n in deepest_first], [sizes[n.depth - first_block] for n in deepest_first], tenant
            )
            _refresh(e, keys[:walked], tenant)
            if e.through and placed:  # before drain: a block it demotes finds its copy queued
                copy_down(pl, e.through, placed, payloads, blobs, first_block, tenant)
            counted(e, len(placed))
        finally:
            if watch is not None:
                watch.end()  # the chain's records before the drain's, as the fast path's
        pl.drain()
        backlog = top.slow and pl.mover.buffered > pl.write_buffer
    if backlog:  # a slow top tier has no faster tier to absorb writes: wait, outside the lock
        pl.mover.wait_buffer(pl.write_buffer)
    if e.through and placed and e.write_lag:
        write_lag.wait(e)  # what a SIGKILL can lose: at most write_lag seconds of stores
    created = len(placed) * e.block_size
    return Usage(cache_creation_tokens=created, by_tier={top.name: created} if created else {})


def counted(e: Engine, placed: int) -> None:
    """The one place a store is counted, on either path: one store, ``placed`` blocks new or repaired."""
    c = e.counters
    c.stores += 1
    c.stored_blocks += placed


def _check_pinned(e: Engine, tenant: str, sizes: list[int]) -> None:
    """Class-0 (pinned) blocks may hold at most ``max_pinned`` bytes of the top tier."""
    ty = e.tenancy
    if ty is None or ty.max_pinned is None or ty.priority(tenant) != 0:
        return
    top = e.slots[0]
    pinned = sum(n for tn, n in top.by_tenant.items() if ty.priority(tn) == 0)
    if pinned + sum(sizes) > ty.max_pinned:
        raise PinnedQuotaError(  # the tenant's own bytes only: the total would count other tenants'
            f"tenant {tenant!r} is class 0 (pinned): storing {sum(sizes)} B more (it holds "
            f"{top.tenant_used(tenant)} B) would pass the cap on pinned bytes in tier {top.name!r}"
        )


def _refresh(e: Engine, keys: list[bytes], tenant: str) -> None:
    """A stored chain's blocks (new and already cached) live for the tenant's TTL from now."""
    ttl = e.tenancy.ttl(tenant) if e.tenancy is not None else None
    if ttl is not None:
        get = e.index.get
        e.expiry.refresh([n for n in map(get, keys) if n is not None], e.clock() + ttl)


def _check(e: Engine, prompt: Prompt, payloads: Sequence[Any], first_block: int) -> None:
    n = prompt.n_blocks
    if not isinstance(first_block, int) or not 0 <= first_block <= n:
        raise ValueError(f"first_block must be an int in [0, {n}] for {len(prompt)} tokens, got {first_block!r}")
    if isinstance(payloads, (str, bytes)) or not isinstance(payloads, Sequence):
        raise PayloadError(f"payloads must be a sequence (one per block), not {type(payloads).__name__}")
    if len(payloads) != n - first_block:
        raise PayloadError(
            f"got {len(payloads)} payloads for blocks {first_block}..{n - 1} of {len(prompt)} tokens "
            f"({n - first_block} full blocks of {e.block_size}); the trailing partial block is not stored"
        )


def _encode(e: Engine, prompt: Prompt, payloads: Sequence[Any], first_block: int) -> list[bytes | None]:
    """Blobs for a serialized top tier (a payload the codec refuses raises PayloadError here)."""
    codec = e.slots[0].codec
    blobs: list[bytes | None] = [None] * len(payloads)
    if codec is not None:
        keys, root, tenant = prompt.keys(), prompt.namespace.root, prompt.namespace.tenant.encode()
        for i in range(first_block, prompt.n_blocks):
            parent_key = keys[i - 1] if i else root
            blobs[i - first_block] = codec.encode(
                payloads[i - first_block], keys[i], prompt.block(i), parent_key, i, tenant
            )
    return blobs


def _measure(e: Engine, payloads: Sequence[Any], blobs: list[bytes | None], first_block: int) -> list[int]:
    """Measure all first: a bad payload, or one larger than the top tier, stores nothing."""
    top = e.slots[0]
    sizes = [len(b) if b is not None else top.tier.size_of(p) for b, p in zip(blobs, payloads)]
    fits(top.capacity, top.name, sizes, first_block)
    return sizes


def fits(capacity: int, name: str, sizes: list[int], first_block: int) -> None:
    """A block larger than the whole top tier is a bad payload, refused before anything is stored."""
    for i, s in enumerate(sizes):
        if s > capacity:
            raise PayloadError(
                f"block {first_block + i} is {s} B, larger than tier '{name}' capacity "
                f"{capacity} B: the capacity is smaller than one block"
            )


def _place(
    e: Engine, prompt: Prompt, keys: list[bytes], payloads: Sequence[Any], blobs: list[bytes | None],
    sizes: list[int], first_block: int,
) -> tuple[list[Node], int] | None:  # fmt: skip
    """Under the lock: insert and place each block, making room as it goes (within the tenant's
    quota of the top tier). Returns (placed, blocks of the chain now cached), or None: the parent
    block is not cached (nothing stored, the blocks counted as rejected)."""
    n, c, index, ns = prompt.n_blocks, e.counters, e.index, prompt.namespace
    parent: Hashable = ns.root
    if first_block > 0:
        pnode = index.get(keys[first_block - 1])
        if pnode is None or pnode.tokens != prompt.block(first_block - 1):
            c.rejected += n - first_block
            return None
        parent = pnode.key
    placed: list[Node] = []
    walked = first_block
    tail: Node | None = None  # pinned while its child is placed, so room-making can't evict it
    try:
        for i in range(first_block, n):
            tokens = prompt.block(i)
            node = index.get(keys[i])
            if node is not None and node.tokens != tokens:
                c.collisions += 1
                break
            if node is not None and e.expiry.deadline.get(node.key) == ERASED_IN_USE:
                # Erased while a request held it (it goes once released): kept "as cached" and
                # refreshed, the erased payload was served again. Nothing is stored from here.
                c.rejected += n - i
                break
            if node is None or node.tier == LOST:
                size = sizes[i - first_block]
                if not e.placement.room(0, size, ns.tenant):
                    c.rejected += n - i
                    break
                if node is not None and index.get(keys[i]) is not node:
                    node = None  # a lost block the room-making pruned (its child evicted): insert it anew
                if node is None:
                    # (an erased blob of the key a tier keeps stays marked there: ``Placement.erased``)
                    node = index.insert(keys[i], parent, tokens, i, tag=ns.tenant)
                else:
                    c.repaired += 1
                e.placement.place(0, node, payloads[i - first_block], size, blobs[i - first_block])
                e.slots[0].charge(node.key, ns.tenant, size)
                placed.append(node)
            if tail is not None:
                index.unpin([tail])
            index.pin([node])
            tail = node
            parent = node.key
            walked = i + 1
    finally:
        if tail is not None:
            index.unpin([tail])
    return placed, walked
