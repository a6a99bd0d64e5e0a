"""The seeded history checker (ctxcache.sim.regions): 100 seeds, clock skew, a checker that can
fail, and concurrent TTL changes and invalidations in three partitioned regions."""

from __future__ import annotations

import time

import pytest

from ctxcache.replication import effects
from ctxcache.replication.state import RegionState
from ctxcache.sim import regions
from ctxcache.sim.regions import REGIONS, Sim, run_seed

SEEDS = 100


def test_100_seeds_converge_and_serve_nothing_erased():
    t0 = time.monotonic()
    failed = [o for o in (run_seed(s) for s in range(SEEDS)) if o.violations]
    assert not failed, regions.report(failed[0])
    assert time.monotonic() - t0 < 120  # ~8 s on one core


@pytest.mark.parametrize("seed", [3, 17, 42])
def test_wall_clock_skew_changes_no_outcome(seed):
    plain, skewed = run_seed(seed), run_seed(seed, skew=True)  # A +1 h, B 0, C -1 h
    assert plain.ok and skewed.ok, plain.violations + skewed.violations
    assert skewed.digests == plain.digests and len(set(plain.digests.values())) == 1
    assert skewed.metadata == plain.metadata
    assert skewed.served == plain.served  # every ask served the same blocks, stored at the same steps
    assert skewed.applied == plain.applied  # every erasure applied at the same step in each region
    assert sum(len(v) for v in plain.applied.values()) > 0 and any(s[4] for s in plain.served)


def test_the_checker_fails_when_erasures_do_nothing(monkeypatch):
    apply = effects.CacheEffects.apply

    def no_erasures(self, u, ks):
        return {} if u.kind in ("erase_tenant", "invalidate") else apply(self, u, ks)

    monkeypatch.setattr(effects.CacheEffects, "apply", no_erasures)
    outs = [run_seed(s) for s in range(5)]
    assert all(o.violations for o in outs)
    found = [v for o in outs for v in o.violations]
    assert any("still indexes" in v for v in found)  # (d): gone when applied
    assert any(" served " in v and "after applying" in v for v in found)  # (b): no resurrection
    assert "replay: python -m ctxcache.sim.regions --seed 0" in regions.report(outs[0])


def test_the_checker_fails_when_a_full_sync_applies_nothing(monkeypatch):
    merge = RegionState.merge_key

    def join_only(self, key, remote):
        merge(self, key, remote)
        return []  # the state joined, the effects it owed never applied

    monkeypatch.setattr(RegionState, "merge_key", join_only)
    found = [v for o in (run_seed(s) for s in range(10)) for v in o.violations]
    assert any("never applied invalidate" in v or "never applied erase_tenant" in v for v in found)  # (e)


def test_the_checker_fails_when_a_ttl_effect_is_lost(monkeypatch):
    apply = effects.CacheEffects.apply
    monkeypatch.setattr(effects.CacheEffects, "apply",
                        lambda self, u, ks: {} if u.kind == "ttl" and u.origin != "A" else apply(self, u, ks))  # fmt: skip
    found = [v for o in (run_seed(s) for s in range(5)) for v in o.violations]
    assert any("TTL in the cache" in v for v in found)


def test_concurrent_ttls_and_invalidations_in_three_partitioned_regions_converge():
    sim = Sim(seed=0, ops=0)
    sim.cut |= {(a, b) for a in REGIONS for b in REGIONS if a != b}  # every region alone
    keys = sim.keys["t1"]
    for r in REGIONS:
        sim.step += 1
        sim.ask(r, "t1", 0)
        sim.ask(r, "t1", 2)
    for r, ttl, key in zip(REGIONS, (300.0, 60.0, None), (keys[0][2], keys[2][1], keys[1][3])):
        sim.step += 1
        sim.reps[r].submit("ttl", "t1", ttl)
        sim.reps[r].submit("invalidate", bytes.fromhex(key))
        for other in REGIONS:
            sim.reps[other].step()  # every link is down: nothing moves
    assert len({rep.state.digest() for rep in sim.reps.values()}) == 3
    assert sim.settle()
    sim.step += 1
    sim.check_final()
    assert not sim.violations, sim.violations
    states = [rep.state for rep in sim.reps.values()]
    assert len({s.digest() for s in states}) == 1 and all(s.metadata() == states[0].metadata() for s in states)
    for r, s in zip(REGIONS, states):
        assert s.value("t:t1", "ttl") == 60.0  # the shortest of 300, 60 and None
        assert sim.caches[r].tenancy.get("t1").ttl == 60.0
        assert s.conflicts["ttl_shortest_wins"] >= 1
        assert len(s.keys["t:t1"].regs["ttl"]) == 3  # all three concurrent, kept
        for key in (keys[0][2], keys[2][1], keys[1][3]):
            assert s.value(f"p:{key}", "erase") != []
    for r in REGIONS:  # every invalidated block (and its subtree) is gone in every region
        sim.ask(r, "t1", 0, store=False)
        sim.ask(r, "t1", 2, store=False)
    last = {(s.region, s.prompt): len(s.blocks) for s in sim.served[-6:]}
    assert last == {(r, p): n for r in REGIONS for p, n in ((0, 2), (2, 1))}
    for c in sim.caches.values():
        c.close()
