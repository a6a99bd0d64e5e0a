"""Policies driven by ContextCache, the way production drives them (batch hit notifications from
lookups, inserts from stores, vetoes from the radix index and pins).

- What each family promises about hits: a block that was hit outlives a newer block that was
  not, once it has had the hits the policy asks for (FIFO promises the opposite).
- Batch and single notifications give the same cache: the same hits, request after request.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from ctxcache import ContextCache
from ctxcache.policies import POLICIES, Policy, policy_names

from ..conftest import FakeClock
from .helpers import conversations

BS = 4
SLOTS = 6  # blocks the tier holds
ONLINE = [n for n in policy_names() if not getattr(POLICIES[n], "offline", False)]

# Hits a block needs before the policy keeps it over newer blocks that had none, and the setup
# that gives the policy reason to (docs/policies.md):
#   recency and frequency policies: one hit; SIEVE: the visited bit; TTL: a refreshed expiry.
#   s3fifo: move_threshold (2) hits in the small queue move it to main.
#   lirs: a first hit on the warm-up HIR block re-enters it into the stack (libCacheSim's quirk),
#     the second makes it LIR.
#   2q: a hit in A1in changes nothing; a block re-stored after its first eviction (a ghost hit)
#     enters Am, and Am outlives A1in.
#   w-tinylfu: window hits are not counted; a block hit in main is promoted, and window newcomers
#     whose sketch count does not beat the main victim's are refused.
HITS = {"s3fifo": 2, "lirs": 2}
SECOND_LIFE = {"2q"}
IN_MAIN = {"w-tinylfu"}
KEEPS_HIT_BLOCKS = [n for n in ONLINE if n != "fifo"]


def make(policy: str, slots: int = SLOTS, clock: FakeClock | None = None) -> ContextCache:
    tier = {"kind": "memory", "capacity": 100 * slots, "high": 1.0, "low": 1.0, "policy": policy}
    return ContextCache.from_config({"block_size": BS, "tiers": [tier]}, clock=clock or FakeClock())


class Driver:
    """Single-block prompts [p]*BS with 100-byte payloads; time moves one second per request."""

    def __init__(self, cache: ContextCache) -> None:
        self.cache = cache
        self.clock: FakeClock = cache.clock

    def store(self, p: int) -> None:
        with self.cache.lookup([p] * BS) as m:
            if m.n_blocks == 0:
                self.cache.store([p] * BS, [bytes(100)])
        self.clock.advance(1)

    def hit(self, p: int) -> None:
        with self.cache.lookup([p] * BS) as m:
            assert m.n_blocks == 1, f"block {p} should be cached"
        self.clock.advance(1)

    def evictions(self) -> int:
        return int(self.cache.stats()["evictions"])

    def cached(self, blocks: Iterable[int]) -> set[int]:
        """Which blocks are still cached (lookups count as hits: only call this at the end)."""
        out = set()
        for p in blocks:
            with self.cache.lookup([p] * BS) as m:
                if m.n_blocks:
                    out.add(p)
        return out


def scenario(policy: str, hits: int, second_life: bool = True) -> tuple[set[int], list[int]]:
    """Block A (0) is the oldest; it gets ``hits`` hits after the tier is full of newer blocks that
    get none; then new blocks come until one eviction has happened. Returns what is cached at the
    end and every block stored (A first)."""
    d = Driver(make(policy))
    if policy in SECOND_LIFE and second_life:
        d.store(0)
        for p in range(100, 100 + SLOTS):  # push A out once (into 2Q's ghost queue A1out)
            d.store(p)
        assert d.evictions() == 1  # A1in is a FIFO: A, the oldest, went
    d.store(0)
    older = [0, *range(1, SLOTS)]
    for p in older[1:]:
        d.store(p)
    if policy in IN_MAIN:
        d.store(200)  # the first eviction moves the window into main
    for _ in range(hits):
        d.hit(0)
    before = d.evictions()
    if policy in IN_MAIN:
        # Two newcomers take turns until one's sketch count beats the main victim's and it is
        # admitted: the main victim is the LRU probation block, which A is unless it was hit.
        for _ in range(3):
            d.store(1000)
            d.store(1001)
        return d.cached([*older, 1000, 1001]), [*older, 1000, 1001]
    p = 1000
    while d.evictions() == before:
        d.store(p)
        p += 1
    assert d.evictions() == before + 1
    return d.cached([*older, *range(1000, p)]), [*older, *range(1000, p)]


@pytest.mark.parametrize("policy", KEEPS_HIT_BLOCKS)
def test_a_hit_block_outlives_newer_blocks_that_were_not_hit(policy):
    cached, stored = scenario(policy, HITS.get(policy, 1))
    assert len(cached) < len(stored), "the scenario must have evicted a block"
    assert 0 in cached, f"{policy}: the hit block was evicted before newer blocks nobody used"


@pytest.mark.parametrize("policy", [n for n in KEEPS_HIT_BLOCKS if n not in SECOND_LIFE])
def test_without_the_hits_the_oldest_block_goes_first(policy):
    """The control: the scenario discriminates (without its hits, block A is the victim)."""
    cached, _ = scenario(policy, 0)
    assert 0 not in cached


def test_2q_without_a_second_life_the_oldest_block_goes_first():
    cached, _ = scenario("2q", 3, second_life=False)
    assert 0 not in cached


def test_fifo_evicts_the_oldest_block_whatever_its_hits():
    cached, _ = scenario("fifo", 3)
    assert 0 not in cached


# --- batch and single notifications drive the cache identically -----------------------------------


def replay(policy: str, tiers: list[dict[str, Any]], requests: list[list[int]]) -> tuple[list[int], dict[str, Any]]:
    cache = ContextCache.from_config(
        {"block_size": BS, "tiers": [{**t, "policy": policy} for t in tiers]}, clock=FakeClock()
    )
    hits = []
    for toks in requests:
        with cache.lookup(toks) as m:
            hits.append(m.hit_tokens)
            n = len(toks) // BS
            cache.store(toks, [bytes(100)] * (n - m.n_blocks), first_block=m.n_blocks)
        cache.clock.advance(1)  # type: ignore[attr-defined]
    s = cache.stats()
    return hits, {k: s[k] for k in ("hits", "evictions", "demotions", "blocks", "bytes")}


ONE = [{"kind": "memory", "capacity": 2000, "high": 1.0, "low": 1.0}]
TWO = [
    {"kind": "memory", "capacity": 800, "high": 1.0, "low": 1.0, "name": "hot"},
    {"kind": "memory", "capacity": 1200, "high": 1.0, "low": 1.0, "name": "warm"},
]


def one_at_a_time(self: Policy, keys: Iterable[Any]) -> None:
    for k in keys:
        self.on_hit(k)


@pytest.mark.parametrize("tiers", [ONE, TWO], ids=["one-tier", "two-tiers"])
@pytest.mark.parametrize("policy", ONLINE)
def test_batch_hits_give_the_same_cache_as_single_hits(policy, tiers, monkeypatch):
    requests = conversations(7, BS)
    got = replay(policy, tiers, requests)
    monkeypatch.setattr(POLICIES[policy], "on_hits", one_at_a_time)
    want = replay(policy, tiers, requests)
    assert got == want
    assert 0 < sum(got[0]) < sum(map(len, requests)) // 2 and got[1]["evictions"] > 0  # a workload that decides
