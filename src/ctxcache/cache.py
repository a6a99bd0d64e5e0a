"""ContextCache, the public API: match -> load -> store -> evict/demote across tiers.

Locking: one re-entrant lock guards the index, every RAM tier, every policy and the mover's
queue. Token validation and block slicing happen before taking it; key hashing happens under it,
lazily, so a cold lookup hashes only the blocks it walks. No disk or network I/O runs under it:
a lookup that needs a slow tier pins what it matched, releases the lock to read (and to probe
persistent tiers for blocks the index does not know), then takes it again to record the result;
writes to slow tiers go through the mover thread (tiers/mover.py). Payloads are handed out as
stored objects or zero-copy views (no copy), and a Match pins its blocks until ``release``.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .codec import Block
from .config import CacheConfig, load_config
from .errors import ConfigError, MatchReleasedError, PayloadError
from .index import Node, RadixIndex
from .keys import BlockHasher, Namespace, Tokens, as_token_array
from .tiers import Tier, make_tier
from .tiers.hierarchy import LOST, Hierarchy
from .usage import Usage


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

    def __enter__(self) -> Match:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.released:
            self._cache.release(self)

    _cache: Any = field(default=None, repr=False)


class ContextCache:
    def __init__(
        self,
        tiers: Sequence[Tier],
        *,
        block_size: int = 256,
        hash: str = "xxh3",
        model: str = "default",
        salt: str | bytes = b"",
        clock: Any = time.monotonic,
        promote: bool = True,
        write_buffer: int = 256 << 20,
    ) -> None:
        if not tiers:
            raise ConfigError("a ContextCache needs at least one tier")
        kinds = [t.slow for t in tiers]
        if kinds != sorted(kinds):
            raise ConfigError("tiers go fastest first: every memory tier before any disk or redis tier")
        self.hasher = BlockHasher(block_size, hash)
        self.block_size = block_size
        self.model = model
        self.salt = salt.encode() if isinstance(salt, str) else bytes(salt)
        self.tiers = list(tiers)
        self.clock = clock
        self.index = RadixIndex()
        self._lock = threading.RLock()
        self._namespaces: dict[str, Namespace] = {}
        self._c = dict.fromkeys(
            ("lookups", "stores", "hits", "misses", "hit_tokens", "lookup_tokens", "stored_blocks", "evictions",
             "demotions", "demotions_skipped", "promotions", "discovered", "lost", "repaired", "write_errors",
             "collisions", "rejected"), 0
        )  # fmt: skip
        self._h = Hierarchy(self.tiers, self.index, self._lock, self._c, promote=promote, write_buffer=write_buffer)
        # One RAM tier of live objects: lookups need no verification beyond the index's.
        self._simple = len(self.tiers) == 1 and self._h.all_memory and self.tiers[0].codec is None
        self._closed = False
        for tier in self.tiers:
            tier.policy.attach(self.index)
            tier.token_bytes = 4 * block_size
            if tier.persistent:  # blocks left by an earlier run: evictable orphans, oldest first
                for key in list(tier.keys()):
                    tier.policy.on_insert(key)

    # --- construction -----------------------------------------------------------------------------
    @classmethod
    def from_config(
        cls, source: Mapping[str, Any] | str | os.PathLike[str] | CacheConfig, *, clock: Any = time.monotonic
    ) -> ContextCache:
        cfg = source if isinstance(source, CacheConfig) else load_config(source)
        tiers: list[Tier] = []
        try:
            for i, tc in enumerate(cfg.tiers):
                tiers.append(make_tier(i, tc, cfg.block_size, clock))
            return cls(
                tiers, block_size=cfg.block_size, hash=cfg.hash, model=cfg.model, salt=cfg.salt, clock=clock,
                promote=cfg.promote, write_buffer=cfg.write_buffer,
            )  # fmt: skip
        except BaseException:
            for tier in tiers:  # release what was opened (disk locks, redis connections)
                tier.close()
            raise

    def namespace(self, namespace: str | Namespace = "default") -> Namespace:
        if isinstance(namespace, Namespace):
            return namespace
        if not isinstance(namespace, str):
            raise TypeError(f"namespace must be a str or Namespace, not {type(namespace).__name__}")
        ns = self._namespaces.get(namespace)
        if ns is None:
            ns = Namespace(tenant=namespace, model=self.model, salt=self.salt)
            self._namespaces[namespace] = ns
        return ns

    # --- the request path -------------------------------------------------------------------------
    def lookup(self, tokens: Tokens, namespace: str | Namespace = "default") -> Match:
        """Find and pin the longest cached prefix of ``tokens``, from any tier. Call ``release``."""
        arr = as_token_array(tokens)
        ns = self.namespace(namespace)
        n_full = self.hasher.n_blocks(len(arr))
        with self._lock:
            nodes = self.hasher.walk(arr, ns, self.index.getter)
            if self._simple:
                return self._finish_simple(nodes, ns, len(arr), n_full)
            payloads, src, reads = self._plan(nodes)
            if not reads and not (self._h.persistent and len(nodes) < n_full):
                return self._finish(nodes, payloads, src, ns, len(arr), n_full, resolved=False)
            self.index.pin(nodes)  # held while the lock is released for I/O
        self._read(nodes, payloads, reads)
        cut = payloads.index(None) if None in payloads else len(nodes)
        found = self._h.discover(self.hasher, arr, ns, cut) if self._h.persistent and cut < n_full else []
        with self._lock:
            self._resolve(nodes, payloads, src, found, ns)
            return self._finish(nodes, payloads, src, ns, len(arr), n_full, resolved=True)

    def _finish_simple(self, nodes: list[Node], ns: Namespace, n_tokens: int, n_full: int) -> Match:
        """Under the lock, one RAM tier: the lookup hot path, one batch call per step."""
        tier = self.tiers[0]
        keys = [n.key for n in nodes]
        payloads = tier.get_many(keys)
        if None in payloads:  # unreadable: the prefix ends there
            cut = payloads.index(None)
            del nodes[cut:], keys[cut:], payloads[cut:]
        n = len(nodes)
        if n:
            tier.policy.on_hits(reversed(keys))  # deepest first: ancestors stay more recent
            tier.hits += n
            self.index.pin(nodes[-1:])  # the deepest pin protects the whole chain (see _finish)
        hit = n * self.block_size
        c = self._c
        c["lookups"] += 1
        c["hits"] += n
        c["misses"] += n_full - n
        c["hit_tokens"] += hit
        c["lookup_tokens"] += n_tokens
        usage = Usage(cache_read_tokens=hit, uncached_tokens=n_tokens - hit, by_tier={tier.name: hit} if n else {})
        return Match(hit, n, payloads, usage, ns, nodes, _cache=self)

    def _plan(self, nodes: list[Node]) -> tuple[list[Any], list[int], dict[int, list[int]]]:
        """Under the lock: serve what RAM holds, list what slow tiers must read; cut at a loss."""
        payloads: list[Any] = [None] * len(nodes)
        src = [0] * len(nodes)
        reads: dict[int, list[int]] = {}
        pending = self._h.mover.pending
        for i, node in enumerate(nodes):
            t = node.tier
            m = pending.get(node.key)
            if t == LOST:
                del nodes[i:], payloads[i:], src[i:]
                break
            src[i] = t
            tier = self.tiers[t]
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
                    self._h.lose(node, t)
                    del nodes[i:], payloads[i:], src[i:]
                    break
                payloads[i] = block.payload
        return payloads, src, reads

    def _read(self, nodes: list[Node], payloads: list[Any], reads: dict[int, list[int]]) -> None:
        """Lock released: load from slow tiers. A failed block stays None in ``payloads``."""
        for t, idxs in reads.items():
            blocks = self.tiers[t].load_many([nodes[i].key for i in idxs], [nodes[i].tokens for i in idxs])
            for i, block in zip(idxs, blocks):
                if block is not None:
                    payloads[i] = block.payload

    def _resolve(
        self, nodes: list[Node], payloads: list[Any], src: list[int], found: list[tuple[int, Block]], ns: Namespace
    ) -> None:
        """Under the lock again: record losses, index discovered blocks, promote, unpin."""
        pinned = list(nodes)
        cut = payloads.index(None) if None in payloads else len(nodes)
        for i in range(cut, len(nodes)):
            if payloads[i] is None:
                self._h.lose(nodes[i], src[i])
        del nodes[cut:], payloads[cut:], src[cut:]
        for node, payload, t in self._h.attach(found, nodes[-1].key if nodes else ns.root, len(nodes), ns.tenant):
            pinned.append(node)
            nodes.append(node)
            payloads.append(payload)
            src.append(t)
        self._hits(nodes, src, check=True)
        for i in range(len(nodes) - 1, -1, -1):  # deepest first, as for hits
            if src[i] > 0:
                self._h.promote_hit(nodes[i], payloads[i], src[i])
        self.index.unpin(pinned)
        for node in pinned:
            if node.tier == LOST:
                self._h.prune(node.key)

    def _hits(self, nodes: list[Node], src: list[int], check: bool = False) -> None:
        for t, tier in enumerate(self.tiers):
            # ``check``: after I/O a block may have been served by a tier whose policy has since
            # dropped it (a concurrent eviction of a copy); policies only take hits for members.
            mine = [n.key for n, s in zip(nodes, src) if s == t and (not check or n.key in tier.policy)]
            if mine:
                # Deepest first, so ancestors end up more recently used than their descendants.
                tier.policy.on_hits(reversed(mine))
                tier.hits += len(mine)

    def _finish(
        self, nodes: list[Node], payloads: list[Any], src: list[int], ns: Namespace, n_tokens: int, n_full: int,
        resolved: bool,
    ) -> Match:  # fmt: skip
        if None in payloads:  # unreadable (only possible in the single-tier path): the prefix ends
            del nodes[payloads.index(None) :]
            del payloads[len(nodes) :], src[len(nodes) :]
        if not resolved:
            self._hits(nodes, src)
        if nodes:
            # Pinning the deepest block is enough: its ancestors are not leaves, so none of
            # the chain can leave the index until release.
            self.index.pin(nodes[-1:])
        by_tier: dict[str, int] = {}
        for s in src:
            name = self.tiers[s].name
            by_tier[name] = by_tier.get(name, 0) + self.block_size
        hit = len(nodes) * self.block_size
        c = self._c
        c["lookups"] += 1
        c["hits"] += len(nodes)
        c["misses"] += n_full - len(nodes)
        c["hit_tokens"] += hit
        c["lookup_tokens"] += n_tokens
        usage = Usage(cache_read_tokens=hit, uncached_tokens=n_tokens - hit, by_tier=by_tier)
        return Match(hit, len(nodes), payloads, usage, ns, nodes, _cache=self)

    def release(self, match: Match) -> None:
        """Unpin a Match's blocks. Releasing twice is an error."""
        if match.released:
            raise MatchReleasedError("this Match was already released")
        with self._lock:
            self.index.unpin(match._nodes[-1:])
            match.released = True
            if match._nodes and match._nodes[-1].tier == LOST:
                self._h.prune(match._nodes[-1].key)

    def store(
        self,
        tokens: Tokens,
        payloads: Sequence[Any],
        namespace: str | Namespace = "default",
        first_block: int = 0,
    ) -> Usage:
        """Store payloads for full blocks ``first_block``.. of ``tokens``.

        Blocks before ``first_block`` must already be cached (normally: pinned by a Match).
        Blocks that are already cached are kept as they are; a cached block whose payload was
        lost (failed verification) is repaired. Storing stops at the first block that cannot be
        placed (no room, or a hash collision), since later blocks would be unreachable without it.
        """
        arr = as_token_array(tokens)
        ns = self.namespace(namespace)
        n = self.hasher.n_blocks(len(arr))
        if not isinstance(first_block, int) or not 0 <= first_block <= n:
            raise ValueError(f"first_block must be an int in [0, {n}] for {len(arr)} tokens, got {first_block!r}")
        if isinstance(payloads, (str, bytes)) or not isinstance(payloads, Sequence):
            raise PayloadError(f"payloads must be a sequence (one per block), not {type(payloads).__name__}")
        if len(payloads) != n - first_block:
            raise PayloadError(
                f"got {len(payloads)} payloads for blocks {first_block}..{n - 1} of {len(arr)} tokens "
                f"({n - first_block} full blocks of {self.block_size}); the trailing partial block is not stored"
            )
        top, codec = self.tiers[0], self.tiers[0].codec
        chain: list[tuple[bytes, bytes]] = []
        blobs: list[bytes | None] = [None] * len(payloads)
        if codec is not None:
            # A serialized top tier: encode before taking the lock, so the lock is not held for
            # the copy and a payload the codec refuses (PayloadError) stores nothing.
            chain = list(self.hasher.chain(arr, ns))
            for i in range(first_block, n):
                parent_key = chain[i - 1][0] if i else ns.root
                blobs[i - first_block] = codec.encode(payloads[i - first_block], *chain[i], parent_key, i)
        # Measure all first: a bad payload stores nothing.
        sizes = [len(b) if b is not None else top.size_of(p) for b, p in zip(blobs, payloads)]
        for i, s in enumerate(sizes):
            if s > top.capacity:
                raise PayloadError(
                    f"block {first_block + i} is {s} B, larger than tier '{top.name}' capacity "
                    f"{top.capacity} B: the capacity is smaller than one block"
                )
        with self._lock:
            keys, blocks = zip(*(chain or self.hasher.chain(arr, ns))) if n else ((), ())
            parent: Hashable = ns.root
            if first_block > 0:
                pnode = self.index.get(keys[first_block - 1])
                if pnode is None or pnode.tokens != blocks[first_block - 1]:
                    self._c["rejected"] += n - first_block
                    return Usage()
                parent = pnode.key
            placed: list[Node] = []
            tail: Node | None = None  # pinned while its child is placed, so room-making can't evict it
            try:
                for i in range(first_block, n):
                    node = self.index.get(keys[i])
                    if node is not None and node.tokens != blocks[i]:
                        self._c["collisions"] += 1
                        break
                    if node is None or node.tier == LOST:
                        size = sizes[i - first_block]
                        if not self._h.room(0, size):
                            self._c["rejected"] += n - i
                            break
                        if node is None:
                            node = self.index.insert(keys[i], parent, blocks[i], i, tag=ns.tenant)
                        else:
                            self._c["repaired"] += 1
                        self._h.place(0, node, payloads[i - first_block], size, blobs[i - first_block])
                        placed.append(node)
                    if tail is not None:
                        self.index.unpin([tail])
                    self.index.pin([node])
                    tail = node
                    parent = node.key
            finally:
                if tail is not None:
                    self.index.unpin([tail])
            for node in reversed(placed):
                top.policy.on_insert(node.key)
            created = len(placed) * self.block_size
            self._c["stores"] += 1
            self._c["stored_blocks"] += len(placed)
            self._h.drain()
            backlog = top.slow and self._h.mover.buffered > self._h.write_buffer
        if backlog:  # a slow top tier has no faster tier to absorb writes: wait, outside the lock
            self._h.mover.wait_buffer(self._h.write_buffer)
        return Usage(cache_creation_tokens=created, by_tier={top.name: created} if created else {})

    # --- eviction -----------------------------------------------------------------------------------
    def evict_all(self) -> int:
        """Evict every unpinned block (tests, admin). Returns blocks removed from the index."""
        with self._lock:
            before = len(self.index)
            for t in range(len(self.tiers)):
                self._h.make_room(t, self._h.used(t))
            removed = before - len(self.index)
        self.flush()
        return removed

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued write and delete has reached its tier. False on timeout."""
        return self._h.mover.wait_idle(timeout)

    # --- introspection ------------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        with self._lock:
            out: dict[str, Any] = dict(self._c)
            out["blocks"] = len(self.index)
            out["bytes"] = sum(self._h.used(t) for t in range(len(self.tiers)))
            out["token_hit_ratio"] = (
                self._c["hit_tokens"] / self._c["lookup_tokens"] if self._c["lookup_tokens"] else 0.0
            )
            mover = self._h.mover
            out["pending_moves"], out["write_buffer_bytes"] = len(mover.queue) + mover.busy, mover.buffered
            out["corrupt"] = sum(t.corrupt for t in self.tiers)
            out["tiers"] = {t.name: t.stats() for t in self.tiers}
        return out

    def _spill(self, budget_s: float = 30.0) -> None:
        """Write RAM blocks down into the first persistent tier when it is local disk.

        Only disk: a remote tier may be down or hung at shutdown, and close() must not wait on
        it. Bounded by ``budget_s`` in all; what does not fit in time stays in RAM (and is lost).
        """
        if not self._h.persistent or self.tiers[min(self._h.persistent)].kind != "disk":
            return
        deadline = time.monotonic() + budget_s
        for t in range(min(self._h.persistent)):
            if self.tiers[t].slow:
                continue
            while time.monotonic() < deadline:
                with self._lock:
                    moved = self._h.spill(t)
                if not moved or not self._h.mover.wait_idle(max(0.1, deadline - time.monotonic())):
                    break

    def close(self) -> None:
        """Write RAM blocks down to local disk if that is the first persistent tier (so a restart
        finds them), flush queued writes, stop the mover, close every tier. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._spill()
        self._h.mover.stop()
        with self._lock:
            for tier in self.tiers:
                tier.close()

    def __enter__(self) -> ContextCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
