"""Options a blob tier (disk, Redis) passes on to its codec."""

from __future__ import annotations

import numpy as np

from ctxcache.tiers import BlockMeta, DiskTier

KEY = b"k" * 16
TOKENS = np.arange(4, dtype="<i4").tobytes()


def test_the_compression_level_reaches_the_codec(tmp_path):
    t = DiskTier(1 << 20, path=tmp_path, compression="zstd", compression_level=19)
    assert t.codec is not None and (t.codec.compression, t.codec.level) == ("zstd", 19)
    assert t.put(KEY, [np.ones(1024, np.float32)], BlockMeta(TOKENS)) < 1024  # 4 KiB, compressed
    assert float(t.get(KEY)[0][0]) == 1.0
    t.close()
