"""ContextCache, the public API: match -> load -> store -> evict/demote.

Locking: one re-entrant lock guards the index, every tier and every policy. Token validation and
block slicing happen before taking it; key hashing happens under it, lazily, so a cold lookup
hashes only the blocks it walks. Payloads are handed out as the stored objects (no copy), and a
Match pins its blocks until ``release``, so a concurrent store can never evict what a caller is
still reading.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .config import CacheConfig, load_config
from .errors import ConfigError, MatchReleasedError, PayloadError, UnknownTierError
from .index import Node, RadixIndex
from .keys import BlockHasher, Namespace, Tokens, as_token_array
from .policies import make_policy
from .tiers import TIERS, Tier
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
    ) -> None:
        if not tiers:
            raise ConfigError("a ContextCache needs at least one tier")
        self.hasher = BlockHasher(block_size, hash)
        self.block_size = block_size
        self.model = model
        self.salt = salt.encode() if isinstance(salt, str) else bytes(salt)
        self.tiers = list(tiers)
        self.clock = clock
        self.index = RadixIndex()
        for tier in self.tiers:
            tier.policy.attach(self.index)
        self._lock = threading.RLock()
        self._namespaces: dict[str, Namespace] = {}
        self._c = dict.fromkeys(
            ("lookups", "stores", "hits", "misses", "hit_tokens", "lookup_tokens",
             "stored_blocks", "evictions", "demotions", "collisions", "rejected"), 0
        )  # fmt: skip

    # --- construction -----------------------------------------------------------------------------
    @classmethod
    def from_config(
        cls, source: Mapping[str, Any] | str | os.PathLike[str] | CacheConfig, *, clock: Any = time.monotonic
    ) -> ContextCache:
        cfg = source if isinstance(source, CacheConfig) else load_config(source)
        tiers: list[Tier] = []
        for i, tc in enumerate(cfg.tiers):
            tier_cls = TIERS.get(tc.kind)
            if tier_cls is None:
                raise UnknownTierError(f"tiers[{i}]: unknown kind {tc.kind!r}; known: {', '.join(sorted(TIERS))}")
            min_bytes = cfg.block_size * 4
            if tc.capacity < min_bytes:
                raise ConfigError(
                    f"tiers[{i}] capacity {tc.capacity} B is smaller than one block "
                    f"({cfg.block_size} tokens need at least {min_bytes} B)"
                )
            policy = make_policy(tc.policy, clock=clock)
            if getattr(policy, "offline", False):
                raise ConfigError(f"tiers[{i}]: policy {policy.name!r} needs the future; it runs in the simulator only")
            try:
                tiers.append(tier_cls(tc.capacity, policy, high=tc.high, low=tc.low, **tc.options))
            except TypeError as exc:
                raise ConfigError(f"tiers[{i}] ({tc.kind}): {exc}") from None
        return cls(tiers, block_size=cfg.block_size, hash=cfg.hash, model=cfg.model, salt=cfg.salt, clock=clock)

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
        """Find and pin the longest cached prefix of ``tokens``. Call ``release`` when done."""
        arr = as_token_array(tokens)
        ns = self.namespace(namespace)
        n_full = self.hasher.n_blocks(len(arr))
        with self._lock:
            nodes = self.hasher.walk(arr, ns, self.index.getter)
            payloads, by_tier = self._load(nodes)
            if nodes:
                # Pinning the deepest block is enough: its ancestors are not leaves, so none of
                # the chain can leave the index until release.
                self.index.pin(nodes[-1:])
            hit = len(nodes) * self.block_size
            c = self._c
            c["lookups"] += 1
            c["hits"] += len(nodes)
            c["misses"] += n_full - len(nodes)
            c["hit_tokens"] += hit
            c["lookup_tokens"] += len(arr)
        usage = Usage(cache_read_tokens=hit, uncached_tokens=len(arr) - hit, by_tier=by_tier)
        return Match(hit, len(nodes), payloads, usage, ns, nodes, _cache=self)

    def _load(self, nodes: list[Node]) -> tuple[list[Any], dict[str, int]]:
        """Payloads of a matched chain, truncating ``nodes`` at the first unreadable one."""
        if not nodes:
            return [], {}
        keys = [n.key for n in nodes]
        if len(self.tiers) == 1:  # the common case: one batch call, one tier
            payloads = self.tiers[0].get_many(keys)
        else:
            payloads = [self.tiers[n.tier].get(n.key) for n in nodes]
        if None in payloads:  # unreadable: the prefix ends there
            del nodes[payloads.index(None) :]
            del payloads[len(nodes) :], keys[len(nodes) :]
        by_tier: dict[str, int] = {}
        for t, tier in enumerate(self.tiers):
            mine = keys if len(self.tiers) == 1 else [n.key for n in nodes if n.tier == t]
            if mine:
                # Deepest first, so ancestors end up more recently used than their descendants.
                tier.policy.on_hits(reversed(mine))
                tier.hits += len(mine)
                by_tier[tier.name] = len(mine) * self.block_size
        return payloads, by_tier

    def release(self, match: Match) -> None:
        """Unpin a Match's blocks. Releasing twice is an error."""
        if match.released:
            raise MatchReleasedError("this Match was already released")
        with self._lock:
            self.index.unpin(match._nodes[-1:])
            match.released = True

    def store(
        self,
        tokens: Tokens,
        payloads: Sequence[Any],
        namespace: str | Namespace = "default",
        first_block: int = 0,
    ) -> Usage:
        """Store payloads for full blocks ``first_block``.. of ``tokens``.

        Blocks before ``first_block`` must already be cached (normally: pinned by a Match).
        Blocks that are already cached are kept as they are. Storing stops at the first block
        that cannot be placed (no room, or a hash collision), since later blocks would be
        unreachable without it.
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
        top = self.tiers[0]
        sizes = [top.size_of(p) for p in payloads]  # measure all first: a bad payload stores nothing
        for i, s in enumerate(sizes):
            if s > top.capacity:
                raise PayloadError(
                    f"block {first_block + i} is {s} B, larger than tier '{top.name}' capacity "
                    f"{top.capacity} B: the capacity is smaller than one block"
                )
        created = 0
        with self._lock:
            keys, blocks = zip(*self.hasher.chain(arr, ns)) if n else ((), ())
            parent: Hashable = ns.root
            if first_block > 0:
                pnode = self.index.get(keys[first_block - 1])
                if pnode is None or pnode.tokens != blocks[first_block - 1]:
                    self._c["rejected"] += n - first_block
                    return Usage()
                parent = pnode.key
            new: list[Node] = []
            tail: Node | None = None  # pinned while its child is placed, so room-making can't evict it
            try:
                for i in range(first_block, n):
                    node = self.index.get(keys[i])
                    if node is not None:
                        if node.tokens != blocks[i]:
                            self._c["collisions"] += 1
                            break
                    else:
                        size = sizes[i - first_block]
                        if size > top.free_bytes() and not self._make_room(0, size - top.free_bytes()):
                            self._c["rejected"] += n - i
                            break
                        node = self.index.insert(keys[i], parent, blocks[i], i, tag=ns.tenant)
                        top.put(node.key, payloads[i - first_block])
                        new.append(node)
                    if tail is not None:
                        self.index.unpin([tail])
                    self.index.pin([node])
                    tail = node
                    parent = node.key
            finally:
                if tail is not None:
                    self.index.unpin([tail])
            for node in reversed(new):
                top.policy.on_insert(node.key)
            created = len(new) * self.block_size
            self._c["stores"] += 1
            self._c["stored_blocks"] += len(new)
            for t, tier in enumerate(self.tiers):
                if tier.over_high():
                    self._make_room(t, tier.bytes_over_low())
        return Usage(cache_creation_tokens=created, by_tier={top.name: created} if created else {})

    # --- eviction -----------------------------------------------------------------------------------
    def _make_room(self, t: int, nbytes: int) -> bool:
        """Evict or demote from tier ``t`` until ``nbytes`` are freed. False if it could not."""
        tier = self.tiers[t]
        last = t == len(self.tiers) - 1
        can = self.index.is_evictable if last else self.index.is_unpinned
        goal = tier.used_bytes - nbytes
        while tier.used_bytes > goal:
            key = tier.policy.evict(can)
            if key is None:
                return False
            payload = tier.get(key)
            if not last and self._demote(key, payload, t + 1):
                tier.delete(key)
            elif self.index.is_evictable(key):
                tier.delete(key)
                self.index.remove(key)
                self._c["evictions"] += 1
            else:  # no room below and still needed by its children: keep it here
                tier.policy.on_insert(key)
                return False
            tier.evictions += 1
        return True

    def _demote(self, key: Hashable, payload: Any, t: int) -> bool:
        """Write a block into tier ``t``, making room there. False if it does not fit."""
        tier = self.tiers[t]
        size = tier.size_of(payload)
        if size > tier.free_bytes() and (size > tier.capacity or not self._make_room(t, size - tier.free_bytes())):
            return False
        tier.put(key, payload)
        tier.policy.on_insert(key)
        node = self.index.get(key)
        assert node is not None
        node.tier = t
        self._c["demotions"] += 1
        return True

    def evict_all(self) -> int:
        """Evict every unpinned block (tests, admin). Returns blocks removed."""
        before = len(self.index)
        with self._lock:
            for t in range(len(self.tiers)):
                self._make_room(t, self.tiers[t].used_bytes)
        return before - len(self.index)

    # --- introspection ------------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        with self._lock:
            out: dict[str, Any] = dict(self._c)
            out["blocks"] = len(self.index)
            out["bytes"] = sum(t.used_bytes for t in self.tiers)
            out["token_hit_ratio"] = (
                self._c["hit_tokens"] / self._c["lookup_tokens"] if self._c["lookup_tokens"] else 0.0
            )
            out["tiers"] = {t.name: t.stats() for t in self.tiers}
        return out

    def close(self) -> None:
        with self._lock:
            for tier in self.tiers:
                tier.close()

    def __enter__(self) -> ContextCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
