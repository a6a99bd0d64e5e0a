"""Throttled slow-tier loads (docs/tenancy.md): a load waits *up to* ``max_wait`` for its bucket
(a wait of exactly ``max_wait`` is still a wait), every wait is counted, and a load given up for
recompute reads nothing from the slow tier."""

from __future__ import annotations

from typing import Any

from ctxcache import ContextCache
from ctxcache.tiers.fake import FakeSlowTier

from .tenancy_util import ask, cache_with, prompt_of, tier_of

RATE = 1000  # bytes/s; the burst is smaller than one lookup's loads, so a full bucket empties at once
P = prompt_of(1, n_blocks=8)


def _cache(tmp_path: Any, clock: Any, sleep: Any = None, **opts: Any) -> tuple[ContextCache, FakeSlowTier]:
    slow = FakeSlowTier(1 << 20)
    ram = tier_of("memory", tmp_path, capacity=1 << 20)
    cache = cache_with([ram, slow], {"a": {"rate": RATE, "burst": 100}}, clock=clock, sleep=sleep, **opts)
    ask(cache, "a", P)
    return cache, slow


def _demote(cache: ContextCache) -> None:
    with cache._engine.lock:
        cache._engine.placement.make_room(0, cache.slots[0].used())
    cache.flush()


def _load_bytes(cache: ContextCache, slow: FakeSlowTier) -> int:
    return sum(slow.nbytes(k) for k in cache.prompt(P, "a").keys())  # noqa: SIM118 (a Prompt method)


def test_a_wait_of_exactly_max_wait_is_waited_and_each_wait_is_counted(tmp_path, clock):
    probe, slow = _cache(tmp_path, clock)
    _demote(probe)
    n = _load_bytes(probe, slow)
    probe.close()
    assert n > 100  # a full bucket lets it through and ends n - 100 bytes in debt

    waits: list[float] = []

    def sleep(s: float) -> None:
        waits.append(s)
        clock.advance(s)

    # Paying the debt back and refilling takes n / RATE seconds: exactly max_wait.
    cache, _ = _cache(tmp_path, clock, sleep, on_throttle="wait", max_wait=n / RATE)
    _demote(cache)
    assert ask(cache, "a", P) == len(P)  # the full bucket lets it through
    for _ in range(2):
        _demote(cache)
        assert ask(cache, "a", P) == len(P)  # waited, then loaded
    assert waits == [n / RATE, n / RATE]
    s = cache.stats()
    assert s["throttled_waits"] == 2 and s["throttled_recomputes"] == 0
    cache.close()


def test_a_load_given_up_for_recompute_reads_nothing_from_the_slow_tier(tmp_path, clock):
    cache, slow = _cache(tmp_path, clock, on_throttle="recompute")
    _demote(cache)
    assert ask(cache, "a", P) == len(P)  # the full bucket lets it through, then is empty
    _demote(cache)
    slow.calls.clear()
    assert ask(cache, "a", P) == 0
    assert "load_many" not in slow.calls  # throttled: the bandwidth is not spent
    assert cache.stats()["throttled_recomputes"] == 1
    cache.close()
