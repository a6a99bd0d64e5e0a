"""Regions (issue #28): replicated metadata with sparse vector clocks, three figures in one run.

1. bytes: metadata bytes per update, sparse clocks (``SparseClock.encode``, the wire form) against
   full version vectors (``clock.full_vector_bytes``: 8 bytes per region, positional), for
   N = 3, 32, 128, 1024 regions and K = 2, 3, 8 regions active on a key (K <= N). Per (N, K),
   ``--keys`` keys each draw K distinct regions out of N, each with a counter uniform in
   1..10^4 (every one bumped at least once; >= 128 is a 2-byte varint), and one update per key
   (kind drawn from ops.KINDS, a 16-byte block key / entry id in hex or a tenant name, its origin
   one of the K). Reported: the clock alone, and the whole ``Update.encode`` with its own clock
   against the same update carrying the full vector instead (update bytes - sparse clock bytes +
   full vector bytes). The sparse form names its regions (strings), a full vector is positional:
   both name styles are measured, short ``r0017`` (5 bytes) and cloud-like ``eu-central-3``
   (9-15 bytes). A varint-positional full vector (N varints, no names) is given as a second
   baseline; the code has no index-encoded sparse form, so none is measured.
2. lag on loopback: 3 regions, one redis-server each (``--save '' --appendonly no``), a RedisLog
   and a Replicator per region, each replicator in its own thread (``Replicator.run``), no-op
   effects that note when each update is applied. Region A's worker side submits ``--rate``
   updates/s through A's inbox (``RedisLog.submit``, as workers do) for ``--seconds``; lag is
   apply time in B and C minus the worker's submit time (same machine, same clock), p50/p99/mean,
   plus the replicators' own ``status()`` lag (origin stamp -> read by the peer, ms-truncated
   stamps). Run at the replicator's default poll interval (50 ms) and at 5 ms.
   ``--pad`` adds a run at 5 ms whose updates carry 8 x 32 = 256 extra bytes each on the wire (a
   32-region full vector's size; encode appends, decode strips them, in this process only): the
   byte cost of full vectors on lag, not their compare cost.
3. converge after a partition: B is cut off (every link to and from B raises LinkDown, as a
   partition does: a proxy around the RedisLog handles, both directions), A's inbox gets 10^4
   updates (all six kinds over ``--part-keys`` keys), C keeps replicating. A's ``queued()`` for
   B is checked (the bounded, counted queue: head seq minus B's ack). Then the links heal and the
   time is taken until B has delivered all 10^4 (B's ``state.digest()`` is then compared with A's
   and C's, threads stopped) and until B has drained both peers' logs (C's holds the same 10^4,
   relayed: duplicates for B).

``--mesh 32`` (not in the default run) adds a lag run with that many regions, logical regions over
4 shared redis-servers, all replicators in this one process: on 2 cores it measures this process's
GIL more than the design (its ``cpu_s_per_s`` says so), but its duplicates per update per region
(every region relays what it delivers, so each update reaches a region N - 1 times) are exact.

Prints one JSON line; writes benchmarks/results/regions.json and regions.png.
Run: .venv/bin/python benchmarks/fleet/bench_regions.py [--keys 2000] [--rate 200] [--seconds 10]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import random
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

from ctxcache.replication import KINDS, LinkDown, RedisLog, Replicator, SparseClock, Update  # noqa: E402
from ctxcache.replication.clock import full_vector_bytes, put_varint  # noqa: E402
from ctxcache.replication.ops import key_for  # noqa: E402
from ctxcache.replication.state import KeyState  # noqa: E402

NS = (3, 32, 128, 1024)
KS = (2, 3, 8)
COUNTER_MAX = 10_000
GEOS = ("us-east", "us-west", "eu-west", "eu-central", "ap-southeast", "ap-northeast", "sa-east", "ca-central")
VALUES: dict[str, Any] = {"ttl": 3600.0, "pin": True, "sem_feedback": False}


# --- 1. bytes ---------------------------------------------------------------------------------------
def region_names(n: int, style: str) -> list[str]:
    if style == "short":
        return [f"r{i:04d}" for i in range(n)]
    return [f"{GEOS[i % len(GEOS)]}-{i // len(GEOS) + 1}" for i in range(n)]


def _target(kind: str, rng: random.Random) -> str:
    if key_for(kind, "00")[0] == "t":
        return f"tenant-{rng.randrange(10**5):05d}"
    return rng.randbytes(16).hex()


def _varint_len(n: int) -> int:
    out = bytearray()
    put_varint(out, n)
    return len(out)


def bytes_case(n: int, k: int, style: str, keys: int, rng: random.Random) -> dict[str, Any]:
    regions = region_names(n, style)
    clock_sparse = clock_full = clock_full_varint = upd_sparse = upd_full = 0
    for _ in range(keys):
        active = rng.sample(regions, k)
        clock = SparseClock({r: rng.randint(1, COUNTER_MAX) for r in active})
        kind = rng.choice(KINDS)
        target = _target(kind, rng)
        u = Update(rng.choice(active), key_for(kind, target), kind, VALUES.get(kind), clock, time.time())
        raw = u.encode()
        back = Update.decode(raw)
        assert (back.origin, back.key, back.kind, back.value, back.clock) == (u.origin, u.key, u.kind, u.value, clock)
        cs, cf = len(clock.encode()), len(full_vector_bytes(clock, regions))
        clock_sparse += cs
        clock_full += cf
        clock_full_varint += sum(_varint_len(clock.get(r)) for r in regions)
        upd_sparse += len(raw)
        upd_full += len(raw) - cs + cf
    names = [len(r.encode()) for r in regions]
    return {
        "n": n, "k": k, "names": style, "name_bytes_min": min(names), "name_bytes_max": max(names),
        "clock_sparse": round(clock_sparse / keys, 1), "clock_full": round(clock_full / keys, 1),
        "clock_full_varint": round(clock_full_varint / keys, 1),
        "update_sparse": round(upd_sparse / keys, 1), "update_full": round(upd_full / keys, 1),
    }  # fmt: skip


def bench_bytes(keys: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [bytes_case(n, k, style, keys, rng) for style in ("short", "cloud") for n in NS for k in KS if k <= n]


# --- redis-servers ----------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Servers:
    """Throwaway redis-servers on loopback, no persistence; all killed on exit."""

    def __init__(self) -> None:
        self.work = Path(tempfile.mkdtemp(prefix="bench-regions-"))
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> str:
        port = _free_port()
        exe = shutil.which("redis-server") or "/usr/bin/redis-server"
        d = self.work / str(port)
        d.mkdir()
        args = [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(d),
                "--protected-mode", "no", "--loglevel", "warning"]  # fmt: skip
        self.procs.append(subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if redis.Redis(port=port, socket_timeout=0.5).ping():
                    return f"redis://127.0.0.1:{port}/0"
            except redis.exceptions.ConnectionError:
                time.sleep(0.02)
        raise RuntimeError(f"redis-server on port {port} did not start")

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        shutil.rmtree(self.work, ignore_errors=True)


# --- a cluster of regions ---------------------------------------------------------------------------
class Cut:
    """A RegionLog handle behind a link that can be cut: every call raises LinkDown while cut."""

    def __init__(self, inner: RedisLog) -> None:
        self.inner, self.up = inner, True

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self.inner, name)

        def call(*a: Any, **kw: Any) -> Any:
            if not self.up:
                raise LinkDown(f"link to {self.inner.region} cut (benchmark partition)")
            return fn(*a, **kw)

        return call


class Applied:
    """No-op effects that note the wall time each update is first applied (by uid)."""

    def __init__(self) -> None:
        self.at: dict[str, float] = {}

    def apply(self, u: Update, ks: KeyState) -> dict[str, Any]:
        self.at.setdefault(u.uid, time.time())
        return {}


class Regions:
    def __init__(self, servers: Servers, names: list[str], prefix: str, interval: float, n_servers: int = 0) -> None:
        self.names, self.interval = names, interval
        if n_servers:  # logical regions sharing redis-servers (each region's keys under its own {R} tag)
            shared = [servers.start() for _ in range(n_servers)]
            urls = {r: shared[i % n_servers] for i, r in enumerate(names)}
        else:
            urls = {r: servers.start() for r in names}
        self.own = {r: RedisLog(urls[r], r, prefix=prefix) for r in names}
        self.links: dict[tuple[str, str], Cut] = {}  # (reader, peer) -> handle on peer's Redis
        self.effects = {r: Applied() for r in names}
        self.reps: dict[str, Replicator] = {}
        for r in names:
            peers = {}
            for p in names:
                if p != r:
                    self.links[r, p] = Cut(RedisLog(urls[p], p, prefix=prefix))
                    peers[p] = self.links[r, p]
            self.reps[r] = Replicator(r, self.own[r], peers, self.effects[r])  # type: ignore[arg-type]
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.reps[r].run, args=(self.stop, interval), daemon=True)
                        for r in names]  # fmt: skip

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(10)

    def cut(self, region: str, up: bool) -> None:
        for (a, b), link in self.links.items():
            if region in (a, b):
                link.up = up


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def _ms(x: float | None) -> float | None:
    return None if x is None else round(1000 * x, 2)


# --- 2. lag -----------------------------------------------------------------------------------------
class Pad:
    """Every update on the wire carries ``extra`` more bytes (a full vector's size), this process only."""

    def __init__(self, extra: int) -> None:
        self.extra, self.encode, self.decode = extra, Update.encode, Update.decode.__func__  # type: ignore[attr-defined]

    def __enter__(self) -> Pad:
        enc, dec, extra = self.encode, self.decode, self.extra
        Update.encode = lambda u: enc(u) + bytes(extra)  # type: ignore[method-assign]
        Update.decode = classmethod(lambda cls, buf: dec(cls, bytes(buf)[:-extra]))  # type: ignore[method-assign,assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        Update.encode = self.encode  # type: ignore[method-assign]
        Update.decode = classmethod(self.decode)  # type: ignore[method-assign,assignment]


def bench_lag(
    servers: Servers, rate: float, seconds: float, interval: float, pad: int, tag: str, regions: int = 3,
    n_servers: int = 0,
) -> dict[str, Any]:  # fmt: skip
    names = ["A", "B", "C"] + [f"R{i:02d}" for i in range(3, regions)]
    regs = Regions(servers, names, f"bench:lag:{tag}:", interval, n_servers)
    worker = regs.own["A"]
    sent: dict[str, float] = {}
    n = int(rate * seconds)
    cpu0 = time.process_time()
    with Pad(pad) if pad else _nullctx():
        regs.start()
        t0 = time.time()
        for i in range(n):
            target = f"{i:032x}"  # one new key per update: its uid is A/1/p:<target>
            t = time.time()
            worker.submit("pin", target, i % 2 == 0)
            sent[f"A/1/{key_for('pin', target)}"] = t
            time.sleep(max(0.0, t0 + (i + 1) / rate - time.time()))
        deadline = time.time() + 10
        while time.time() < deadline and any(len(regs.effects[r].at) < n for r in names[1:]):
            time.sleep(0.02)
        status = {r: regs.reps[r].status() for r in names}
        regs.close()
    out: dict[str, Any] = {"regions": regions, "redis_servers": n_servers or regions, "interval_ms": interval * 1000,
                           "pad_bytes": pad, "updates": n, "rate_per_s": rate}  # fmt: skip
    all_lag: list[float] = []
    for r in names[1:] if regions == 3 else ():
        at = regs.effects[r].at
        lag = [at[u] - t for u, t in sent.items() if u in at]
        all_lag += lag
        out[r] = {"applied": len(lag), "missing": n - len(lag), "p50_ms": _ms(_pct(lag, 0.5)),
                  "p99_ms": _ms(_pct(lag, 0.99)), "mean_ms": _ms(statistics.fmean(lag)),
                  "status_lag_p50_ms": _ms(status[r]["lag_p50_s"]), "status_lag_p99_ms": _ms(status[r]["lag_p99_s"])}  # fmt: skip
    if regions > 3:
        for r in names[1:]:
            at = regs.effects[r].at
            all_lag += [at[u] - t for u, t in sent.items() if u in at]
        out["applied"] = sum(len(regs.effects[r].at) for r in names[1:])
        out["missing"] = n * (regions - 1) - out["applied"]
        out["duplicates_per_update_per_region"] = round(
            statistics.fmean(status[r]["counters"].get("duplicates", 0) for r in names[1:]) / n, 2
        )
        out["cpu_s_per_s"] = round((time.process_time() - cpu0) / seconds, 2)  # this process's CPU (servers aside)
    a_at = regs.effects["A"].at  # the inbox hop alone: worker submit -> stamped and applied in A
    inbox = [a_at[u] - t for u, t in sent.items() if u in a_at]
    out["inbox_p50_ms"], out["inbox_p99_ms"] = _ms(_pct(inbox, 0.5)), _ms(_pct(inbox, 0.99))
    out["p50_ms"], out["p99_ms"] = _ms(_pct(all_lag, 0.5)), _ms(_pct(all_lag, 0.99))
    out["mean_ms"] = _ms(statistics.fmean(all_lag))
    return out


class _nullctx:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


# --- 3. converge after a partition ------------------------------------------------------------------
def _mixed(i: int, keys: int, rng: random.Random) -> tuple[str, str, Any]:
    kind = KINDS[i % len(KINDS)]
    j = rng.randrange(keys)
    target = f"tenant-{j:05d}" if key_for(kind, "00")[0] == "t" else f"{j:032x}"
    value = {"ttl": float(rng.randint(60, 86400)), "pin": rng.random() < 0.5, "sem_feedback": rng.random() < 0.5}
    return kind, target, value.get(kind)


def bench_partition(servers: Servers, updates: int, keys: int, interval: float, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    names = ["A", "B", "C"]
    regs = Regions(servers, names, "bench:part:", interval)
    a, b, c = (regs.reps[r] for r in names)
    regs.start()
    for i in range(30):  # warm: every region loaded, B caught up and acked before the cut
        regs.own["A"].submit(*_mixed(i, keys, rng))
    _wait(lambda: all(r.pos.get("A", a.head) >= a.head > 0 for r in (b, c)) and a.queued().get("B") == 0, 20)
    base_b = b.state.counters["applied"]
    regs.cut("B", False)
    t_sub = time.time()
    pipe = regs.own["A"].r.pipeline(transaction=False)  # the inbox, 10^4 entries in one round trip
    for i in range(updates):
        kind, target, value = _mixed(i, keys, rng)
        pipe.xadd(regs.own["A"].k["inbox"], {"k": kind, "t": target, "v": json.dumps(value)})
    pipe.execute()
    head0 = a.head
    _wait(lambda: a.head >= head0 + updates and c.pos["A"] >= a.head and a.queued().get("C") == 0, 120)
    t_part = time.time() - t_sub
    queued = a.queued()
    b_during = b.state.counters["applied"] - base_b
    regs.cut("B", True)
    t0 = time.time()
    converged = _wait(lambda: b.state.counters["applied"] - base_b >= updates, 120)
    t_conv = time.time() - t0
    drained = _wait(lambda: b.pos["A"] >= a.head and b.pos["C"] >= c.head, 120)
    t_drain = time.time() - t0
    regs.close()
    digests = {r: regs.reps[r].state.digest() for r in names}
    return {
        "updates": updates, "keys": len(a.state.keys), "interval_ms": interval * 1000,
        "queued_for_B": queued.get("B"), "queued_for_C": queued.get("C"), "delivered_in_B_while_cut": b_during,
        "submit_to_A_and_C_s": round(t_part, 3), "converge_s": round(t_conv, 3) if converged else None,
        "converge_updates_per_s": round(updates / t_conv) if converged else None,
        "drain_both_logs_s": round(t_drain, 3) if drained else None, "digests": digests,
        "digests_equal": len(set(digests.values())) == 1, "b_duplicates": b.state.counters["duplicates"],
        "b_pending": b.state.n_pending, "full_syncs_B": b.stats["full_syncs"],
    }  # fmt: skip


def _wait(cond: Any, timeout: float) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(0.005)
    return False


# --- plot -------------------------------------------------------------------------------------------
def _plot(res: dict[str, Any], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(1, 3, figsize=(13, 3.6))
    rows = res["bytes"]
    colors = {2: "#3a7", 3: "#37a", 8: "#a73"}
    for k in KS:
        for style, ls in (("short", "-"), ("cloud", ":")):
            pts = [(r["n"], r["clock_sparse"]) for r in rows if r["k"] == k and r["names"] == style]
            ax[0].plot(*zip(*pts, strict=True), ls, marker="o", color=colors[k], label=f"sparse K={k} ({style})")
    full = sorted({(r["n"], r["clock_full"]) for r in rows})
    fv = sorted({(r["n"], r["clock_full_varint"]) for r in rows if r["k"] == 2 and r["names"] == "short"})
    ax[0].plot(*zip(*full, strict=True), "k-", marker="s", label="full vector, 8 B/region")
    ax[0].plot(*zip(*fv, strict=True), "k--", marker="s", label="full vector, varints (K=2)")
    ax[0].set_xscale("log")
    ax[0].set_yscale("log")
    ax[0].set_xlabel("regions N")
    ax[0].set_ylabel("clock bytes per update")
    ax[0].set_title("clock: sparse grows with K, full with N")
    ax[0].legend(fontsize=6)
    lag = res["lag"]
    labels = [f"{x['interval_ms']:g} ms poll" + (f"\n+{x['pad_bytes']} B" if x["pad_bytes"] else "") for x in lag]
    xs = range(len(lag))
    ax[1].bar([x - 0.2 for x in xs], [x["p50_ms"] for x in lag], 0.4, label="p50", color="#37a")
    ax[1].bar([x + 0.2 for x in xs], [x["p99_ms"] for x in lag], 0.4, label="p99", color="#a73")
    ax[1].set_xticks(list(xs), labels, fontsize=7)
    ax[1].set_ylabel("ms, worker submit in A -> applied in B, C")
    ax[1].set_title(f"lag, 3 regions on loopback, {lag[0]['rate_per_s']:g}/s")
    ax[1].legend(fontsize=7)
    p = res["partition"]
    ax[2].bar(["converge", "drain both logs"], [p["converge_s"] or 0, p["drain_both_logs_s"] or 0], color="#73a")
    ax[2].set_ylabel("s after the heal")
    ax[2].set_title(f"B after a partition, {p['updates']:,} queued")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=2000, help="keys per (N, K, names) bytes case")
    ap.add_argument("--rate", type=float, default=200.0)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--partition", type=int, default=10_000)
    ap.add_argument("--part-keys", type=int, default=2000)
    ap.add_argument("--no-pad", dest="pad", action="store_false", help="skip the padded (full-vector size) lag run")
    ap.add_argument("--mesh", type=int, default=0, help="also a lag run with this many regions (on 4 redis-servers)")
    ap.add_argument("--mesh-rate", type=float, default=20.0)
    ap.add_argument("--seed", type=int, default=28)
    ap.add_argument("--out", default="regions.json", help="result file, in benchmarks/results/ unless a path")
    a = ap.parse_args()
    logging.getLogger("ctxcache.replication").setLevel(logging.ERROR)  # the partition's link-down warnings
    t_start = time.time()
    res: dict[str, Any] = {"bench": "regions", "cpus": os.cpu_count(), "python": platform.python_version()}
    res["bytes"] = bench_bytes(a.keys, a.seed)
    servers = Servers()
    try:
        res["redis"] = redis.Redis.from_url(servers.start()).info()["redis_version"]
        runs = [(0.05, 0), (0.005, 0)] + ([(0.005, 8 * 32)] if a.pad else [])
        res["lag"] = [bench_lag(servers, a.rate, a.seconds, iv, pad, f"{i}") for i, (iv, pad) in enumerate(runs)]
        if a.mesh:
            res["lag_mesh"] = bench_lag(servers, a.mesh_rate, a.seconds, 0.05, 0, "mesh", a.mesh, 4)
        res["partition"] = bench_partition(servers, a.partition, a.part_keys, 0.05, a.seed)
    finally:
        servers.close()
    res["wall_s"] = round(time.time() - t_start, 1)
    out = ROOT / "benchmarks" / "results" / a.out  # a bare name: in results/; the plot beside it
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1) + "\n")
    _plot(res, out.with_suffix(".png"))
    print(json.dumps(res))


if __name__ == "__main__":
    main()
