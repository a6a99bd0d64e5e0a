"""Server config parsing, TTL pins, and `ctxcache serve` argument errors (no model needed)."""

from __future__ import annotations

import json
import socket

import pytest
from typer.testing import CliRunner

from ctxcache import ContextCache
from ctxcache.cli import app
from ctxcache.errors import ConfigError
from ctxcache.server import DEFAULT_BLOCK_SIZE, load_server_config
from ctxcache.server.jobs import _created_by_ttl, common_prefix
from ctxcache.server.pins import PinManager
from ctxcache.usage import Usage

runner = CliRunner()


def test_defaults_and_a_full_config_file(tmp_path):
    cfg = load_server_config(None)
    assert cfg.cache_config["block_size"] == DEFAULT_BLOCK_SIZE and cfg.api_keys == {}
    assert cfg.cache_dict("m@1")["model"] == "m@1"
    p = tmp_path / "server.toml"
    p.write_text(
        '[server]\nmax_queue = 3\nauto_cache = false\n[cache]\nblock_size = 32\n'
        '[[cache.tiers]]\nkind = "memory"\ncapacity = "64MiB"\n[api_keys]\n"k1" = "team-a"\n'
    )  # fmt: skip
    cfg = load_server_config(p)
    assert cfg.max_queue == 3 and cfg.auto_cache is False and cfg.api_keys == {"k1": "team-a"}
    assert cfg.cache_config["block_size"] == 32


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"srv": {}}, "unknown config tables"),
        ({"server": {"max_queeu": 1}}, "unknown [server] keys"),
        ({"server": {"max_queue": 0}}, "max_queue must be a positive integer"),
        ({"server": {"auto_cache": "yes"}}, "auto_cache must be true or false"),
        ({"server": {"default_max_tokens": 5000}}, "exceeds max_tokens_limit"),
        ({"api_keys": {"k": ""}}, "api_keys"),
        ({"api_keys": {"adm-key-1": "t"}, "admin": {"key": "adm-key-1"}}, "admin key is also an API key of"),
        ({"admin": {"key": "short"}}, "[admin] key must be a string of at least 8"),
        ({"admin": {"kee": "adm-key-1"}}, "unknown [admin] keys ['kee']"),
        ({"api_keys": {"adm-key-1": "t"}, "observability": {"admin_key": "adm-key-1"}}, "admin key is also"),
        ({"cache": {"block_size": 0}}, "block_size"),
    ],
)
def test_bad_config_is_rejected_with_a_message(data, needle):
    with pytest.raises(ConfigError, match=None) as info:
        load_server_config(data)
    assert needle in str(info.value)


def test_missing_and_malformed_config_files(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_server_config(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[server\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_server_config(bad)


class Clock:
    t = 0.0

    def __call__(self):
        return self.t


def _cache_with(tokens, ns="t"):
    cache = ContextCache.from_config({"block_size": 4, "tiers": [{"kind": "memory", "capacity": 4096}]})
    cache.store(tokens, [b"x" * 100] * (len(tokens) // 4), ns)
    return cache


def test_pins_keep_blocks_until_the_ttl_passes_and_a_hit_refreshes_it():
    toks = list(range(1, 17))
    cache, clock = _cache_with(toks), Clock()
    pins = PinManager(cache, max_bytes=10_000, clock=clock)
    assert pins.keep(toks[:10], "t", 300) == 8  # full blocks only
    assert cache.evict_all() == 2  # the two blocks past the pinned prefix go, the pinned two stay
    clock.t = 200
    pins.keep(toks[:10], "t", 300)  # refresh: now expires at 500
    clock.t = 400
    assert pins.sweep() == 0 and len(pins) == 1
    clock.t = 501
    assert pins.sweep() == 1 and len(pins) == 0 and pins.pinned_bytes == 0
    assert cache.evict_all() == 2


def test_pins_respect_their_byte_budget():
    toks = list(range(1, 17))
    cache, clock = _cache_with(toks), Clock()
    pins = PinManager(cache, max_bytes=500, clock=clock)
    pins.keep(toks[:8], "t", 3600)  # 200 bytes, expires last
    pins.keep(toks[:4], "t", 300)  # 100 bytes
    pins.keep(toks[:12], "t", 600)  # 300 bytes: over budget, the soonest expiry (the 5m pin) goes
    assert len(pins) == 2 and pins.pinned_bytes == 200 + 300 and pins.released_early == 1
    assert pins.keep(list(range(100, 116)), "t", 300) == 0  # not cached: nothing to pin
    pins.clear()
    assert len(pins) == 0


def test_created_tokens_are_split_by_breakpoint_ttl():
    u = Usage(cache_read_tokens=64, cache_creation_tokens=192, uncached_tokens=250)
    assert _created_by_ttl(u, [(100, "1h"), (256, "5m")]) == {"1h": 36, "5m": 156}
    assert _created_by_ttl(u, []) == {"5m": 192, "1h": 0}
    assert common_prefix([1, 2, 3], [1, 2, 4, 5]) == 2 and common_prefix([1], [1, 2]) == 1


def test_serve_reports_bad_arguments_before_loading_anything(tmp_path):
    res = runner.invoke(app, ["serve", "--config", str(tmp_path / "missing.toml")])
    assert res.exit_code == 2 and "config file not found" in res.output
    res = runner.invoke(app, ["serve", "--port", "0"])
    assert res.exit_code == 2 and "--port" in res.output
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        res = runner.invoke(app, ["serve", "--port", str(s.getsockname()[1])])
    assert res.exit_code == 2 and "already in use" in res.output
    res = runner.invoke(app, ["serve", "--port", "0", "--model", str(tmp_path)])
    assert res.exit_code == 2


def test_serve_rejects_a_directory_that_is_not_a_model(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    res = runner.invoke(app, ["serve", "--port", str(port), "--model", str(tmp_path)])
    assert res.exit_code == 2 and "no config.json" in res.output


def _print_config(tmp_path, args, env=None):
    model = tmp_path / "my-model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text("{}")
    res = runner.invoke(
        app,
        ["serve", "--print-config", "--model", str(model), *args],
        env={"CTXCACHE_HOME": str(tmp_path), **(env or {})},
    )
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout[res.stdout.index("{") :])


def test_flags_beat_environment_beat_config_file_beat_defaults(tmp_path):
    conf = tmp_path / "s.toml"
    conf.write_text('[server]\nmax_context = 2048\nmodel_id = "from-file"\n[cache]\nblock_size = 16\n')
    out = _print_config(tmp_path, ["--config", str(conf)])
    assert out["server"]["max_context"] == 2048 and out["cache"]["block_size"] == 16
    assert out["sources"]["server.max_context"] == "config file"
    env = {"CTXCACHE_MAX_MODEL_LEN": "4096", "CTXCACHE_BLOCK_SIZE": "64", "CTXCACHE_SERVED_MODEL_NAME": "env-name"}
    out = _print_config(tmp_path, ["--config", str(conf)], env)
    assert (out["server"]["max_context"], out["cache"]["block_size"], out["server"]["model_id"]) == (
        4096,
        64,
        "env-name",
    )
    assert out["sources"]["server.max_context"] == out["sources"]["cache.block_size"] == "environment"
    out = _print_config(tmp_path, ["--config", str(conf), "--max-model-len", "1024", "--api-key", "sk-1"], env)
    assert out["server"]["max_context"] == 1024 and out["sources"]["server.max_context"] == "flag"
    assert out["server"]["api_keys"] == ["<4-character key> -> default"]  # the key itself is never printed
    out = _print_config(tmp_path, ["--served-model-name", "a", "--served-model-name", "b"])
    assert out["server"]["model_id"] == "a" and out["server"]["model_aliases"] == ["b"]
    res = runner.invoke(app, ["serve", "--print-config", "--max-model-len", "0", "--model", str(tmp_path / "my-model")])
    assert res.exit_code == 2 and "max_context must be a positive integer" in res.output


def test_a_server_only_config_keeps_the_default_ram_and_disk_tiers(tmp_path):
    conf = tmp_path / "s.toml"
    conf.write_text("[server]\nmax_queue = 3\n")
    out = _print_config(tmp_path, ["--config", str(conf)])
    assert [t["kind"] for t in out["cache"]["tiers"]] == ["memory", "disk"]
    assert out["sources"]["cache.tiers"] == "default (RAM + disk)"
    conf.write_text('[[cache.tiers]]\nkind = "memory"\ncapacity = "1GiB"\n')
    assert [t["kind"] for t in _print_config(tmp_path, ["--config", str(conf)])["cache"]["tiers"]] == ["memory"]
