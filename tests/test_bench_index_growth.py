"""benchmarks/index/bench_index_growth.py and its worker: a stall says whether the kernel or our code took
the time, the constant-work op's stalls are kept beside store's and lookup's, and results saved
before that (benchmarks/results/index_growth.json) still render, with "n/a" where a field is new."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks" / "index"
RESULTS = ROOT / "benchmarks" / "results"


@pytest.fixture
def stalls(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH))
    import index_growth_stalls

    return index_growth_stalls


class NoGc:
    last = (0, 0, -1)  # no collection seen


def rusage(utime_ms: float = 0.0, stime_ms: float = 0.0, minflt: int = 0, nivcsw: int = 0) -> Any:
    fields = [0.0] * 16  # struct rusage order: utime, stime, maxrss, ..., minflt (6), ..., nvcsw, nivcsw
    fields[0], fields[1], fields[6], fields[15] = utime_ms / 1e3, stime_ms / 1e3, minflt, nivcsw
    return resource.struct_rusage(fields)


def test_a_kept_stall_says_whether_the_kernel_or_user_code_took_the_time(stalls: ModuleType) -> None:
    s = stalls.Stalls(NoGc())
    zero = rusage()
    s.note("store", 10, 0, 20_000_000, 20_000_000, zero, rusage(1.8, 18.2, minflt=4100))
    s.note("store", 11, 0, 21_000_000, 21_000_000, zero, rusage(21.0))
    s.note("store", 12, 0, 5_000, 5_000, zero, rusage(minflt=9))  # short: kept (one of the 10 longest), not counted
    kernel, ours, short = sorted(s.top(by_cpu=True), key=lambda x: x["blocks"])
    assert kernel["cause"].startswith("kernel: 4,100 minor page faults; user 1.8 ms, sys 18.2 ms")
    assert kernel["rusage"] == {"user_ms": 1.8, "sys_ms": 18.2, "minflt": 4100, "majflt": 0, "nvcsw": 0, "nivcsw": 0}
    assert ours["cause"] == (
        "unattributed user-mode CPU work; user 21.0 ms, sys 0.0 ms, 0 minor + 0 major faults, 0 vol + 0 invol switches"
    )
    assert short["cpu_ms"] == 0.005
    assert (s.n_cpu_over_10ms, s.n_over_10ms, len(s.top())) == (2, 2, 3)


def test_short_ops_are_kept_only_while_among_the_ten_longest_by_cpu(stalls: ModuleType) -> None:
    """The constant-work op never reaches the stall threshold on a quiet machine: its top 10 by CPU
    are still kept, and an op shorter than all of them is not."""
    s = stalls.Stalls(NoGc())
    for i in range(10):
        s.note("noise", i, 0, 50_000 + i, 50_000 + i, rusage(), rusage())
    s.note("noise", 10, 0, 20_000, 20_000, rusage(), rusage())
    s.note("noise", 11, 0, 90_000, 90_000, rusage(), rusage())
    assert [x["blocks"] for x in s.top(by_cpu=True)] == [11, 9, 8, 7, 6, 5, 4, 3, 2, 1]
    assert (s.n_cpu_over_10ms, s.n_over_10ms) == (0, 0)


def test_sys_time_without_faults_and_too_short_ops_are_told_apart(stalls: ModuleType) -> None:
    s = stalls.Stalls(NoGc())
    s.note("lookup", 1, 0, 12_000_000, 12_000_000, rusage(), rusage(3.0, 9.0))
    s.note("lookup", 2, 0, 1_500_000, 1_500_000, rusage(), rusage(1.5, nivcsw=1))
    long, short = s.top(by_cpu=True)
    assert long["cause"].startswith("kernel: mostly sys time; ")
    assert short["cause"].startswith("unattributed CPU work (too short for the tick-sampled user/sys split); ")
    assert short["cause"].endswith("0 vol + 1 invol switches")


def test_results_saved_before_the_noise_stalls_render_with_na(stalls: ModuleType, tmp_path: Path) -> None:
    saved = RESULTS / "index_growth_ordereddict_4096.json"  # saved before the noise stalls were kept
    out = tmp_path / "old.json"
    r = subprocess.run(
        [sys.executable, str(BENCH / "bench_index_growth.py"), "--combine", "--from-results", str(saved)]
        + ["--out", str(out), "--parts", str(tmp_path / "none")],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=str(ROOT / "src")),
    )
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout.strip())
    goals = summary["goals"]
    assert goals["ops_over_10ms"]["noise_floor"] == "n/a"
    assert goals["ops_over_10ms"]["store_lookup"] == {"cpu": 1, "wall": 6}  # the saved 10 M run
    assert goals["noise_floor_longest_cpu_op"] == "n/a"
    assert goals["noise_floor_longest_ms"]["cpu"] == pytest.approx(16.67344)  # from the per-decade maxima
    assert goals["no_stall_over_10ms_cpu"] is False  # the keys from before still there
    assert "new                constant-work         n/a         n/a        16.7" in r.stderr
    assert "n/a (not recorded by this run)" in r.stderr
    assert out.exists() and out.with_suffix(".png").exists()


def test_a_quick_run_keeps_the_constant_work_ops_own_stalls(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, str(BENCH / "bench_index_growth.py"), "--tree", "new", "--max-blocks", "3000"]
        + ["--parts", str(tmp_path / "parts"), "--out", str(tmp_path / "r.json")],
        capture_output=True,
        text=True,
        timeout=180,
        env=dict(os.environ, PYTHONPATH=str(ROOT / "src")),
    )
    assert r.returncode == 0, r.stderr
    part = json.loads((tmp_path / "parts" / "new.json").read_text())
    assert set(part["noise_over_10ms"]) == {"cpu", "wall"}
    assert all("rusage" in s and "switches" in s["cause"] for s in part["stalls_top_cpu"] + part["noise_top_cpu"])
    noise = json.loads(r.stdout.strip())["stalls"]["new"]["ops_over_10ms"]["noise_floor"]
    assert noise == part["noise_over_10ms"]
    assert "new: longest constant-work ops by CPU" in r.stderr
