"""What the semantic cache's tombstone sync costs (semantic/tombstones.py, docs/semantic-cache.md).

One SemanticCache on a throwaway loopback redis-server holding 200 entries; its store's clock is
injected so the sync falls due exactly when this script says. Figures (median of ``REPS`` lookups,
interleaved, each a hit on the same entry):
- hit_us: a hit when no sync is due (the per-hit cost: no round trip, as before tombstones);
- hit_sync_us: the one hit per ``sync_interval`` that pays the sync (one round trip, a Lua script,
  empty reply: the steady state), and its ratio to hit_us;
- sync_fresh_us / sync_within_skew_us / sync_old_us: a sync right after another process
  tombstoned ``N_TOMBS`` entries (confirmed deletes, all read), the next one (a tombstone written
  within ``skew`` of the last read is read again: a margin for a step of the Redis server's
  clock), and the one after that and 21 more (median; none read: only what changed since the last read travels);
- the tombstones each sync transferred.

Run: .venv/bin/python benchmarks/semantic/bench_semantic_tombstones.py  (needs redis-server)
"""

from __future__ import annotations

import json
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from ctxcache.semantic import EntryStore, HashingEmbedder, SemanticCache, SemanticQuery
from ctxcache.tiers import RedisTier

OUT = Path(__file__).resolve().parents[1] / "results"
REPS, N_ENTRIES, N_TOMBS = 300, 200, 1000


def start_redis(tmp: str) -> tuple[subprocess.Popen[bytes], int]:
    exe = shutil.which("redis-server")
    if exe is None:
        raise SystemExit("redis-server not installed: apt-get install redis-server")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", tmp]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import redis

    for _ in range(200):
        try:
            redis.Redis(port=port).ping()
            return proc, port
        except redis.exceptions.ConnectionError:
            time.sleep(0.02)
    raise RuntimeError("redis-server did not start")


def timed_hit(cache: SemanticCache, q: SemanticQuery) -> float:
    t0 = time.perf_counter()
    assert cache.lookup(q).hit is not None
    return (time.perf_counter() - t0) * 1e6


def measure(port: int) -> dict[str, Any]:
    now = [0.0]
    tier = RedisTier(1 << 40, "fifo", url=f"redis://127.0.0.1:{port}/0", prefix="b:", name="semantic", timeout=1.0)
    store = EntryStore(tier, sync_interval=2.0, clock=lambda: now[0])
    assert tier.wait_ready(5) and store.tombs is not None
    cache = SemanticCache(HashingEmbedder(), store, capacity=1 << 28)
    qs = [
        SemanticQuery(text=f"What is the capital of country number {i}?", tenant="t", model="m")
        for i in range(N_ENTRIES)
    ]
    for q in qs:
        cache.store(q, {"text": q.text})
    plain, paying = [], []
    for i in range(REPS):  # interleaved: a hit with no sync due, then one that pays the sync
        plain.append(timed_hit(cache, qs[i % N_ENTRIES]))
        now[0] += store.sync_interval
        paying.append(timed_hit(cache, qs[i % N_ENTRIES]))
    trips = tier.round_trips
    for i in range(REPS):
        timed_hit(cache, qs[i % N_ENTRIES])
    no_trips = tier.round_trips - trips
    # another process erases N_TOMBS entries (tombstones only: these keys are not held here)
    erased = [i.to_bytes(16, "big") for i in range(N_TOMBS)]
    store.tombs.mark(erased)
    store.tombs.settle(erased)  # their deletes landed: they linger (a pending one is read at every sync)
    syncs = []  # (µs, tombstones read): right after the erasure, after the skew margin, the next one
    for wait in (0.0, store.tombs.skew + 0.1, 0.0):
        time.sleep(wait)
        now[0] += store.sync_interval
        read0, t0 = store.tombs.read, time.perf_counter()
        store.sync()
        syncs.append((round((time.perf_counter() - t0) * 1e6, 1), store.tombs.read - read0))
    old = []  # the steady state again, now with N_TOMBS lingering: a median, not one sample
    for _ in range(21):
        now[0] += store.sync_interval
        read0, t0 = store.tombs.read, time.perf_counter()
        store.sync()
        old.append(((time.perf_counter() - t0) * 1e6, store.tombs.read - read0))
    syncs[2] = (round(statistics.median(u for u, _ in old), 1), syncs[2][1] + sum(n for _, n in old))
    cache.close()
    hit, hit_sync = statistics.median(plain), statistics.median(paying)
    return {"bench": "semantic_tombstones", "entries": N_ENTRIES, "reps": REPS, "hit_us": round(hit, 1),
            "hit_sync_us": round(hit_sync, 1), "sync_over_hit": round(hit_sync / hit, 2),
            "round_trips_in_hits_between_syncs": no_trips, "tombstones": N_TOMBS,
            "sync_fresh_us": syncs[0][0], "sync_fresh_read": syncs[0][1],
            "sync_within_skew_us": syncs[1][0], "sync_within_skew_read": syncs[1][1],
            "sync_old_us": syncs[2][0], "sync_old_read": syncs[2][1]}  # fmt: skip


def plot(out: dict[str, Any]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    labels = ["hit, no\nsync due", "hit that\nsyncs (0 new)", f"sync, {N_TOMBS}\nnew", "sync within\nskew (re-read)",
              "next sync\n(0 read)"]  # fmt: skip
    vals = [out["hit_us"], out["hit_sync_us"], out["sync_fresh_us"], out["sync_within_skew_us"], out["sync_old_us"]]
    fig, ax = plt.subplots(figsize=(6.5, 4))
    ax.bar(labels, vals, color=["#4c72b0", "#dd8452", "#c44e52", "#8172b3", "#55a868"])
    ax.set_ylabel("µs (median / one run)")
    ax.set_title("semantic cache: tombstone sync cost (loopback Redis)")
    fig.tight_layout()
    fig.savefig(OUT / "semantic_tombstones.png", dpi=120)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        proc, port = start_redis(tmp)
        try:
            out = measure(port)
        finally:
            proc.terminate()
            proc.wait(10)
    print(json.dumps(out), flush=True)
    OUT.mkdir(exist_ok=True)
    (OUT / "semantic_tombstones.json").write_text(json.dumps(out, indent=1) + "\n")
    plot(out)


if __name__ == "__main__":
    main()
