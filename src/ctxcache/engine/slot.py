"""Slot: one tier, its eviction policy, its limits and its counters. The only code that changes
a tier's accounting.

The tier stores and measures blocks; the slot decides nothing either, but it is where every event
about a tier is recorded: a key becoming resident (``admit``), used (``touch``), leaving
(``drop``), chosen as a victim (``victim``), bytes reserved by queued writes (``reserve``) and
released by queued deletes. Placement and the lookup call these; nobody reaches into
``slot.policy`` or a counter from outside.

Per-tenant accounting lives here too: every resident key is charged to its owner (the tenant
tag of its index node; ``ORPHAN`` for blocks an earlier run left) with its bytes, when it is
admitted, and uncharged when it is dropped or evicted, so ``by_tenant`` is the bytes each tenant
holds in this tier, and ``quotas`` the per-tenant limits tenancy set on it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, fields
from typing import Any, Protocol

from ..codec import Codec
from ..policies import Policy
from ..shardmap import ShardedDict, owner_shard, untrack
from ..tiers import Tier

ORPHAN = ""  # the owner of blocks whose tenant is unknown (left by an earlier run)
MAX_PAIRS = 4096  # distinct (tenant, bytes) charges shared between blocks (see Slot.charge)
BREAK_AFTER = 8  # deletes refused in a row that stop passes on a tier (see Slot.may_delete)
FIRST_BACKOFF = 0.5  # seconds from the breaker opening to its first probe; doubled after each
MAX_BACKOFF = 30.0  # seconds at most between two probes

log = logging.getLogger("ctxcache.engine")


class Watcher(Protocol):
    """Told, under the engine's lock, when a key starts or stops being charged to a tier: where
    placement changes (events/emitter.py turns these into KV events). Must not block."""

    # While a store's run is open (``begin``), a key admitted to tier ``run_pos`` is appended to
    # ``run`` by the slot itself, not told through ``admitted``: a call less per stored block.
    run: list[Hashable] | None
    run_pos: int
    # While a run of removals is open and a room-making pass may add to it, ``xkey`` is its
    # (tier, reason): the slot appends a key leaving for that reason to ``xrun`` itself.
    xrun: list[Hashable] | None
    xkey: tuple[int, str] | None

    def admitted(self, pos: int, key: Hashable) -> None: ...

    def left(self, pos: int, key: Hashable, why: str = "") -> None:
        """``key`` is no longer charged to tier ``pos``; ``why``: "evicted" or "demoted" where the
        caller knows it (a room-making pass), else "" (the watcher finds out)."""

    def landed(self, pos: int, key: Hashable) -> None: ...

    def begin(self) -> None:
        """A store starts: what it tells until ``end`` may be recorded in runs (same order)."""

    def end(self) -> None: ...

    def chain(self, pos: int, keys: Sequence[Hashable], parents: Sequence[Hashable | None], sizes: list[int]) -> None:
        """``keys``, one chain in order, were just charged to tier ``pos`` (``charge(tell=False)``),
        with their parents (None at a namespace root) and charged sizes: what a run records, told
        at once by a store that knows them (store_simple.py), so nothing is read back per block."""


@dataclass(slots=True)
class Counters:
    """The engine's event counters, by owner: the lookup (``lookups`` .. ``lookup_tokens``), the
    store (``stores`` .. ``rejected``) and placement (``evictions`` .. ``delete_errors``, but
    ``discovered``: discovery's; ``through_*``: engine/through.py's). Each field is changed by exactly one of them."""

    lookups: int = 0
    stores: int = 0
    hits: int = 0
    misses: int = 0
    hit_tokens: int = 0
    lookup_tokens: int = 0
    stored_blocks: int = 0
    evictions: int = 0
    quota_evictions: int = 0  # the part of ``evictions`` a tenant at its quota caused (placement)
    demotions: int = 0
    demotions_skipped: int = 0
    promotions: int = 0
    discovered: int = 0
    lost: int = 0
    unavailable_misses: int = 0  # loads a slow tier could not reach: misses, not lost (lookup)
    repaired: int = 0
    write_errors: int = 0
    delete_errors: int = 0  # deletes a slow tier refused: the block stays stored and charged (placement)
    collisions: int = 0
    rejected: int = 0
    throttled_waits: int = 0  # loads that waited for their tenant's bucket (lookup)
    throttled_recomputes: int = 0  # loads given up for recompute when the bucket was empty (lookup)
    expired: int = 0  # blocks reclaimed by the TTL sweeper (erasure)
    erased: int = 0  # blocks removed by tenant erasure or flush (erasure)
    through_writes: int = 0  # write-through copies queued for slow tiers (through)
    through_dropped: int = 0  # write-through copies refused: tier full/over quota/down, write buffer full (through)
    write_lag_waits: int = 0  # stores that waited for the write-through queue to catch up (store)
    write_lag_overruns: int = 0  # of those, waits that gave up with the queue still behind (store)

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


class Slot:
    """Tier ``pos`` of the engine. Not thread-safe: called under the engine's lock."""

    __slots__ = (
        "pos", "tier", "policy", "name", "capacity", "high", "low", "slow", "persistent", "kind",
        "hits", "evictions", "inflow", "outflow", "owners", "by_tenant", "quotas", "owner_of", "_pairs",
        "retry", "retrying", "refusals", "backoff", "probe_at", "clock", "write", "watch",
    )  # fmt: skip

    def __init__(self, pos: int, tier: Tier, policy: Policy, clock: Callable[[], float] = time.monotonic) -> None:
        self.pos = pos
        self.tier = tier
        self.policy = policy
        self.name, self.kind = tier.name, tier.kind
        self.capacity, self.high, self.low = tier.capacity, tier.high, tier.low
        self.slow, self.persistent = tier.slow, tier.persistent
        self.hits = 0
        self.evictions = 0
        self.inflow = 0  # bytes of writes queued into this tier
        self.outflow = 0  # bytes of blocks queued to leave it
        # resident key -> (tenant, bytes charged); sharded: no insert rebuilds a table of every block
        self.owners: ShardedDict[Hashable, tuple[str, int]] = ShardedDict(owner_shard)
        self._pairs: dict[tuple[str, int], tuple[str, int]] = {}
        self.by_tenant: dict[str, int] = {}  # tenant -> bytes it holds here
        self.quotas: dict[str, int] = {}  # tenant -> byte limit here (tenancy sets it; absent: none)
        self.owner_of: Callable[[Hashable], str] = lambda key: ORPHAN  # the engine sets it
        # Blocks whose delete failed, next victims first (see ``settled``), and those taken from
        # ``retry`` whose delete has not reported yet.
        self.retry: dict[Hashable, None] = {}
        self.retrying: set[Hashable] = set()
        # The delete breaker (``may_delete``): refused deletes since one last landed, and when
        # (by the engine's clock, so wall time whatever the pass rate) it may probe next.
        self.clock = clock
        self.refusals = 0
        self.backoff = 0.0  # seconds from the next probe to the one after
        self.probe_at = 0.0  # the next probe's time, while the breaker is open
        self.watch: Watcher | None = None  # told of every key that becomes resident or leaves (KV events)
        # "through": every store queues a copy here (engine/through.py); "demote": only demotions
        # reach it. Resolved from the tier's setting and its place by the factory (``write_mode``).
        self.write = "demote"

    @property
    def codec(self) -> Codec | None:
        return self.tier.codec

    # --- bytes -----------------------------------------------------------------------------------
    def used(self) -> int:
        """Logical bytes: what the tier holds, plus queued writes into it, minus queued deletes."""
        return self.tier.used_bytes + self.inflow - self.outflow

    def free(self) -> int:
        return self.capacity - self.used()

    def over_high(self) -> int:
        """Bytes to free to come back down to the low watermark, once above the high one (else 0)."""
        used = self.used()
        return used - int(self.low * self.capacity) if used > self.high * self.capacity else 0

    def reserve(self, inflow: int, outflow: int) -> None:
        """Charge (positive) or settle (negative) bytes of queued moves."""
        self.inflow += inflow
        self.outflow += outflow

    # --- the policy's view of residency ----------------------------------------------------------
    def admit(self, key: Hashable, size: int | None = None, tenant: str | None = None) -> None:
        """``key`` is resident: tell the policy, charge its owner (``size`` None: what the tier
        holds for it; a key still charged, re-admitted after a refused eviction, keeps its charge).
        A block whose delete failed, placed here again (stored, promoted, demoted onto its copy),
        is wanted: its delete no longer applies, so it is no retry (``victim`` would take it first)."""
        if key in self.policy:  # resident already: inserted twice, a policy's queues keep it twice (s3fifo)
            self.policy.on_remove(key)
        self.policy.on_insert(key)
        if self.retry:
            self.retry.pop(key, None)
        if key not in self.owners.shards[hash(key) % 239]:
            self.charge(key, self.owner_of(key) if tenant is None else tenant, size)

    def admit_chain(
        self, keys: Iterable[Hashable], sizes: Iterable[int] | None = None, tenant: str | None = None
    ) -> None:
        if sizes is None:
            for key in keys:
                self.admit(key)
        else:
            for key, size in zip(keys, sizes):
                self.admit(key, size, tenant)

    def charge(self, key: Hashable, tenant: str, size: int | None, tell: bool = True) -> None:
        """Charge ``key``'s bytes to ``tenant`` before the policy learns of it (a store places a
        chain first and admits it deepest first after; the quota must see every block at once).
        ``tell=False``: the caller tells the watch itself, the whole chain at once (``Watcher.chain``)."""
        owners = self.owners.shards[hash(key) % 239]
        if key in owners:
            return
        n = self.tier.nbytes(key) if size is None else size
        pair = (tenant, n)
        # Blocks share one tuple per distinct charge (a model's blocks are one size), not one each.
        # Untracked (a str and an int), so storing it leaves the owners' dict untracked too; a shared
        # one was untracked when first stored (untrack is a ctypes call: ~180 ns a block saved).
        shared = self._pairs.get(pair)
        if shared is not None:
            pair = shared
        else:
            if len(self._pairs) < MAX_PAIRS:
                self._pairs[pair] = pair
            untrack(pair)
        owners[key] = pair
        self.by_tenant[tenant] = self.by_tenant.get(tenant, 0) + n
        w = self.watch
        if w is not None and tell:  # charged: resident from now on (a store charges before it admits)
            run = w.run
            if run is not None and w.run_pos == self.pos:
                run.append(key)
            else:
                w.admitted(self.pos, key)

    def _uncharge(self, key: Hashable, why: str = "") -> None:
        got = self.owners.pop(key, None)
        if got is not None:
            w = self.watch
            if w is not None:
                if why and w.xkey == (self.pos, why) and w.xrun is not None:
                    w.xrun.append(key)  # a room-making pass's removal: the open run's (Watcher)
                else:
                    w.left(self.pos, key, why)
            left = self.by_tenant.get(got[0], 0) - got[1]
            if left > 0:
                self.by_tenant[got[0]] = left
            else:
                self.by_tenant.pop(got[0], None)

    def owner(self, key: Hashable) -> str | None:
        got = self.owners.get(key)
        return None if got is None else got[0]

    def tenant_used(self, tenant: str) -> int:
        return self.by_tenant.get(tenant, 0)

    def tenant_blocks(self, tenant: str) -> list[Hashable]:
        return [k for k, (t, _) in self.owners.items() if t == tenant]

    def touch(self, keys: Sequence[Hashable]) -> None:
        """Hits, deepest first (callers pass them so): ancestors end up more recently used. A block
        whose delete failed, hit here (a lookup found it in storage and indexed it here), is no retry."""
        self.policy.on_hits(keys)
        if self.retry:
            for key in keys:
                self.retry.pop(key, None)
        self.hits += len(keys)

    def drop(self, key: Hashable) -> None:
        self.policy.on_remove(key)
        self._uncharge(key)

    def holds(self, key: Hashable) -> bool:
        return key in self.policy

    def victim(self, can_evict: Callable[[Any], bool]) -> Hashable | None:
        """The next block to leave: a block whose delete failed first (``settled``), then the
        policy's choice. A failed block still resident but not allowed now keeps its turn."""
        if self.retry:
            for key in [k for k in self.retry if k not in self.policy]:
                del self.retry[key]  # left by another road meanwhile (erased, lost)
            key = next((k for k in self.retry if can_evict(k)), None)
            if key is not None:
                del self.retry[key]
                self.retrying.add(key)
                self.policy.on_remove(key)
                return key
        return self.policy.evict(can_evict)

    def settled(self, key: Hashable, refused: bool) -> bool:
        """The move of ``key`` out of this tier reported. ``refused``: its delete failed and it is
        resident again (at its policy's MRU end: ``on_insert`` is all a policy offers). It becomes
        the next victim, so the block that failed to leave is the first to try again; unless this
        was that retry: then it keeps its policy's place, so a tier that keeps refusing it costs
        one retry per cycle of its policy, not one per pass. True for a retry refused again."""
        again = key in self.retrying
        self.retrying.discard(key)
        if refused and not again:
            self.retry[key] = None
        return refused and again

    def stayed(self, key: Hashable) -> None:
        """A victim that could not leave (no room below, still needed) is resident again. Taken from
        ``retry``, its retry ends with no delete sent: its next refusal is a first one, not "again"."""
        self.retrying.discard(key)
        self.admit(key)

    def deleted(self, refused: bool) -> None:
        """A delete from this tier reported: refused (it raised), or landed (which closes the
        breaker: the tier takes deletes again). Opening and closing are logged once each."""
        if refused:
            self.refusals += 1
            if self.refusals == BREAK_AFTER:
                self.backoff = FIRST_BACKOFF
                self.probe_at = self.clock() + FIRST_BACKOFF
                log.warning(
                    "tier %s: %d deletes in a row refused; passes there paused, one-block probe in %.1f s",
                    self.name, BREAK_AFTER, FIRST_BACKOFF,
                )  # fmt: skip
            return
        if self.broken:
            log.info("tier %s: a delete landed after %d refused; deletes resumed", self.name, self.refusals)
        self.refusals, self.backoff, self.probe_at = 0, 0.0, 0.0

    @property
    def broken(self) -> bool:
        """The breaker is open: the last ``BREAK_AFTER`` deletes here were refused."""
        return self.refusals >= BREAK_AFTER

    def may_delete(self) -> bool:
        """Whether a pass may take victims here (asked once per pass). No, while the breaker is
        open (``BREAK_AFTER`` deletes refused in a row: a dead disk or Redis), but for one probe
        pass once ``backoff`` seconds have passed since the last (``FIRST_BACKOFF`` after it
        opened, doubling up to ``MAX_BACKOFF`` while probes are refused; a probe takes one victim
        and makes no room: its delete's report opens or closes). By the engine's clock, not by
        passes: a busy cache probes a dead tier no more often than an idle one.
        Every victim's delete would fail and each retried victim again, each failure an unlink
        or a round trip, a log line and a counter: a dead tier cost as many deletes as it held
        blocks over its capacity at every pass. Turned away, the pass frees nothing, so a store
        needing room here is refused (a demotion goes elsewhere), as at a full tier: capacity
        and quotas hold, passes end, and the first probe that lands brings the tier back."""
        if not self.broken:
            return True
        now = self.clock()
        if now < self.probe_at:
            return False
        self.backoff = min(2 * self.backoff, MAX_BACKOFF)
        self.probe_at = now + self.backoff
        return True

    def breaker(self) -> dict[str, Any]:
        """The delete breaker's state, for stats and metrics."""
        wait = max(0.0, self.probe_at - self.clock()) if self.broken else 0.0
        return {"deletes_paused": self.broken, "delete_refusals_in_a_row": self.refusals, "next_probe_in_s": wait}

    def evicted(self, key: Hashable, why: str = "") -> None:
        """A victim left the tier (demoted or evicted: ``why``, when the caller knows which):
        its owner is no longer charged."""
        self.evictions += 1
        self._uncharge(key, why)

    def stats(self) -> dict[str, Any]:
        out = self.tier.stats()
        out.update(policy=self.policy.name, capacity=self.capacity, hits=self.hits, evictions=self.evictions)
        out["write"] = self.write
        out["tenants"] = dict(self.by_tenant)
        out.update(self.breaker())
        return out
