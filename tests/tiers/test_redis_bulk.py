"""Multi-MB pipelines wait ``bulk_timeout``, small ones ``timeout``: a pause inside a 9 MB read (a
busy host's redis-server descheduled mid-transfer) is no outage, while a server that stalls a small
read is still marked down after about ``timeout`` (issue 26: the 50 ms default timed out 42 MB
reads on a starved machine and turned another worker's hit into a miss)."""

from __future__ import annotations

import socket
import threading
import time

import numpy as np
import pytest

from ctxcache import ContextCache
from ctxcache.tiers import RedisTier

from ..replication.linkproxy import LinkProxy

BS = 4


class StallProxy(LinkProxy):
    """Holds the server's next reply ``stall`` seconds (``arm``): after its first chunk (``mid``, a
    transfer paused half-way), or before it."""

    def __init__(self, target_port: int) -> None:
        self.stall, self.mid = 0.0, True
        self.armed = threading.Event()
        super().__init__(target_port)

    def arm(self, stall: float, mid: bool = True) -> None:
        self.stall, self.mid = stall, mid
        self.armed.set()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        from_server = src.getpeername()[1] == self.target[1]
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                hold = from_server and self.armed.is_set()
                if hold:
                    self.armed.clear()
                if hold and not self.mid:
                    time.sleep(self.stall)
                dst.sendall(data)
                if hold and self.mid:
                    time.sleep(self.stall)
        except OSError:
            pass
        finally:
            self._drop(src, dst)


def cache_over(proxy: StallProxy, bulk_timeout: float) -> ContextCache:
    tier = RedisTier(1 << 30, url=proxy.url, prefix="bulk:", timeout=0.05, bulk_timeout=bulk_timeout, bloom=False)
    assert tier.wait_ready()
    return ContextCache([tier], block_size=BS)


def stored(cache: ContextCache, first: int, blocks: int, floats: int) -> list[int]:
    toks = [first + i for i in range(blocks * BS)]
    cache.store(toks, [[np.full(floats, t, np.float32)] for t in toks[::BS]])
    cache.flush()
    return toks


def hits_after(
    cache: ContextCache, toks: list[int], proxy: StallProxy, stall: float, mid: bool = True
) -> tuple[int, float]:
    proxy.arm(stall, mid)
    t0 = time.monotonic()
    with cache.lookup(toks) as m:
        return m.hit_tokens, time.monotonic() - t0


def healthy(cache: ContextCache) -> bool:
    return bool(next(iter(cache.stats()["tiers"].values()))["healthy"])


@pytest.fixture
def proxy(redis_url):
    port = int(redis_url.rsplit(":", 1)[1].split("/")[0])
    p = StallProxy(port)
    yield p
    p.close()


def test_a_pause_inside_a_multi_mb_read_is_not_an_outage(proxy):
    cache = cache_over(proxy, bulk_timeout=1.0)
    toks = stored(cache, 0, blocks=9, floats=1 << 18)  # 9 x 1 MiB: past BULK_BYTES
    hit, _ = hits_after(cache, toks, proxy, stall=0.3)
    assert hit == len(toks)
    assert healthy(cache)
    cache.close()


def test_without_a_bulk_timeout_the_same_pause_marks_the_tier_down(proxy):
    cache = cache_over(proxy, bulk_timeout=0.05)  # bulk_timeout <= timeout: one client, as before
    toks = stored(cache, 0, blocks=9, floats=1 << 18)
    hit, _ = hits_after(cache, toks, proxy, stall=0.3)
    assert hit == 0 and not healthy(cache)
    cache.close()


def test_a_small_read_that_stalls_still_fails_after_about_timeout(proxy):
    cache = cache_over(proxy, bulk_timeout=1.0)
    toks = stored(cache, 0, blocks=2, floats=64)  # a few KB: the short timeout applies
    hit, took = hits_after(cache, toks, proxy, stall=0.8, mid=False)
    assert hit == 0 and took < 0.6, took  # about one 50 ms timeout, not the 0.8 s stall or bulk's 1 s
    cache.close()


def test_bulk_timeout_from_a_tier_table(redis_url):
    cache = ContextCache.from_config(
        {"block_size": BS, "tiers": [{"kind": "redis", "capacity": "1GiB", "url": redis_url, "bulk_timeout": "2s"}]}
    )
    assert cache.slots[0].tier.bulk_timeout == 2.0
    cache.close()
