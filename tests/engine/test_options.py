"""EngineOptions: the engine's keyword options are named once, and the facade forwards them all.

An option declared on ``Engine`` itself (beside ``sleep``, the engine's own test hook) would not
reach ``ContextCache``; one added to ``EngineOptions`` reaches it with its type."""

from __future__ import annotations

import inspect
import time
import typing

import pytest

from ctxcache import ContextCache, EngineOptions, MemoryTier
from ctxcache.engine import Engine


def test_the_engine_and_the_facade_take_their_options_from_one_typed_dict():
    engine = inspect.signature(Engine).parameters
    facade = inspect.signature(ContextCache).parameters
    assert list(engine) == ["tiers", "sleep", "options"] and list(facade) == ["tiers", "options"]
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
        "write_buffer": 1 << 20, "tenancy": None,
    }  # fmt: skip
    assert set(given) == EngineOptions.__optional_keys__  # a new option: add it here too
    with ContextCache([MemoryTier(1 << 20)], **given) as cache:
        e = cache._engine
        got = (e.block_size, e.hasher.hash, e.model, e.salt, e.clock, e.placement.promote, e.placement.write_buffer)
        assert got == (16, "blake3", "m", b"s", clock, False, 1 << 20) and e.tenancy is None
    with ContextCache([MemoryTier(1 << 20)]) as cache:
        e = cache._engine
        got = (e.block_size, e.hasher.hash, e.model, e.salt, e.clock, e.placement.promote, e.placement.write_buffer)
        assert got == (256, "xxh3", "default", b"", time.monotonic, True, 256 << 20) and e.tenancy is None


def test_an_unknown_option_is_refused_by_name():
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) 'blocksize'; known: block_size, clock"):
        ContextCache([MemoryTier(1 << 20)], blocksize=16)  # type: ignore[call-arg]
