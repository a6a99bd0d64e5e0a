"""`ctxcache replicate` as a user types it: bad arguments are a clear error (exit 2), a second
replicator of a region waits for the first's claim, SIGTERM is a clean exit."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

from ctxcache.cli import app
from ctxcache.replication import RedisLog

from ..server.test_fleet_events import SRC


@pytest.mark.parametrize(
    "args, msg",
    [
        (["--peer", "b"], "NAME=URL"),
        (["--peer", "a=redis://127.0.0.1:1/0"], "lists itself"),
        (["--peer", "b=http://x"], "redis://host:port/db"),
        (["--peer", "b=redis://127.0.0.1:1/0", "--peer", "b=redis://127.0.0.1:2/0"], "given twice"),
        (["--peer", "bad name=redis://127.0.0.1:1/0"], "region name"),
    ],
)
def test_bad_arguments_are_a_clear_error(args, msg):
    r = CliRunner().invoke(app, ["replicate", "--region", "a", "--redis", "redis://127.0.0.1:1/0", *args])
    assert r.exit_code == 2 and msg in r.output, r.output


def _wait_for_line(proc, needle: str, timeout: float = 120) -> None:
    """Read ``proc``'s output until a line holds ``needle``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 1.0)
        if ready:
            line = proc.stdout.readline()
            assert line or proc.poll() is None, "the replicator exited"
            if needle in line:
                return
    raise AssertionError(f"no line with {needle!r} within {timeout} s")


def _replicate(region, url, peer):
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    cmd = [sys.executable, "-c", "from ctxcache.cli import main; main()", "replicate", "--region", region,
           "--redis", url, "--peer", peer, "--status-every", "0.5"]  # fmt: skip
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_one_replicator_per_region_and_sigterm_is_a_clean_exit(redis_factory):
    own, peer = redis_factory(), redis_factory()
    first = _replicate("a", own.url, f"b={peer.url}")
    second = None
    try:
        log = RedisLog(own.url, "a")
        deadline = time.monotonic() + 30
        while log.r.get(log.k["owner"]) is None:
            assert time.monotonic() < deadline and first.poll() is None
            time.sleep(0.1)
        holder = log.r.get(log.k["owner"])
        second = _replicate("a", own.url, f"b={peer.url}")
        _wait_for_line(second, "replicating region a")  # up, polling the claim (a loaded host starts it slowly)
        assert log.r.get(log.k["owner"]) == holder  # the second waits
        log.submit("erase_tenant", "acme", None)
        deadline = time.monotonic() + 10
        while int(log.r.hget(log.k["meta"], "seq") or 0) < 1:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        # its periodic status line shows the erasure applied while it holds the claim (waited for:
        # SIGTERM right after the log's seq moved may come before any such line is printed)
        _wait_for_line(first, '"holding": true, "head": 1')
        first.send_signal(signal.SIGTERM)
        assert first.wait(20) == 0
        out = first.stdout.read() if first.stdout else ""
        assert '"holding": false, "head": 1' in out, out  # its last line: the claim released at exit
        deadline = time.monotonic() + 5  # the claim was released: the second takes over at once
        while log.r.get(log.k["owner"]) in (None, holder):
            assert time.monotonic() < deadline, "the second replicator did not take over"
            time.sleep(0.1)
    finally:
        for p in (first, second):
            if p is not None and p.poll() is None:
                p.terminate()
                p.wait(20)
