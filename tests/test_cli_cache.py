"""`ctxcache cache stats|clear|erase` on a config's tiers, including blocks an earlier run left."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from ctxcache import ContextCache
from ctxcache.cli import app

CONFIG = """
block_size = 4
[[tiers]]
kind = "memory"
capacity = "1MiB"
[[tiers]]
kind = "disk"
capacity = "1MiB"
path = "{path}"
fsync = false
[tenants.a]
[tenants.b]
"""


def test_stats_erase_and_clear_see_blocks_of_an_earlier_run(tmp_path):
    cfg = tmp_path / "cache.toml"
    cfg.write_text(CONFIG.format(path=tmp_path / "disk"))
    with ContextCache.from_config(cfg) as cache:  # close() spills RAM down to disk
        for tenant in ("a", "b"):
            p = cache.prompt(list(range(16)), tenant)
            cache.store(p, [b"kv" * 32] * 4)
    runner = CliRunner()
    r = runner.invoke(app, ["cache", "stats", "-c", str(cfg)])
    assert r.exit_code == 0, r.output
    disk = json.loads(r.output)["tiers"]["disk"]
    assert disk["blocks"] == 8 and set(disk["tenants"]) == {"a", "b"}  # owners read from headers
    r = runner.invoke(app, ["cache", "erase", "nobody", "-c", str(cfg)])
    assert r.exit_code == 2 and "unknown tenant" in r.output
    r = runner.invoke(app, ["cache", "erase", "a", "-c", str(cfg)])
    assert r.exit_code == 0 and json.loads(r.output)["verified"]
    assert len(list((tmp_path / "disk" / "blocks").rglob("*.blk"))) == 4
    assert set(
        json.loads(runner.invoke(app, ["cache", "stats", "-c", str(cfg)]).output)["tiers"]["disk"]["tenants"]
    ) == {"b"}
    r = runner.invoke(app, ["cache", "clear", "--yes", "-c", str(cfg)])
    assert r.exit_code == 0 and json.loads(r.output)["erased_blocks"] == 4
    assert not list((tmp_path / "disk" / "blocks").rglob("*.blk"))
