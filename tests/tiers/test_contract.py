"""The Tier contract: every tier kind (memory hot, memory warm, disk, Redis, Redis Cluster, and the
FakeTier the engine tests use) through the same cases. What one kind does, all do; where the
contract depends on a declared capability (``codec``, ``persistent``), the case says so.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from ctxcache.codec import Codec
from ctxcache.tiers import BlockMeta, DiskTier, MemoryTier, RedisTier, Tier
from ctxcache.tiers.fake import FakeSlowTier, FakeTier

KINDS = ["memory-hot", "memory-warm", "disk", "redis", "redis-cluster", "fake", "fake-slow"]
KEYS = [bytes([i]) * 16 for i in range(6)]
_prefixes = itertools.count()


def toks(i: int) -> bytes:
    return np.full(4, i, "<i4").tobytes()


def meta(i: int) -> BlockMeta:
    return BlockMeta(toks(i), KEYS[i - 1] if i else b"\0" * 16, i)


def payload(i: int, n: int = 64) -> list[np.ndarray]:
    return [np.full(n, i, np.float32)]  # what codecs take: a list of arrays


def same(a: object, b: list[np.ndarray]) -> bool:
    return a is not None and len(a) == 1 and np.array_equal(np.asarray(a[0]), b[0])


@pytest.fixture(params=KINDS)
def tier(request, tmp_path):
    kind = request.param
    prefix = f"contract{next(_prefixes)}:"
    if kind == "memory-hot":
        t: Tier = MemoryTier(1 << 20)
    elif kind == "memory-warm":
        t = MemoryTier(1 << 20, mode="warm", codec="fp16", compression="lz4")
    elif kind == "disk":
        t = DiskTier(1 << 20, path=tmp_path, fsync=False)
    elif kind == "redis":
        t = RedisTier(1 << 20, url=request.getfixturevalue("redis_url"), prefix=prefix, timeout=0.5)
    elif kind == "redis-cluster":
        url = request.getfixturevalue("redis_cluster")[0].url.rsplit("/", 1)[0]
        t = RedisTier(1 << 20, url=url, cluster=True, prefix=prefix, timeout=0.5)
    elif kind == "fake":
        t = FakeTier(1 << 20)
    else:
        t = FakeSlowTier(1 << 20)
    if isinstance(t, RedisTier):
        assert t.wait_ready()
    t.token_bytes = len(toks(0))
    yield t
    t.close()


def test_put_get_delete_and_byte_accounting(tier):
    assert tier.get(KEYS[0]) is None and KEYS[0] not in tier and len(tier) == 0 and tier.used_bytes == 0
    sizes = [tier.put(k, payload(i), meta(i)) for i, k in enumerate(KEYS[:3])]
    assert len(tier) == 3 and all(k in tier for k in KEYS[:3]) and KEYS[3] not in tier
    assert [tier.nbytes(k) for k in KEYS[:3]] == sizes and tier.used_bytes == sum(sizes)
    assert all(same(tier.get(k), payload(i)) for i, k in enumerate(KEYS[:3]))
    assert tier.delete(KEYS[1]) and not tier.delete(KEYS[1])
    assert KEYS[1] not in tier and tier.get(KEYS[1]) is None and tier.nbytes(KEYS[1]) == 0
    assert tier.used_bytes == sizes[0] + sizes[2]


def test_a_put_replaces_and_recharges(tier):
    tier.put(KEYS[0], payload(0, 64), meta(0))
    size = tier.put(KEYS[0], payload(7, 256), meta(0))
    assert len(tier) == 1 and tier.used_bytes == size == tier.nbytes(KEYS[0])
    assert same(tier.get(KEYS[0]), payload(7, 256))


def test_batch_calls_agree_with_single_ones(tier):
    assert tier.put_many([(k, payload(i)) for i, k in enumerate(KEYS[:4])]) == tier.used_bytes
    assert tier.contains_many(KEYS[:5]) == [True] * 4 + [False]
    got = tier.get_many(KEYS[:5])
    assert all(same(g, payload(i)) for i, g in enumerate(got[:4])) and got[4] is None
    assert tier.delete_many(KEYS[:2] + KEYS[5:]) == 2 and tier.contains_many(KEYS[:4]) == [False, False, True, True]


def test_load_many_checks_token_bytes_where_blocks_carry_them(tier):
    tier.put(KEYS[2], payload(2), meta(2))
    block = tier.load_many([KEYS[2], KEYS[3]], [toks(2), toks(3)])
    assert same(block[0].payload, payload(2)) and block[1] is None
    wrong = tier.load_many([KEYS[2]], [toks(9)])[0]
    if tier.codec is not None:  # a header carries the tokens: another prompt's block is a miss
        assert wrong is None and block[0].tokens == toks(2) and block[0].depth == 2
    else:  # live objects: the radix index has already verified the tokens
        assert same(wrong.payload, payload(2))


def test_no_false_negatives_and_keys_oldest_first(tier):
    for i, k in enumerate(KEYS[:4]):
        tier.put(k, payload(i), meta(i))
    assert tier.might_contain_many(KEYS[:4]) == [True] * 4
    if tier.ordered_keys:
        assert list(tier.keys()) == KEYS[:4]
    else:  # sharded RAM maps keep no global order (and no policy learns a RAM tier at start)
        assert sorted(tier.keys()) == KEYS[:4] and not tier.persistent


def test_size_of_bounds_what_a_put_charges(tier):
    for i, n in enumerate((16, 64, 1024)):
        assert tier.size_of(payload(i, n)) >= tier.put(KEYS[i], payload(i, n), meta(i))


def test_blob_passthrough_is_declared_by_codec(tier):
    tier.put(KEYS[0], payload(0), meta(0))
    if tier.codec is None:
        with pytest.raises(NotImplementedError):
            tier.get_blob(KEYS[0])
        with pytest.raises(NotImplementedError):
            tier.put_blob(KEYS[1], b"x")
        return
    blob = tier.get_blob(KEYS[0])
    other = MemoryTier(1 << 20, mode="warm", codec=tier.codec.mode, compression=tier.codec.compression)
    other.put_blob(KEYS[0], blob)  # the same codec reads it as is: no re-encoding
    assert same(other.get(KEYS[0]), payload(0))
    assert tier.put_blobs([(KEYS[1], Codec(tier.codec.mode, tier.codec.compression).encode(payload(1), KEYS[1]))]) == [
        True
    ]
    assert same(tier.get(KEYS[1]), payload(1)) and tier.get_blob(KEYS[5]) is None


def test_forget_and_adopt_are_declared_by_persistent(tier):
    size = tier.put(KEYS[0], payload(0), meta(0))
    if not tier.persistent:
        with pytest.raises(NotImplementedError):
            tier.adopt(KEYS[0], size)
        tier.forget(KEYS[0])  # a RAM tier simply drops what it can no longer serve
        assert KEYS[0] not in tier and tier.used_bytes == 0
        return
    tier.forget(KEYS[0])  # stop charging; storage untouched
    assert KEYS[0] not in tier and tier.used_bytes == 0
    block = tier.load_many([KEYS[0]], [toks(0)])[0]  # still in storage: a discovery finds it
    assert block is not None and same(block.payload, payload(0))
    tier.adopt(KEYS[0], block.nbytes)
    tier.adopt(KEYS[0], block.nbytes)  # idempotent
    assert KEYS[0] in tier and tier.used_bytes == block.nbytes == size


def test_a_slow_tier_charges_a_landed_write_through_landing(tier):
    seen = []

    def landing(kb, charge):  # the engine's hook: the block is stored, not yet charged
        seen.append((kb, tier.get_blob(kb) is not None, kb in tier, tier.used_bytes))
        charge()

    tier.landing = landing
    size = tier.put(KEYS[0], payload(0), meta(0))
    assert KEYS[0] in tier and tier.used_bytes == size == tier.nbytes(KEYS[0])
    if not tier.slow:  # written under the engine's lock: nothing to hook
        assert seen == []
        return
    blob = Codec(tier.codec.mode, tier.codec.compression).encode(payload(1), KEYS[1])
    assert tier.put_blobs([(KEYS[1], blob)]) == [True] and tier.used_bytes == size + len(blob)
    assert seen == [(KEYS[0], True, False, 0), (KEYS[1], True, False, size)]


def test_stats_are_storage_only(tier):
    tier.put(KEYS[0], payload(0), meta(0))
    s = tier.stats()
    assert s["kind"] == tier.kind and s["blocks"] == 1 and s["bytes"] == tier.used_bytes
    assert s["corrupt"] == 0 and s["healthy"] is True
    assert not {"policy", "hits", "evictions"} & set(s)  # the engine's Slot adds those


def _kinds() -> dict[str, object]:
    import torch

    a = np.arange(64, dtype=np.float32)
    return {
        "bytes": b"\x01" * 64,
        "bare numpy array": a,
        "bare torch tensor": torch.arange(64, dtype=torch.float32),
        "bfloat16 tensor": torch.arange(64, dtype=torch.bfloat16),
        "list": [a, a + 1],
        "tuple": (a, a + 1),
        "dict": {"k": a, "v": a + 1},
        "(K, V) pairs": [(a, a + 1), (a + 2, a + 3)],
    }


def _flat(p: object) -> list[np.ndarray]:
    """A payload as a flat list of float64 arrays (torch and numpy, tuple and list compare equal)."""
    if isinstance(p, (bytes, bytearray, memoryview)):
        return [np.frombuffer(p, np.uint8).astype(np.float64)]
    if isinstance(p, dict):
        return [x for v in p.values() for x in _flat(v)]
    if isinstance(p, (list, tuple)):
        return [x for v in p for x in _flat(v)]
    return [np.asarray(p.float() if hasattr(p, "float") else p, dtype=np.float64)]


@pytest.mark.parametrize("kind", list(_kinds()))
def test_every_tier_takes_every_documented_payload_kind(tier, kind):
    p = _kinds()[kind]
    tier.put(KEYS[0], p, meta(0))
    got = tier.get(KEYS[0])
    assert got is not None
    assert all(np.array_equal(x, y) for x, y in zip(_flat(got), _flat(p), strict=True))


BAD = {
    "str": "not a payload",
    "None": None,
    "int": 7,
    "list of str": ["a", "b"],
    "object array": np.array([object()]),
    "complex dtype": [np.ones(4, np.complex64)],
    "int dict keys": {1: np.ones(4)},
}


@pytest.mark.parametrize("bad", list(BAD))
def test_every_tier_refuses_anything_else_with_the_same_error(tier, bad):
    from ctxcache.errors import PayloadError

    with pytest.raises(PayloadError) as exc:
        tier.put(KEYS[0], BAD[bad], meta(0))
    with pytest.raises(PayloadError) as ref:
        Codec().encode(BAD[bad], KEYS[0])
    assert str(exc.value) == str(ref.value)
    assert KEYS[0] not in tier and tier.used_bytes == 0
