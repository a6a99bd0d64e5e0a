"""A Cluster delete batch spans several masters. With one master hung (SIGSTOP: it keeps its data),
the deletes the healthy masters answered landed: the tier stops charging exactly those, keeps
charging the hung master's keys, and names them in ``DeleteFailedError.failed``. Before, the whole
batch raised: the pipelines of masters after the hung one were never sent, and the tier stopped
charging every key, so the caller could not tell which deletes had landed."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

from ctxcache.errors import DeleteFailedError, TierUnavailableError
from ctxcache.tiers import RedisTier
from tests.conftest import wait_cluster_ok

KEYS = [bytes([i]) * 16 for i in range(40)]
TOKENS = np.arange(4, dtype="<i4").tobytes()
PREFIX = b"pd:"


def test_a_delete_spanning_masters_with_one_hung_uncharges_exactly_what_landed(redis_cluster):
    url = redis_cluster[0].url.rsplit("/", 1)[0]
    t = RedisTier(1 << 24, url=url, cluster=True, prefix=PREFIX.decode(), retry_interval=0.05)
    assert t.wait_ready()
    blobs = [(k, t.codec.encode(b"v" * (i + 1), k, TOKENS)) for i, k in enumerate(KEYS)]  # sizes differ
    assert t.put_blobs(blobs) == [True] * len(KEYS)
    size = {k: len(b) for k, b in blobs}
    hung, healthy = redis_cluster[1], [redis_cluster[0], redis_cluster[2]]
    on_hung = {name[len(PREFIX) :] for name in hung.client().keys(PREFIX + b"*")}
    assert 0 < len(on_hung) < len(KEYS)  # the batch spans the hung master and the others
    os.kill(hung.proc.pid, signal.SIGSTOP)
    try:
        with pytest.raises(TierUnavailableError, match="unreachable") as err:
            t.delete_many(KEYS)
        assert not any(n.client().keys(PREFIX + b"*") for n in healthy)  # before: some never sent
        assert set(t.keys()) == on_hung and len(t) == len(on_hung)  # noqa: SIM118 (a Tier method); before: 0
        assert t.used_bytes == sum(size[k] for k in on_hung)  # before: 0
        assert isinstance(err.value, DeleteFailedError)
        assert set(err.value.failed) == on_hung and len(err.value.failed) == len(on_hung)
        assert err.value.deleted == len(KEYS) - len(on_hung)
        assert t.healthy and t.masters_down == [f"127.0.0.1:{hung.port}"]  # only it (before: the whole tier down)
        with pytest.raises(DeleteFailedError) as again:
            t.delete_many(sorted(on_hung))  # skipped while down: nothing landed, all still charged
        assert set(again.value.failed) == on_hung and again.value.deleted == 0 and len(t) == len(on_hung)
    finally:
        os.kill(hung.proc.pid, signal.SIGCONT)
    wait_cluster_ok(redis_cluster)  # a pause past the node timeout fails the cluster for a moment
    assert t.wait_ready(5)
    t.delete_many(err.value.failed)  # the retry (DELs sent while hung may have run on resume: no matter)
    assert len(t) == 0 and t.used_bytes == 0
    assert not any(n.client().keys(PREFIX + b"*") for n in redis_cluster)
    t.close()
