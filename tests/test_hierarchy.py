"""The tier hierarchy in ContextCache: demotion through the mover, promotion, discovery after a
restart or from another process, configuration of every tier kind, and concurrency."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from ctxcache import ContextCache
from ctxcache.errors import ConfigError, PayloadError
from ctxcache.tiers import DiskTier, MemoryTier

from .conftest import payload_for

BS = 4


def put(cache, toks, ns="default"):
    """lookup + check + store the rest + release. Returns the Match's hit tokens and usage."""
    with cache.lookup(toks, ns) as m:
        assert m.payloads == [payload_for(ns, toks, i, BS) for i in range(m.n_blocks)]  # never a wrong block
        n = len(toks) // BS
        cache.store(toks, [payload_for(ns, toks, i, BS) for i in range(m.n_blocks, n)], ns, m.n_blocks)
        return m.hit_tokens, m.usage


def mem_disk(path, mem=300, write="through", **top):
    return {
        "block_size": BS,
        **top,
        "tiers": [
            {"kind": "memory", "capacity": mem, "high": 1.0, "low": 1.0},
            {"kind": "disk", "path": str(path), "capacity": "1MiB", "fsync": False, "write": write},
        ],
    }


class GatedDisk(DiskTier):
    """A disk tier whose writes wait for a gate: demotions stay queued while the test looks."""

    gate = threading.Event()

    def put_blob(self, key, blob):
        assert self.gate.wait(10)
        return super().put_blob(key, blob)


def test_queued_demotions_are_served_from_the_queue(tmp_path):
    GatedDisk.gate.clear()
    tiers = [MemoryTier(100, high=1.0, low=1.0), GatedDisk(1 << 20, path=tmp_path, fsync=False, write="demote")]
    cache = ContextCache(tiers, block_size=BS)
    for p in range(6):  # 32-byte payloads: three fit in RAM, the rest is demoted (queued)
        put(cache, [p] * BS)
    s = cache.stats()
    assert s["demotions"] == 3 and s["pending_moves"] == 3 and s["tiers"]["disk"]["blocks"] == 0
    with cache.lookup([0] * BS) as m:  # requests do not wait for the gated writer
        assert m.payloads == [payload_for("default", [0] * BS, 0, BS)] and m.usage.by_tier == {"disk": 4}
    GatedDisk.gate.set()
    assert cache.flush(10)
    s = cache.stats()
    assert s["pending_moves"] == 0 and s["tiers"]["disk"]["blocks"] == 3 and s["bytes"] <= 100 + (1 << 20)
    cache.close()


def test_restart_discovers_blocks_on_disk_and_verifies_them(tmp_path):
    prompts = [[p] * 8 + list(range(p, p + 5)) for p in range(12)]
    with ContextCache.from_config(mem_disk(tmp_path)) as cache:
        for toks in prompts:
            put(cache, toks)
    # The hot tier is not persisted; every demoted block is on disk.
    with ContextCache.from_config(mem_disk(tmp_path)) as again:
        on_disk = again.stats()["tiers"]["disk"]["blocks"]
        assert on_disk > 0 and again.stats()["blocks"] == 0
        hits = [put(again, toks)[0] for toks in prompts]
        s = again.stats()
        assert s["discovered"] == sum(hits) // BS and s["discovered"] > 0 and s["collisions"] == 0
        # A different tenant computes different keys: nothing is discovered for it.
        assert again.lookup(prompts[0], "other").hit_tokens == 0


def test_hits_in_a_slow_tier_are_promoted_and_the_copy_stays(tmp_path):
    cache = ContextCache.from_config(mem_disk(tmp_path, mem=64, write="demote"))  # two 32-byte blocks fit
    for p in range(4):
        put(cache, [p] * BS)
    cache.flush()
    with cache.lookup([0] * BS) as m:
        assert m.usage.by_tier == {"disk": 4}
    with cache.lookup([0] * BS) as m:
        assert m.usage.by_tier == {"memory": 4}  # promoted
    cache.flush()
    s = cache.stats()
    # RAM: 0 (promoted) and 3; disk: 1, 2 (demoted to make room for 0) and 0's copy, which stays
    assert s["promotions"] == 1 and s["tiers"]["disk"]["blocks"] == 3 and s["tiers"]["memory"]["blocks"] == 2
    demoted_before = s["demotions"]
    for p in range(10, 14):
        put(cache, [p] * BS)  # pushes block 0 out of RAM again: its clean copy needs no write
    cache.flush()
    assert cache.stats()["demotions"] > demoted_before and cache.stats()["write_errors"] == 0
    with cache.lookup([0] * BS) as m:
        assert m.usage.by_tier == {"disk": 4} and m.payloads == [payload_for("default", [0] * BS, 0, BS)]
    cache.close()


def test_promotion_can_be_turned_off(tmp_path):
    cache = ContextCache.from_config(mem_disk(tmp_path, mem=64, promote=False))
    for p in range(4):
        put(cache, [p] * BS)
    cache.flush()
    for _ in range(2):
        with cache.lookup([0] * BS) as m:
            assert m.usage.by_tier == {"disk": 4}
    assert cache.stats()["promotions"] == 0
    cache.close()


def test_warm_ram_holds_kv_arrays_in_k16v8():
    cfg = {
        "block_size": BS,
        "tiers": [
            {"kind": "memory", "capacity": 2000, "high": 1.0, "low": 1.0},
            {"kind": "memory", "mode": "warm", "codec": "k16v8", "capacity": "1MiB", "name": "warm"},
        ],
    }
    cache = ContextCache.from_config(cfg)
    rng = np.random.default_rng(0)
    kv = {p: [tuple(rng.standard_normal((1, BS, 16)).astype(np.float32) for _ in "kv")] for p in range(8)}
    for p, block in kv.items():
        cache.store([p] * BS, [block])
    assert cache.stats()["tiers"]["warm"]["blocks"] > 0
    for p, block in kv.items():
        with cache.lookup([p] * BS) as m:
            (k, v), (k0, v0) = m.payloads[0][0], block[0]
            assert k.dtype == np.float32 and np.abs(k - k0).max() <= 2**-11 * np.abs(k0).max()
            assert np.abs(v - v0).max() <= np.abs(v0).max() / 254 * 1.001


def test_every_tier_kind_from_toml(tmp_path, redis_url):
    p = tmp_path / "cache.toml"
    p.write_text(
        f"""block_size = {BS}
hash = "blake3"
salt = "s"
write_buffer = "1MiB"
[[tiers]]
kind = "memory"
capacity = 200
high = 1.0
low = 1.0
[[tiers]]
kind = "memory"
mode = "warm"
name = "warm"
codec = "raw"
compression = "lz4"
capacity = "1KiB"
[[tiers]]
kind = "disk"
path = "{tmp_path / "disk"}"
capacity = 3000
fsync = false
[[tiers]]
kind = "redis"
url = "{redis_url}"
capacity = "1MiB"
ttl = "1h"
timeout = "50ms"
"""
    )
    cache = ContextCache.from_config(p)
    prompts = [[q] * 12 for q in range(25)]
    for toks in prompts:
        put(cache, toks)
        cache.flush()  # paced traffic: the mover keeps up (a burst may evict instead of waiting)
    s = cache.stats()
    assert all(s["tiers"][name]["blocks"] > 0 for name in ("memory", "warm", "disk", "redis")), s["tiers"]
    assert s["tiers"]["disk"]["bytes"] <= 3000 and s["write_errors"] == 0
    served = {}
    for toks in reversed(prompts):  # most recent first: served by each tier in turn
        hit, usage = put(cache, toks)
        cache.flush()
        assert hit == 12
        for name, n in usage.by_tier.items():
            served[name] = served.get(name, 0) + n
    assert set(served) == {"memory", "warm", "disk", "redis"}
    cache.close()


def shared(url, salt="team", mem=64):
    return {
        "block_size": BS,
        "hash": "blake3",
        "salt": salt,
        "tiers": [
            {"kind": "memory", "capacity": mem, "high": 1.0, "low": 1.0},
            {"kind": "redis", "url": url, "capacity": "1MiB", "retry_interval": 0.05},
        ],
    }


def test_processes_share_blocks_through_redis(redis_url):
    a = ContextCache.from_config(shared(redis_url))
    prompts = [[q] * 8 for q in range(6)]
    for toks in prompts:
        put(a, toks)
    a.close()  # flushes its queued writes
    b = ContextCache.from_config(shared(redis_url))
    b.tiers[1].wait_ready()
    hits = [put(b, toks)[0] for toks in prompts]
    assert sum(hits) > 0 and b.stats()["discovered"] == sum(hits) // BS
    c = ContextCache.from_config(shared(redis_url, salt="another team"))
    c.tiers[1].wait_ready()
    assert c.lookup(prompts[0]).hit_tokens == 0  # another salt: other keys, nothing shared
    b.close()
    c.close()


def test_bloom_filter_saves_round_trips_on_misses(redis_url, redis_server):
    cache = ContextCache.from_config(shared(redis_url))
    cache.tiers[1].wait_ready()
    raw = redis_server.client()
    raw.config_resetstat()
    for q in range(200):  # nothing like these was ever stored
        with cache.lookup([1000 + q] * 8) as m:
            assert m.hit_tokens == 0
    gets = raw.info("commandstats").get("cmdstat_get", {}).get("calls", 0)
    bloom = cache.stats()["tiers"]["redis"]["bloom"]
    assert bloom["skipped"] >= 190 and gets <= 10
    cache.close()


def test_close_flushes_a_slow_top_tier(tmp_path):
    cfg = {"block_size": BS, "tiers": [{"kind": "disk", "path": str(tmp_path), "capacity": "1MiB"}]}
    with ContextCache.from_config(cfg) as cache:
        for q in range(10):
            put(cache, [q] * 8)
    with ContextCache.from_config(cfg) as again:
        assert again.stats()["tiers"]["disk"]["blocks"] == 20
        assert all(put(again, [q] * 8)[0] == 8 for q in range(10))


@pytest.mark.parametrize(
    ("tiers", "match"),
    [
        ([{"kind": "disk", "path": "{tmp}", "capacity": "1MiB"}, {"kind": "memory", "capacity": "1MiB"}], "fastest"),
        ([{"kind": "disk", "capacity": "1MiB", "pth": "x"}], r"unknown keys \['pth'\]; known: .*'path'"),
        ([{"kind": "disk", "capacity": "1MiB"}], "needs a 'path'"),
        ([{"kind": "memory", "capacity": "1MiB", "mode": "lukewarm"}], "'hot' or 'warm'"),
        ([{"kind": "memory", "capacity": "1MiB", "codec": "int8"}], "'warm' only"),
        ([{"kind": "memory", "mode": "warm", "capacity": "1MiB", "compression": "gzip"}], "unknown compression"),
    ],
)
def test_bad_tier_configs_name_the_problem(tmp_path, tiers, match):
    for t in tiers:
        if t.get("path") == "{tmp}":
            t["path"] = str(tmp_path)
    with pytest.raises(ConfigError, match=match):
        ContextCache.from_config({"block_size": BS, "tiers": tiers})
    DiskTier(1 << 20, path=tmp_path).close()  # a failed config released the directory it opened


def test_bad_top_level_options():
    with pytest.raises(ConfigError, match="promote"):
        ContextCache.from_config({"promote": "yes"})
    with pytest.raises(ConfigError, match="size"):
        ContextCache.from_config({"write_buffer": "lots"})


def test_threads_with_a_slow_tier_keep_every_invariant(tmp_path):
    cache = ContextCache.from_config(mem_disk(tmp_path, mem=600) | {"write_buffer": 2000})
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            for _ in range(150):
                toks = [1, 2, 3, 4] + rng.integers(0, 4, size=int(rng.integers(0, 16))).tolist()
                put(cache, toks, f"t{int(rng.integers(0, 2))}")
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:1]
    cache.flush()
    s = cache.stats()
    assert s["tiers"]["memory"]["bytes"] <= 600 and s["write_errors"] == 0 and s["corrupt"] == 0
    assert all(n.pins == 0 for n in cache.index)
    for node in cache.index:  # every indexed block is readable from the tier the index names
        assert node.tier >= 0 and node.key in cache.tiers[node.tier]
    cache.close()


def test_a_payload_the_codec_refuses_stores_nothing(tmp_path):
    warm = {"kind": "memory", "mode": "warm", "codec": "int8", "capacity": "1MiB"}
    disk = {"kind": "disk", "path": str(tmp_path), "capacity": "1MiB"}
    for top in (warm, disk):
        cache = ContextCache.from_config({"block_size": BS, "tiers": [top]})
        good, bad = [np.ones((1, BS, 4), np.float32)], [np.array([[1.0, np.nan]], np.float32)]
        with pytest.raises(PayloadError, match="non-finite|cannot encode"):
            cache.store(list(range(8)), [good, bad if top is warm else object()])
        cache.flush()
        assert cache.stats()["blocks"] == 0 and cache.stats()["write_errors"] == 0
        assert cache.store(list(range(8)), [good, good]).cache_creation_tokens == 8
        cache.close()


def test_close_writes_ram_blocks_down_so_a_restart_finds_them(tmp_path):
    cfg = {
        "block_size": 4,
        "tiers": [
            {"kind": "memory", "capacity": "1MiB"},
            {"kind": "disk", "capacity": "4MiB", "path": str(tmp_path / "kv")},
        ],
    }
    toks = list(range(40))
    payloads = [[np.full((2, 4), i, dtype=np.float32)] for i in range(10)]
    with ContextCache.from_config(cfg) as cache:
        cache.store(toks, payloads)
        assert cache.stats()["tiers"]["memory"]["blocks"] == 10  # all still in RAM before close
    with ContextCache.from_config(cfg) as again, again.lookup(toks) as m:
        assert m.hit_tokens == 40 and m.usage.by_tier == {"disk": 40}
        assert all(np.array_equal(np.asarray(p[0]), q[0]) for p, q in zip(m.payloads, payloads))
