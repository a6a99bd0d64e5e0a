"""A slow tier whose every delete raises (a dead disk or Redis). Without a breaker each eviction
pass sent a delete for every block the tier held over its capacity, each refused and charged
again, and each refused retry started one more pass (``refusals.refused_again``): 12,544
refused deletes for 120 stores (benchmarks/tiers/bench_dead_tier_deletes.py). The tier's breaker
(``Slot.may_delete``) turns passes away once ``BREAK_AFTER`` deletes in a row were refused, but
for one probe pass once ``backoff`` seconds passed on the engine's clock (``FIRST_BACKOFF``,
doubling to ``MAX_BACKOFF``): a store needing room there is refused, so the tier holds no more
than its capacity and the blocks it refused to delete, and the first probe that lands closes the
breaker and brings the tier back. The tests drive a fake clock, ``STEP`` seconds per store."""

from __future__ import annotations

from collections.abc import Hashable

from ctxcache import ContextCache
from ctxcache.engine.slot import BREAK_AFTER, FIRST_BACKOFF, MAX_BACKOFF, Slot
from ctxcache.policies import make_policy
from ctxcache.tiers import MemoryTier
from ctxcache.tiers.fake import FakeSlowTier
from tests.conftest import FakeClock

from .tenancy_util import ask, cache_with
from .test_delete_errors import Refuse, _accounted, _full_tier, store
from .test_retry_count import _blob, one

STEP = 1.0  # seconds the fake clock moves before each store


def _refused_held(tier: FakeSlowTier, refused: list[Hashable]) -> int:
    """Bytes of blocks whose delete was refused that the tier still stores."""
    return sum(len(tier.store[k]) for k in set(refused) & set(tier.store))  # type: ignore[index]


def _dead(
    cache: ContextCache, tier: FakeSlowTier, refuse: Refuse, stores: range, clock: FakeClock, step: float = STEP
) -> list[set[Hashable]]:
    """Store each of ``stores``, ``step`` seconds apart, while every delete is refused; returns the
    keys each store's passes tried to delete. The tier holds its capacity throughout, but for
    blocks it refused to delete."""
    per_store = []
    for i in stores:
        before = len(refuse.refused)
        clock.advance(step)
        store(cache, i)
        assert cache.flush(10)
        per_store.append(set(refuse.refused[before:]))
        assert tier.used_bytes <= tier.capacity + _refused_held(tier, refuse.refused)
        assert cache.slots[0].used() == tier.used_bytes
    return per_store


def test_a_dead_tier_gets_one_delete_per_backoff_not_one_per_block_per_pass():
    clock = FakeClock()
    cache, tier, _, blob = _full_tier(4, clock)
    refuse = Refuse()
    tier.on_call = refuse
    per_store = _dead(cache, tier, refuse, range(4, 124), clock)
    # Before the breaker: 14,400 deletes refused here, the nth store's passes trying about n
    # blocks (every block held over capacity, and one more for each refused retry's pass).
    assert cache.stats()["delete_errors"] <= 3 * BREAK_AFTER + 8 + len(per_store) * STEP / MAX_BACKOFF
    tried = [len(keys) for keys in per_store]
    opened = next(i for i in range(len(tried)) if sum(tried[: i + 1]) >= BREAK_AFTER)
    assert max(tried[opened + 1 :]) == 1  # open: a probe, one block, one delete
    probes = [i for i, n in enumerate(tried) if i > opened and n]
    # The other stores' passes turned away: a probe 0.5, 1, 2 .. 16 s after the last, then every 30 s.
    assert len(probes) <= 7 + len(per_store) * STEP / MAX_BACKOFF
    gaps = [(b - a) * STEP for a, b in zip(probes, probes[1:])]
    assert all(gap >= min(2 ** (n + 1) * FIRST_BACKOFF, MAX_BACKOFF) for n, gap in enumerate(gaps))
    assert max(gaps) >= MAX_BACKOFF  # backed off to its cap
    # Open, the tier grows no more: a store that needs room is refused, a probe's too (before:
    # each store's block landed, and the tier ended 120 blocks over its capacity of 4).
    assert tier.used_bytes <= 4 * blob + sum(tried[: opened + 1]) * blob
    assert cache.stats()["rejected"] >= len(per_store) - opened - 1
    cache.close()


def test_after_recovery_the_first_probe_closes_the_breaker_and_the_tier_is_within_capacity():
    clock = FakeClock()
    cache, tier, _, blob = _full_tier(4, clock)
    refuse = Refuse()
    tier.on_call = refuse
    _dead(cache, tier, refuse, range(4, 64), clock)
    assert tier.used_bytes > 4 * blob and cache.slots[0].broken
    assert tier.used_bytes <= 4 * blob + BREAK_AFTER * blob  # before the breaker: 60 blocks over
    refuse.on = False  # the disk recovers
    for n in range(int(MAX_BACKOFF / STEP) + 2):
        clock.advance(STEP)
        store(cache, 64 + n)
        assert cache.flush(10)
        if tier.used_bytes <= 4 * blob:
            break
    assert n * STEP <= MAX_BACKOFF + STEP  # the next probe came, and the pass after it made the room
    assert not cache.slots[0].broken
    _accounted(tier)
    errors, rejected = cache.stats()["delete_errors"], cache.stats()["rejected"]
    for i in range(100, 110):  # back to normal: each store evicts one block, none refused
        clock.advance(STEP)
        store(cache, i)
        assert cache.flush(10)
        assert tier.used_bytes <= 4 * blob and cache.slots[0].used() == tier.used_bytes
    assert (cache.stats()["delete_errors"], cache.stats()["rejected"]) == (errors, rejected)
    assert not set(refuse.refused) & set(tier.store)  # every refused block left in the end
    cache.close()


def test_deletes_that_fail_now_and_then_never_open_the_breaker():
    cache, tier, hook, blob = _full_tier(4)
    for i in range(4, 60):
        hook.bad = set(tier.keys()) if i % 2 else set()  # noqa: SIM118 (a Tier method)
        store(cache, i)
        assert cache.flush(10)
    assert cache.stats()["rejected"] == 0 and cache.stats()["delete_errors"] > BREAK_AFTER
    assert cache.slots[0].refusals < BREAK_AFTER
    cache.close()


def _opened(clock: FakeClock) -> Slot:
    slot = Slot(0, MemoryTier(1 << 20), make_policy("lru"), clock)
    for _ in range(BREAK_AFTER - 1):
        slot.deleted(refused=True)
    assert slot.may_delete() and slot.may_delete()  # closed: every pass may delete
    slot.deleted(refused=True)
    return slot


def test_the_breaker_backs_off_by_doubling_to_its_cap_and_a_landed_delete_closes_it():
    clock = FakeClock()
    slot = _opened(clock)
    probes = []
    for _ in range(800):  # 200 s, four passes a second
        if slot.may_delete():
            probes.append(clock())
        clock.advance(0.25)
    gaps = [b - a for a, b in zip(probes, probes[1:])]
    assert probes[0] == FIRST_BACKOFF and gaps == [1, 2, 4, 8, 16, *[MAX_BACKOFF] * (len(gaps) - 5)]
    slot.deleted(refused=False)
    assert all(slot.may_delete() for _ in range(5)) and slot.backoff == slot.probe_at == 0


def test_no_probe_comes_before_its_time_however_many_passes_ask_and_one_comes_after():
    """By the clock, not by passes: before, a busy cache probed a dead tier every 16 passes however
    short the time, an idle one however long."""
    clock = FakeClock()
    slot = _opened(clock)
    for wait in (FIRST_BACKOFF, 2 * FIRST_BACKOFF, 4 * FIRST_BACKOFF):
        clock.advance(wait - 0.01)
        assert not any(slot.may_delete() for _ in range(10_000))
        clock.advance(0.01)
        assert [slot.may_delete() for _ in range(10_000)].count(True) == 1


def test_a_frozen_clock_turns_every_pass_away_on_an_open_breaker():
    clock = FakeClock()
    cache, tier, _, _ = _full_tier(4, clock)
    refuse = Refuse()
    tier.on_call = refuse
    _dead(cache, tier, refuse, range(4, 24), clock, step=0.0)
    assert cache.slots[0].broken
    before, reports = len(refuse.refused), cache.slots[0].refusals
    _dead(cache, tier, refuse, range(24, 224), clock, step=0.0)  # 200 stores, each one pass or more
    assert len(refuse.refused) == before  # before: a probe every 16 passes (12 refused blocks)
    clock.advance(FIRST_BACKOFF)
    _dead(cache, tier, refuse, range(224, 324), clock, step=0.0)
    assert len(set(refuse.refused[before:])) == 1  # its time came: one probe, one block
    assert cache.slots[0].refusals == reports + 1  # one delete reported refused
    cache.close()


def test_a_tenant_at_its_quota_on_a_dead_tier_is_refused_rather_than_held_over_it():
    """Quota passes go through the breaker too: once open, the tenant's stores that need room
    among its own blocks are refused (before: each store landed, its quota pass refused, and the
    tenant held a block more per store)."""
    blob = _blob({"a": {}})
    refuse = Refuse()
    refuse.on = False
    tier = FakeSlowTier(1 << 20, on_call=refuse)
    clock = FakeClock()
    cache = cache_with([tier], {"a": {"quota": {"fake-slow": 4 * blob}}}, clock=clock)
    for i in range(4):
        ask(cache, "a", one(i))
        assert cache.flush(10)
    refuse.on = True
    for i in range(4, 64):
        clock.advance(STEP)
        ask(cache, "a", one(i))
        assert cache.flush(10)
        assert cache.slots[0].tenant_used("a") <= 4 * blob + _refused_held(tier, refuse.refused)
    assert cache.slots[0].broken and cache.stats()["delete_errors"] <= 2 * BREAK_AFTER + 8 + 60 * STEP / MAX_BACKOFF
    assert cache.slots[0].tenant_used("a") <= 4 * blob + BREAK_AFTER * blob  # before: 64 blocks
    refuse.on = False
    for i in range(64, 64 + int(MAX_BACKOFF / STEP) + 1):
        clock.advance(STEP)
        ask(cache, "a", one(i))
        assert cache.flush(10)
    assert cache.slots[0].tenant_used("a") == 4 * blob and not cache.slots[0].broken
    assert cache.slots[0].used() == tier.used_bytes
    cache.close()
