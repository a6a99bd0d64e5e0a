"""What the engine core promises outside the request path: per-tenant bytes in ``tenant_usage``,
the derived figures of ``stats``, the TTL sweeper thread (started only when a tenant has a TTL,
and reclaiming on its own), and expired class-0 blocks giving way when a tier needs room.
Mutation testing found each unchecked."""

from __future__ import annotations

import threading
import time

import pytest

from ctxcache import ContextCache
from ctxcache.engine import core
from ctxcache.engine.tenancy import InvalidSaltError

from .tenancy_util import BS, ask, cache_with, payloads, prompt_of, tier_of

BLOCK = 64  # bytes a hot memory tier charges for one test block (16 float32)


def test_tenant_usage_gives_the_bytes_each_tenant_holds_per_tier(tmp_path):
    cache = cache_with([tier_of("memory", tmp_path)], {"a": {}, "b": {}})
    ask(cache, "a", prompt_of(1))
    ask(cache, "a", prompt_of(2, n_blocks=2))
    ask(cache, "b", prompt_of(3, n_blocks=1))
    assert cache.tenant_usage("a")["tiers"]["memory"] == {"bytes": 6 * BLOCK, "quota": None}
    assert cache.tenant_usage("b")["tiers"]["memory"]["bytes"] == BLOCK
    assert cache.tenant_usage("a")["blocks"] == 6


def test_stats_derive_the_hit_ratio_and_the_eviction_reasons(tmp_path):
    cache = cache_with([tier_of("memory", tmp_path)], {"a": {}})
    toks = prompt_of(1)
    prompt = cache.prompt(toks[: 2 * BS], "a")
    with cache.lookup(prompt) as m:
        cache.store(prompt, payloads(toks[: 2 * BS]), first_block=m.n_blocks)
    with cache.lookup(cache.prompt(toks, "a")) as m:
        assert m.hit_tokens == 2 * BS
    s = cache.stats()
    assert (s["hit_tokens"], s["lookup_tokens"]) == (2 * BS, 2 * BS + 4 * BS)
    assert s["token_hit_ratio"] == pytest.approx(2 / 6)
    cache.erase_tenant("a")
    reasons = cache.stats()["evictions_by_reason"]
    assert reasons == {"capacity": 0, "quota": 0, "ttl": 0, "erasure": 2, "corrupt": 0}


def test_token_hit_ratio_is_zero_before_any_lookup():
    assert ContextCache.from_config({"block_size": BS}).stats()["token_hit_ratio"] == 0.0


def _sweepers(cache: ContextCache) -> list[threading.Thread]:
    t = cache._engine._sweeper
    return [] if t is None else [t]


def test_the_sweeper_reclaims_expired_blocks_on_its_own(tmp_path, clock, monkeypatch):
    monkeypatch.setattr(core, "SWEEP_EVERY_S", 0.02)
    cache = cache_with([tier_of("memory", tmp_path)], {"a": {"ttl": "10s"}, "b": {"ttl": "1h"}}, clock=clock)
    assert [t.name for t in _sweepers(cache)] == ["ctxcache-ttl-sweeper"]
    ask(cache, "a", prompt_of(1))
    clock.advance(11)  # nobody calls sweep(): the thread does
    deadline = time.monotonic() + 10
    while cache.stats()["expired"] < 4 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert cache.stats()["expired"] == 4 and cache.tenant_usage("a")["tiers"]["memory"]["bytes"] == 0
    cache.close()
    assert not any(t.is_alive() for t in _sweepers(cache))


def test_no_sweeper_thread_without_a_ttl(tmp_path):
    cache = cache_with([tier_of("memory", tmp_path)], {"a": {}, "b": {"rate": 1 << 20}})
    assert _sweepers(cache) == []
    cache.close()


def test_expired_class_0_blocks_give_way_to_new_blocks_without_a_sweep(tmp_path, clock):
    """Live class-0 blocks never leave; once their TTL has run out they are evictable like any
    block, before the sweeper has reclaimed them."""
    cache = cache_with(
        [tier_of("memory", tmp_path, capacity=8 * BLOCK, high=1.0, low=1.0)],
        {"sys": {"priority": 0, "ttl": "60s"}, "be": {}},
        clock=clock,
    )
    ask(cache, "sys", prompt_of(1))
    ask(cache, "sys", prompt_of(2))  # the tier is full of class-0 blocks
    assert ask(cache, "be", prompt_of(3)) == 0 and cache.tenant_usage("be")["blocks"] == 0  # live: they stay
    clock.advance(61)
    assert ask(cache, "be", prompt_of(3)) == 0  # expired: they make room now
    assert cache.tenant_usage("be")["blocks"] == 4 and cache.stats()["expired"] == 0
    assert ask(cache, "be", prompt_of(3)) == 4 * BS


def test_a_second_close_does_nothing(tmp_path):
    """close() is idempotent: a block that was pinned at the first close (so it stayed in RAM) and
    released afterwards is not spilled by a second close into a disk tier already closed (its
    directory lock released: another process may own it by then)."""
    disk = tier_of("disk", tmp_path, write="demote")  # only a spill could write it there
    cache = ContextCache([tier_of("memory", tmp_path), disk], block_size=BS)
    toks = prompt_of(1, n_blocks=1)
    cache.store(toks, payloads(toks), "default", 0)
    held = cache.lookup(toks)
    cache.close()
    cache.release(held)
    before = set(threading.enumerate())
    cache.close()
    assert len(disk) == 0 and cache.stats()["pending_moves"] == 0
    assert not [t.name for t in set(threading.enumerate()) - before]  # no mover started again


def test_a_cache_salt_without_tenants_narrows_sharing():
    """vLLM's per-request cache_salt: requests share blocks only under the same salt."""
    cache = ContextCache.from_config({"block_size": BS})
    toks = prompt_of(1)
    salted = cache.prompt(toks, "default", cache_salt="s1")
    cache.store(salted, payloads(toks), "default", 0)
    for salt, hit in (("s1", 4 * BS), ("s2", 0), (None, 0)):
        with cache.lookup(cache.prompt(toks, "default", cache_salt=salt)) as m:
            assert m.hit_tokens == hit, salt
    with pytest.raises(InvalidSaltError, match="cache_salt must be"):
        cache.prompt(toks, "default", cache_salt="no spaces allowed")


def test_one_ram_tier_of_encoded_blocks_loses_and_repairs_a_corrupt_block(tmp_path):
    """The one-tier fast path is for live objects only: encoded blocks can be corrupt, and a
    corrupt one must be marked lost (and pruned) so that the next store replaces it, not left
    indexed as cached: a miss forever."""
    warm = tier_of("memory-warm", tmp_path)
    cache = ContextCache([warm], block_size=BS)
    toks = prompt_of(1, n_blocks=2)
    cache.store(toks, payloads(toks), "default", 0)
    with cache.lookup(toks) as m:
        key = m.keys[1]
    blob = bytearray(warm.get_blob(key) or b"")
    blob[-1] ^= 0xFF
    warm.put_blob(key, bytes(blob))
    assert ask(cache, "default", toks) == BS  # block 1 unreadable: a miss, and stored again
    assert cache.stats()["lost"] == 1 and warm.corrupt == 1
    assert ask(cache, "default", toks) == 2 * BS
