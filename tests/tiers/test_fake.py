"""The fake RAM tier is a MemoryTier that logs its storage calls and loses keys on demand: every
read path (get, get_many, load_many) goes through the log and the losses, as the engine tests
that use it assume."""

from __future__ import annotations

from ctxcache.tiers import MemoryTier
from ctxcache.tiers.fake import FakeTier

KEYS = [bytes([i]) * 16 for i in range(3)]


def test_the_fake_ram_tier_logs_every_storage_call_and_loses_keys_on_demand():
    seen: list[tuple[str, tuple[object, ...]]] = []
    t = FakeTier(1 << 20, name="ram", on_call=lambda name, keys: seen.append((name, keys)))
    assert isinstance(t, MemoryTier) and t.kind == "fake" and t.name == "ram"
    for i, k in enumerate(KEYS):
        assert t.put(k, b"v" * (i + 1)) == i + 1
    assert t.used_bytes == 6 and len(t) == 3
    t.lose.add(KEYS[1])
    assert t.get(KEYS[0]) == b"v" and t.get(KEYS[1]) is None
    assert t.get_many(KEYS) == [b"v", None, b"vvv"]
    blocks = t.load_many(KEYS, [None] * 3)
    assert [b is not None and b.payload for b in blocks] == [b"v", False, b"vvv"]
    assert t.delete(KEYS[2]) and t.used_bytes == 3
    assert t.calls == ["put"] * 3 + ["get"] * 8 + ["delete"]
    assert seen[0] == ("put", (KEYS[0],)) and seen[-1] == ("delete", (KEYS[2],))
