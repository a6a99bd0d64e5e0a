"""The engine against fake tiers (ctxcache.tiers.fake): no I/O under the lock, one owner for each
counter, losses and a dead tier handled, without disk or Redis."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ctxcache import ContextCache
from ctxcache.tiers.fake import FakeSlowTier, FakeTier

from ..conftest import payload_for

BS = 4
SRC = Path(__file__).resolve().parents[2] / "src" / "ctxcache"


def put(cache, toks, ns="default"):
    prompt = cache.prompt(toks, ns)
    with cache.lookup(prompt) as m:
        assert m.payloads == [payload_for(ns, toks, i, BS) for i in range(m.n_blocks)]  # never a wrong block
        rest = [payload_for(ns, toks, i, BS) for i in range(m.n_blocks, prompt.n_blocks)]
        cache.store(prompt, rest, first_block=m.n_blocks)
        return m.hit_tokens, m.usage


def two_tiers(on_call=None, ram=100):
    ram_tier = FakeTier(ram, high=1.0, low=1.0, name="ram")
    slow = FakeSlowTier(1 << 20, name="slow", on_call=on_call)
    return ContextCache([ram_tier, slow], block_size=BS), ram_tier, slow


def test_a_slow_tier_is_never_called_under_the_engine_lock():
    held: list[str] = []
    cache = None

    def check(name, keys):
        if cache is not None and cache._engine.lock._is_owned():
            held.append(name)

    cache, _, slow = two_tiers(check)
    for p in range(8):  # 32-byte payloads, three fit in RAM: demotions through the mover
        put(cache, [p] * BS)
    cache.flush()
    for p in range(8):  # hits in the slow tier: reads between the locked phases, then promotion
        assert put(cache, [p] * BS)[0] == BS
    cache.evict_all()
    cache.close()
    assert {"put_blobs", "load_many"} <= set(slow.calls)  # the fake did see the traffic
    assert held == []


def test_per_tier_hits_and_bytes_add_up_to_the_engine_counters():
    cache, ram, slow = two_tiers()
    for _ in range(3):
        for p in range(6):
            put(cache, [p, p] * BS)  # two blocks each
        cache.flush()
    s = cache.stats()
    assert s["hits"] == sum(t["hits"] for t in s["tiers"].values()) > 0
    assert s["bytes"] == ram.used_bytes + slow.used_bytes == sum(slot.used() for slot in cache.slots)
    assert s["evictions"] <= sum(t["evictions"] for t in s["tiers"].values())


def test_a_block_the_slow_tier_lost_is_a_miss_then_repaired():
    cache, _, slow = two_tiers()
    toks = list(range(3 * BS))
    put(cache, toks)
    cache.evict_all()  # all three blocks now only in the slow tier
    keys = cache.hasher.keys(toks, cache.namespace())
    slow.lose.add(keys[1])
    hit, usage = put(cache, toks)  # block 0 served, block 1 lost: stored again from here
    assert hit == BS and usage.by_tier == {"slow": BS}
    s = cache.stats()
    assert s["lost"] == 1 and s["repaired"] == 1
    slow.lose.clear()
    cache.flush()
    assert put(cache, toks)[0] == 3 * BS


def test_a_dead_slow_tier_costs_hits_not_requests():
    cache, _, slow = two_tiers(ram=1000)
    put(cache, list(range(2 * BS)))
    slow.down = True
    for p in range(40):  # RAM fills: demotions are refused (tier unhealthy), blocks are evicted
        put(cache, [p + 100] * BS)
    cache.flush()
    assert put(cache, [139] * BS)[0] == BS  # recent blocks still served from RAM
    assert cache.stats()["write_errors"] == 0  # nothing was even queued for the dead tier
    slow.down = False
    put(cache, [500] * BS)


@pytest.mark.parametrize(
    ("pattern", "owner"),
    [
        (r"(?<!\bc)\.(hits|evictions|inflow|outflow)\s*[-+]?=", "engine/slot.py"),  # per-tier counters
        (r"\bc(ounters)?\.(lookups|hits|misses|hit_tokens|lookup_tokens)\s*\+=", "engine/lookup.py"),
        (r"\bc(ounters)?\.(stores|stored_blocks|collisions|rejected|repaired)\s*\+=", "engine/store.py"),
        (
            r"\bc\.(evictions|demotions|demotions_skipped|promotions|lost|write_errors|delete_errors)\s*\+=",
            "engine/placement.py",
        ),
        (r"\bc(ounters)?\.discovered\s*\+=", "engine/discovery.py"),
        (r"\bc(ounters)?\.(throttled_waits|throttled_recomputes)\s*\+=", "engine/lookup.py"),  # tenancy
        (r"\bc(ounters)?\.unavailable_misses\s*\+=", "engine/lookup.py"),
        (r"\bc(ounters)?\.(expired|erased)\s*\+=", "engine/erasure.py"),
        (r"\bc(ounters)?\.(through_writes|through_dropped)\s*\+=", "engine/through.py"),
        (r"\b(by_tenant|owners)\[[^\]]*\]\s*=|\b(by_tenant|owners)\.pop\(", "engine/slot.py"),
        (r"\bts\[\"(lookups|hit_tokens|lookup_tokens)\"\]\s*\+=", "engine/lookup.py"),
    ],
)
def test_each_counter_is_changed_in_one_module(pattern, owner):
    """One owner per piece of state: grep src/ for writes to each group of counters."""
    writers = {str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if re.search(pattern, p.read_text())}
    assert writers == {owner}
