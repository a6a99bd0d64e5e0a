"""An erased block whose delete a persistent tier refused is never served again, not even after a
restart (engine/tombstones.py): the tier keeps a tombstone journal (disk: a file in its directory;
Redis: a value beside the blocks), the next run deletes those blocks instead of adopting them, and
the journal empties once the deletes land. Without it the restarted engine adopted the file (or
discovery found the Redis value) and served the erased tenant's block."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import redis

from ctxcache.codec import Block
from ctxcache.engine import Engine
from ctxcache.engine.tenancy import load_tenancy
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


class ReadHook(DiskTier):
    """A disk whose first read, once done, runs ``after_read`` before it returns."""

    after_read: Callable[[], object] | None = None

    def load_many(
        self, keys: Sequence[Hashable], tokens: Sequence[bytes | None], unavailable: set[int] | None = None
    ) -> list[Block | None]:
        out = super().load_many(keys, tokens, unavailable)
        hook, self.after_read = self.after_read, None
        if hook is not None:
            hook()
        return out


def _store(cache: Any) -> None:
    cache.store(TOKENS, [np.full(8, i, np.float32) for i in range(2)], "acme", 0)
    assert cache.flush(10)


def _erased_with_refused_unlinks(path: Path) -> Any:
    """A cache over a disk at ``path`` whose tenant was erased while the disk refused every unlink."""
    disk = RefusingDisk(1 << 20, path=path, fsync=False)
    cache = cache_with([disk], TENANTS)
    _store(cache)
    disk.refuse = True
    cache.erase_tenant("acme")
    return cache


def test_disk_an_erased_block_a_refused_delete_kept_stays_erased_after_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "disk"
    cache = _erased_with_refused_unlinks(path)
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


def test_disk_an_erased_block_read_by_discovery_before_its_restart_delete_landed_is_not_served(
    tmp_path: Path,
) -> None:
    """The race behind the intermittent failure of the test above under ``pytest -n 2``: at start the
    tombstoned blocks' deletes are queued (``tombstones.restore``) and the mover sends them while a
    lookup may be discovering. Discovery read the erased blobs (lock released), the deletes landed
    and reported (the blocks no longer marked erased, no delete outstanding), then ``attach``
    indexed and served what was read: the erased tenant's payload. Forced here in that order."""
    path = tmp_path / "disk"
    cache = _erased_with_refused_unlinks(path)
    cache.close()
    assert len((path / "tombstones").read_text().split()) == 2

    # The restarted engine steps its mover by hand: the deletes restore queued for the tombstoned
    # blocks are sent, land and report while the lookup's discovery is between its read and attach.
    tier = ReadHook(1 << 20, path=path, fsync=False)
    engine = Engine([tier], block_size=BS, tenancy=load_tenancy(TENANTS, {}), background=False)
    steps: list[bool] = []

    def deletes_land() -> None:
        while engine.placement.mover.step():
            steps.append(True)

    tier.after_read = deletes_land
    m = engine.lookup(TOKENS, "acme")
    assert steps, "the deletes were to land after the read"
    assert m.hit_tokens == 0, "an erased block was served"
    engine.release(m)
    assert not list((path / "blocks").rglob("*.blk"))  # deleted
    assert len(tier) == 0 and tier.used_bytes == 0  # and nothing charged for them
    assert engine.lookup(TOKENS, "acme").hit_tokens == 0
    engine.close()


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
