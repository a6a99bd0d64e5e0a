"""`ctxcache serve` without a config file runs on RAM + local disk, per model."""

from __future__ import annotations

from ctxcache import ContextCache
from ctxcache.server.cli import embedded_tiers


def test_embedded_default_is_ram_over_disk_under_ctxcache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("CTXCACHE_HOME", str(tmp_path))
    tiers = embedded_tiers("gemma-3-270m@0123456789abcdef")
    assert [t["kind"] for t in tiers] == ["memory", "disk"]
    assert tiers[1]["path"] == str(tmp_path / "kv" / "0123456789abcdef")
    assert embedded_tiers("other@fedcba9876543210")[1]["path"] != tiers[1]["path"]  # one directory per model
    with ContextCache.from_config({"block_size": 4, "tiers": tiers}) as cache:
        assert [t.kind for t in cache.tiers] == ["memory", "disk"]
        cache.store(list(range(8)), [b"a" * 64, b"b" * 64])
        with cache.lookup(list(range(8))) as m:
            assert m.hit_tokens == 8
