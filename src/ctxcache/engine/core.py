"""Engine: the one owner of the index, the slots (tier + policy + counters), placement, the
mover and the lock. ``ContextCache`` is its public facade.

Locking: one re-entrant lock guards the index, every RAM tier, every slot and the mover's
queue. Token validation happens once per request, in ``prompt``, before taking it; key hashing
happens under it during the walk, lazily, so a cold lookup hashes only the blocks it walks. No
disk or network I/O runs under it (see lookup.py and mover.py).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Any, Unpack

from ..index import RadixIndex
from ..keys import BlockHasher, Namespace, Prompt, Tokens
from ..tiers import Tier
from ..tiers.memory import MemoryTier
from ..usage import Usage
from . import erasure as _erasure
from . import invalidation as _invalidation
from . import lifecycle as _lifecycle
from . import lookup as _lookup
from . import lookup_simple as _lookup_simple
from . import store as _store
from . import store_simple as _store_simple
from . import tombstones as _tombstones
from . import ttl as _ttl
from .bandwidth import TokenBucket
from .expiry import Expiry
from .factory import make_slots
from .fairness import Fairness
from .journal import ErasureJournal
from .lookup import Match
from .operator_pins import OperatorPins
from .options import EngineOptions, check_options, write_lag_of
from .placement import LOST, Placement
from .sealing import TenantSealer
from .slot import ORPHAN, Counters, Slot
from .tenancy import Tenancy
from .through import tiers_of

SWEEP_EVERY_S = 1.0


class Engine:
    def __init__(
        self,
        tiers: Sequence[Tier],
        *,
        sleep: Callable[[float], None] = time.sleep,
        background: bool = True,
        **options: Unpack[EngineOptions],
    ) -> None:
        """``background=False`` (the deterministic simulation): no threads; the caller steps the
        mover (``placement.mover.step``) and calls ``sweep``."""
        check_options(options)
        block_size, clock = options.get("block_size", 256), options.get("clock", time.monotonic)
        salt, tenancy = options.get("salt", b""), options.get("tenancy")
        self.slots: list[Slot] = make_slots(tiers, clock, block_size)
        self.hasher = BlockHasher(block_size, options.get("hash", "xxh3"))
        self.block_size = block_size
        self.model = options.get("model", "default")
        self.salt = salt.encode() if isinstance(salt, str) else bytes(salt)
        self.clock = clock
        self.tiers = [s.tier for s in self.slots]
        self.index = RadixIndex()
        self.lock = threading.RLock()
        self.counters = Counters()
        self._namespaces: dict[tuple[str, str | None], Namespace] = {}
        self.tenancy = tenancy
        self.sleep = sleep
        self.expiry = Expiry()
        self.buckets: dict[str, TokenBucket] = {}
        self.tenant_stats: dict[str, dict[str, int]] = {}  # written by the lookup only
        self.placement = Placement(
            self.slots, self.index, self.lock, self.counters, promote=options.get("promote", True),
            write_buffer=options.get("write_buffer", 256 << 20), manual=not background,
        )  # fmt: skip
        self.pins = OperatorPins(self.index, self.placement.prune)  # an operator's, not a lookup's
        # the slow tiers every store also queues to, and how far behind their copies may fall
        self.through, self.write_lag = tiers_of(self.placement), write_lag_of(options.get("write_lag", 1.0))
        # One RAM tier of live objects: lookups need no verification beyond the index's.
        self.simple = len(self.slots) == 1 and self.placement.all_memory and self.tiers[0].codec is None
        self.leaving: str | None = None  # why blocks leave tiers now, when not placement's own doing (events)
        self._closed = False
        self._stop = threading.Event()
        self._sweeper: threading.Thread | None = None
        self._background = background
        if tenancy is not None:
            self._set_tenancy(tenancy)
        path = options.get("erasure_journal")
        self.journal = self.placement.mover.journal = None if path is None else ErasureJournal(path)
        self._open_stored()
        # The store's fast path (store_simple.py): a plain hot MemoryTier (not a subclass: FakeTier
        # logs its calls) and no policy that watches the index (each pin would tell it). Policies
        # attach in ``_open_stored`` only. Tests switch it off to compare the paths.
        self.fast_store = self.simple and type(self.tiers[0]) is MemoryTier and not self.index.watched
        # The lookup's (lookup_simple.py) on the same terms; also the release's single unpin in line.
        self.fast_lookup = self.fast_store

    def _open_stored(self) -> None:
        """At start: what persistent tiers hold becomes evictable orphans, but what a tombstone or the
        erasure journal names (deleted again: ``tombstones.restore``); then each within its limits."""
        dead = _tombstones.dead_keys(self)
        for t, slot in enumerate(self.slots):
            slot.policy.attach(self.index)
            if slot.persistent:  # blocks left by an earlier run: evictable orphans, oldest first,
                for key in list(slot.tier.keys()):  # charged to the tenant their header names
                    if key not in dead[t]:  # erased, its delete refused: deleted again (restore)
                        slot.admit(key, tenant=slot.tier.tenant_of(key).decode(errors="replace") or ORPHAN)
        with self.lock:  # every tier's finds charged first: trimming one may write down to the next
            _tombstones.restore(self, dead)
            for t in self.placement.persistent:
                _lifecycle.trim(self.placement, t)  # within the quotas and capacities configured now

    def _set_tenancy(self, tenancy: Tenancy) -> None:
        get = self.index.get

        def owner_of(key: Hashable) -> str:
            node = get(key)
            return node.tag if node is not None and isinstance(node.tag, str) else ORPHAN

        for slot in self.slots:
            slot.owner_of = owner_of
            slot.quotas = {t.id: t.quota[slot.name] for t in tenancy.tenants.values() if slot.name in t.quota}
        self.placement.fairness = Fairness(tenancy, lambda key: self.expiry.expired(key, self.clock()))
        for t in tenancy.tenants.values():
            if t.rate is not None:
                self.buckets[t.id] = TokenBucket(t.rate, t.burst, self.clock)
        if tenancy.master_key is not None:
            sealer = TenantSealer(tenancy.master_key)
            for slot in self.slots:
                if slot.slow and slot.tier.codec is not None:
                    slot.tier.codec.sealer = sealer
        if any(t.ttl is not None for t in tenancy.tenants.values()):
            self.ensure_sweeper()

    def ensure_sweeper(self) -> None:
        """Start the TTL sweeper unless it runs (or the caller steps it: ``background=False``).
        Started late too: a TTL set at run time, or blocks erased while a lookup held them."""
        with self.lock:
            if not self._background or self._sweeper is not None or self._closed:
                return
            self._sweeper = threading.Thread(target=self._sweep_loop, name="ctxcache-ttl-sweeper", daemon=True)
            self._sweeper.start()

    def _sweep_loop(self) -> None:
        while not self._stop.wait(SWEEP_EVERY_S):
            self.sweep()

    @contextlib.contextmanager
    def leaving_as(self, reason: str) -> Iterator[None]:
        """Under the lock: blocks that leave tiers meanwhile leave for ``reason`` (erased, expired)."""
        before, self.leaving = self.leaving, reason
        for slot in self.slots:  # slots append to an open run of removals only under no reason (Watcher.xkey)
            if slot.watch is not None:
                slot.watch.xkey = None
        try:
            yield
        finally:
            self.leaving = before

    # --- requests -----------------------------------------------------------------------------------
    def namespace(self, namespace: str | Namespace = "default", cache_salt: str | None = None) -> Namespace:
        """A tenant's namespace (cached). With tenants configured, the tenant must exist and its
        root is derived from the server secret (``Tenancy.root_salt``); ``cache_salt`` narrows it."""
        if isinstance(namespace, Namespace):
            return namespace
        if not isinstance(namespace, str):
            raise TypeError(f"namespace must be a str or Namespace, not {type(namespace).__name__}")
        ns = self._namespaces.get((namespace, cache_salt))
        if ns is None:
            if self.tenancy is not None:
                salt = self.salt + self.tenancy.root_salt(namespace, cache_salt)
            elif cache_salt is not None:
                from .tenancy import check_salt

                salt = self.salt + b"/" + check_salt(cache_salt).encode()
            else:
                salt = self.salt
            ns = Namespace(tenant=namespace, model=self.model, salt=salt)
            self._namespaces[(namespace, cache_salt)] = ns
        return ns

    def prompt(
        self, tokens: Tokens | Prompt, namespace: str | Namespace = "default", cache_salt: str | None = None
    ) -> Prompt:
        """Validate once; a Prompt passes through (its own namespace wins)."""
        if isinstance(tokens, Prompt):
            return tokens
        return self.hasher.prompt(tokens, self.namespace(namespace, cache_salt))

    def lookup(self, tokens: Tokens | Prompt, namespace: str | Namespace = "default") -> Match:
        if self.fast_lookup:
            return _lookup_simple.lookup(self, tokens, namespace)
        if not isinstance(tokens, Prompt):  # self.prompt, inlined: a one-block lookup is ~6 µs in all
            tokens = self.hasher.prompt(tokens, self.namespace(namespace))
        return _lookup.lookup(self, tokens)

    def release(self, match: Match) -> None:
        pinned = match._pinned
        with self.lock:
            if self.fast_lookup and len(pinned) == 1 and pinned[0].pins > 0:
                pinned[0].pins -= 1  # index.unpin of one node when nothing watches the index
            else:
                self.index.unpin(pinned)  # raises for a block not pinned
            match.released = True
            nodes = match._nodes
            if nodes and nodes[-1].tier == LOST:
                self.placement.prune(nodes[-1].key)

    def store(
        self, tokens: Tokens | Prompt, payloads: Sequence[Any], namespace: str | Namespace, first_block: int
    ) -> Usage:
        if not isinstance(tokens, Prompt):  # self.prompt, inlined as in lookup
            ns = self._namespaces.get((namespace, None)) if namespace.__class__ is str else None
            tokens = self.hasher.prompt(tokens, self.namespace(namespace) if ns is None else ns)
        if self.fast_store:
            return _store_simple.store(self, tokens, payloads, first_block)
        return _store.store(self, tokens, payloads, first_block)

    # --- maintenance --------------------------------------------------------------------------------
    def evict_all(self) -> int:
        with self.lock:
            before = len(self.index)
            for t in range(len(self.slots)):
                self.placement.make_room(t, self.placement.used(t))
            removed = before - len(self.index)
        self.flush()
        return removed

    def flush(self, timeout: float | None = None) -> bool:
        return self.placement.mover.wait_idle(timeout)

    def sweep(self, now: float | None = None) -> int:
        """Reclaim expired blocks from every tier (the sweeper thread calls it). Returns how many."""
        return _erasure.sweep(self, self.clock() if now is None else now)

    def erase_tenant(self, tenant: str) -> dict[str, Any]:
        """Remove every block of ``tenant`` from every tier, wait for the deletes, verify."""
        return _erasure.erase_tenant(self, tenant)

    def invalidate(self, key: Hashable) -> dict[str, Any]:
        """Remove ``key``'s block and every block under it from every tier, wait, verify."""
        return _invalidation.invalidate(self, key)

    def set_tenant_ttl(self, tenant: str, ttl: float | None) -> dict[str, Any]:
        return _ttl.set_tenant_ttl(self, tenant, ttl)

    def pin_prefix(self, key: Hashable) -> int:
        with self.lock:
            return self.pins.pin(key)

    def unpin_prefix(self, key: Hashable) -> int:
        with self.lock:
            n = self.pins.unpin(key)
            if n:
                self.placement.drain()  # what the pin kept over a high watermark may leave now
        return n

    def pinned_prefixes(self) -> list[Hashable]:
        with self.lock:
            return self.pins.pinned()

    def tenant_usage(self, tenant: str) -> dict[str, Any]:
        with self.lock:
            tiers = {s.name: {"bytes": s.tenant_used(tenant), "quota": s.quotas.get(tenant)} for s in self.slots}
            out: dict[str, Any] = {"tenant": tenant, "tiers": tiers}
            out.update(self.tenant_stats.get(tenant, {}))
            out["blocks"] = sum(1 for n in self.index if n.tag == tenant)
        return out

    def stats(self) -> dict[str, Any]:
        with self.lock:
            c = self.counters
            out: dict[str, Any] = c.as_dict()
            out["blocks"] = len(self.index)
            out["bytes"] = sum(s.used() for s in self.slots)
            out["token_hit_ratio"] = c.hit_tokens / c.lookup_tokens if c.lookup_tokens else 0.0
            mover = self.placement.mover
            out["pending_moves"], out["write_buffer_bytes"] = len(mover.queue) + mover.busy, mover.buffered
            out["mover_lag_s"] = mover.lag_s()
            out["corrupt"] = sum(t.corrupt for t in self.tiers)
            out["evictions_by_reason"] = {
                "capacity": c.evictions - c.quota_evictions, "quota": c.quota_evictions, "ttl": c.expired,
                "erasure": c.erased, "corrupt": out["corrupt"],
            }  # fmt: skip
            out["tiers"] = {s.name: s.stats() for s in self.slots}
        return out

    def spill(self, budget_s: float = 30.0) -> None:
        """Write RAM blocks down into the first persistent tier when it is local disk.

        Only disk: a remote tier may be down or hung at shutdown, and close() must not wait on
        it. Bounded by ``budget_s`` in all; what does not fit in time stays in RAM (and is lost).
        """
        pl = self.placement
        if not pl.persistent or self.tiers[min(pl.persistent)].kind != "disk":
            return
        deadline = time.monotonic() + budget_s
        for t in range(min(pl.persistent)):
            if self.tiers[t].slow:
                continue
            while time.monotonic() < deadline:
                with self.lock:
                    moved = _lifecycle.spill(pl, t)
                if not moved or not pl.mover.wait_idle(max(0.1, deadline - time.monotonic())):
                    break

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._sweeper is not None:
            self._sweeper.join(timeout=5)
        self.sweep()  # expired blocks leave storage now: a restart would find them with no TTL known
        with self.lock:
            self.pins.clear()  # not kept over a restart; pinned RAM blocks are spilled like the rest
        self.spill()
        self.placement.mover.stop()
        _tombstones.persist(self)
        with self.lock:
            for tier in self.tiers:
                tier.close()
