"""The fleet simulator (sim/fleet*.py): determinism, the cost model's arithmetic, the arms' order
on a small shared-prefix shape, the oracle as an upper bound, nothing refused, no events for the
approximate arm."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from ctxcache.cli import app
from ctxcache.sim.costmodel import CostModel
from ctxcache.sim.fleet import Fleet, FleetConfig, simulate_fleet
from ctxcache.sim.fleet_arms import ARMS
from ctxcache.sim.fleet_report import goals, run_point
from ctxcache.sim.fleet_worker import WorkerSpec
from ctxcache.sim.fleet_workloads import FleetRequest, chat, shared_prefix, warmed

COST = CostModel("test", a=1e-4, b=2e-9, c0=0.02)
SPEC = WorkerSpec(COST, kv_blocks=96, decode_s=0.01)
CFG = FleetConfig(workers=4, spec=SPEC, warmup=0.0)


def small(n: int = 320, qps: float = 12.0, seed: int = 0) -> list[FleetRequest]:
    # 40 groups of a 4-block system prompt: each worker's RAM (96 blocks) holds its share of the
    # groups, not all of them, so spreading a group over workers costs hits
    return shared_prefix(n, qps, groups=40, system_tokens=4 * 512, question_tokens=600, output_tokens=64, seed=seed)


def _same(a: dict, b: dict) -> dict:
    return {k: v for k, v in a.items() if k != "wall_s"} == {k: v for k, v in b.items() if k != "wall_s"}


@pytest.mark.parametrize("arm", ["precise-shared", "random"])
def test_the_same_seed_gives_the_same_result(arm):
    reqs = small(120)
    first = simulate_fleet(reqs, arm, CFG)
    assert _same(first, simulate_fleet(reqs, arm, CFG))
    other = simulate_fleet(small(120, seed=1), arm, replace(CFG, seed=1))
    assert not _same(first, other)


def test_one_request_costs_what_the_cost_model_says():
    """TTFT = overhead + per-token x uncached (+ the quadratic term); then decode per output token."""
    r = FleetRequest(1.0, tuple(range(10)), 10 * 512 - 100, 50)
    again = FleetRequest(100.0, tuple(range(8)) + (90, 91), 10 * 512 - 100, 50)  # shares 8 full blocks
    fleet = Fleet("precise", replace(CFG, workers=1))
    fleet.run([r, again])
    one, two = fleet.jobs
    assert one.hit == 0
    assert one.first - one.req.time == pytest.approx(0.02 + 1e-4 * r.input_length + 2e-9 * r.input_length**2)
    assert one.done - one.first == pytest.approx(50 * 0.01)
    assert two.hit == 8 * 512
    left = again.input_length**2 - (8 * 512) ** 2
    assert two.first - two.req.time == pytest.approx(0.02 + 1e-4 * (again.input_length - 8 * 512) + 2e-9 * left)
    fleet.close()


def test_queueing_adds_the_wait_and_a_request_too_big_for_the_kv_waits_instead_of_failing():
    big = FleetRequest(0.0, tuple(range(100, 300)), 200 * 512, 10)  # 200 blocks > 96 of KV capacity
    small_one = FleetRequest(0.001, (1, 2), 1024, 10)
    fleet = Fleet("round-robin", replace(CFG, workers=1))
    fleet.run([big, small_one])
    a, b = fleet.jobs
    assert a.done > 0 and b.done > 0
    assert b.start == pytest.approx(a.done)  # no room beside the big one: it waited for it to finish
    assert fleet.result()["refused"] == 0
    fleet.close()


def test_precise_beats_random_and_the_oracle_bounds_every_hit_ratio():
    reqs = small()
    res = {arm: simulate_fleet(reqs, arm, CFG) for arm in ARMS}
    assert res["precise"]["hit_ratio"] > 1.5 * res["random"]["hit_ratio"]
    assert res["precise"]["ttft_p90_s"] < res["random"]["ttft_p90_s"]
    for arm in ARMS:
        assert res[arm]["hit_ratio"] <= res["oracle"]["hit_ratio"], arm
        assert res[arm]["refused"] == 0 and res[arm]["completed"] == len(reqs), arm
    assert res["precise"]["events_applied"] > 0 and res["precise"]["index_entries"] > 0


def test_the_approximate_arm_takes_no_events():
    fleet = Fleet("approximate", CFG)
    assert all(w.emitter is None for w in fleet.workers)  # the workers publish nothing
    fleet.run(small(120))
    res = fleet.result()
    assert res["events_applied"] == 0 and res["index_entries"] == 0
    assert res["decisions"].get("cache", 0) > 0  # routed by its history
    with pytest.raises(AssertionError):
        fleet.arm.apply(None)  # type: ignore[arg-type]
    fleet.close()


def test_chat_rounds_grow_the_history_and_hit_it():
    reqs = chat(60, 4.0, systems=2, rounds=3, think_s=5.0)
    by_session: dict[str, list[FleetRequest]] = {}
    for r in reqs:
        by_session.setdefault(r.session or "", []).append(r)
    for rounds in by_session.values():
        for prev, nxt in zip(rounds, rounds[1:]):
            full = prev.input_length // 512
            assert nxt.blocks[:full] == prev.blocks[:full]
    assert simulate_fleet(reqs, "precise", CFG)["hit_ratio"] > 0.3


def test_the_warm_up_arrives_slower_and_the_rest_keeps_its_rate():
    reqs = [FleetRequest(float(t), (t,), 512, 1) for t in range(1, 9)]
    got = [r.time for r in warmed(reqs, 0.25, 4.0)]
    assert got == [1.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0]  # 2 warm-up requests 4 s apart, then 1 s apart
    assert [r.blocks for r in warmed(reqs, 0.25, 4.0)] == [r.blocks for r in reqs]


def test_goals_read_from_a_ladder():
    rows = [*run_point("shared-prefix", 2, 0.5, 16, ARMS, CFG), *run_point("shared-prefix", 2, 3.0, 16, ARMS, CFG)]
    g = goals(rows)
    assert g["high_load_qps"] in (1.0, 6.0)
    assert g["no_request_refused"]["met"] is True
    assert set(g) >= {"precise_vs_random_p90", "hit_vs_oracle", "low_load_vs_best", "balance_max_min"}


def test_cli_fleet_sim_prints_json_lines():
    out = CliRunner().invoke(
        app, ["fleet-sim", "--workers", "2", "--router", "precise,random", "--requests", "15", "--qps", "1", "--json"]
    )
    assert out.exit_code == 0, out.output
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["arm"] for r in rows] == ["precise", "random"] and all(r["workers"] == 2 for r in rows)
    bad = CliRunner().invoke(app, ["fleet-sim", "--router", "nope"])
    assert bad.exit_code == 2 and "unknown router arm" in bad.output
