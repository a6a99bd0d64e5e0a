"""A whole Redis tier going unhealthy (one server hung, or every Cluster master) is logged once as a
WARNING with the error, and its reconnection once as INFO: not per request, nor per failed
reconnect attempt. A Cluster tier's down masters are a Prometheus gauge. Servers are paused with
SIGSTOP (they keep their data)."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ctxcache.errors import DeleteFailedError
from ctxcache.observability.exporter import CacheCollector
from ctxcache.tiers import RedisTier
from tests.conftest import free_port, wait_cluster_ok

KEYS = [bytes([i]) * 16 for i in range(30)]
TOKENS = np.arange(4, dtype="<i4").tobytes()
PREFIX = b"outage:"
RETRY = 0.1  # several failed reconnect attempts fit in the pause below


def _tier(url: str, **kw: object) -> RedisTier:
    t = RedisTier(1 << 24, url=url, prefix=PREFIX.decode(), timeout=0.2, retry_interval=RETRY, **kw)
    assert t.wait_ready()
    blobs = [(k, t.codec.encode(b"v%d" % i, k, TOKENS)) for i, k in enumerate(KEYS)]
    assert t.put_blobs(blobs) == [True] * len(KEYS)
    return t


def _requests(t: RedisTier) -> None:
    for _ in range(5):  # loads, writes and deletes: each answered at once once the tier is unhealthy
        t.load_many(KEYS, [TOKENS] * len(KEYS))
        t.put_blobs([(KEYS[0], t.codec.encode(b"x", KEYS[0], TOKENS))])
        with contextlib.suppress(DeleteFailedError):  # refused while unhealthy
            t.delete_many(KEYS[:2])


def _tier_lines(caplog: pytest.LogCaptureFixture, name: str) -> list[tuple[int, str]]:
    return [
        (r.levelno, r.getMessage())
        for r in caplog.records
        if r.name == "ctxcache.tiers" and r.getMessage().startswith(f"redis tier {name!r}")
    ]


def _wait_lines(caplog: pytest.LogCaptureFixture, name: str, n: int) -> list[tuple[int, str]]:
    deadline = time.monotonic() + 3  # the INFO line follows the reconnect that wait_ready saw
    while len(_tier_lines(caplog, name)) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    return _tier_lines(caplog, name)


def test_a_hung_server_is_logged_once_when_the_tier_goes_down_and_once_when_it_reconnects(redis_factory, caplog):
    """Before, a whole tier going down or coming back was logged nowhere by the tier."""
    caplog.set_level(logging.INFO, logger="ctxcache.tiers")
    server = redis_factory()
    t = _tier(server.url)
    os.kill(server.proc.pid, signal.SIGSTOP)
    try:
        _requests(t)
        assert not t.healthy
        time.sleep(10 * RETRY)  # about ten reconnect attempts, each failing
        assert not t.healthy
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)
    assert t.wait_ready(5)
    _requests(t)
    lines = _wait_lines(caplog, t.name, 2)
    assert [level for level, _ in lines] == [logging.WARNING, logging.INFO]
    assert "unhealthy" in lines[0][1] and "Timeout" in lines[0][1]  # the error that took it down
    assert "reconnected" in lines[1][1]
    t.close()


def test_a_server_not_up_at_startup_is_logged_once_then_its_connection_once(redis_factory, caplog):
    caplog.set_level(logging.INFO, logger="ctxcache.tiers")
    port = free_port()
    t = RedisTier(1 << 24, url=f"redis://127.0.0.1:{port}/0", timeout=0.2, retry_interval=RETRY)
    time.sleep(5 * RETRY)  # failed attempts
    assert not t.healthy
    redis_factory(port)
    assert t.wait_ready(5)
    lines = _wait_lines(caplog, t.name, 2)
    assert [level for level, _ in lines] == [logging.WARNING, logging.INFO]
    assert "no answer at startup" in lines[0][1] and "reconnected" in lines[1][1]
    t.close()


def test_every_cluster_master_hung_is_logged_once_as_a_tier_outage_and_once_at_reconnect(cluster, caplog):
    caplog.set_level(logging.INFO, logger="ctxcache.tiers")
    t = _tier(cluster[0].url.rsplit("/", 1)[0], cluster=True)
    for node in cluster:
        os.kill(node.proc.pid, signal.SIGSTOP)
    try:
        _requests(t)
        assert not t.healthy
        time.sleep(10 * RETRY)
    finally:
        for node in cluster:
            os.kill(node.proc.pid, signal.SIGCONT)
    wait_cluster_ok(cluster)
    assert t.wait_ready(5) and t.masters_down == []
    _requests(t)
    lines = _wait_lines(caplog, t.name, 2)
    assert [level for level, _ in lines] == [logging.WARNING, logging.INFO]
    assert "unhealthy" in lines[0][1] and "every master" in lines[0][1] and "reconnected" in lines[1][1]
    t.close()


def _scrape(t: RedisTier) -> dict[str, float]:
    reg = CollectorRegistry()
    reg.register(CacheCollector(lambda: {"tiers": {t.name: t.stats()}}))
    text = generate_latest(reg).decode()
    fams = text_string_to_metric_families(text)
    return {s.labels["tier"]: s.value for f in fams for s in f.samples if s.name == "ctxcache_tier_masters_down"}


def test_a_cluster_tier_exports_its_down_masters_as_a_gauge(cluster):
    """Before, the down masters were in stats and /readyz only: no Prometheus series."""
    t = _tier(cluster[0].url.rsplit("/", 1)[0], cluster=True)
    assert _scrape(t) == {t.name: 0.0}
    hung = cluster[1]
    os.kill(hung.proc.pid, signal.SIGSTOP)
    try:
        t.load_many(KEYS, [TOKENS] * len(KEYS))
        assert t.healthy and t.masters_down == [f"127.0.0.1:{hung.port}"]
        assert _scrape(t) == {t.name: 1.0}
    finally:
        os.kill(hung.proc.pid, signal.SIGCONT)
    wait_cluster_ok(cluster)
    assert t.wait_ready(5)
    assert _scrape(t) == {t.name: 0.0}
    t.close()


def test_a_single_server_tier_has_no_masters_down_series(redis_url):
    t = _tier(redis_url)
    assert _scrape(t) == {}
    t.close()
