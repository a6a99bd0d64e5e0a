"""The lookup service: stashed matches, the Unix socket, a dead or hostile peer."""

from __future__ import annotations

import contextlib
import socket
import struct
from pathlib import Path

import numpy as np

from ctxcache import ContextCache
from ctxcache.integrations.vllm.lookup import LookupClient, LookupServer, Stash, default_socket_path
from tests.conftest import FakeClock


def _cache() -> ContextCache:
    return ContextCache.from_config({"block_size": 4, "tiers": [{"kind": "memory", "capacity": "1MiB"}]})


def _fill(cache: ContextCache, tokens: list[int], tenant: str = "t") -> None:
    n = len(tokens) // 4
    cache.store(tokens, [[np.full(2, i, dtype=np.float32)] for i in range(n)], tenant)


def test_stash_pins_until_taken_and_checks_tokens() -> None:
    cache = _cache()
    _fill(cache, list(range(12)))
    stash = Stash(cache)
    assert stash.lookup("r", "t", list(range(13))) == 12
    assert stash.lookup("r", "other", list(range(13))) == 0  # replaces (and releases) the first
    assert stash.lookup("r", "t", list(range(13))) == 12
    assert cache.evict_all() == 0  # pinned by the stash
    assert stash.take("r", [99] * 12) is None  # other tokens: released, not handed out
    assert cache.evict_all() == 3
    _fill(cache, list(range(12)))
    stash.lookup("r", "t", list(range(12)))
    m = stash.take("r", list(range(12)))
    assert m is not None and m.n_blocks == 3 and len(stash) == 0
    cache.release(m)


def test_stash_expires_and_drops() -> None:
    clock = FakeClock()
    cache = _cache()
    _fill(cache, list(range(8)))
    stash = Stash(cache, ttl=10, clock=clock)
    stash.lookup("a", "t", list(range(8)))
    stash.lookup("b", "t", list(range(8)))
    stash.drop(["a", "missing"])
    assert len(stash) == 1
    # the scheduler waits for each lookup: it is timed for the benchmark's breakdown
    assert stash.lookups == 2 and 0 < stash.lookup_max_s <= stash.lookup_s
    clock.advance(11)
    stash.expire()
    assert len(stash) == 0 and cache.evict_all() == 2


def test_socket_round_trip_and_hostile_clients(tmp_path: Path) -> None:
    cache = _cache()
    _fill(cache, list(range(8)))
    stash = Stash(cache)
    server = LookupServer(stash, tmp_path / "s.sock", lambda: {"ok": 1})
    try:
        client = LookupClient(tmp_path / "s.sock")
        assert client.lookup("r", "t", list(range(9))) == 8
        assert client.lookup("q", "t", [-1, 5]) == 0  # invalid tokens: a miss, not a dead service
        assert client.stats() == {"ok": 1}
        # Not JSON, an absurd length: the server drops each connection (it may already have when we
        # send, hence a connection per message and a broken pipe tolerated).
        for bad in (struct.pack("<I", 5) + b"{nope", struct.pack("<I", 1 << 30)):
            raw = socket.socket(socket.AF_UNIX)
            raw.settimeout(5)
            raw.connect(str(tmp_path / "s.sock"))
            with contextlib.suppress(OSError):
                raw.sendall(bad)
                raw.recv(1)
            raw.close()
        assert client.lookup("r2", "t", list(range(9))) == 8  # still serving
        assert len(stash) == 2
        client.close()
    finally:
        server.close()
        stash.close()
    assert not (tmp_path / "s.sock").exists()


def test_client_without_a_server_answers_miss(tmp_path: Path) -> None:
    client = LookupClient(tmp_path / "nobody.sock", timeout=0.5)
    assert client.lookup("r", "t", [1, 2, 3]) == 0
    assert client.errors == 1


def test_default_socket_path_is_short_and_private() -> None:
    p = default_socket_path("x" * 200 + "/../evil")
    assert len(str(p)) < 108 and "/" not in p.name and (p.parent.stat().st_mode & 0o777) == 0o700


def test_take_hands_a_longer_match_to_a_shorter_load() -> None:
    cache = _cache()
    _fill(cache, list(range(12)))
    stash = Stash(cache)
    assert stash.lookup("r", "t", list(range(13))) == 12
    # A tensor-parallel rank loads only what every rank holds (ranks.py): its own pinned Match serves.
    m = stash.take("r", list(range(8)))
    assert m is not None and m.n_blocks == 3
    cache.release(m)
    stash.lookup("r", "t", list(range(13)))
    assert stash.take("r", [0, 1, 2, 3, 99, 5, 6, 7]) is None  # other tokens: released
    assert cache.evict_all() == 3
