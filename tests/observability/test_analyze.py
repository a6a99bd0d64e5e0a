"""`ctxcache analyze` on the real Mooncake trace: an injected scan and a tenant flood are flagged,
the clean trace is not; and `ctxcache ab-report` on a request log."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from ctxcache.cli import app
from ctxcache.observability.ab import compare, group_of, group_stats
from ctxcache.observability.analyze import AnalyzeError, analyze, robust_z

runner = CliRunner()


def run_json(*args):
    r = runner.invoke(app, ["analyze", *args, "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout[r.stdout.index("{") :])


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    d = tmp_path_factory.mktemp("an")
    return {
        "clean": run_json("--save-windows", str(d / "clean.jsonl")),
        "scan": run_json("--inject", "scan@1800:120"),
        "flood": run_json("--inject", "flood@1800:120"),
        "windows": d / "clean.jsonl",
    }


def test_clean_trace_is_not_flagged(results):
    assert results["clean"]["flags"] == [] and results["clean"]["judged"] >= 45


def test_scan_is_flagged_at_its_time_by_eviction_rate(results):
    flags = results["scan"]["flags"]
    assert flags and all(1800 <= f["t"] < 1800 + 240 for f in flags)
    assert flags[0]["feature"] in ("eviction_rate", "hit_ratio") and flags[0]["t"] == 1800


def test_flood_is_flagged_and_eviction_entropy_drives_it(results):
    flags = results["flood"]["flags"]
    assert flags and flags[0]["t"] == 1800
    assert any(f["feature"] == "eviction_entropy" and f["z"] < 0 for f in flags)
    assert all(1800 <= f["t"] < 1800 + 900 for f in flags)


def test_analyze_reads_a_metrics_log(results, tmp_path):
    rows = [json.loads(x) for x in results["windows"].read_text().splitlines()]
    rows[30]["eviction_rate"] *= 5  # one bad window in a saved log
    log = tmp_path / "m.jsonl"
    log.write_text("not a window line\n".replace("not a window line", json.dumps({"msg": "hello"})) + "\n"
                   + "\n".join(json.dumps(r) for r in rows) + "\n")  # fmt: skip
    out = run_json(str(log))
    assert [f["window"] for f in out["flags"]] == [30] and out["flags"][0]["feature"] == "eviction_rate"


def test_analyze_errors_are_clear(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    r = runner.invoke(app, ["analyze", str(bad)])
    assert r.exit_code == 2 and "not JSON" in r.output
    r = runner.invoke(app, ["analyze", str(tmp_path / "missing.jsonl")])
    assert r.exit_code == 2 and "not found" in r.output
    r = runner.invoke(app, ["analyze", "--inject", "burst@10"])
    assert r.exit_code == 2 and "scan or flood" in r.output
    with pytest.raises(AnalyzeError, match="need at least"):
        analyze(
            [{"t": 0, "hit_ratio": 0.5, "eviction_rate": 1, "eviction_entropy": 1, "age_skew": 0, "load_latency_s": 1}]
            * 3
        )
    with pytest.raises(AnalyzeError, match="lack feature"):
        analyze([{"t": 0, "hit_ratio": 0.5}] * 20)


def test_robust_z_by_hand():
    x = np.array([[1.0], [2.0], [3.0], [4.0], [100.0]])
    z, med = robust_z(x)
    # median 3, |dev| = 2 1 0 1 97 -> MAD 1, scale 1.4826
    assert med[0] == 3 and z[4, 0] == pytest.approx(97 / 1.4826)


def _log(tmp_path, n=60, b_hit=0.8, b_ttft=0.05):
    rng = np.random.default_rng(1)
    lines = []
    for i in range(n):
        g = "a" if i % 2 else "b"
        hit = 0.5 if g == "a" else b_hit
        lines.append(json.dumps({"msg": "request", "ab_group": g, "prompt_tokens": 1000,
                                 "cached_tokens": int(1000 * min(1, max(0, hit + rng.normal(0, 0.05)))),
                                 "ttft_s": float((0.1 if g == "a" else b_ttft) + rng.uniform(0, 0.01))}))  # fmt: skip
    path = tmp_path / "req.jsonl"
    path.write_text("plain text line\n" + "\n".join(lines) + "\n")
    return path


def test_ab_report_finds_a_real_difference(tmp_path):
    r = runner.invoke(app, ["ab-report", str(_log(tmp_path)), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["a"]["requests"] == 30 and out["b"]["requests"] == 30
    assert out["b"]["hit_ratio"] > out["a"]["hit_ratio"] and out["test"]["hit_ratio_significant"]
    assert out["b"]["ttft_p50_s"] < out["a"]["ttft_p50_s"] and out["test"]["ttft_significant"]
    r = runner.invoke(app, ["ab-report", str(_log(tmp_path))])
    assert "significant at alpha 0.05" in r.output


def test_ab_report_no_difference_is_not_significant(tmp_path):
    r = runner.invoke(app, ["ab-report", str(_log(tmp_path, b_hit=0.5, b_ttft=0.1)), "--json"])
    out = json.loads(r.stdout)
    assert not out["test"]["hit_ratio_significant"] and not out["test"]["ttft_significant"]


def test_ab_report_errors(tmp_path):
    empty = tmp_path / "e.log"
    empty.write_text("nothing here\n")
    r = runner.invoke(app, ["ab-report", str(empty)])
    assert r.exit_code == 2 and "no request records" in r.output
    r = runner.invoke(app, ["ab-report", str(empty), "--alpha", "2"])
    assert r.exit_code == 2


def test_group_assignment_is_sticky_and_near_the_fraction():
    ids = [f"user-{i}" for i in range(4000)]
    groups = [group_of(u, 0.25) for u in ids]
    assert groups == [group_of(u, 0.25) for u in ids]
    assert 0.22 < groups.count("b") / len(ids) < 0.28
    assert group_of("x", 0.0) == "a" and group_of("x", 1.0) == "b"
    assert [group_of(u, 0.25, salt="other") for u in ids] != groups  # a new salt reshuffles


def test_group_stats_and_compare_by_hand():
    recs = [{"ab_group": "a", "prompt_tokens": 100, "cached_tokens": 50, "ttft_s": t} for t in (0.1, 0.2, 0.3)]
    s = group_stats(recs)["a"]
    assert s.hit_ratio == 0.5 and s.ttft_p50_s == pytest.approx(0.2) and s.ttft_p95_s == pytest.approx(0.29)
    c = compare(s, s)
    assert c.hit_ratio_p == 1.0 and not c.ttft_significant
