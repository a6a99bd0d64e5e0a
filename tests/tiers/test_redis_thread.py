"""RedisTier's background thread (reconnects, Bloom filter refreshes): it notices a dead server on
its own, a tier without a filter has nothing to refresh, it is named for stack dumps, and it
never keeps a process alive that forgot to close its tier."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import ctxcache
from ctxcache.tiers import RedisTier
from tests.conftest import free_port

SRC = Path(ctxcache.__file__).resolve().parents[1]  # the sources under test, for a child process


def test_a_refresh_that_finds_the_server_dead_marks_the_tier_down(redis_factory):
    server = redis_factory()
    t = RedisTier(1 << 20, url=server.url, bloom_refresh=0.05, retry_interval=60)
    assert t.wait_ready()
    server.kill()
    deadline = time.monotonic() + 3
    while t.healthy and time.monotonic() < deadline:  # no request is made: only the refresh scans
        time.sleep(0.01)
    assert not t.healthy and t.errors >= 1
    t.close()


def test_a_tier_without_a_filter_refreshes_nothing(redis_url):
    t = RedisTier(1 << 20, url=redis_url, bloom=False, bloom_refresh=0.02, retry_interval=0.05)
    assert t.wait_ready()
    time.sleep(0.3)  # several refresh periods
    assert t.errors == 0 and t.healthy
    t.close()


def test_the_thread_is_named_after_the_tier():
    t = RedisTier(1 << 20, url=f"redis://127.0.0.1:{free_port()}/0", name="shared", retry_interval=60)
    assert t.stats()["healthy"] is False  # down at start: a plain False in stats, not null
    assert "ctxcache-redis-shared" in [th.name for th in threading.enumerate()]
    t.close()


def test_a_process_that_never_closes_its_tier_still_exits():
    code = (
        "from ctxcache.tiers import RedisTier\n"
        f"t = RedisTier(1 << 20, url='redis://127.0.0.1:{free_port()}/0', retry_interval=0.05)\n"
        "print('made', flush=True)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0 and "made" in proc.stdout, proc.stderr
