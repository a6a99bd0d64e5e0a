"""A block whose delete failed is the first victim of the next pass (a retry). When that retry
lands, the pass must have evicted exactly what its room needed: the retried block's bytes count
as freed, as any victim's. Before the fix the pass counted them as still needed and freed them
again from other victims: one block too many, each time a retry landed. A retry refused again
is charged again at its report, which then frees its bytes from other victims (so the tier, or
the tenant's quota, is held as before)."""

from __future__ import annotations

import contextlib
from collections.abc import Hashable
from typing import Any

import pytest

from ctxcache import ContextCache
from ctxcache.tiers.fake import FakeSlowTier

from .tenancy_util import ask, cache_with, prompt_of
from .test_delete_errors import Refusing, _full_tier, store


def one(i: int) -> list[int]:
    """A one-block prompt: its own chain, so every block is a leaf (evictable) from the start."""
    return prompt_of(i, n_blocks=1)


def put(cache: ContextCache, tier: FakeSlowTier, tenant: str, i: int) -> Hashable:
    """One block stored and landed; returns its key. One at a time: a write landing while the next
    store makes room counts twice until reported."""
    before = set(tier.keys())  # noqa: SIM118 (a Tier method)
    ask(cache, tenant, one(i))
    assert cache.flush(10)
    (key,) = set(tier.keys()) - before  # noqa: SIM118
    return key


def _blob(tenants: dict[str, Any]) -> int:
    """The bytes one block of a one-letter tenant takes in a fake slow tier."""
    probe = cache_with([FakeSlowTier(1 << 20)], tenants)
    ask(probe, "a", one(999))
    assert probe.flush(10)
    blob = probe.slots[0].tenant_used("a")
    probe.close()
    return blob


def test_a_retry_that_lands_frees_exactly_the_room_needed():
    cache, tier, hook, blob = _full_tier(4)
    k0, k1, k2, k3 = list(tier.keys())  # least recently used first
    hook.bad.add(k0)
    store(cache, 4)  # k0 is evicted; its delete fails once: charged again, 5 blocks in 4 blocks' room
    assert cache.flush(10) and cache.slots[0].used() == tier.used_bytes == 5 * blob
    hook.bad.clear()  # the retry will land
    hook.deletes.clear()
    evictions = cache.stats()["evictions"]
    store(cache, 5)  # room for 2 blocks: the retried k0 and one more
    assert cache.flush(10)
    assert hook.deletes == [k0, k1]  # before the fix: [k0, k1, k2]
    assert cache.stats()["evictions"] - evictions == 2
    assert {k2, k3} < set(tier.keys()) and len(tier.store) == 4  # noqa: SIM118
    assert cache.slots[0].used() == tier.used_bytes == 4 * blob  # full, as the capacity allows
    cache.close()


@pytest.mark.parametrize("spare", [True, False])
def test_with_tenant_stages_a_landed_retry_takes_no_more_victims(spare):
    """Stages: a's blocks (over its weighted share), then best effort (a's), then SLO (s's). The
    retried block is a's. ``spare``: a has more blocks the first stage could take (before the fix
    it took one, a's). Without them the first stage ends at the retry and one more block: no
    later stage (s's blocks) is reached, before the fix either (the pass ends at a stage's end
    once its room is made, the retried bytes counted or not)."""
    tenants = {"a": {"weight": 1}, "s": {"priority": 1, "weight": 3}}
    blob = _blob(tenants)
    hook = Refusing()
    tier = FakeSlowTier(8 * blob, on_call=hook, high=1.0, low=1.0)
    cache = cache_with([tier], tenants)
    s_keys = [put(cache, tier, "s", i) for i in range(5)]  # within s's share (6 blocks)
    a0, a1, a2 = (put(cache, tier, "a", i) for i in range(10, 13))  # over a's share (2): full
    assert cache.slots[0].tenant_used("s") == 5 * blob and cache.slots[0].used() == 8 * blob
    hook.bad.add(a0)
    a3 = put(cache, tier, "a", 13)  # a0 leaves first (over share); its delete fails once
    assert hook.deletes == [a0, a0] and cache.slots[0].used() == 9 * blob
    hook.bad.clear()
    hook.deletes.clear()
    with contextlib.ExitStack() as held:
        if not spare:  # a2 and a3 pinned: the first stage can take a0 and a1 only
            for i in (12, 13):
                m = held.enter_context(cache.lookup(cache.prompt(one(i), "a")))
                assert m.n_blocks == 1
        s_keys.append(put(cache, tier, "s", 5))  # room for 2 blocks: a0 (retried) and a1
    assert hook.deletes == [a0, a1]  # before the fix, with spare: [a0, a1, a2]
    assert set(tier.keys()) == {a2, a3, *s_keys}  # noqa: SIM118
    assert cache.slots[0].tenant_used("s") == 6 * blob and cache.slots[0].used() == 8 * blob
    cache.close()


@pytest.mark.parametrize("again", [False, True])
def test_a_quota_pass_that_lands_a_retry_keeps_the_tenant_at_its_quota(again):
    """``again``: the retry is refused too. Its report charges the block again, over the quota
    the pass made room against, and frees that from another of the tenant's blocks."""
    blob = _blob({"a": {}})
    tenants = {"a": {"quota": {"fake-slow": 4 * blob}}}
    hook = Refusing()
    tier = FakeSlowTier(1 << 20, on_call=hook)
    cache = cache_with([tier], tenants)
    a0, a1, a2, a3 = (put(cache, tier, "a", i) for i in range(4))  # a at its quota
    hook.bad.add(a0)
    a4 = put(cache, tier, "a", 4)  # a0 leaves (quota); its delete fails: a is one block over
    assert cache.slots[0].tenant_used("a") == 5 * blob
    if not again:
        hook.bad.clear()
    hook.deletes.clear()
    quota_evictions = cache.stats()["quota_evictions"]
    a5 = put(cache, tier, "a", 5)  # room for 2 of a's blocks: a0 (retried) and a1
    assert cache.slots[0].tenant_used("a") == 4 * blob  # before the fix: 3 blocks (again: 4)
    if again:  # a0 stays stored and charged: a2 made its room, once a0's refusal reported
        assert set(hook.deletes) == {a0, a1, a2} and set(tier.keys()) == {a0, a3, a4, a5}  # noqa: SIM118
        assert cache.stats()["quota_evictions"] - quota_evictions == 3
    else:
        assert hook.deletes == [a0, a1] and set(tier.keys()) == {a2, a3, a4, a5}  # noqa: SIM118
        assert cache.stats()["quota_evictions"] - quota_evictions == 2
    assert cache.slots[0].used() == tier.used_bytes
    cache.close()
