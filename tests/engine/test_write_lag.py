"""``write_lag``: with write-through, a store returns only once the mover is at most ``write_lag``
seconds behind, so a SIGKILL loses at most the copies queued in that last window, even when the
tier writes slower than requests store (issue 26, item 0: "lose at most the last second")."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ctxcache import ContextCache
from ctxcache.config import load_config
from ctxcache.errors import ConfigError
from ctxcache.tiers import DiskTier, MemoryTier
from ctxcache.tiers.fake import FakeSlowTier

from .tenancy_util import BS, ask, prompt_of

SRC = Path(__file__).resolve().parents[2] / "src"


class Crawl:
    """``on_call``: each batch written takes ``per_block`` seconds a block (``first``: the first
    batch only, this long) until ``fast`` (the test has measured: the drain at close is instant)."""

    def __init__(self, per_block: float, first: float = 0.0) -> None:
        self.per_block, self.first, self.fast = per_block, first, False

    def __call__(self, name: str, keys: tuple[object, ...]) -> None:
        if name != "put_blobs" or self.fast:
            return
        if self.first:
            time.sleep(self.first)
            self.fast = True
        else:
            time.sleep(self.per_block * len(keys))


def slow_cache(write_lag: float, crawl: Crawl | None = None) -> ContextCache:
    """RAM over a write-through tier that writes slower than the test stores."""
    crawl = crawl or Crawl(per_block=0.05)

    slow = FakeSlowTier(1 << 24, on_call=crawl, write="through")
    cache = ContextCache([MemoryTier(1 << 24), slow], block_size=BS, write_lag=write_lag)
    cache.crawl = crawl  # type: ignore[attr-defined]
    return cache


def lags_after_stores(cache: ContextCache, seconds: float) -> list[float]:
    """Store a new 2-block prompt every 20 ms for ``seconds`` (its copies take the tier 100 ms:
    the tier falls further behind with every store); the mover's lag after each."""
    mover, out, i = cache._engine.placement.mover, [], 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        ask(cache, "default", prompt_of(i, n_blocks=2))
        with cache._engine.lock:
            out.append(mover.lag_s())
        i += 1
        time.sleep(0.02)
    cache.crawl.fast = True  # type: ignore[attr-defined]
    return out


def test_a_store_waits_while_the_write_through_queue_is_more_than_write_lag_behind():
    cache = slow_cache(write_lag=0.4)
    lags = lags_after_stores(cache, 2.0)
    assert max(lags) <= 0.4 + 0.3, lags  # the bound, plus the time to read it on a loaded machine
    s = cache.stats()
    assert s["write_lag_waits"] > 0 and s["write_lag_overruns"] == 0 and s["through_dropped"] == 0
    cache.close()


def test_without_write_lag_the_queue_runs_ahead_of_the_tier():
    cache = slow_cache(write_lag=0)
    lags = lags_after_stores(cache, 2.0)
    assert max(lags) > 1.0, lags  # what a SIGKILL would lose here: the check above is not vacuous
    assert cache.stats()["write_lag_waits"] == 0
    cache.close()


def test_a_wait_that_outlives_its_cap_is_counted_and_the_store_still_returns():
    cache = slow_cache(write_lag=0.05, crawl=Crawl(0.0, first=5.5))  # its first batch outlasts the 5 s cap
    t0 = time.monotonic()
    ask(cache, "default", prompt_of(1, n_blocks=2))
    time.sleep(0.2)  # the mover is inside that batch, its copies older than write_lag
    ask(cache, "default", prompt_of(2, n_blocks=2))
    assert time.monotonic() - t0 < 20
    s = cache.stats()
    assert s["write_lag_waits"] >= 1 and s["write_lag_overruns"] >= 1
    cache.close()


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), "1s", True])
def test_a_bad_write_lag_is_refused(bad):
    with pytest.raises(ValueError, match="write_lag"):
        ContextCache([MemoryTier(1 << 20)], write_lag=bad)


def test_write_lag_from_toml():
    assert load_config({"write_lag": "250ms"}).write_lag == 0.25
    assert load_config({"write_lag": 0}).write_lag == 0.0
    assert load_config({}).write_lag == 1.0
    with pytest.raises(ConfigError, match="write_lag"):
        load_config({"write_lag": "soon"})


# A process that stores as fast as it can into RAM over a write-through disk that writes slower
# (a disk under load: 40 ms per batch), printing each store's key once it has returned.
_WRITER = textwrap.dedent(
    """
    import json, sys, time
    from ctxcache import ContextCache
    from ctxcache.tiers import DiskTier, MemoryTier

    class Loaded(DiskTier):
        def put_blobs(self, items):
            time.sleep(0.04)
            return super().put_blobs(items)

    path, lag = sys.argv[1], float(sys.argv[2])
    cache = ContextCache([MemoryTier(1 << 28), Loaded(1 << 30, path=path, fsync=False)], block_size=4,
                         write_lag=lag)
    import numpy as np
    i = 0
    while True:
        toks = [i * 1000 + j for j in range(8)]
        p = cache.prompt(toks)
        cache.store(p, [[np.full(16, t, np.float32)] for t in toks[::4]])
        print(json.dumps([i, time.monotonic()]), flush=True)
        i += 1
    """
)


def stored_then_killed(tmp_path: Path, lag: float) -> tuple[list[float], list[bool]]:
    """Run the writer for ~3 s, SIGKILL it; (seconds before the kill each store returned, whether
    the reopened disk serves it)."""
    disk = tmp_path / f"disk-{lag}"
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(disk), str(lag)], stdout=subprocess.PIPE, env=env)
    assert proc.stdout is not None
    returned: list[tuple[int, float]] = []
    deadline = None
    for line in proc.stdout:
        i, t = json.loads(line)
        returned.append((i, t))
        deadline = deadline or time.monotonic() + 3.0
        if time.monotonic() >= deadline:
            break
    proc.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    proc.wait(10)
    cache = ContextCache([MemoryTier(1 << 28), DiskTier(1 << 30, path=disk, fsync=False)], block_size=BS)
    kept = []
    for i, _ in returned:
        with cache.lookup(cache.prompt([i * 1000 + j for j in range(8)])) as m:
            kept.append(m.hit_tokens == 8)
    cache.close()
    return [killed - t for _, t in returned], kept


def test_a_sigkilled_writer_loses_at_most_the_last_write_lag_of_stores(tmp_path):
    ago, kept = stored_then_killed(tmp_path, lag=0.5)
    lost = [a for a, k in zip(ago, kept) if not k]
    assert len(ago) > 20 and any(kept)
    assert max(lost, default=0.0) <= 0.5 + 0.5, sorted(lost)[-5:]  # the bound plus one batch and the kill's delay


def test_without_write_lag_a_sigkill_loses_stores_older_than_a_second(tmp_path):
    ago, kept = stored_then_killed(tmp_path, lag=0)
    lost = [a for a, k in zip(ago, kept) if not k]
    assert max(lost, default=0.0) > 1.0, sorted(lost)[-5:]
