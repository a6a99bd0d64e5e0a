"""The memory tier stores a block's size only where it differs from the first size it stored (a
model's KV blocks are one size): its accounting must still be exact under any mix of sizes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxcache.tiers import MemoryTier

OPS = st.lists(st.tuples(st.booleans(), st.integers(0, 15), st.sampled_from([0, 3, 8, 8, 8, 50])), max_size=120)


@settings(max_examples=200, deadline=None)
@given(OPS)
def test_sizes_and_used_bytes_stay_exact(ops):
    tier = MemoryTier(1 << 20)
    ref: dict[bytes, int] = {}
    for put, i, size in ops:
        key = bytes([i]) * 16
        if put:
            assert tier.put(key, b"x" * size) == size
            ref[key] = size
        else:
            assert tier.delete(key) == (ref.pop(key, None) is not None)
        assert tier.used_bytes == sum(ref.values())
        assert all(tier.nbytes(bytes([j]) * 16) == ref.get(bytes([j]) * 16, 0) for j in range(16))
    assert len(tier) == len(ref) and set(tier.keys()) == set(ref)
    stored = sum(len(s) for s in tier._sizes.shards)
    assert stored == sum(1 for s in ref.values() if s != tier._common)  # only the exceptions
