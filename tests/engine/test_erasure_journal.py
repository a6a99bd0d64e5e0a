"""The engine's erasure journal (engine/journal.py): an erasure wins a restart even when the tier
that keeps the block refused its tombstone too, or could not be searched at all. Without the
journal, the restarted engine adopted the disk's file and served the erased tenant's block."""

from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path
from typing import Any

import numpy as np

from ctxcache import ContextCache
from ctxcache.engine.journal import ErasureJournal
from ctxcache.engine.tenancy import load_tenancy
from ctxcache.tiers import DiskTier

from .tenancy_util import BS

TENANTS = {"acme": {}}
TOKENS = list(range(1, 1 + 2 * BS))


class DeadDisk(DiskTier):
    """A disk whose unlinks and tombstone writes fail (EIO, ENOSPC) while ``refuse`` is set."""

    refuse = False

    def delete(self, key: Hashable) -> bool:
        if DeadDisk.refuse:
            raise OSError(5, "Input/output error")
        return super().delete(key)

    def _save_dead(self, dead: set[bytes]) -> None:
        if DeadDisk.refuse:
            raise OSError(28, "No space left on device")
        super()._save_dead(dead)


def _cache(path: Path, journal: Path | None) -> Any:
    tenancy = load_tenancy(TENANTS, {})
    j = None if journal is None else str(journal)
    return ContextCache([DeadDisk(1 << 20, path=path, fsync=False)], block_size=BS, tenancy=tenancy, erasure_journal=j)


def _erase_with_everything_refused(path: Path, journal: Path | None) -> None:
    cache = _cache(path, journal)
    cache.store(TOKENS, [np.full(8, i, np.float32) for i in range(2)], "acme", 0)
    assert cache.flush(10)
    DeadDisk.refuse = True
    try:
        cache.erase_tenant("acme")
        cache.close()
    finally:
        DeadDisk.refuse = False
    assert len(list((path / "blocks").rglob("*.blk"))) == 2  # still stored, and no tombstone file
    assert not (path / "tombstones").exists()


def test_an_erasure_whose_tombstone_the_tier_refused_wins_the_restart(tmp_path: Path) -> None:
    path, journal = tmp_path / "disk", tmp_path / "erasures"
    _erase_with_everything_refused(path, journal)
    assert len(ErasureJournal(journal).keys) == 2

    cache = _cache(path, journal)
    assert cache.lookup(TOKENS, "acme").hit_tokens == 0  # not adopted, not discovered
    assert cache.flush(10)
    assert not list((path / "blocks").rglob("*.blk"))  # deleted at start
    cache.close()
    assert not journal.exists()  # every delete landed: the journal emptied


def test_without_the_journal_the_erased_block_comes_back(tmp_path: Path) -> None:
    """The limit the journal removes (docs/storage.md, Faults): shown, so the test above means something."""
    path = tmp_path / "disk"
    _erase_with_everything_refused(path, None)
    cache = _cache(path, None)
    assert cache.lookup(TOKENS, "acme").hit_tokens == len(TOKENS)
    cache.close()


def test_the_journal_keeps_keys_and_unsearched_tiers_of_tenants(tmp_path: Path) -> None:
    j = ErasureJournal(tmp_path / "j")
    assert j.add([(b"k" * 16, "redis"), (b"k" * 16, "disk")], {b"acme": {"redis", "disk two"}})
    again = ErasureJournal(tmp_path / "j")
    assert again.keys == {b"k" * 16: {"redis", "disk"}} and again.tenants == {b"acme": {"redis", "disk two"}}
    again.remove([(b"k" * 16, "redis")], [b"acme"])
    assert ErasureJournal(tmp_path / "j").keys == {b"k" * 16: {"disk"}}
    again.remove([(b"k" * 16, "disk")])
    assert not (tmp_path / "j").exists()
