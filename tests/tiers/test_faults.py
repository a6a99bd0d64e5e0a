"""Fault injection: damaged blocks on disk and in Redis, Redis killed mid-run, a writer SIGKILLed
mid-demotion. In every case: detected, counted, a miss, no exception, and never a wrong block."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import numpy as np

from ctxcache import ContextCache
from ctxcache.codec import Codec

from ..conftest import payload_for

BS = 4


def put(cache, toks, ns="default"):
    with cache.lookup(toks, ns) as m:
        assert m.payloads == [payload_for(ns, toks, i, BS) for i in range(m.n_blocks)]
        n = len(toks) // BS
        usage = cache.store(toks, [payload_for(ns, toks, i, BS) for i in range(m.n_blocks, n)], ns, m.n_blocks)
        return m.hit_tokens, usage


def two_tier(slow: dict, mem: int = 96) -> ContextCache:
    return ContextCache.from_config(
        {"block_size": BS, "tiers": [{"kind": "memory", "capacity": mem, "high": 1.0, "low": 1.0}, slow]}
    )


def flip_last_byte(data: bytes) -> bytes:
    return data[:-1] + bytes([data[-1] ^ 0x01])


def check_damage_is_a_miss_then_repaired(cache: ContextCache, damage) -> None:
    prompt = list(range(12))  # three 32-byte blocks: RAM holds exactly three
    put(cache, prompt)
    for q in range(3):  # push the prompt out of RAM into the slow tier
        put(cache, [100 + q] * BS)
    cache.flush()
    slow = cache.tiers[1]
    key = cache.hasher.keys(prompt, cache.namespace())[1]  # damage the middle block
    assert cache.index.get(key).tier == 1
    damage(key)
    hit, _ = put(cache, prompt)  # stops at the damaged block and stores it (and the rest) again
    assert hit == BS and slow.corrupt == 1 and cache.stats()["lost"] == 1
    assert cache.stats()["repaired"] == 1
    assert put(cache, prompt)[0] == 12  # repaired
    cache.flush()


def test_a_flipped_byte_on_disk_is_a_counted_miss_and_the_next_store_repairs_it(tmp_path):
    cache = two_tier({"kind": "disk", "path": str(tmp_path), "capacity": "1MiB", "fsync": False})

    def damage(key: bytes) -> None:
        f = tmp_path / "blocks" / key[:1].hex() / f"{key.hex()}.blk"
        f.write_bytes(flip_last_byte(f.read_bytes()))

    check_damage_is_a_miss_then_repaired(cache, damage)
    cache.close()


def test_a_flipped_byte_in_redis_is_a_counted_miss_and_the_next_store_repairs_it(redis_url, redis_server):
    cache = two_tier({"kind": "redis", "url": redis_url, "capacity": "1MiB", "prefix": "f:"})
    raw = redis_server.client()

    def damage(key: bytes) -> None:
        raw.set(b"f:" + key, flip_last_byte(raw.get(b"f:" + key)))

    check_damage_is_a_miss_then_repaired(cache, damage)
    # The repaired block is written back to Redis when it is demoted again.
    for q in range(4):
        put(cache, [200 + q] * BS)
    cache.flush()
    key = cache.hasher.keys(list(range(12)), cache.namespace())[1]
    assert Codec().decode(raw.get(b"f:" + key), key).tokens == np.arange(4, 8, dtype="<i4").tobytes()
    cache.close()


def test_redis_killed_mid_run_degrades_to_local_tiers_and_recovers(redis_factory):
    server = redis_factory()
    cache = two_tier({"kind": "redis", "url": server.url, "capacity": "1MiB", "retry_interval": 0.05}, mem=320)
    errors: list[BaseException] = []
    stop = threading.Event()
    stored = [0]

    def traffic() -> None:
        rng = np.random.default_rng(0)
        try:
            while not stop.is_set():
                toks = [int(x) for x in rng.integers(0, 30, size=2)] * 4
                put(cache, toks)
                stored[0] += 1
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    th = threading.Thread(target=traffic)
    th.start()
    time.sleep(0.3)
    server.kill()
    time.sleep(0.3)
    before = stored[0]
    time.sleep(0.3)
    assert stored[0] > before and not errors  # requests keep succeeding from RAM
    s = cache.stats()
    assert not s["tiers"]["redis"]["healthy"]
    redis_factory(server.port)  # back on the same port (empty: no persistence)
    deadline = time.monotonic() + 5
    while not cache.tiers[1].healthy and time.monotonic() < deadline:
        time.sleep(0.02)
    assert cache.tiers[1].healthy
    time.sleep(0.3)
    stop.set()
    th.join()
    assert not errors, errors[:1]
    cache.flush()
    assert cache.tiers[1].stats()["reconnects"] >= 1
    assert server.client().dbsize() > 0  # demotions reach Redis again
    cache.close()


CHILD = """
import sys
import numpy as np
from ctxcache import ContextCache
cfg = {"block_size": 4, "tiers": [
    {"kind": "memory", "capacity": "128KiB", "high": 1.0, "low": 1.0},
    {"kind": "disk", "path": sys.argv[1], "capacity": "64MiB", "fsync": True}]}
cache = ContextCache.from_config(cfg)
q = int(sys.argv[2])
while True:
    cache.store([q] * 8, [[np.full(16384, q * 10 + i, np.float32)] for i in range(2)])
    print(q, flush=True)
    q += 1
"""


def test_a_writer_sigkilled_mid_demotion_never_leaves_a_torn_block(tmp_path):
    path, start, torn_seen = tmp_path / "disk", 0, 0
    for _ in range(3):
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(path), str(start)], stdout=subprocess.PIPE, text=True
        )
        assert child.stdout is not None
        last = start
        deadline = time.monotonic() + 20
        written = len(list(path.glob("blocks/*/*.blk")))
        while time.monotonic() < deadline:  # kill it while a block is half written
            line = child.stdout.readline()
            last = int(line) if line.strip() else last
            grown = last - start > 8 and len(list(path.glob("blocks/*/*.blk"))) > written + 2
            if grown and any((path / "tmp").glob("*.tmp")):
                torn_seen += 1
                break
        child.kill()
        child.wait()
        start = last + 1
    assert torn_seen >= 1
    cache = ContextCache.from_config(
        {"block_size": 4, "tiers": [{"kind": "disk", "path": str(path), "capacity": "64MiB"}]}
    )
    disk = cache.tiers[0]
    assert disk.corrupt == 0 and not list((path / "tmp").iterdir()) and len(disk) > 0
    for f in path.glob("blocks/*/*.blk"):
        Codec().decode(f.read_bytes())  # every file on disk is complete and verified
    hits = 0
    for q in range(start):
        with cache.lookup([q] * 8) as m:
            hits += m.n_blocks
            for i, payload in enumerate(m.payloads):
                assert np.array_equal(payload[0], np.full(16384, q * 10 + i, np.float32))
    assert hits > 0
    cache.close()
