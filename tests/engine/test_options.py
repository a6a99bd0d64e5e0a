"""EngineOptions: the engine's keyword options are named once, and the facade forwards them all.

An option declared on ``Engine`` itself (beside ``sleep`` and ``background``, the engine's own test
hooks: the second runs it without threads for the deterministic simulation) would not
reach ``ContextCache``; one added to ``EngineOptions`` reaches it with its type."""

from __future__ import annotations

import dataclasses
import inspect
import time
import typing

import pytest

from ctxcache import ContextCache, EngineOptions, MemoryTier
from ctxcache.config import CacheConfig
from ctxcache.engine import Engine
from ctxcache.engine.factory import NOT_IN_CONFIG, engine_options


def test_the_engine_and_the_facade_take_their_options_from_one_typed_dict():
    engine = inspect.signature(Engine).parameters
    facade = inspect.signature(ContextCache).parameters
    assert list(engine) == ["tiers", "sleep", "background", "options"] and list(facade) == ["tiers", "options"]
    for params, owner in ((engine, Engine), (facade, ContextCache)):
        assert params["options"].kind is inspect.Parameter.VAR_KEYWORD
        hints = typing.get_type_hints(owner.__init__, include_extras=True)
        assert hints["options"] == typing.Unpack[EngineOptions]
    assert EngineOptions.__required_keys__ == frozenset()


def test_every_option_reaches_the_engine_and_the_defaults_are_as_documented():
    def clock() -> float:
        return 0.0

    given: EngineOptions = {
        "block_size": 16, "hash": "blake3", "model": "m", "salt": "s", "clock": clock, "promote": False,
        "write_buffer": 1 << 20, "write_lag": 0.25, "tenancy": None, "erasure_journal": None,
    }  # fmt: skip
    assert set(given) == EngineOptions.__optional_keys__  # a new option: add it here too
    with ContextCache([MemoryTier(1 << 20)], **given) as cache:
        e = cache._engine
        got = (e.block_size, e.hasher.hash, e.model, e.salt, e.clock, e.placement.promote, e.placement.write_buffer)
        assert got == (16, "blake3", "m", b"s", clock, False, 1 << 20) and e.tenancy is None and e.journal is None
        assert e.write_lag == 0.25
    with ContextCache([MemoryTier(1 << 20)]) as cache:
        e = cache._engine
        got = (e.block_size, e.hasher.hash, e.model, e.salt, e.clock, e.placement.promote, e.placement.write_buffer)
        assert got == (256, "xxh3", "default", b"", time.monotonic, True, 256 << 20) and e.tenancy is None
        assert e.write_lag == 1.0


def test_an_unknown_option_is_refused_by_name():
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) 'blocksize'; known: block_size, clock"):
        ContextCache([MemoryTier(1 << 20)], blocksize=16)  # type: ignore[call-arg]


def test_every_option_comes_from_the_config_or_is_named_as_one_no_config_holds():
    """A new EngineOptions key must get its config source in ``engine_options`` (or, for a live
    object a TOML file cannot hold, a place in ``NOT_IN_CONFIG``), or ``from_config`` drops it."""
    from_config = set(engine_options(CacheConfig()))
    assert NOT_IN_CONFIG.issubset(EngineOptions.__optional_keys__)  # no stale name in the exclusions
    assert not from_config & NOT_IN_CONFIG
    missing = EngineOptions.__optional_keys__ - from_config - NOT_IN_CONFIG
    assert not missing, f"EngineOptions keys no config sets: {sorted(missing)}"


def test_from_config_hands_every_config_field_to_the_engine(tmp_path):
    """Each CacheConfig field set away from its default reaches the engine (``tiers`` go to make_tier)."""
    cfg = {
        "block_size": 16, "hash": "blake3", "model": "m", "salt": "s", "promote": False, "write_buffer": "1MiB",
        "write_lag": "250ms", "tenants": {"a": {"api_keys": ["key-a"]}}, "tenancy": {"max_pinned": 4096},
        "tiers": [{"kind": "memory", "capacity": "1MiB"}], "erasure_journal": str(tmp_path / "erasures"),
    }  # fmt: skip
    assert set(cfg) == {f.name for f in dataclasses.fields(CacheConfig)}  # a new field: set it here too

    def clock() -> float:
        return 0.0

    with ContextCache.from_config(cfg, clock=clock) as cache:
        e = cache._engine
        got = (e.block_size, e.hasher.hash, e.model, e.salt, e.clock, e.placement.promote, e.placement.write_buffer)
        assert got == (16, "blake3", "m", b"s", clock, False, 1 << 20) and e.write_lag == 0.25
        assert e.tenancy is not None and e.tenancy.authenticate("key-a") == "a" and e.tenancy.max_pinned == 4096
        assert cache.slots[0].capacity == 1 << 20
        assert e.journal is not None and e.journal.path == tmp_path / "erasures"
