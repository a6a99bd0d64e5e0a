"""Overhead of observability: metrics + tracing on vs off, side by side in one run.

1. Lookup throughput (library level). One cycle = lookup, store the missing blocks, release, on
   a RAM-tier ContextCache that evicts steadily (prompts: one of 20 shared prefixes + a unique
   tail; 4 tenants). "on" attaches the observer's index hooks (every insert and eviction feeds
   the indicators) and renders the Prometheus registry (collectors read the cache, indicators
   computed) every second (the dashboard polls every 2 s, Prometheus every 15 s); "off" is the bare cache. Rounds alternate on/off (on first in even
   rounds); the figure is the ratio of median rates. Recording a served request (metrics, log
   record, span tree) is server work, not lookup work: its cost is reported apart, in us.
2. Served TTFT (the real model: Gemma 3 270M, fp32, CPU). Two servers in this process, one with
   observability on (JSON request log to a file, spans into a batch span processor, the stats
   ticker every second, /metrics scraped every second by a thread), one with it off
   (``ObsConfig(enabled=False)``: no hooks, collectors, records, spans). The same multi-turn
   chat workload (benchmarks/serving/bench_ttft.py's) goes to both, request by request, alternating which
   server goes first. Reported: p50 of each and the median of per-request ratios on/off.

Targets: lookup ratio >= 0.9, TTFT p50 within 2 %.

    python benchmarks/serving/bench_observability.py                 # ~5 min on 2 cores
    python benchmarks/serving/bench_observability.py --sessions 2    # smaller TTFT part
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from prometheus_client import CollectorRegistry, generate_latest

from ctxcache import ContextCache
from ctxcache.observability.logging import configure
from ctxcache.observability.service import ObsConfig, Observability

sys.path.insert(0, str(Path(__file__).resolve().parent))
RESULTS = Path(__file__).resolve().parents[1] / "results"
# a registry render this often in the "on" arm: more often than the dashboard (2 s) or Prometheus (15 s)
SCRAPE_EVERY_S = float(os.environ.get("SCRAPE", "1.0"))


class _Outcome:  # the fields Observability.request_done reads from the server's Outcome
    def __init__(self, usage: Any) -> None:
        from ctxcache.integrations import Generation, Timings

        self.generation = Generation("", [1, 2], "stop", None, 0, usage, Timings(lookup_s=1e-4, prefill_s=1e-3))
        self.usage, self.ttft_s, self.queued_s, self.tokenize_s = usage, 0.002, 1e-4, 1e-4


def _lookup_round(on: bool, prompts: list[np.ndarray], bs: int) -> float:
    """Cycles per CPU second (this process's CPU time: other jobs on a shared machine do not
    count); ``on``: the observer's hooks see every insert and eviction, and the
    registry is scraped (collectors read the cache, indicators computed) every second."""
    cache = ContextCache.from_config({"block_size": bs, "tiers": [{"kind": "memory", "capacity": 3000 * 64}]})
    registry = CollectorRegistry()
    obs = Observability(cache, registry, ObsConfig(trace_exporter="memory", log_every_s=3600)) if on else None
    payload = b"k" * 64
    # Scrapes follow this process's CPU time, the unit of the rate: on a busy machine wall-clock
    # scrapes would come many times per CPU second of lookups and inflate the "on" arm's cost.
    c0 = time.process_time()
    next_scrape = c0 + SCRAPE_EVERY_S / 2  # a round is ~0.6 CPU s: one scrape each, of a full cache
    for i, toks in enumerate(prompts):
        ns = f"t{i % 4}"
        with cache.lookup(toks, ns) as m:
            n = len(toks) // bs
            cache.store(toks[: n * bs], [payload] * (n - m.n_blocks), ns, m.n_blocks)
        if obs is not None and time.process_time() >= next_scrape:
            generate_latest(registry)
            next_scrape = time.process_time() + SCRAPE_EVERY_S
    rate = len(prompts) / (time.process_time() - c0)
    if obs is not None:
        obs.close()
    cache.close()
    return rate


def _record_cost(n: int) -> dict[str, float]:
    """Microseconds to record one served request: metrics, log record (level off), span tree."""
    from ctxcache.usage import Usage

    out = {}
    for exporter in ("none", "memory"):
        cache = ContextCache.from_config({"block_size": 16, "tiers": [{"kind": "memory", "capacity": 1 << 20}]})
        obs = Observability(cache, CollectorRegistry(), ObsConfig(trace_exporter=exporter, log_every_s=3600))
        o = _Outcome(Usage(512, 64, 64, {"memory": 512}))
        t0 = time.perf_counter()
        for i in range(n):
            obs.request_done(f"t{i % 4}", "a", o, time.perf_counter())
            if obs.tracing.memory is not None and i % 500 == 499:
                obs.tracing.memory.clear()
        out[f"record_request_us_spans_{exporter}"] = 1e6 * (time.perf_counter() - t0) / n
        obs.close()
        cache.close()
    return out


def bench_lookup(rounds: int, n: int, seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    bs = 16
    shared = [rng.integers(0, 30000, 64 * (k + 1)).astype(np.int32) for k in range(20)]  # 20 "system prompts"
    prompts = [
        np.concatenate([shared[rng.integers(0, 20)], rng.integers(0, 30000, rng.integers(16, 256))]).astype(np.int32)
        for _ in range(n)
    ]
    on, off = [], []
    for r in range(rounds):
        order = (True, False) if r % 2 == 0 else (False, True)
        for flag in order:
            (on if flag else off).append(_lookup_round(flag, prompts, bs))
    ratio = statistics.median(on) / statistics.median(off)
    paired = statistics.median(a / b for a, b in zip(on, off))
    return {"lookup_paired_median_ratio": paired, "lookup_cycles_per_s_on": statistics.median(on), "lookup_cycles_per_s_off": statistics.median(off),
            "lookup_throughput_ratio": ratio, "rounds": rounds, "cycles_per_round": n, **_record_cost(2000)}  # fmt: skip


def bench_ttft(sessions: int, turns: int, max_tokens: int, seed: int) -> dict[str, Any]:
    from bench_ttft import filler, make_workload, one_request

    from ctxcache.integrations.model_store import model_id_for, resolve_model
    from ctxcache.integrations.transformers import CachedLM
    from ctxcache.server import ServerConfig, create_app
    from ctxcache.server.testing import LiveServer

    path = resolve_model(None)
    base = CachedLM.from_pretrained(path, ContextCache.from_config({"block_size": 32}))
    model_id = model_id_for(path)
    work = make_workload(base.tokenizer, sessions, turns, seed)
    base.full_logits(base.encode([{"role": "system", "content": work["system"]}]))  # warm-up

    def app(enabled: bool) -> Any:
        cache = ContextCache.from_config({"block_size": 32, "tiers": [{"kind": "memory", "capacity": "4GiB"}]})
        lm = CachedLM(base.model, base.tokenizer, cache, max_context=8192)
        obs = ObsConfig(enabled=enabled, trace_exporter="memory" if enabled else "none", log_every_s=1.0)
        return create_app(lm, ServerConfig(), model_id=model_id, obs=obs)

    log_sink = io.StringIO()
    configure("INFO", json=True, stream=log_sink)
    on_app, off_app = app(True), app(False)
    stop = threading.Event()
    ttft: dict[str, list[float]] = {"on": [], "off": []}
    import random

    rng = random.Random(seed)
    with LiveServer(on_app) as on_url, LiveServer(off_app) as off_url, httpx.Client(base_url=on_url, timeout=600) as con, \
            httpx.Client(base_url=off_url, timeout=600) as coff:  # fmt: skip

        def scrape() -> None:
            with httpx.Client(base_url=on_url, timeout=30) as s:
                while not stop.wait(1.0):
                    s.get("/metrics")

        scraper = threading.Thread(target=scrape, daemon=True)
        scraper.start()
        convs = [[{"role": "system", "content": work["system"]}, *h] for h in work["histories"]]
        k = 0
        for t in range(turns):
            for s in range(sessions):
                convs[s].append({"role": "user", "content": work["questions"][s][t]})
                pair = [("on", con), ("off", coff)] if k % 2 == 0 else [("off", coff), ("on", con)]
                for name, client in pair:
                    ttft[name].append(one_request(client, model_id, convs[s], max_tokens)["ttft_s"])
                convs[s].append({"role": "assistant", "content": filler(rng, base.tokenizer, 40)})
                k += 1
                print(f"\r{k}/{sessions * turns} requests", end="", file=sys.stderr, flush=True)
        stop.set()
        scraper.join()
        spans = len(on_app.state.obs.tracing.memory.get_finished_spans())
    print(file=sys.stderr)
    configure("WARNING", json=False)
    logged = sum(1 for line in log_sink.getvalue().splitlines() if '"msg":"request"' in line)
    ratios = [a / b for a, b in zip(ttft["on"], ttft["off"])]
    p50_on, p50_off = statistics.median(ttft["on"]), statistics.median(ttft["off"])
    return {"model": "gemma3-270m (real, fp32 CPU)", "requests_per_arm": len(ratios),
            "ttft_p50_on_s": p50_on, "ttft_p50_off_s": p50_off, "ttft_p50_ratio": p50_on / p50_off,
            "ttft_paired_median_ratio": statistics.median(ratios), "spans_recorded": spans,
            "request_log_lines": logged}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=24)
    ap.add_argument("--cycles", type=int, default=1500)
    ap.add_argument("--sessions", type=int, default=6)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip-ttft", action="store_true", help="only the lookup part (no model)")
    args = ap.parse_args()
    if min(args.rounds, args.cycles, args.sessions, args.turns, args.max_tokens) < 1:
        ap.error("counts must be >= 1")
    logging.getLogger("ctxcache").setLevel(logging.WARNING)
    out: dict[str, Any] = {"bench": "observability"}
    out.update(bench_lookup(args.rounds, args.cycles, args.seed))
    if not args.skip_ttft:
        out.update(bench_ttft(args.sessions, args.turns, args.max_tokens, args.seed))
    out["lookup_ok"] = out["lookup_throughput_ratio"] >= 0.9
    if "ttft_p50_ratio" in out:
        out["ttft_ok"] = abs(out["ttft_p50_ratio"] - 1) <= 0.02
    RESULTS.mkdir(exist_ok=True)
    name = "observability_lookup" if args.skip_ttft else "observability"  # a partial run keeps the full one
    (RESULTS / f"{name}.json").write_text(json.dumps(out, indent=2) + "\n")
    _plot(out, RESULTS / f"{name}.png")
    print(json.dumps(out))


def _plot(out: dict[str, Any], path: Path) -> None:
    """Off and on side by side: lookup cycles/s and, when measured, served TTFT p50."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    parts = [("lookup cycles / CPU s", out["lookup_cycles_per_s_off"], out["lookup_cycles_per_s_on"], "{:,.0f}")]
    if "ttft_p50_off_s" in out:
        parts.append(("served TTFT p50 (ms)", 1e3 * out["ttft_p50_off_s"], 1e3 * out["ttft_p50_on_s"], "{:,.1f}"))
    fig, axes = plt.subplots(1, len(parts), figsize=(4.2 * len(parts), 3.4), squeeze=False)
    for ax, (title, off, on, fmt) in zip(axes[0], parts):
        bars = ax.bar(["off", "metrics + tracing on"], [off, on], color=["#9aa5b1", "#3b82f6"])
        for b, v in zip(bars, (off, on)):
            ax.annotate(fmt.format(v), (b.get_x() + b.get_width() / 2, v), ha="center", va="bottom", fontsize=9)
        ax.set_title(f"{title}: on/off {on / off:.3f}", fontsize=10)
    fig.suptitle("observability overhead (bench_observability.py)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
