"""MemoryTier paths mutation testing found unchecked: a warm tier verifies the key in a blob's
header like disk and Redis do (a blob copied in under another key is a counted miss), the
diagnostics list of what a tier holds, what its stats report, and the base Tier's answers for
what a RAM tier cannot do or cannot know."""

from __future__ import annotations

import numpy as np
import pytest

from ctxcache.tiers import BlockMeta, MemoryTier

KEYS = [bytes([i]) * 16 for i in range(3)]
TOKENS = np.arange(4, dtype="<i4").tobytes()  # the same token bytes in every block


def test_a_warm_blob_put_under_another_key_is_a_counted_miss():
    # put_blob is how the mover copies blocks between tiers of one format: the key in the header
    # is the only thing that tells a blob filed under the wrong name (checksums and tokens match).
    t = MemoryTier(1 << 20, mode="warm")
    t.put(KEYS[0], [np.full(4, 0, np.float32)], BlockMeta(TOKENS))
    blob = t.get_blob(KEYS[0])
    assert blob is not None
    t.put_blob(KEYS[1], blob)
    assert t.load_many([KEYS[1]], [TOKENS]) == [None]
    assert t.corrupt == 1 and KEYS[1] not in t
    t.put_blob(KEYS[2], blob)
    assert t.get(KEYS[2]) is None and t.corrupt == 2 and KEYS[2] not in t
    got = t.load_many([KEYS[0]], [TOKENS])[0]
    assert got is not None and got.key == KEYS[0] and float(got.payload[0][0]) == 0.0


@pytest.mark.parametrize("mode", ["hot", "warm"])
def test_payloads_lists_what_the_tier_holds(mode):
    t = MemoryTier(1 << 20, mode=mode)
    assert t.payloads() == []
    for i, k in enumerate(KEYS):
        t.put(k, b"payload %d" % i, BlockMeta(TOKENS))
    held = t.payloads()
    if mode == "hot":
        assert sorted(held) == [b"payload 0", b"payload 1", b"payload 2"]
    else:  # the encoded blobs, which is what warm RAM holds
        assert sorted(held) == sorted(t.get_blob(k) for k in KEYS)


def test_stats_report_mode_codec_and_compression():
    assert MemoryTier(1 << 20).stats()["mode"] == "hot"
    warm = MemoryTier(1 << 20, mode="warm", codec="fp16", compression="zstd").stats()
    assert (warm["mode"], warm["codec"], warm["compression"]) == ("warm", "fp16", "zstd")


def test_a_hot_tier_refuses_blob_writes_by_name():
    with pytest.raises(NotImplementedError, match="tier 'hot' does not store encoded blocks"):
        MemoryTier(1 << 20, name="hot").put_blob(KEYS[0], b"blob")


@pytest.mark.parametrize("mode", ["hot", "warm"])
def test_a_ram_tier_names_no_owner(mode):
    # "Unknown" is b"": the engine then charges blocks to no tenant instead of a made-up one.
    t = MemoryTier(1 << 20, mode=mode)
    t.put(KEYS[0], b"payload", BlockMeta(TOKENS, tenant=b"a"))
    assert t.tenant_of(KEYS[0]) == b"" and t.tenant_of(KEYS[1]) == b""
