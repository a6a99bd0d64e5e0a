"""Without tenants every block belongs to the namespace's tenant, "default": the bytes a tier
reports per tenant (``stats()["tiers"][name]["tenants"]``, exported as
``ctxcache_tenant_tier_bytes``) must say so for promoted and discovered blocks too, and for blocks a failed demotion left in place, not file them
under the orphans' owner "" (blocks an earlier run left, shown as "(unknown)")."""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from ctxcache import ContextCache
from ctxcache.tiers import MemoryTier, RedisTier
from ctxcache.tiers.fake import FakeSlowTier

BS = 4
TOKENS = list(range(2 * BS))


def _payloads() -> list[list[np.ndarray]]:
    return [[np.full(16, i, np.float32)] for i in range(2)]


def _write_down(cache: ContextCache) -> None:
    with cache._engine.lock:
        cache._engine.placement.make_room(0, cache.slots[0].used())
    cache.flush()


def _owners(cache: ContextCache, tier: str) -> set[str]:
    return set(cache.stats()["tiers"][tier]["tenants"])


def test_a_promoted_block_stays_the_default_tenants():
    cache = ContextCache([MemoryTier(1 << 20, name="hot"), FakeSlowTier(1 << 20, name="low")], block_size=BS)
    cache.store(TOKENS, _payloads(), "default", 0)
    _write_down(cache)
    with cache.lookup(TOKENS) as m:
        assert m.usage.by_tier == {"low": 2 * BS}  # promoted back to hot
    assert cache.stats()["promotions"] == 2
    assert _owners(cache, "hot") == {"default"} and _owners(cache, "low") == {"default"}
    cache.close()


def test_a_discovered_block_is_the_default_tenants(tmp_path, redis_url):
    def cache() -> ContextCache:
        red = RedisTier(1 << 20, url=redis_url, prefix=f"own{id(tmp_path)}:", timeout=0.5, bloom=False, name="red")
        assert red.wait_ready()
        return ContextCache([MemoryTier(1 << 20, name="hot"), red], block_size=BS, promote=False)

    writer = cache()
    writer.store(TOKENS, _payloads(), "default", 0)
    _write_down(writer)
    writer.close()
    reader = cache()
    with reader.lookup(TOKENS) as m:
        assert m.n_blocks == 2
    assert reader.stats()["discovered"] == 2 and _owners(reader, "red") == {"default"}
    reader.close()


class _RefusingSlowTier(FakeSlowTier):
    """Up, but refuses every write (a full or read-only backend)."""

    def put_blobs(self, items: Sequence[tuple[Hashable, bytes]]) -> list[bool]:
        return [False] * len(items)


def test_a_block_whose_demotion_failed_stays_the_default_tenants():
    top = FakeSlowTier(1 << 20, name="top")
    cache = ContextCache([top, _RefusingSlowTier(1 << 20, name="below")], block_size=BS)
    cache.store(TOKENS, _payloads(), "default", 0)
    cache.flush()
    used = cache.slots[0].tenant_used("default")
    _write_down(cache)  # both writes are refused: the blocks stay in the top tier
    assert cache.stats()["write_errors"] == 2
    assert _owners(cache, "top") == {"default"} and cache.slots[0].tenant_used("default") == used
    cache.close()
