"""What a store reports: the tokens it created per tier, and a class-0 tenant refused at the
pinned-bytes cap told how much it holds itself (mutation testing found both unchecked)."""

from __future__ import annotations

import pytest

from ctxcache import ContextCache
from ctxcache.engine.tenancy import PinnedQuotaError
from ctxcache.errors import PayloadError

from .tenancy_util import BS, ask, cache_with, payloads, prompt_of, tier_of

BLOCK = 64  # bytes a hot memory tier charges for one test block (16 float32)


def test_a_store_reports_the_tokens_it_created_in_the_top_tier(tmp_path):
    cache = ContextCache([tier_of("memory", tmp_path, name="hot"), tier_of("disk", tmp_path)], block_size=BS)
    toks = prompt_of(1)
    usage = cache.store(toks, payloads(toks), "default", 0)
    assert usage.cache_creation_tokens == 4 * BS and usage.by_tier == {"hot": 4 * BS}
    again = cache.store(toks, payloads(toks), "default", 0)  # all cached already: nothing created
    assert again.cache_creation_tokens == 0 and again.by_tier == {}
    cache.close()


def test_the_pinned_cap_refusal_gives_the_tenants_own_bytes(tmp_path):
    cache = cache_with(
        [tier_of("memory", tmp_path, capacity=16 * BLOCK)], {"s1": {"priority": 0}}, max_pinned=6 * BLOCK
    )
    ask(cache, "s1", prompt_of(1))  # 4 blocks
    with pytest.raises(PinnedQuotaError, match=rf"storing {3 * BLOCK} B more \(it holds {4 * BLOCK} B\)"):
        ask(cache, "s1", prompt_of(2, n_blocks=3))


@pytest.mark.parametrize("tier", ["memory", "memory-warm", "disk"])
def test_a_payload_the_tier_refuses_stores_nothing(tmp_path, tier):
    """Refused while measuring, before the lock. A hot memory tier used to measure a str and
    refuse it in ``put``, under the lock: its block stayed indexed with no payload, uncharged."""
    cache = ContextCache([tier_of(tier, tmp_path)], block_size=BS)
    with pytest.raises(PayloadError, match="cannot encode a payload of type str"):
        cache.store(prompt_of(1, 2), [b"kv", "str"], "default", 0)
    assert len(cache.index) == 0 and len(cache.tiers[0]) == 0 and cache.stats()["stores"] == 0
    cache.close()
