"""Regression: a commit refused because the region's own log (its Redis) is down.

Before the fix the updates were delivered into the in-memory state but never logged: peers never
read them, and a re-read inbox entry was stamped again with the next counter, so peers held every
later update of that key forever (no convergence). Found by ctxcache.sim.regions with own-log
outages. Now a refused commit reloads the committed state before anything else."""

from __future__ import annotations

import pytest

from ctxcache.replication.log import LinkDown
from ctxcache.sim.regions import REGIONS, Sim


def converged(sim: Sim) -> None:
    assert sim.settle()
    sim.step += 1
    sim.check_final()
    assert not sim.violations, sim.violations
    assert len({rep.state.digest() for rep in sim.reps.values()}) == 1


def test_a_refused_submit_leaves_no_gap():
    sim = Sim(seed=0, ops=0)
    sim.reps["A"].step()
    sim.logs["A"].up = False
    with pytest.raises(LinkDown):
        sim.reps["A"].submit("ttl", "t0", 60.0)
    sim.logs["A"].up = True
    u = sim.reps["A"].submit("ttl", "t0", 30.0)
    assert u.uid == "A/1/t:t0"  # the refused one was no update: its counter is taken again
    converged(sim)
    assert all(rep.state.value("t:t0", "ttl") == 30.0 for rep in sim.reps.values())
    assert all(sim.caches[r].tenancy.get("t0").ttl == 30.0 for r in REGIONS)


def test_a_refused_inbox_commit_is_stamped_once():
    sim = Sim(seed=0, ops=0)
    sim.logs["A"].submit("ttl", "t0", 60.0)
    real = sim.logs["A"].commit

    def down(*a, **k):
        raise LinkDown("own log down at the commit")

    sim.logs["A"].commit = down
    with pytest.raises(LinkDown):
        sim.reps["A"].step()
    sim.logs["A"].commit = real
    sim.reps["A"].submit("ttl", "t0", 30.0)  # takes A/1: the inbox entry was not committed
    sim.reps["A"].step()  # the inbox entry again: A/2
    converged(sim)
    assert all(rep.state.value("t:t0", "ttl") == 60.0 for rep in sim.reps.values())


def test_a_refused_register_submit_restores_the_committed_value():
    sim = Sim(seed=0, ops=0)
    sim.reps["A"].submit("ttl", "t0", 300.0)
    sim.logs["A"].up = False
    with pytest.raises(LinkDown):
        sim.reps["A"].submit("ttl", "t0", 20.0)  # its effect reached the cache, its commit did not
    assert sim.caches["A"].tenancy.get("t0").ttl == 20.0
    sim.logs["A"].up = True
    sim.reps["A"].step()  # reloads: the cache follows the committed value again
    assert sim.caches["A"].tenancy.get("t0").ttl == 300.0
    converged(sim)
