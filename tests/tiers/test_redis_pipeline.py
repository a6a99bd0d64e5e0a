"""RedisTier round trips: a batch is one pipeline, one command's error spoils only its own
answer, and in a Cluster a slot that moved to another master is followed after one miss (the
tier refreshes its topology on a MOVED reply instead of missing on that slot forever). A delete
that did not land (MOVED, a hung master) raises."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import numpy as np
import pytest

from ctxcache.errors import DeleteFailedError, TierUnavailableError
from ctxcache.tiers import BlockMeta, RedisTier
from tests.conftest import wait_cluster_ok

KEYS = [bytes([i]) * 16 for i in range(40)]
TOKENS = np.arange(4, dtype="<i4").tobytes()


def test_a_batch_is_one_round_trip(redis_url):
    t = RedisTier(1 << 24, url=redis_url, prefix="rt:", retry_interval=0.05)
    assert t.wait_ready()
    before = t.round_trips
    assert t.put_blobs([(k, t.codec.encode(b"v", k, TOKENS)) for k in KEYS]) == [True] * len(KEYS)
    assert t.round_trips == before + 1
    assert all(b is not None for b in t.load_many(KEYS, [TOKENS] * len(KEYS)))
    assert t.round_trips == before + 2 and t.stats()["round_trips"] == before + 2
    t.close()


def test_one_commands_error_spoils_only_its_own_answer(redis_url, redis_server):
    t = RedisTier(1 << 24, url=redis_url, prefix="we:", retry_interval=0.05)
    assert t.wait_ready()
    t.put(KEYS[0], b"good", BlockMeta(TOKENS))
    redis_server.client().rpush(b"we:" + KEYS[1], b"a list, not a block")  # GET answers WRONGTYPE
    got = t.load_many(KEYS[:2], [TOKENS] * 2)
    assert got[0] is not None and got[0].payload == b"good" and got[1] is None
    assert t.healthy
    t.close()


def _node_id(server) -> str:
    return server.client().execute_command("CLUSTER", "MYID").decode()


def _move_slot(nodes, slot: int, src, dst) -> None:
    """Move an empty slot from master ``src`` to master ``dst``, the way redis-cli reshards."""
    sid, did = _node_id(src), _node_id(dst)
    dst.client().execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", sid)
    src.client().execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", did)
    for node in [dst, src, *[n for n in nodes if n not in (src, dst)]]:
        node.client().execute_command("CLUSTER", "SETSLOT", slot, "NODE", did)


def _owner(nodes, slot: int, view=None):
    """The master that owns ``slot`` in one node's view of the cluster (default: the first's)."""
    for lo, hi, master, *_ in (view or nodes[0]).client().execute_command("CLUSTER", "SLOTS"):
        if lo <= slot <= hi:
            return next(n for n in nodes if n.port == int(master[1]))
    raise AssertionError(f"no owner of slot {slot}")


def _agreed(nodes, slot: int, owner) -> None:
    deadline = time.monotonic() + 5
    while any(_owner(nodes, slot, n) is not owner for n in nodes):
        assert time.monotonic() < deadline, "the cluster did not agree on the moved slot"
        time.sleep(0.05)


@pytest.fixture
def moved_slot(redis_cluster) -> Iterator[tuple[bytes, object]]:
    """A block key whose (empty) slot is moved to another master; moved back afterwards."""
    nodes = redis_cluster
    name = b"mv:" + KEYS[7]
    slot = int(nodes[0].client().execute_command("CLUSTER", "KEYSLOT", name))
    src = _owner(nodes, slot)
    dst = next(n for n in nodes if n is not src)
    yield name, (nodes, slot, src, dst)
    if _owner(nodes, slot) is dst:
        dst.client().delete(name)
        _move_slot(nodes, slot, dst, src)
    _agreed(nodes, slot, src)


def test_a_cluster_tier_follows_a_slot_that_moved(moved_slot):
    name, (nodes, slot, src, dst) = moved_slot
    t = RedisTier(1 << 24, url=nodes[0].url.rsplit("/", 1)[0], cluster=True, prefix="mv:", retry_interval=0.05)
    assert t.wait_ready()
    _move_slot(nodes, slot, src, dst)
    _agreed(nodes, slot, dst)
    blob = t.codec.encode(b"moved", KEYS[7], TOKENS)
    first = t.put_blobs([(KEYS[7], blob)])  # the tier still sends it to the old owner: MOVED
    assert first == [False] and t.healthy
    assert t.put_blobs([(KEYS[7], blob)]) == [True]  # topology refreshed: the new owner takes it
    assert dst.client().get(name) == blob
    got = t.load_many([KEYS[7]], [TOKENS])[0]
    assert got is not None and got.payload == b"moved"
    t.close()


def test_a_cluster_delete_answered_moved_raises_then_lands(moved_slot):
    """A delete sent to a slot's old owner is answered MOVED and deletes nothing: it must raise
    (before: 0, the block left stored with nobody charging for it). Retried, it lands."""
    name, (nodes, slot, src, dst) = moved_slot
    t = RedisTier(1 << 24, url=nodes[0].url.rsplit("/", 1)[0], cluster=True, prefix="mv:", retry_interval=0.05)
    assert t.wait_ready()
    _move_slot(nodes, slot, src, dst)
    _agreed(nodes, slot, dst)
    dst.client().set(name, t.codec.encode(b"stays", KEYS[7], TOKENS))  # written by another process
    with pytest.raises(TierUnavailableError, match="refused"):
        t.delete_many([KEYS[7]])
    assert t.healthy and dst.client().exists(name)
    assert t.delete(KEYS[7]) is True and not dst.client().exists(name)  # topology refreshed
    t.close()


def test_a_moved_reply_in_a_cluster_batch_fails_only_its_key(moved_slot):
    """Only the key whose master answered MOVED is named failed and stays charged; the batch's
    other deletes landed and are uncharged (before: the whole batch raised, none uncharged)."""
    name, (nodes, slot, src, dst) = moved_slot
    t = RedisTier(1 << 24, url=nodes[0].url.rsplit("/", 1)[0], cluster=True, prefix="mv:", retry_interval=0.05)
    assert t.wait_ready()
    others = [k for k in KEYS[:12] if k != KEYS[7]]
    assert t.put_blobs([(k, t.codec.encode(b"v", k, TOKENS)) for k in others]) == [True] * 11
    _move_slot(nodes, slot, src, dst)
    _agreed(nodes, slot, dst)
    blob = t.codec.encode(b"v", KEYS[7], TOKENS)
    dst.client().set(name, blob)  # written by another process, found and adopted here
    t.adopt(KEYS[7], len(blob))
    with pytest.raises(DeleteFailedError, match="refused") as err:
        t.delete_many(KEYS[:12])
    assert err.value.failed == (KEYS[7],) and err.value.deleted == 11
    assert list(t.keys()) == [KEYS[7]] and t.used_bytes == len(blob) and t.healthy  # noqa: SIM118 (a Tier method)
    assert [k for n in nodes for k in n.client().keys(b"mv:*")] == [name]  # only it is still stored
    t.close()


def test_a_cluster_delete_on_a_hung_master_raises(redis_cluster):
    t = RedisTier(1 << 24, url=redis_cluster[0].url.rsplit("/", 1)[0], cluster=True, prefix="hd:", retry_interval=0.05)
    assert t.wait_ready()
    assert t.put_blobs([(k, t.codec.encode(b"v", k, TOKENS)) for k in KEYS]) == [True] * len(KEYS)
    victim = redis_cluster[1].proc
    on_hung = sorted(name[3:] for name in redis_cluster[1].client().keys(b"hd:*"))
    os.kill(victim.pid, signal.SIGSTOP)
    try:
        with pytest.raises(TierUnavailableError, match="unreachable"):
            t.delete_many(KEYS)  # before: a count of 0, as if none had been stored
        assert t.healthy and t.masters_down == [f"127.0.0.1:{redis_cluster[1].port}"]  # only the hung master
        with pytest.raises(TierUnavailableError):
            t.delete(on_hung[0])  # skipped while its master is down
    finally:
        os.kill(victim.pid, signal.SIGCONT)
    wait_cluster_ok(redis_cluster)
    assert t.wait_ready(5)
    t.delete_many(KEYS)  # what the hung master held is deleted now (some DELs may have run on resume)
    assert not any(n.client().keys(b"hd:*") for n in redis_cluster)
    t.close()
