"""The lookup: find, load and pin the longest cached prefix of a prompt, from any tier.

Up to three phases. Under the lock: walk the index (hashing lazily, verifying token bytes), then
``plan``: serve what RAM tiers and the mover's queue hold, list what slow tiers must read. If
nothing is slow and nothing may be missing from the index, ``finish`` there. Otherwise pin what
matched, release the lock, ``read`` from slow tiers and ``discover`` blocks persistent tiers hold
that the index lacks; then under the lock again ``resolve`` (losses, discovered blocks,
promotions, unpin) and ``finish``. A block its slow tier could not reach (``load_many``'s
``unavailable``) is a miss but no loss: it stays indexed and charged, and is read again next
time. One RAM tier of live objects takes ``finish_simple``, the hot path: one batch call per step.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from itertools import repeat
from operator import is_
from typing import TYPE_CHECKING, Any

from ..codec import Block
from ..index import Node
from ..keys import Namespace, Prompt
from ..usage import Usage
from . import discovery as _discovery
from .placement import LOST

if TYPE_CHECKING:
    from .bandwidth import TokenBucket
    from .core import Engine


def first_missing(payloads: list[Any]) -> int:
    """Index of the first None (an unreadable block), else the length.

    By identity: ``None in payloads`` compares with ``==``, which a numpy array answers elementwise.
    The usual answer (none missing) is one C loop, without a generator's frame per item.
    """
    if not any(map(is_, payloads, repeat(None))):
        return len(payloads)
    return next(i for i, p in enumerate(payloads) if p is None)


@dataclass
class Match:
    """The longest cached prefix of a request. Pins its blocks until released."""

    hit_tokens: int
    n_blocks: int
    payloads: list[Any]
    usage: Usage
    namespace: Namespace
    _nodes: list[Node] = field(default_factory=list, repr=False)
    released: bool = False
    _pinned: list[Node] = field(default_factory=list, repr=False)  # what release unpins

    def __enter__(self) -> Match:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.released:
            self._cache.release(self)

    _cache: Any = field(default=None, repr=False)

    @property
    def keys(self) -> list[Hashable]:
        """Keys of the matched blocks, in order (what the lookup computed)."""
        return [n.key for n in self._nodes]


def lookup(e: Engine, prompt: Prompt) -> Match:
    n_full = prompt.n_blocks
    with e.lock:
        nodes = e.hasher.walk(prompt, shards=e.index.shards)
        if e.expiry.deadline:  # len(e.expiry), without a Python __len__ call on every lookup
            e.expiry.cut(nodes, e.clock())  # an expired block is a miss
        if e.simple:
            return finish_simple(e, nodes, prompt._keys, n_full, len(prompt.tokens), prompt.namespace)
        payloads, src, reads = plan(e, nodes)
        if not reads and not (e.placement.persistent and len(nodes) < n_full):
            return finish(e, nodes, payloads, src, prompt, resolved=False)
        e.index.pin(nodes)  # held while the lock is released for I/O
        epoch = e.placement.erased_epoch  # an erased blob's delete landing meanwhile voids discovery
    limit = throttle(e, nodes, reads, prompt.namespace.tenant)
    missed: list[tuple[int, Hashable]] = []  # (tier, key) of each slow read that came back empty
    unavailable = read(e, nodes, payloads, reads, limit, missed)
    cut = first_missing(payloads)
    discover = e.placement.persistent and cut < n_full and limit >= len(nodes)
    bucket = e.buckets.get(prompt.namespace.tenant) if discover else None
    if bucket is not None:
        discover = throttle_discovery(e, bucket)
    found = _discovery.discover(e.placement, prompt, cut, missed) if discover else []
    if bucket is not None and found:
        bucket.charge(sum(block.nbytes for _, block in found))
    with e.lock:
        for t, key in missed:
            _discovery.vanished(e.placement, t, key)
        resolve(e, nodes, payloads, src, found, prompt.namespace, limit, unavailable, epoch)
        return finish(e, nodes, payloads, src, prompt, resolved=True)


def throttle(e: Engine, nodes: list[Node], reads: dict[int, list[int]], tenant: str) -> int:
    """Lock released: draw the bytes of slow-tier loads from the tenant's bucket. When it is
    empty, wait (up to ``max_wait``) or give the loads up for recompute, as configured. Returns
    the number of leading blocks that may be loaded."""
    bucket = e.buckets.get(tenant)
    if bucket is None or not reads or e.tenancy is None:
        return len(nodes)
    first = min(i for idxs in reads.values() for i in idxs)
    nbytes = sum(e.slots[t].tier.nbytes(nodes[i].key) for t, idxs in reads.items() for i in idxs)
    if bucket.try_take(nbytes):
        return len(nodes)
    wait = bucket.wait_for(nbytes)
    c = e.counters
    if e.tenancy.on_throttle == "wait" and wait <= e.tenancy.max_wait:
        e.sleep(wait)
        with e.lock:
            c.throttled_waits += 1
        if bucket.try_take(nbytes) or bucket.wait_for(nbytes) == 0:
            return len(nodes)
    with e.lock:
        c.throttled_recomputes += 1
    return first


def throttle_discovery(e: Engine, bucket: TokenBucket) -> bool:
    """Lock released: may discovery read now? Only while the tenant's bucket is not empty (its
    reads are charged after, by size); else wait or recompute as for any throttled load."""
    wait = bucket.wait_for(1)
    if wait == 0:
        return True
    assert e.tenancy is not None  # buckets exist only with tenancy
    c = e.counters
    if e.tenancy.on_throttle == "wait" and wait <= e.tenancy.max_wait:
        e.sleep(wait)
        with e.lock:
            c.throttled_waits += 1
        return True
    with e.lock:
        c.throttled_recomputes += 1
    return False


def _count(e: Engine, nodes: list[Node], n_full: int, n_tokens: int, tenant: str) -> int:
    n = len(nodes)
    hit = n * e.block_size
    c = e.counters
    c.lookups += 1
    c.hits += n
    c.misses += n_full - n
    c.hit_tokens += hit
    c.lookup_tokens += n_tokens
    if e.tenancy is not None:
        ts = e.tenant_stats.setdefault(tenant, {"lookups": 0, "hit_tokens": 0, "lookup_tokens": 0})
        ts["lookups"] += 1
        ts["hit_tokens"] += hit
        ts["lookup_tokens"] += n_tokens
        ttl = e.tenancy.ttl(tenant)
        if ttl is not None and nodes:
            e.expiry.refresh(nodes, e.clock() + ttl)  # refreshed on hit
    return hit


def finish_simple(e: Engine, nodes: list[Node], keys: list[bytes], n_full: int, n_tokens: int, ns: Namespace) -> Match:
    """Under the lock, one RAM tier: the lookup hot path, one batch call per step. ``keys``: the
    prompt's, hashed by the walk (its nodes are their prefix)."""
    slot = e.slots[0]
    keys = keys[: len(nodes)]
    payloads = slot.tier.get_many(keys)
    cut = first_missing(payloads)
    if cut < len(payloads):  # unreadable: the prefix ends there
        del nodes[cut:], keys[cut:], payloads[cut:]
    n = len(nodes)
    if n:
        slot.touch(keys[::-1])  # deepest first: ancestors stay more recent
        # One tier: pins only keep blocks in the index, and the deepest pin keeps its whole
        # chain there (ancestors are not leaves).
        e.index.pin(nodes[-1:])
    hit = _count(e, nodes, n_full, n_tokens, ns.tenant)
    # Positional: keywords cost ~330 ns of a ~5 µs one-block lookup. Usage(cache_read, creation,
    # uncached, by_tier); Match(..., _nodes, released, _pinned, _cache).
    usage = Usage(hit, 0, n_tokens - hit, {slot.name: hit} if n else {})
    return Match(hit, n, payloads, usage, ns, nodes, False, nodes[-1:], e)


def plan(e: Engine, nodes: list[Node]) -> tuple[list[Any], list[int], dict[int, list[int]]]:
    """Under the lock: serve what RAM holds, list what slow tiers must read; cut at a loss."""
    payloads: list[Any] = [None] * len(nodes)
    src = [0] * len(nodes)
    reads: dict[int, list[int]] = {}
    pending = e.placement.mover.pending
    for i, node in enumerate(nodes):
        t = node.tier
        m = pending.get(node.key)
        if t == LOST:
            del nodes[i:], payloads[i:], src[i:]
            break
        src[i] = t
        tier = e.slots[t].tier
        if m is not None and m.dst != t and tier.slow:  # a copy into another tier queued after its write
            m = e.placement.mover.write_into(node.key, t)  # here: read, the tier gave the old blob (seed 200210)
        if m is not None and m.dst == t and m.payload is not None:
            payloads[i] = m.payload  # queued for a slow tier: still readable from the queue
        elif m is not None and m.dst == t and m.blob is not None and tier.codec is not None:
            payloads[i] = tier.codec.decode(m.blob).payload
        elif m is not None and m.dst == t and m.src is not None:
            reads.setdefault(m.src, []).append(i)  # in flight between slow tiers: read the source
        elif tier.slow:
            reads.setdefault(t, []).append(i)
        else:
            block = tier.load_many([node.key], [node.tokens])[0]
            if block is None:
                e.placement.lose(node, t)
                del nodes[i:], payloads[i:], src[i:]
                break
            payloads[i] = block.payload
    return payloads, src, reads


def read(
    e: Engine, nodes: list[Node], payloads: list[Any], reads: dict[int, list[int]], limit: int,
    missed: list[tuple[int, Hashable]],
) -> set[int]:  # fmt: skip
    """Lock released: load from slow tiers. A failed block stays None in ``payloads``, its (tier,
    key) added to ``missed`` when the tier was reached. Returns the positions of those whose tier
    could not be reached (unavailable: kept, not lost)."""
    unavailable: set[int] = set()
    for t, idxs in reads.items():
        idxs = [i for i in idxs if i < limit]
        if not idxs:
            continue
        down: set[int] = set()
        blocks = e.slots[t].tier.load_many([nodes[i].key for i in idxs], [nodes[i].tokens for i in idxs], down)
        unavailable.update(idxs[j] for j in down)
        for j, (i, block) in enumerate(zip(idxs, blocks)):
            if block is not None:
                payloads[i] = block.payload
            elif j not in down:
                missed.append((t, nodes[i].key))
    return unavailable


def resolve(
    e: Engine, nodes: list[Node], payloads: list[Any], src: list[int], found: list[tuple[int, Block]], ns: Namespace,
    limit: int, unavailable: set[int], epoch: int | None = None,
) -> None:  # fmt: skip
    """Under the lock again: record losses, index discovered blocks, promote, unpin. Blocks from
    ``limit`` on were not loaded (throttled), and ``unavailable`` ones could not be reached (their
    tier still holds and charges them): misses, not losses. ``epoch``: ``Placement.erased_epoch``
    when the lock was released (``discovery.attach``)."""
    pl = e.placement
    pinned = list(nodes)
    cut = min(first_missing(payloads), limit)
    for i in range(cut, limit):
        if payloads[i] is None and i in unavailable:
            e.counters.unavailable_misses += 1
        elif payloads[i] is None:
            pl.lose(nodes[i], src[i])
    del nodes[cut:], payloads[cut:], src[cut:]
    now = e.clock()
    expired = (lambda key: e.expiry.expired(key, now)) if len(e.expiry) else (lambda key: False)
    parent = nodes[-1].key if nodes else ns.root
    for node, payload, t in _discovery.attach(pl, found, parent, len(nodes), ns.tenant, expired, epoch):
        pinned.append(node)
        nodes.append(node)
        payloads.append(payload)
        src.append(t)
    hits(e, nodes, src, check=True)
    for i in range(len(nodes) - 1, -1, -1):  # deepest first, as for hits
        if src[i] > 0:
            pl.promote_hit(nodes[i], payloads[i], src[i])
    e.index.unpin(pinned)
    for node in pinned:
        if node.tier == LOST:
            pl.prune(node.key)


def hits(e: Engine, nodes: list[Node], src: list[int], check: bool = False) -> None:
    for t, slot in enumerate(e.slots):
        # ``check``: after I/O a block may have been served by a tier whose policy has since
        # dropped it (a concurrent eviction of a copy); policies only take hits for members.
        mine = [n.key for n, s in zip(nodes, src) if s == t and (not check or slot.holds(n.key))]
        if mine:
            slot.touch(mine[::-1])  # deepest first: ancestors end up more recently used


def finish(e: Engine, nodes: list[Node], payloads: list[Any], src: list[int], prompt: Prompt, resolved: bool) -> Match:
    cut = first_missing(payloads)
    if cut < len(payloads):  # unreadable (only possible in the single-tier path): the prefix ends
        del nodes[cut:]
        del payloads[len(nodes) :], src[len(nodes) :]
    if not resolved:
        hits(e, nodes, src)
    # Every block: above the last tier a pin also keeps a block from being demoted, and the
    # ancestors of a held prefix are as needed in their tier as its deepest block.
    pinned = nodes if len(e.slots) > 1 else nodes[-1:]
    e.index.pin(pinned)
    if not resolved and len(e.slots) > 1:  # RAM tiers only: hits below the top move up as after I/O
        for i in range(len(nodes) - 1, -1, -1):
            if src[i] > 0:
                e.placement.promote_hit(nodes[i], payloads[i], src[i])
    by_tier: dict[str, int] = {}
    for s in src:
        name = e.slots[s].name
        by_tier[name] = by_tier.get(name, 0) + e.block_size
    hit = _count(e, nodes, prompt.n_blocks, len(prompt), prompt.namespace.tenant)
    usage = Usage(cache_read_tokens=hit, uncached_tokens=len(prompt) - hit, by_tier=by_tier)
    return Match(hit, len(nodes), payloads, usage, prompt.namespace, nodes, _cache=e, _pinned=list(pinned))
