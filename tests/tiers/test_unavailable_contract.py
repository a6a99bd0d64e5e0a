"""``load_many``'s ``unavailable``: a tier names the misses it could not reach right now (a Redis
Cluster master or the whole server hung, a disk read failing with an OSError other than "no such
file") apart from blocks absent or damaged, keeps charging them, and RAM tiers name none. The
engine keeps the former (see tests/engine/test_unavailable_tier.py) and loses the latter."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import numpy as np

from ctxcache.tiers import DiskTier, MemoryTier, RedisTier
from ctxcache.tiers.base import BlockMeta
from ctxcache.tiers.fake import FakeSlowTier
from tests.conftest import wait_cluster_ok
from tests.tiers.test_redis_pipeline import KEYS as PKEYS
from tests.tiers.test_redis_pipeline import TOKENS, _agreed, moved_slot  # noqa: F401 - a fixture

KEYS = [bytes([i + 1]) * 16 for i in range(24)]
TOK = np.arange(4, dtype="<i4").tobytes()


def test_a_hung_cluster_master_s_keys_are_named_unavailable_the_others_are_not(cluster_partial):
    t = RedisTier(1 << 24, url=cluster_partial[0].url.rsplit("/", 1)[0], cluster=True, prefix="uk:", timeout=0.2)
    assert t.wait_ready()
    for k in KEYS:
        t.put(k, b"v", BlockMeta(TOK))
    hung = cluster_partial[1]
    on_hung = {name[3:] for name in hung.client().keys(b"uk:*")}
    gone = next(k for k in KEYS if k not in on_hung)  # deleted behind the tier's back: really absent
    for node in cluster_partial:
        with contextlib.suppress(Exception):  # MOVED from the masters that do not own it
            node.client().delete(b"uk:" + gone)
    used, gone_size = t.used_bytes, t.nbytes(gone)
    os.kill(hung.proc.pid, signal.SIGSTOP)
    try:
        down: set[int] = set()
        got = t.load_many(KEYS, [TOK] * len(KEYS), down)
        assert down == {i for i, k in enumerate(KEYS) if k in on_hung} and down
        assert [i for i, g in enumerate(got) if g is None] == sorted(down | {KEYS.index(gone)})
        assert t.used_bytes == used - gone_size > 0  # only the absent one is no longer charged
        assert gone not in t and all(k in t for k in on_hung)
    finally:
        os.kill(hung.proc.pid, signal.SIGCONT)
    wait_cluster_ok(cluster_partial)
    for node in cluster_partial:
        for name in node.client().keys(b"uk:*"):
            node.client().delete(name)
    t.close()


def test_a_hung_server_s_keys_are_all_unavailable_and_stay_charged(redis_factory):
    server = redis_factory()
    t = RedisTier(1 << 24, url=server.url, prefix="ul:", timeout=0.05, retry_interval=0.05)
    assert t.wait_ready()
    for k in KEYS[:3]:
        t.put(k, b"v", BlockMeta(TOK))
    os.kill(server.proc.pid, signal.SIGSTOP)
    try:
        for _ in range(2):  # the round trip that times out, then the tier marked unhealthy
            down: set[int] = set()
            assert t.load_many(KEYS[:3], [TOK] * 3, down) == [None] * 3 and down == {0, 1, 2}
        assert len(t) == 3 and not t.healthy
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)
    t.close()


def test_disk_names_a_failing_read_unavailable_and_a_missing_file_not(tmp_path: Path):
    t = DiskTier(1 << 20, path=tmp_path, fsync=False)
    for k in KEYS[:3]:
        t.put(k, b"v", BlockMeta(TOK))
    f = tmp_path / "blocks" / KEYS[0][:1].hex() / f"{KEYS[0].hex()}.blk"
    f.unlink()
    f.mkdir()  # IsADirectoryError: an OSError that is not FileNotFoundError
    (tmp_path / "blocks" / KEYS[1][:1].hex() / f"{KEYS[1].hex()}.blk").unlink()
    down: set[int] = set()
    got = t.load_many(KEYS[:3], [TOK] * 3, down)
    assert got[:2] == [None, None] and got[2] is not None and down == {0}
    assert KEYS[0] in t and KEYS[1] not in t  # the unreadable one is still charged
    assert t.load_many(KEYS[:1], [TOK]) == [None]  # without the set: a miss, never an exception
    t.close()


def test_ram_and_fake_tiers():
    m = MemoryTier(1 << 20)
    down: set[int] = set()
    assert m.load_many(KEYS[:2], [TOK, TOK], down) == [None, None] and down == set()
    f = FakeSlowTier(1 << 20)
    f.put(KEYS[0], b"v", BlockMeta(TOK))
    f.down = True
    assert f.load_many(KEYS[:1], [TOK], down) == [None] and down == {0} and KEYS[0] in f


def test_a_read_answered_moved_is_unavailable_then_served_by_the_new_owner(moved_slot):  # noqa: F811 - the fixture
    """A slot resharded with its keys: the first read reaches the old owner (MOVED), which is not
    "absent": the block stays charged, and the refreshed topology serves it. Before: uncharged, lost."""
    name, (nodes, slot, src, dst) = moved_slot
    t = RedisTier(1 << 24, url=nodes[0].url.rsplit("/", 1)[0], cluster=True, prefix="mv:", retry_interval=0.05)
    assert t.wait_ready()
    key = PKEYS[7]
    t.put(key, b"moved", BlockMeta(TOKENS))
    sid = src.client().execute_command("CLUSTER", "MYID").decode()
    did = dst.client().execute_command("CLUSTER", "MYID").decode()
    dst.client().execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", sid)
    src.client().execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", did)
    src.client().execute_command("MIGRATE", "127.0.0.1", dst.port, "", 0, 5000, "KEYS", name)
    for node in [dst, src, *[n for n in nodes if n not in (src, dst)]]:
        node.client().execute_command("CLUSTER", "SETSLOT", slot, "NODE", did)
    _agreed(nodes, slot, dst)
    down: set[int] = set()
    assert t.load_many([key], [TOKENS], down) == [None] and down == {0} and key in t
    got = t.load_many([key], [TOKENS], down)[0]
    assert got is not None and got.payload == b"moved"
    t.close()
