from __future__ import annotations

import pytest

from ctxcache import ContextCache
from ctxcache.config import load_config, parse_size
from ctxcache.errors import ConfigError, UnknownPolicyError, UnknownTierError


@pytest.mark.parametrize(
    ("text", "n"),
    [(4096, 4096), ("4096", 4096), ("512MiB", 512 * 2**20), ("1GiB", 2**30), ("1.5GB", 1_500_000_000), ("2 kb", 2000)],
)
def test_parse_size(text, n):
    assert parse_size(text) == n


@pytest.mark.parametrize("bad", ["", "12 parsecs", "-5MiB", 0, -1, True, 1.5, "0KiB"])
def test_parse_size_rejects(bad):
    with pytest.raises(ConfigError):
        parse_size(bad)


def test_toml_file_matches_dict(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text(
        'block_size = 16\nhash = "blake3"\nmodel = "m"\n'
        '[[tiers]]\nkind = "memory"\ncapacity = "1MiB"\npolicy = { name = "lfu-decay", decay = 0.01 }\nhigh = 0.9\n'
    )
    cfg = load_config(p)
    assert cfg.block_size == 16 and cfg.hash == "blake3" and cfg.model == "m"
    assert cfg.tiers[0].capacity == 2**20 and cfg.tiers[0].high == 0.9
    cache = ContextCache.from_config(p)
    assert cache.slots[0].policy.params() == {"decay": 0.01}
    assert cache.hasher.hash == "blake3"


def test_missing_or_invalid_toml(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("block_size = = 3")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)


@pytest.mark.parametrize(
    ("cfg", "exc", "match"),
    [
        ({"blok_size": 3}, ConfigError, "unknown config keys"),
        ({"block_size": 0}, ConfigError, "block_size"),
        ({"hash": "md5"}, ConfigError, "unknown hash"),
        ({"tiers": []}, ConfigError, "non-empty"),
        ({"tiers": [{"kind": "memory"}]}, ConfigError, "capacity"),
        ({"tiers": [{"kind": "tape", "capacity": "1MiB"}]}, UnknownTierError, "known: memory"),
        ({"tiers": [{"kind": "memory", "capacity": "1MiB", "policy": "mru"}]}, UnknownPolicyError, "known:"),
        ({"block_size": 256, "tiers": [{"kind": "memory", "capacity": 100}]}, ConfigError, "smaller than one block"),
    ],
)
def test_bad_configs_name_the_problem(cfg, exc, match):
    with pytest.raises(exc, match=match):
        ContextCache.from_config(cfg)


def test_default_config_is_one_gib_memory_lru():
    c = ContextCache.from_config({})
    assert c.block_size == 256 and c.tiers[0].capacity == 2**30 and c.slots[0].policy.name == "lru"
