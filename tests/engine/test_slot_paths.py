"""Per-tenant accounting in a Slot holds for any hashable key, not only the engine's bytes digests
(the slot picks a shard per key type; mutation testing found the non-bytes branch unchecked)."""

from __future__ import annotations

from collections.abc import Hashable

import pytest

from ctxcache.engine import Slot
from ctxcache.policies import make_policy
from ctxcache.tiers import MemoryTier


@pytest.mark.parametrize("key", ["a", 7, ("t", 1), b"\x00" * 8])
def test_a_key_is_charged_to_its_tenant_until_it_leaves(key: Hashable):
    s = Slot(0, MemoryTier(1000), make_policy("lru"))
    s.admit(key, 100, "t")
    s.admit("other", 50, "u")
    assert s.owner(key) == "t" and s.tenant_used("t") == 100 and s.tenant_blocks("t") == [key]
    s.admit(key)  # re-admitted (a refused eviction): keeps its one charge
    assert s.tenant_used("t") == 100
    s.drop(key)
    assert s.owner(key) is None and s.tenant_used("t") == 0 and s.stats()["tenants"] == {"u": 50}
