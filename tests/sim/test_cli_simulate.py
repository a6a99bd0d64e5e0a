from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from ctxcache.cli import app, default_trace
from ctxcache.policies import policy_names
from ctxcache.sim.simulator import Trace
from ctxcache.sim.traces import read_mooncake

runner = CliRunner()

FIRST_FIELDS = [
    "policy",
    "size_blocks",
    "size_fraction",
    "semantics",
    "requests",
    "block_accesses",
    "miss_ratio",
    "token_hit_ratio",
    "est_prefill_s_saved",
    "accesses_per_s",
]


@pytest.fixture(scope="module", autouse=True)
def _shared_trace():
    assert default_trace().is_file(), f"shared trace missing at {default_trace()}"


def test_table_lists_every_policy_and_size():
    res = runner.invoke(app, ["simulate", "--limit", "200", "--policy", "all", "--size", "0.05,0.2"])
    assert res.exit_code == 0, res.output
    out = res.stdout
    for name in policy_names():
        assert name in out
    assert "0.05" in out and "0.2" in out
    assert "200 requests" in out and "token miss ratio" in out
    assert "*" in out  # the best online policy per column is marked


def test_json_lines_have_the_documented_fields_and_sane_values():
    res = runner.invoke(app, ["simulate", "--limit", "200", "--policy", "lru,belady", "--size", "0.1,300", "--json"])
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in res.stdout.splitlines() if line.strip()]
    tr = Trace(list(read_mooncake(default_trace(), limit=200)))
    tenth = tr.capacity(0.1)
    assert [(r["policy"], r["size_blocks"]) for r in rows] == [
        ("lru", tenth),
        ("lru", 300),
        ("belady", tenth),
        ("belady", 300),
    ]
    by = {(r["policy"], r["size_blocks"]): r for r in rows}
    for r in rows:
        assert list(r)[: len(FIRST_FIELDS)] == FIRST_FIELDS
        assert r["semantics"] == "prefix" and r["requests"] == 200
        assert r["block_accesses"] == tr.stream.size
        assert 0.0 <= r["miss_ratio"] <= 1.0 and 0.0 <= r["token_hit_ratio"] <= 1.0
        assert r["accesses_per_s"] > 0 and r["est_prefill_s_saved"] >= 0
        assert r["cost_model"] == "gemma3-270m-cpu"
    assert by[("lru", tenth)]["size_fraction"] == 0.1
    assert by[("lru", 300)]["size_fraction"] == pytest.approx(300 / tr.unique_blocks)
    assert by[("belady", 300)]["token_hit_ratio"] >= by[("lru", 300)]["token_hit_ratio"]


def test_object_semantics_and_other_cost_model():
    res = runner.invoke(
        app,
        ["simulate", "--limit", "100", "--policy", "fifo", "--size", "0.1", "--semantics", "object", "--json",
         "--cost-model", "llama3-8b-a100"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    (row,) = [json.loads(line) for line in res.stdout.splitlines()]
    assert row["semantics"] == "object" and row["cost_model"] == "llama3-8b-a100"
    assert row["miss_ratio"] == pytest.approx(row["misses"] / row["block_accesses"])


def test_plot_writes_a_png(tmp_path):
    png = tmp_path / "curves.png"
    res = runner.invoke(app, ["simulate", "--limit", "150", "--policy", "lru,fifo,belady", "--plot", str(png)])
    assert res.exit_code == 0, res.output
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1024


@pytest.fixture
def bad_trace(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1]}\n{"oops": 1}\n')
    return p


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--trace", "MISSING"], "not found"),
        (["--trace", "BAD"], "bad.jsonl:2: Mooncake record lacks field 'timestamp'"),
        (["--policy", "lru,nope"], "unknown policy 'nope'; known: "),
        (["--policy", ""], "unknown policy"),
        (["--cost-model", "gpt-9"], "unknown cost model 'gpt-9'; known: "),
        (["--size", "0"], "--size must be > 0"),
        (["--size", "0.1,-2"], "--size must be > 0"),
        (["--size", "abc"], "cannot parse 'abc'"),
        (["--size", "0.1,,0.2"], "cannot parse ''"),
        (["--size", "nan"], "--size must be > 0"),
        (["--semantics", "tree"], "unknown semantics 'tree'"),
        (["--limit", "0"], "--limit must be >= 1"),
        (["--plot", "NODIR"], "--plot: directory does not exist"),
    ],
)
def test_bad_input_exits_2_with_a_one_line_message(tmp_path, bad_trace, args, message):
    subs = {"MISSING": str(tmp_path / "missing.jsonl"), "BAD": str(bad_trace), "NODIR": str(tmp_path / "no" / "p.png")}
    args = [subs.get(a, a) for a in args]
    # Later options override the defaults given first (the last value of an option wins).
    res = runner.invoke(app, ["simulate", "--limit", "50", "--policy", "lru", *args])
    assert res.exit_code == 2, res.output
    assert message in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and res.stderr.startswith("error:")
    assert res.stdout == ""
