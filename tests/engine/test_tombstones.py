"""An erased block whose delete a persistent tier refused is never served again, not even after a
restart (engine/tombstones.py): the tier keeps a tombstone journal (disk: a file in its directory;
Redis: a value beside the blocks), the next run deletes those blocks instead of adopting them, and
the journal empties once the deletes land. Without it the restarted engine adopted the file (or
discovery found the Redis value) and served the erased tenant's block."""

from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path
from typing import Any

import numpy as np
import redis

from ctxcache.tiers import DiskTier, RedisTier

from .tenancy_util import BS, cache_with

TENANTS = {"acme": {}}
TOKENS = list(range(1, 1 + 2 * BS))


class RefusingDisk(DiskTier):
    """A disk whose unlinks fail (EIO) while ``refuse`` is set."""

    refuse = False

    def delete(self, key: Hashable) -> bool:
        if self.refuse:
            raise OSError(5, "Input/output error")
        return super().delete(key)


def _store(cache: Any) -> None:
    cache.store(TOKENS, [np.full(8, i, np.float32) for i in range(2)], "acme", 0)
    assert cache.flush(10)


def test_disk_an_erased_block_a_refused_delete_kept_stays_erased_after_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "disk"
    disk = RefusingDisk(1 << 20, path=path, fsync=False)
    cache = cache_with([disk], TENANTS)
    _store(cache)
    disk.refuse = True
    cache.erase_tenant("acme")
    assert len(list((path / "blocks").rglob("*.blk"))) == 2  # still stored: the unlinks failed
    cache.close()
    assert len((path / "tombstones").read_text().split()) == 2

    RefusingDisk.refuse = False
    cache = cache_with([RefusingDisk(1 << 20, path=path, fsync=False)], TENANTS)
    assert cache.lookup(TOKENS, "acme").hit_tokens == 0  # not adopted, not discovered
    assert cache.flush(10)
    assert not list((path / "blocks").rglob("*.blk"))  # deleted at start
    assert not (path / "tombstones").exists()  # and the journal emptied
    cache.close()


def test_redis_an_erased_block_a_refused_delete_kept_stays_erased_after_a_restart(redis_factory: Any) -> None:
    server = redis_factory()
    raw: redis.Redis = server.client()
    tier = RedisTier(1 << 20, url=server.url, prefix="ts:", timeout=0.5)
    assert tier.wait_ready()
    cache = cache_with([tier], TENANTS)
    _store(cache)
    raw.execute_command("ACL", "SETUSER", "default", "-del")  # DEL refused (NOPERM), SET still allowed
    try:
        cache.erase_tenant("acme")
        cache.close()
    finally:
        raw.execute_command("ACL", "SETUSER", "default", "+del")
    blocks = [k for k in raw.keys("ts:*") if k != b"ts:#tombstones"]
    assert len(blocks) == 2  # still stored
    assert len(raw.get("ts:#tombstones").split()) == 2

    tier = RedisTier(1 << 20, url=server.url, prefix="ts:", timeout=0.5)
    assert tier.wait_ready()
    cache = cache_with([tier], TENANTS)
    assert cache.lookup(TOKENS, "acme").hit_tokens == 0  # not discovered
    assert cache.flush(10)
    assert raw.keys("ts:*") == []  # deleted at start, the journal gone with them
    cache.close()
