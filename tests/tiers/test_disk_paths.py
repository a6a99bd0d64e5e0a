"""DiskTier paths mutation testing found unchecked: two writers racing to create a new shard
directory, and the owners of blocks found on start (which the engine charges them to)."""

from __future__ import annotations

import os

import numpy as np

from ctxcache.tiers import BlockMeta, DiskTier

KEYS = [bytes([i]) * 16 for i in range(3)]
TOKENS = np.arange(4, dtype="<i4").tobytes()


def test_a_writer_that_loses_the_race_for_a_new_shard_still_stores(tmp_path, monkeypatch):
    t = DiskTier(1 << 20, path=tmp_path, fsync=False)
    real = os.replace
    raced: list[str] = []

    def replace(src, dst):
        if not raced:
            # Another thread's first write of this shard made the directory after our rename
            # found it missing and before our mkdir.
            raced.append(str(dst))
            os.mkdir(os.path.dirname(dst), 0o700)
            raise FileNotFoundError(dst)
        return real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    t.put(KEYS[0], b"block zero", BlockMeta(TOKENS))
    assert raced and t.get(KEYS[0]) == b"block zero"
    assert not list((tmp_path / "tmp").iterdir())
    t.close()


def test_owners_of_blocks_found_on_start(tmp_path):
    t = DiskTier(1 << 20, path=tmp_path, fsync=False)
    t.put(KEYS[0], b"owned", BlockMeta(TOKENS, tenant=b"alice"))
    t.put(KEYS[1], b"no owner", BlockMeta(TOKENS))
    t.close()
    again = DiskTier(1 << 20, path=tmp_path, fsync=False)
    assert again.tenant_of(KEYS[0]) == b"alice"
    assert again.tenant_of(KEYS[1]) == b""  # unknown: the engine charges it to no tenant
    assert again.tenant_of(KEYS[2]) == b""  # not held at all
    again.close()


def test_options_reach_the_blob_tier(tmp_path):
    t = DiskTier(1 << 20, "fifo", path=tmp_path, name="ssd", codec="fp16", compression="zstd", high=0.9, low=0.5)
    assert (t.name, t.policy_spec, t.high, t.low) == ("ssd", "fifo", 0.9, 0.5)
    assert t.codec is not None and (t.codec.mode, t.codec.compression) == ("fp16", "zstd")
    assert t.put(KEYS[0], [np.ones(1024, np.float32)], BlockMeta(TOKENS)) < 1024  # 4 KiB, compressed
    assert float(t.get(KEYS[0])[0][0]) == 1.0
    t.close()
