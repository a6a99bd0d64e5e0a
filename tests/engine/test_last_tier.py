"""The last tier makes room too: when disk is full, its oldest blocks go so that newer demotions
land (a last tier that never evicts would keep the first blocks ever demoted and drop every newer
one). Mutation testing found no test filling the last tier of a multi-tier cache."""

from __future__ import annotations

import numpy as np

from ctxcache import ContextCache

BS = 4


def prompt(i: int) -> list[int]:
    return [i * 100 + j for j in range(2 * BS)]  # two blocks


def test_a_full_disk_evicts_its_oldest_blocks_for_newer_demotions(tmp_path):
    tiers = [
        {"kind": "memory", "capacity": 4096},  # under four 1 KiB blocks
        # about 13 blocks; demotion only: a write-through disk would also hold RAM's blocks (fewer distinct ones)
        {"kind": "disk", "capacity": 16384, "path": str(tmp_path), "fsync": False, "write": "demote"},
    ]
    cache = ContextCache.from_config({"block_size": BS, "tiers": tiers})
    for i in range(10):
        with cache.lookup(prompt(i)) as m:
            blocks = [[np.full(256, i * 10 + b, np.float32)] for b in range(m.n_blocks, 2)]
            cache.store(prompt(i), blocks, "default", first_block=m.n_blocks)
        cache.flush()  # demotions landed: disk blocks in flight are never evicted
    assert cache.stats()["evictions"] > 0
    for i in range(4, 10):  # the newest six prompts: in RAM or demoted most recently
        with cache.lookup(prompt(i)) as m:
            assert m.n_blocks == 2 and float(np.asarray(m.payloads[1][0])[0]) == i * 10 + 1
    with cache.lookup(prompt(0)) as m:
        assert m.n_blocks == 0  # the first blocks made room long ago
    cache.close()
