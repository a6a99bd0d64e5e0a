"""PendingDeletes: the journal survives a torn last line, compacts, and goes once nothing is pending;
the bound gives up the oldest key and counts it."""

from __future__ import annotations

import pytest

from ctxcache.errors import ConfigError, TierUnavailableError
from ctxcache.semantic import EntryStore, HashingEmbedder, SemanticCache, SemanticQuery
from ctxcache.semantic.pending import PendingDeletes
from ctxcache.tiers import MemoryTier

A, B, C = b"a" * 16, b"b" * 16, b"c" * 16


def test_journal_is_read_back_and_removed_when_empty(tmp_path):
    j = tmp_path / "d" / "pending"
    p = PendingDeletes(j, fsync=False)
    p.add([A, B])
    p.discard([A])
    with open(j, "ab") as f:
        f.write(b"+" + C.hex().encode()[:10])  # a torn append: no newline
    again = PendingDeletes(j, fsync=False)
    assert again.keys() == [B] and again.loaded == 1
    again.discard([B])
    assert not j.exists() and again.stats()["retried_deletes"] == 1


def test_journal_compacts(tmp_path):
    j = tmp_path / "pending"
    p = PendingDeletes(j, fsync=False)
    for i in range(200):
        k = i.to_bytes(16, "big")
        p.add([k, A])
        p.discard([k])
    assert len(j.read_bytes().splitlines()) < 100
    assert PendingDeletes(j, fsync=False).keys() == [A]


def test_the_bound_gives_up_the_oldest_and_counts_it(tmp_path):
    p = PendingDeletes(tmp_path / "pending", limit=2, fsync=False)
    p.add([A, B])
    p.add([C])
    assert p.keys() == [B, C] and p.stats()["dropped_deletes"] == 1
    assert PendingDeletes(tmp_path / "pending", limit=2, fsync=False).keys() == [B, C]


def test_a_bad_limit_is_a_config_error():
    for bad in (0, True, "9"):
        with pytest.raises(ConfigError, match="max_pending must be a positive number"):
            EntryStore(EntryStore.memory().tier, max_pending=bad)


def test_an_unreadable_journal_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="pending-delete journal"):
        EntryStore(EntryStore.memory().tier, journal=tmp_path)  # a directory


class FlakyTier(MemoryTier):
    """A memory tier whose deletes fail while ``down`` (as a Redis tier's do), counting the tries."""

    def __init__(self) -> None:
        super().__init__(1 << 30, "fifo", mode="warm", name="flaky")
        self.down, self.tries = False, 0

    def delete(self, key):
        self.tries += 1
        if self.down:
            raise TierUnavailableError("down")
        return super().delete(key)

    def delete_many(self, keys):
        return sum(self.delete(k) for k in keys)


def test_retries_come_at_most_every_interval_and_from_lookups(tmp_path):
    t = [0.0]
    tier = FlakyTier()
    store = EntryStore(tier, retry_interval=1.0, clock=lambda: t[0])
    c = SemanticCache(HashingEmbedder(), store, capacity=1 << 20)
    e = c.store(SemanticQuery(text="What is the capital of France?", tenant="t", model="m"), {"text": "Paris"})
    assert e is not None
    tier.down = True
    c.erase(e.id)
    ask = SemanticQuery(text="What is the capital of Japan?", tenant="t", model="m")
    for _ in range(5):
        c.lookup(ask)
    assert tier.tries == 2 and len(store.pending) == 1  # the erase, then one retry: not one per lookup
    tier.down, t[0] = False, 1.5
    c.lookup(ask)  # a hit-only workload still retries
    assert tier.tries == 3 and len(store.pending) == 0 and e.id not in tier
