"""``Tier.size_of`` is what the engine charges against capacities and quotas before a block is
encoded; for tiers that store blobs without compression it must be exactly what ``put`` then
charges for a block of the engine's shape: a 16-byte key and parent, and ``token_bytes`` of token
ids (the engine sets it to 4 x block_size). Headers are padded to 64 bytes, which hides a size
that is off by a few bytes for most lengths, so every token length of one padding period is tried."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ctxcache.codec_arrays import ALIGN
from ctxcache.tiers import BlockMeta, DiskTier, MemoryTier, Tier

PAYLOAD = [(np.ones((2, 8), np.float32), np.zeros((2, 8), np.float32))]  # one layer's (K, V)


def make(kind: str, path: Path) -> Tier:
    if kind == "disk":
        return DiskTier(1 << 24, path=path, fsync=False)
    return MemoryTier(1 << 24, mode="warm")


@pytest.mark.parametrize("kind", ["disk", "memory-warm"])
def test_size_of_is_what_put_charges_for_an_engine_block(kind, tmp_path):
    t = make(kind, tmp_path)
    for i, n in enumerate(range(1024 - ALIGN, 1024 + 1)):
        t.token_bytes = n
        key = i.to_bytes(2, "big") * 8
        charged = t.put(key, PAYLOAD, BlockMeta(bytes(n), parent=b"p" * 16, depth=1))
        assert t.size_of(PAYLOAD) == charged, f"token_bytes={n}"
