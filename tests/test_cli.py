from __future__ import annotations

import json

from typer.testing import CliRunner

from ctxcache.cli import app, default_trace

runner = CliRunner()


def test_demo_on_the_real_trace_prints_the_table():
    trace = default_trace()
    assert trace.is_file(), f"shared trace missing at {trace}"
    res = runner.invoke(app, ["demo", "--limit", "300", "--size", "0.05"])
    assert res.exit_code == 0, res.output
    for word in ("requests", "hit tokens", "token hit ratio", "evictions"):
        assert word in res.output
    assert "300" in res.output


def test_demo_on_a_small_trace_counts_hits(tmp_path):
    p = tmp_path / "t.jsonl"
    rows = [
        {"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2]},
        {"timestamp": 5, "input_length": 1536, "output_length": 1, "hash_ids": [1, 2, 3]},
    ]
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    res = runner.invoke(app, ["demo", "--trace", str(p), "--size", "1"])
    assert res.exit_code == 0, res.output
    assert "1,024" in res.output  # the second request hits blocks 1 and 2


def test_demo_bad_input_exits_2_with_a_message(tmp_path):
    res = runner.invoke(app, ["demo", "--trace", str(tmp_path / "missing.jsonl")])
    assert res.exit_code == 2 and "not found" in res.output
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1]}\n{"oops": 1}\n')
    res = runner.invoke(app, ["demo", "--trace", str(bad)])
    assert res.exit_code == 2 and "bad.jsonl:2" in res.output
    assert "lacks field 'timestamp'" in res.output
    res = runner.invoke(app, ["demo", "--size", "0"])
    assert res.exit_code == 2 and "--size" in res.output
    res = runner.invoke(app, ["demo", "--policy", "nope"])
    assert res.exit_code == 2 and "known:" in res.output


def test_cache_clear_deletes_saved_blocks_but_not_a_running_servers(tmp_path):
    import numpy as np

    from ctxcache.tiers import BlockMeta, DiskTier

    kv = tmp_path / "kv"
    old = DiskTier(1 << 20, path=kv / "old")
    old.put(b"k" * 16, [np.ones(8, np.float32)], BlockMeta(b"", b"", 0))
    old.close()  # a stopped server's blocks
    running = DiskTier(1 << 20, path=kv / "live")  # holds its directory's lock, as a server does
    env = {"CTXCACHE_HOME": str(tmp_path)}
    res = runner.invoke(app, ["cache", "clear"], env=env, input="n\n")
    assert res.exit_code == 1 and (kv / "old").exists()  # asked, and the answer was no
    res = runner.invoke(app, ["cache", "clear", "--yes"], env=env)
    assert res.exit_code == 0 and not (kv / "old").exists() and (kv / "live").exists()
    assert "in use by a running server" in res.output
    running.close()
    assert runner.invoke(app, ["cache", "clear", "-y"], env=env).exit_code == 0 and not (kv / "live").exists()
