"""ContextCache.set_tenant_ttl: a tenant's TTL changed at run time applies to the blocks it holds
(re-stamped from their last use), the sweep reclaims what a shorter TTL expired, and an erased
block a lookup still holds is never brought back by a new TTL."""

from __future__ import annotations

import pytest

from ctxcache import ContextCache
from ctxcache.engine.tenancy import UnknownTenantError
from ctxcache.errors import CtxCacheError
from ctxcache.tiers import MemoryTier

from .tenancy_util import BS, cache_with, payloads

TOKENS = list(range(1, 1 + 3 * BS))


def _cache(clock, ttl: str | None = None) -> ContextCache:
    spec = {} if ttl is None else {"ttl": ttl}
    return cache_with([MemoryTier(1 << 20)], {"a": spec, "b": {}}, clock=clock)


def _store(cache: ContextCache, tokens: list[int] = TOKENS, tenant: str = "a") -> None:
    cache.store(tokens, payloads(tokens), tenant, 0)


def _hit(cache: ContextCache, tokens: list[int] = TOKENS, tenant: str = "a") -> int:
    with cache.lookup(tokens, tenant) as m:
        return m.hit_tokens


def test_a_ttl_set_where_there_was_none_expires_the_blocks_held_and_the_sweep_reclaims_them(clock):
    cache = _cache(clock)
    _store(cache)
    _store(cache, tenant="b")
    assert cache._engine._sweeper is None  # no tenant had a TTL
    out = cache.set_tenant_ttl("a", 10.0)
    assert out == {"tenant": "a", "ttl": 10.0, "blocks_restamped": 3}
    assert cache._engine._sweeper is not None  # started for it
    clock.advance(11)
    assert cache.sweep() == 3
    assert _hit(cache) == 0 and _hit(cache, tenant="b") == 3 * BS  # b has no TTL
    cache.close()


def test_a_shorter_ttl_expires_blocks_idle_longer_than_it_at_once(clock):
    cache = _cache(clock, "100s")
    _store(cache)
    clock.advance(20)  # idle 20 s: within 100 s, past 10 s
    assert _hit(cache) == 3 * BS
    clock.advance(20)
    assert cache.set_tenant_ttl("a", 10)["blocks_restamped"] == 3  # last used at 20: due at 30
    assert _hit(cache) == 0
    assert cache.sweep() == 3 and len(cache.index) == 0
    cache.close()


def test_a_longer_ttl_keeps_blocks_for_longer_and_new_hits_use_it(clock):
    cache = _cache(clock, "10s")
    _store(cache)
    clock.advance(5)
    cache.set_tenant_ttl("a", 100)
    clock.advance(50)  # past the old TTL, within the new one
    assert cache.sweep() == 0 and _hit(cache) == 3 * BS  # a hit: due at 155 now
    clock.advance(99)
    assert cache.sweep() == 0 and _hit(cache) == 3 * BS
    cache.close()


def test_no_ttl_drops_every_deadline(clock):
    cache = _cache(clock, "10s")
    _store(cache)
    assert cache.set_tenant_ttl("a", None) == {"tenant": "a", "ttl": None, "blocks_restamped": 3}
    clock.advance(1000)
    assert cache.sweep() == 0 and _hit(cache) == 3 * BS
    cache.close()


def test_an_erased_block_still_held_is_not_brought_back_by_a_new_ttl(clock):
    cache = _cache(clock)
    _store(cache)
    held = cache.lookup(TOKENS, "a")
    assert cache.erase_tenant("a")["in_use"] == 3
    assert cache.set_tenant_ttl("a", 1000)["blocks_restamped"] == 0
    assert _hit(cache) == 0
    cache.release(held)
    assert _hit(cache) == 0 and cache.sweep() == 3
    cache.close()


def test_an_unknown_tenant_or_a_cache_without_tenants_is_an_error(clock):
    cache = _cache(clock)
    with pytest.raises(UnknownTenantError, match="nobody") as err:
        cache.set_tenant_ttl("nobody", 10)
    assert isinstance(err.value, CtxCacheError)
    with pytest.raises(ValueError, match="positive"):
        cache.set_tenant_ttl("a", -1)
    cache.close()
    plain = ContextCache([MemoryTier(1 << 20)], block_size=BS)
    with pytest.raises(UnknownTenantError):
        plain.set_tenant_ttl("default", 10)
    plain.close()
