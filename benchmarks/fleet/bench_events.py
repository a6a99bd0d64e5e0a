"""KV events on Redis Streams (docs/events.md), four figures in one run against a throwaway
redis-server on loopback:

1. store overhead, events on vs off: the same stores (16-block prompts, 1 KiB payloads, RAM tier)
   into two caches, alternating store by store (and which goes first) so a busy machine slows both
   alike; the figure is the median round's time per store, on minus off, over off (goal <= 5 %).
   Wall time on a loaded machine is noisy, and the events' own threads (emitter, publisher) run
   under the same GIL between both caches' stores: so CPU time too, the request thread's per store
   (thread_time) and the background threads' per "on" store (process_time less the request
   thread's); ``cpu_overhead_pct`` charges all of the latter to the "on" stores. That background
   also holds this loop's own work (its prompts, its timers: ~13 µs a store pair with events off
   on both caches, ~10 of it the prompts); ``events_threads_cpu_*`` counts the events' threads
   alone (their CPU clocks).
2. publish -> visible at another process: a store here, at a steady rate, and a consumer in a
   subprocess that notes the wall time at which each key reaches its view; p50/p99 of the
   difference (goal p99 <= 50 ms). Both clocks are this machine's.
3. consumer throughput: a stream pre-filled with N batches of 10 events (BlockStored of a 4-block
   chain each), read, decoded and applied by one consumer on one thread; events/s by the wall
   clock and per CPU-second of that thread (goal >= 100k events/s per core). The same stream is
   read again with the reference decoder (codec.decode_events_reference, the pre-unrolled one),
   alternating, for the before/after figure in one run.
4. rebuild from a snapshot of 1 M blocks: GET, decode and build the view (goal <= 5 s).

Prints one JSON line; writes benchmarks/results/events.json and events.png.
Run: PYTHONPATH=src .venv/bin/python benchmarks/fleet/bench_events.py [--rounds 7] [--stores 2000]
[--only store_overhead]: one part alone, printed, no results file written.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

import redis  # noqa: E402

from ctxcache.cache import ContextCache  # noqa: E402
from ctxcache.events import BlockStored, EventBatch, ListSink, WorkerStarted  # noqa: E402
from ctxcache.events.consumer import Consumer  # noqa: E402
from ctxcache.events.emitter import Emitter  # noqa: E402
from ctxcache.events.runtime import start_events  # noqa: E402
from ctxcache.events.state import WorkerView, encode_snapshot  # noqa: E402
from ctxcache.events.streams import StreamsPublisher, snapshot_key  # noqa: E402
from ctxcache.events.watch import EngineWatch  # noqa: E402

BS = 16
WATCHER = """
import json, sys, time, redis
sys.path.insert(0, sys.argv[3])
from ctxcache.events.consumer import Consumer
seen = {}
class L:
    def stored(self, view, tier, keys):
        now = time.time()
        for k in keys:
            seen.setdefault(k.hex(), now)
    def removed(self, view, tier, keys): pass
    def forget(self, view): pass
c = Consumer(redis.Redis.from_url(sys.argv[1]), prefix="bench:ev:", listeners=[L()], block_ms=100)
while not c.workers:
    c.poll()
print("following", flush=True)
end = time.time() + float(sys.argv[2])
while time.time() < end and len(seen) < int(sys.argv[4]):
    c.poll()
print(json.dumps(seen))
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _redis(workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    exe = shutil.which("redis-server") or "/usr/bin/redis-server"
    args = [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(workdir)]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            if redis.Redis(port=port).ping():
                break
        except redis.exceptions.ConnectionError:
            time.sleep(0.02)
    return proc, f"redis://127.0.0.1:{port}/0"


def _cache(capacity: str = "4GiB") -> ContextCache:
    return ContextCache.from_config({"block_size": BS, "tiers": [{"kind": "memory", "capacity": capacity}]})


def _prompts(n: int, seed: int) -> list[list[int]]:
    return [list(range((seed * n + i) * 1000, (seed * n + i) * 1000 + 16 * BS)) for i in range(n)]


def _events_cpu() -> float:
    """CPU seconds of the events' own threads so far (emitter "ctxcache-events", publisher
    "ctxcache-events-<worker>"): the background figure without this loop's own work (its
    prompts and timers, ~13 µs a store pair here, which process_time less thread_time counts)."""
    total = 0.0
    for t in threading.enumerate():
        if t.name.startswith("ctxcache-events") and t.ident is not None:
            with contextlib.suppress(OSError, AttributeError):  # ended meanwhile, or no per-thread clocks
                total += time.clock_gettime(time.pthread_getcpuclockid(t.ident))
    return total


def store_overhead(url: str, rounds: int, stores: int, capacity: str = "4GiB") -> dict[str, Any]:
    off, on = _cache(capacity), _cache(capacity)
    rt = start_events(on, {"enabled": True, "url": url, "worker": "bench-on", "prefix": "bench:ov:", "consume": False})
    assert rt is not None
    payloads = [b"x" * 1024] * 16
    per: dict[str, list[float]] = {"off": [], "on": [], "cpu_off": [], "cpu_on": [], "bg": [], "ev": []}
    for r in range(rounds):  # store by store, alternating which cache goes first: noise hits both alike
        spent = {"off": 0.0, "on": 0.0, "cpu_off": 0.0, "cpu_on": 0.0}
        p0, e0 = time.process_time(), _events_cpu()
        for i, p in enumerate(_prompts(stores, r)):  # made inside p0: the figures of earlier runs did
            for name, cache in (("off", off), ("on", on)) if i % 2 == 0 else (("on", on), ("off", off)):
                c0, t0 = time.thread_time(), time.perf_counter()
                cache.store(p, payloads)
                spent[name] += time.perf_counter() - t0
                spent["cpu_" + name] += time.thread_time() - c0
        time.sleep(0.05)  # the last batch published: its CPU counts in this round
        bg = time.process_time() - p0 - spent["cpu_off"] - spent["cpu_on"]
        for name in spent:
            per[name].append(spent[name] / stores)
        per["bg"].append(bg / stores)
        per["ev"].append((_events_cpu() - e0) / stores)
    time.sleep(0.5)
    stats = rt.stats()
    rt.close()
    m_off, m_on = statistics.median(per["off"]), statistics.median(per["on"])
    c_off, c_on, bg, ev = (statistics.median(per[n]) for n in ("cpu_off", "cpu_on", "bg", "ev"))
    return {
        "store_us_off": round(m_off * 1e6, 1), "store_us_on": round(m_on * 1e6, 1),
        "overhead_pct": round(100 * (m_on - m_off) / m_off, 2),
        "cpu_us_off": round(c_off * 1e6, 1), "cpu_us_on": round(c_on * 1e6, 1),
        "background_cpu_us_per_store": round(bg * 1e6, 1),
        "request_thread_cpu_overhead_pct": round(100 * (c_on - c_off) / c_off, 2),
        "cpu_overhead_pct": round(100 * (c_on + bg - c_off) / c_off, 2), "events_published": stats["publisher"]["published"],
        "events_threads_cpu_us_per_store": round(ev * 1e6, 1),
        "events_threads_cpu_overhead_pct": round(100 * (c_on + ev - c_off) / c_off, 2),
        "events_dropped": stats["publisher"]["dropped"], "rounds": rounds, "stores_per_round": stores,
    }  # fmt: skip


def store_cpu(url: str, rounds: int, stores: int, capacity: str = "4GiB") -> dict[str, Any]:
    """All the CPU a store costs with events on: the request thread's and the events' threads',
    against a cache without events, whole rounds alternating (on, off; off, on; ...). Store by
    store alternation (``store_overhead``) is right for wall time but charges the events' threads
    for the other cache: every other store churns its own blocks through the caches the emitter
    then reads cold, and each batch holds half as many stores. A server has one cache.
    ``capacity`` "8MiB": full from the first round on, each store evicts as many blocks as it
    adds (a server's steady state)."""
    off, on = _cache(capacity), _cache(capacity)
    rt = start_events(
        on, {"enabled": True, "url": url, "worker": "bench-cpu", "prefix": "bench:cpu:", "consume": False}
    )
    assert rt is not None
    payloads = [b"x" * 1024] * 16
    per: dict[str, list[float]] = {"off": [], "on": [], "ev": []}
    for r in range(2 * rounds):
        cache, name = (on, "on") if (r % 2 == 0) == (r % 4 < 2) else (off, "off")
        prompts = _prompts(stores, r)
        time.sleep(0.05)  # the other cache's last batch is out before this round's clocks start
        e0, c0 = _events_cpu(), time.thread_time()
        for p in prompts:
            cache.store(p, payloads)
        spent = time.thread_time() - c0
        if name == "on":
            time.sleep(0.05)  # its last batch published: that CPU counts in this round
            per["ev"].append((_events_cpu() - e0) / stores)
        per[name].append(spent / stores)
    rt.close()
    c_off, c_on, ev = (statistics.median(per[n]) for n in ("off", "on", "ev"))
    return {
        "cpu_us_off": round(c_off * 1e6, 2), "cpu_us_on": round(c_on * 1e6, 2),
        "events_threads_cpu_us_per_store": round(ev * 1e6, 2),
        "request_thread_cpu_overhead_pct": round(100 * (c_on - c_off) / c_off, 2),
        "all_cpu_overhead_pct": round(100 * (c_on + ev - c_off) / c_off, 2), "rounds": rounds, "stores_per_round": stores,
    "capacity": capacity,
    }  # fmt: skip


def all_cpu(res: dict[str, Any]) -> dict[str, float]:
    """A store's CPU with events on, all of it: the request thread's (``request_thread``: the
    round figure swings by +-10 % with where the GC's full collections land) plus the events'
    threads' (``store_cpu``), over a store's CPU without events; a tier with room and a full one."""
    out: dict[str, float] = {}
    for name, rt, cpu in (("room", "request_thread", "store_cpu"), ("full", "request_thread_full", "store_cpu_full")):
        more, ev, base = (res[rt]["request_thread_cpu_us_more"], res[cpu]["events_threads_cpu_us_per_store"],
                          res[rt]["cpu_us_off"])  # fmt: skip
        out[f"{name}_us"] = round(more + ev, 2)
        out[f"{name}_pct"] = round(100 * (more + ev) / base, 2)
    return out


def request_thread(rounds: int, stores: int, capacity: str = "4GiB") -> dict[str, Any]:
    """The request thread's own CPU a store, events on vs off, without the noise the round figures
    carry: alternating store by store, the cyclic GC off (a full collection lands in whichever
    round it happens to), no emitter thread (its records dropped every 40 stores)."""
    off, on = _cache(capacity), _cache(capacity)
    em = Emitter("bench", [ListSink()])
    EngineWatch(on._engine, em).attach()
    payloads = [b"x" * 1024] * 16
    deltas, offs = [], []
    gc.collect()
    gc.disable()
    try:
        for r in range(rounds):
            spent = {"off": 0.0, "on": 0.0}
            for i, p in enumerate(_prompts(stores, 50 + r)):
                for name, c in (("off", off), ("on", on)) if i % 2 == 0 else (("on", on), ("off", off)):
                    t0 = time.thread_time()
                    c.store(p, payloads)
                    spent[name] += time.thread_time() - t0
                if i % 40 == 0:
                    em._records.clear()
            deltas.append((spent["on"] - spent["off"]) / stores)
            offs.append(spent["off"] / stores)
    finally:
        gc.enable()
    d, o = statistics.median(deltas), statistics.median(offs)
    return {"cpu_us_off": round(o * 1e6, 2), "request_thread_cpu_us_more": round(d * 1e6, 2),
            "request_thread_cpu_overhead_pct": round(100 * d / o, 2), "capacity": capacity}  # fmt: skip


def visibility(url: str, n: int, rate: float) -> dict[str, Any]:
    cache = _cache()
    rt = start_events(
        cache, {"enabled": True, "url": url, "worker": "bench-vis", "prefix": "bench:ev:", "consume": False}
    )
    assert rt is not None
    secs = n / rate + 30
    warm = [1, 2, 3] * BS  # registers the worker; its key is not timed
    cache.store(warm, [b"w" * 1024] * 3)
    args = [sys.executable, "-c", WATCHER, url, str(secs), str(ROOT / "src"), str(n + 3)]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    proc.stdout.readline()  # "following": it has read the worker's snapshot
    sent: dict[str, float] = {}
    for p in _prompts(n, 99):
        key = cache.hasher.keys(p[:BS], cache.namespace())[0]
        t = time.time()
        cache.store(p[:BS], [b"y" * 1024])
        sent[key.hex()] = t
        time.sleep(max(0.0, t + 1 / rate - time.time()))
    out, _ = proc.communicate(timeout=secs + 30)
    seen = json.loads(out.strip().splitlines()[-1])
    rt.close()
    lat = sorted(1000 * (seen[k] - t) for k, t in sent.items() if k in seen)
    q = statistics.quantiles(lat, n=100) if len(lat) > 1 else [0.0] * 99
    return {"samples": len(lat), "missing": len(sent) - len(lat), "p50_ms": round(q[49], 2), "p99_ms": round(q[98], 2),
            "max_ms": round(lat[-1], 2) if lat else None, "rate_per_s": rate}  # fmt: skip


def throughput(url: str, batches: int, reads: int = 2) -> dict[str, Any]:
    client = redis.Redis.from_url(url)
    pub = StreamsPublisher(client, "bench-tp", prefix="bench:tp:", maxlen=batches * 2, buffer=batches + 10)
    pub.publish(EventBatch("bench-tp", "e", 1, (WorkerStarted(("ram",), (), BS),), time.time()))
    k = 0
    for seq in range(2, batches + 2):
        evs = []
        for _ in range(10):
            keys = tuple((k + j).to_bytes(16, "big") for j in range(4))
            evs.append(BlockStored(keys, "ram", None, BS, 4096))
            k += 4
        pub.publish(EventBatch("bench-tp", "e", seq, tuple(evs), time.time()))
    while pub.stats()["queued"]:
        time.sleep(0.05)
    pub.close()
    client.delete(snapshot_key("bench:tp:", "bench-tp"))  # no snapshot: the consumer reads every entry
    runs: dict[str, list[tuple[float, float]]] = {"new": [], "reference": []}
    for name in ("reference", "new") * reads:
        runs[name].append(_consume(url, batches, name == "reference"))
    n = 10 * batches + 1
    wall, cpu = (statistics.median(x[i] for x in runs["new"]) for i in (0, 1))
    rwall, rcpu = (statistics.median(x[i] for x in runs["reference"]) for i in (0, 1))
    return {"events": n, "keys": 4 * (n - 1), "events_per_s": round(n / wall), "events_per_cpu_s": round(n / cpu),
            "wall_s": round(wall, 3), "reads_each": reads,
            "reference_decoder": {"events_per_s": round(n / rwall), "events_per_cpu_s": round(n / rcpu)}}  # fmt: skip


def _consume(url: str, batches: int, reference: bool) -> tuple[float, float]:
    """One consumer reads the whole stream: (wall s, CPU s of its thread)."""
    from ctxcache.events import codec, consumer

    decode = consumer.decode_events  # type: ignore[attr-defined]
    if reference:  # an older tree has no reference decoder: its decode_events is the before
        consumer.decode_events = getattr(codec, "decode_events_reference", codec.decode_events)  # type: ignore[attr-defined]
    try:
        c = Consumer(redis.Redis.from_url(url), prefix="bench:tp:", heartbeat_s=3600, block_ms=1)
        c.poll()  # discovery: no snapshot, so it follows the stream from its first entry
        t0, c0 = time.perf_counter(), time.thread_time()
        while c.workers["bench-tp"].seq < batches + 1:
            c.poll()
        assert c.applied == 10 * batches + 1, c.stats()
        return time.perf_counter() - t0, time.thread_time() - c0
    finally:
        consumer.decode_events = decode  # type: ignore[attr-defined]


def snapshot_rebuild(url: str, blocks: int) -> dict[str, Any]:
    client = redis.Redis.from_url(url, socket_timeout=30)
    view = WorkerView("bench-snap", "e", 7)
    view.started = WorkerStarted(("ram", "redis"), ("redis",), BS, ("redis://x:1/0#p",))
    view.tiers["redis"] = {os.urandom(16) for _ in range(blocks)}
    blob = encode_snapshot(view, "0-0")
    client.set(snapshot_key("bench:sn:", "bench-snap"), blob)
    c = Consumer(redis.Redis.from_url(url, socket_timeout=30), prefix="bench:sn:")
    from ctxcache.events.consumer import _Followed

    f = _Followed("bench-snap", time.monotonic())
    t0 = time.perf_counter()
    c._resync(f)
    dt = time.perf_counter() - t0
    assert len(f.view.tiers["redis"]) == blocks
    return {"blocks": blocks, "snapshot_mb": round(len(blob) / 2**20, 1), "rebuild_s": round(dt, 3)}


def _plot(res: dict[str, Any], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(1, 3, figsize=(11, 3.2))
    so = res["store_overhead"]
    ax[0].bar(["events off", "events on"], [so["store_us_off"], so["store_us_on"]], color=["#888", "#3a7"])
    ax[0].set_ylabel("µs per store (16 blocks)")
    ax[0].set_title(f"store overhead {so['overhead_pct']:+.1f} % (goal <= 5 %)")
    v = res["visibility"]
    ax[1].bar(["p50", "p99"], [v["p50_ms"], v["p99_ms"]], color="#37a")
    ax[1].axhline(50, color="r", ls="--", lw=1)
    ax[1].set_ylabel("ms, store -> seen by another process")
    ax[1].set_title("visibility (goal p99 <= 50 ms)")
    t, s = res["throughput"], res["snapshot"]
    ax[2].bar(["k events/CPU-s", "1M rebuild, s x100"],
              [t["events_per_cpu_s"] / 1000, s["rebuild_s"] * 100], color=["#a73", "#73a"])  # fmt: skip
    ax[2].set_title("consumer (goal >= 100k/s; <= 5 s)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


PARTS: dict[str, Any] = {
    "store_overhead": store_overhead, "store_cpu": store_cpu,
    "store_overhead_full": lambda url, r, n: store_overhead(url, r, n, "8MiB"),
    "store_cpu_full": lambda url, r, n: store_cpu(url, r, n, "8MiB"),
    "request_thread": lambda url, r, n: request_thread(r, n),
    "request_thread_full": lambda url, r, n: request_thread(r, n, "8MiB"),
    "visibility": visibility, "throughput": throughput, "snapshot": snapshot_rebuild,
}  # fmt: skip


def _only(a: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-events-"))
    proc, url = _redis(work)
    try:
        same = (a.rounds, a.stores)
        args = {"store_overhead": same, "store_overhead_full": same, "store_cpu": same, "store_cpu_full": same, "request_thread": same,
                "request_thread_full": same, "visibility": (a.visible, a.rate),
                "throughput": (a.batches,), "snapshot": (a.blocks,)}[a.only]  # fmt: skip
        print(json.dumps({"bench": "events", a.only: PARTS[a.only](url, *args)}))
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    # Many short rounds: a full collection of the cyclic GC lands in one round (+10-17 µs a store
    # there) and the median of 21 does not move; of 7 it often did.
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--stores", type=int, default=700)
    ap.add_argument("--visible", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=200.0)
    ap.add_argument("--batches", type=int, default=20_000)
    ap.add_argument("--blocks", type=int, default=1_000_000)
    ap.add_argument("--only", choices=PARTS, help="run one part; prints it, writes no results file")
    a = ap.parse_args()
    if a.only is not None:
        _only(a)
        return
    work = Path(tempfile.mkdtemp(prefix="bench-events-"))
    proc, url = _redis(work)
    try:
        res: dict[str, Any] = {"bench": "events"}
        res["store_overhead"] = store_overhead(url, a.rounds, a.stores)
        res["store_overhead_full"] = store_overhead(url, a.rounds, a.stores, "8MiB")
        res["store_cpu"] = store_cpu(url, a.rounds, a.stores)
        res["store_cpu_full"] = store_cpu(url, a.rounds, a.stores, "8MiB")
        res["request_thread"] = request_thread(8, 2000)
        res["request_thread_full"] = request_thread(8, 2000, "8MiB")
        res["store_all_cpu"] = all_cpu(res)
        res["visibility"] = visibility(url, a.visible, a.rate)
        res["throughput"] = throughput(url, a.batches)
        res["snapshot"] = snapshot_rebuild(url, a.blocks)
        res["goals_met"] = {
            # the measure: a store's cost (wall), a RAM tier with room and a full one
            "store_overhead_le_5pct": res["store_overhead"]["overhead_pct"] <= 5.0
            and res["store_overhead_full"]["overhead_pct"] <= 5.0,
            "store_request_thread_cpu_le_5pct": res["request_thread"]["request_thread_cpu_overhead_pct"] <= 5.0
            and res["request_thread_full"]["request_thread_cpu_overhead_pct"] <= 5.0,
            # stricter: the events' background threads' CPU charged to the store too (docs/events.md)
            "store_all_cpu_le_5pct": res["store_all_cpu"]["room_pct"] <= 5.0
            and res["store_all_cpu"]["full_pct"] <= 5.0,
            "visible_p99_le_50ms": res["visibility"]["p99_ms"] <= 50.0,
            "consumer_ge_100k_per_core": res["throughput"]["events_per_cpu_s"] >= 100_000,
            "snapshot_1m_le_5s": res["snapshot"]["rebuild_s"] <= 5.0,
        }
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(work, ignore_errors=True)
    out = ROOT / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "events.json").write_text(json.dumps(res, indent=1) + "\n")
    _plot(res, out / "events.png")
    print(json.dumps(res))


if __name__ == "__main__":
    main()
