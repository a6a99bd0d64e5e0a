"""Placement at its edges: a quota or a tier exceeded by a single byte or filled exactly, discovered
chains indexed at their true depths, a lost leaf leaving the index at once, and blocks moving
between two slow tiers (served from the source while in flight; a promotion into a slow top tier
charged its size before the write lands)."""

from __future__ import annotations

import threading
from collections.abc import Hashable
from typing import Any

import numpy as np

from ctxcache import ContextCache
from ctxcache.tiers import DiskTier, MemoryTier
from ctxcache.tiers.fake import FakeSlowTier

from .tenancy_util import BS, ask, cache_with, prompt_of, tier_of

BLOCK = 64  # bytes a hot memory tier charges for one test block (16 float32)


def _one_block(i: int) -> list[int]:
    return prompt_of(i, n_blocks=1)


def test_a_quota_exceeded_by_one_byte_makes_room(tmp_path):
    ram = tier_of("memory", tmp_path, capacity=64 * BLOCK)
    cache = cache_with([ram], {"a": {"quota": {"memory": 2 * BLOCK - 1}}})
    for i in range(3):
        ask(cache, "a", _one_block(i))
        assert cache.slots[0].tenant_used("a") == BLOCK  # a second block would be 1 byte over
    assert ask(cache, "a", _one_block(2)) == BS  # the newest stayed
    cache.close()


def test_a_block_that_fills_an_empty_tier_exactly_is_stored(tmp_path):
    ram = tier_of("memory", tmp_path, capacity=BLOCK, high=1.0, low=1.0)
    cache = cache_with([ram], {"a": {}})  # with tenants, room is made in per-tenant stages
    ask(cache, "a", _one_block(1))
    assert cache.slots[0].tenant_used("a") == BLOCK
    assert ask(cache, "a", _one_block(1)) == BS
    cache.close()


def test_a_discovered_chain_is_indexed_at_the_depths_a_stored_one_has(tmp_path, clock):
    def cache() -> ContextCache:
        ram = tier_of("memory", tmp_path, capacity=1 << 20)
        disk = DiskTier(1 << 20, path=tmp_path / "disk", fsync=False)
        return cache_with([ram, disk], {"a": {}}, clock=clock)

    writer = cache()
    ask(writer, "a", prompt_of(1))
    keys = writer.prompt(prompt_of(1), "a").keys()
    assert [writer._engine.index.get(k).depth for k in keys] == [0, 1, 2, 3]
    writer.close()  # spilled to disk
    fresh = cache()
    assert ask(fresh, "a", prompt_of(1)) == 4 * BS  # discovered on disk
    assert fresh.stats()["discovered"] == 4
    assert [fresh._engine.index.get(k).depth for k in keys] == [0, 1, 2, 3]
    fresh.close()


def test_a_lost_leaf_in_an_encoded_ram_tier_leaves_the_index_at_once():
    warm = MemoryTier(1 << 20, mode="warm", codec="raw")
    cache = ContextCache([warm, FakeSlowTier(1 << 20)], block_size=BS)
    prompt = cache.prompt(prompt_of(1, n_blocks=3))
    cache.store(prompt, [[np.full(16, i, np.float32)] for i in range(3)], first_block=0)
    leaf = prompt.keys()[2]
    blob = warm.get_blob(leaf)
    assert blob is not None
    warm.put_blob(leaf, blob[:-1] + bytes([blob[-1] ^ 0xFF]))  # fails verification
    with cache.lookup(prompt) as m:
        assert m.n_blocks == 2
    s = cache.stats()
    assert s["lost"] == 1 and s["blocks"] == 2  # nothing pinned it: it is gone, its parent stays
    cache.close()


class _Gate:
    """An ``on_call`` hook: while closed, a slow tier's writes wait (as a slow backend's would)."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.open.set()

    def __call__(self, name: str, keys: tuple[Hashable, ...]) -> None:
        if name == "put_blobs":
            self.open.wait(10)


def _two_slow(gate_top: bool) -> tuple[ContextCache, _Gate, Any]:
    gate = _Gate()
    top = FakeSlowTier(1 << 20, on_call=gate if gate_top else None, name="top")
    low = FakeSlowTier(1 << 20, on_call=None if gate_top else gate, name="low")
    cache = cache_with([top, low], {"a": {}})
    prompt = cache.prompt(prompt_of(1, n_blocks=1), "a")
    cache.store(prompt, [[np.full(16, 7, np.float32)]], first_block=0)
    cache.flush()
    return cache, gate, prompt


def _demote(cache: ContextCache) -> None:
    with cache._engine.lock:
        assert cache._engine.placement.make_room(0, cache.slots[0].used())


def test_a_block_in_flight_between_slow_tiers_is_read_from_its_source():
    cache, gate, prompt = _two_slow(gate_top=False)
    gate.open.clear()
    _demote(cache)  # queued for the lower tier; its write waits at the gate
    with cache.lookup(prompt) as m:
        assert m.usage.by_tier == {"low": BS} and float(m.payloads[0][0][0]) == 7.0
    gate.open.set()
    cache.flush()
    assert cache.stats()["tiers"]["low"]["blocks"] == 1 and cache.stats()["tiers"]["top"]["blocks"] == 0
    with cache.lookup(prompt) as m:  # landed: read from the lower tier itself
        assert m.usage.by_tier == {"low": BS} and float(m.payloads[0][0][0]) == 7.0
    cache.close()


def test_a_promotion_into_a_slow_top_tier_is_charged_its_size_at_once():
    cache, gate, prompt = _two_slow(gate_top=True)
    size = cache.slots[0].tenant_used("a")
    assert size > 0
    _demote(cache)
    cache.flush()
    assert cache.slots[0].tenant_used("a") == 0
    gate.open.clear()
    with cache.lookup(prompt) as m:  # served from the lower tier, copied up (queued)
        assert m.n_blocks == 1
    assert cache.stats()["promotions"] == 1
    assert cache.slots[0].tenant_used("a") == size  # before the write lands
    gate.open.set()
    cache.flush()
    assert cache.slots[0].tenant_used("a") == size
    cache.close()
