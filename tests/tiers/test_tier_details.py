"""Small tier contracts mutation testing found unchecked (docs/testing.md): counters that count,
stats that report, a Redis tier without a Bloom filter that still answers "maybe", a closed one
that answers "no", and dependency errors raised when a tier is configured, not at first use."""

from __future__ import annotations

import builtins

import numpy as np
import pytest

from ctxcache.errors import MissingDependencyError
from ctxcache.tiers import BlockMeta, DiskTier, MemoryTier, RedisTier
from ctxcache.tiers.bloom import KeyFilter

KEYS = [bytes([i]) * 16 for i in range(4)]
TOKENS = np.arange(4, dtype="<i4").tobytes()


def test_a_warm_tier_counts_every_corrupt_blob_and_no_miss():
    t = MemoryTier(1 << 20, mode="warm")
    for k in KEYS[:3]:
        t.put(k, [np.ones(4, np.float32)], BlockMeta(TOKENS))
    assert t.load_many([b"?" * 16, b"!" * 16], [TOKENS, None]) == [None, None]
    assert t.corrupt == 0  # a key it never had is a miss, not damage
    for k in KEYS[:2]:
        t._data[k] = b"garbage"  # what a bit flip in RAM would leave
    assert t.load_many(KEYS[:3], [TOKENS] * 3)[:2] == [None, None]
    assert t.corrupt == 2 and KEYS[0] not in t and KEYS[2] in t


def test_a_hot_tier_says_it_holds_no_encoded_blocks():
    with pytest.raises(NotImplementedError, match="tier 'hot' does not store encoded blocks"):
        MemoryTier(1 << 20, name="hot").get_blob(KEYS[0])


def test_disk_stats_report_the_blocks_recovered_on_start(tmp_path):
    t = DiskTier(1 << 20, path=tmp_path, fsync=False)
    for k in KEYS:
        t.put(k, b"block", BlockMeta(TOKENS))
    t.close()
    again = DiskTier(1 << 20, path=tmp_path, fsync=False)
    assert again.stats()["recovered"] == len(KEYS) and again.stats()["path"] == str(tmp_path)


def test_redis_without_bloom_answers_maybe_and_closed_answers_no(redis_url):
    t = RedisTier(1 << 20, url=redis_url, ttl="1h", bloom=False, retry_interval=0.05)
    assert t.wait_ready()
    t.put(KEYS[0], b"block", BlockMeta(TOKENS))
    assert t.might_contain_many(KEYS[:2]) == [True, True]  # no filter: every key may be there
    assert t.stats()["ttl"] == 3600
    t.close()
    assert t.might_contain_many(KEYS[:2]) == [False, False]  # closed: never worth a round trip


def test_a_missing_rbloom_fails_when_the_filter_is_made(monkeypatch):
    real = builtins.__import__

    def no_rbloom(name, *a, **kw):
        if name == "rbloom":
            raise ImportError(name)
        return real(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_rbloom)
    with pytest.raises(MissingDependencyError, match=r"the Bloom filter needs 'rbloom': pip install"):
        KeyFilter(10)
