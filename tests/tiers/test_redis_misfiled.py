"""A valid block value copied under another key's name in Redis (by a tool, a restore, or a
tenant probing another's blocks) is never served for that key: the Redis twin of
tests/tiers/test_disk_misfiled.py. Checksums and token bytes are fine; only the key in the header
gives it away, so it must be checked on every read path, counted as corrupt and deleted."""

from __future__ import annotations

import numpy as np

from ctxcache.tiers import BlockMeta, RedisTier

KEYS = [bytes([i]) * 16 for i in range(3)]
TOKENS = np.arange(4, dtype="<i4").tobytes()  # the same token bytes in every block


def misfiled(redis_url: str, redis_server) -> RedisTier:
    t = RedisTier(1 << 20, url=redis_url, prefix="mf:", retry_interval=0.05)
    assert t.wait_ready()
    t.put(KEYS[0], b"block zero", BlockMeta(TOKENS))
    t.put(KEYS[1], b"block one", BlockMeta(TOKENS))
    r = redis_server.client()
    r.set(b"mf:" + KEYS[1], r.get(b"mf:" + KEYS[0]))  # zero's value under one's name
    return t


def test_a_value_copied_under_another_key_is_a_counted_miss_and_deleted(redis_url, redis_server):
    t = misfiled(redis_url, redis_server)
    assert t.load_many([KEYS[1]], [TOKENS]) == [None]  # never "block zero"
    assert t.corrupt == 1 and redis_server.client().get(b"mf:" + KEYS[1]) is None
    assert t.get(KEYS[0]) == b"block zero"
    t.close()


def test_the_blob_path_checks_the_key_too(redis_url, redis_server):
    # get_blob feeds copies between tiers of the same format: a misfiled value must not travel on.
    t = misfiled(redis_url, redis_server)
    assert t.get_blob(KEYS[1]) is None and t.corrupt == 1
    assert t.get_blob(KEYS[0]) is not None
    t.close()
