"""TTFT of multi-turn chat through the server, context cache on vs off, and a block-size sweep.

Workload: N sessions x T turns, interleaved round-robin (turn 1 of every session, then turn 2 ...).
Every prompt starts with one shared ~500-token system prompt, then the session's history
(1-3k tokens over the run); each turn adds a ~100-token user message and the model's reply.
Requests go one at a time over HTTP (streaming) to an in-process server on loopback, so TTFT is
what a client sees: HTTP + queue + tokenize + lookup + load + prefill + first token.

Reported per configuration (JSON lines on stdout, all of it in benchmarks/results/ttft.json):
TTFT p50/p95, prompt and prefilled tokens, token reuse (cached / prompt tokens), and for cached
requests the ratio TTFT / prefill time of the uncached suffix (the model forward alone, as timed
by the server): the overhead of serving from the cache (target <= 1.25).

    python benchmarks/serving/bench_ttft.py                  # 10 sessions x 6 turns, sweep 16..256
    python benchmarks/serving/bench_ttft.py --sessions 4     # scaled down for a slow machine
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ctxcache import ContextCache
from ctxcache.integrations.model_store import model_id_for, resolve_model
from ctxcache.integrations.transformers import CachedLM
from ctxcache.server import ServerConfig, create_app
from ctxcache.server.testing import LiveServer

RESULTS = Path(__file__).resolve().parents[1] / "results"
err = Console(stderr=True)

_SUBJECTS = [
    "The harbour master",
    "A young engineer",
    "The night nurse",
    "Our librarian",
    "The mayor's assistant",
    "A visiting chemist",
    "The ferry captain",
    "An old fisherman",
    "The school principal",
    "A tram driver",
]
_VERBS = ["reported", "noticed", "explained", "wrote down", "complained", "argued", "remembered", "announced"]
_OBJECTS = [
    "that the tide tables were wrong",
    "a crack in the northern seawall",
    "the delay of the winter supplies",
    "three unfamiliar ships near the lighthouse",
    "the price of coal rising again",
    "a missing ledger",
    "that the clock tower ran eleven minutes late",
    "a strange signal on the radio every evening",
]
_TAILS = ["before the storm arrived.", "during the council meeting.", "on the last day of October.",
          "while the market was closing.", "in a letter to the newspaper.", "after the lights went out."]  # fmt: skip


def filler(rng: random.Random, tok: Any, n_tokens: int) -> str:
    """Prose of about ``n_tokens`` tokens."""
    parts: list[str] = []
    while len(tok(" ".join(parts), add_special_tokens=False).input_ids) < n_tokens:
        parts.append(f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)} {rng.choice(_TAILS)}")
    return " ".join(parts)


def make_workload(tok: Any, sessions: int, turns: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    system = "You are the archivist of a coastal town. Answer from these notes. " + filler(rng, tok, 500)
    histories = []
    for s in range(sessions):
        target = 500 + (s * 900) // max(1, sessions - 1)  # history beyond the system prompt: 0.5-1.4k to start
        hist: list[dict[str, str]] = []
        while sum(len(tok(m["content"]).input_ids) for m in hist) < target:
            hist.append({"role": "user", "content": filler(rng, tok, 80)})
            hist.append({"role": "assistant", "content": filler(rng, tok, 40)})
        histories.append(hist)
    questions = [[f"Question {t + 1}: " + filler(rng, tok, 100) for t in range(turns)] for _ in range(sessions)]
    return {"system": system, "histories": histories, "questions": questions}


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))]


def one_request(client: httpx.Client, model_id: str, messages: list[dict[str, str]], max_tokens: int) -> dict[str, Any]:
    body = {"model": model_id, "messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}  # fmt: skip
    t0 = time.perf_counter()
    ttft, text, final = None, [], {}
    with client.stream("POST", "/v1/chat/completions", json=body) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {r.read().decode()}")
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            choices = chunk.get("choices") or []
            if choices and choices[0]["delta"].get("content"):
                ttft = ttft or time.perf_counter() - t0
                text.append(choices[0]["delta"]["content"])
            if choices and choices[0].get("finish_reason") and ttft is None:
                ttft = time.perf_counter() - t0  # an empty reply: its first token ended the turn
            if "usage" in chunk:
                final = chunk
    u, ext = final["usage"], final["ctxcache"]
    return {"ttft_s": ttft, "prompt_tokens": u["prompt_tokens"], "cached_tokens": u["prompt_tokens_details"]["cached_tokens"],
            "timings": ext["timings"], "reply": "".join(text)}  # fmt: skip


def run_config(lm: CachedLM, model_id: str, work: dict[str, Any], args: argparse.Namespace, label: str,
               cache_on: bool) -> dict[str, Any]:  # fmt: skip
    cfg = ServerConfig(cache=cache_on, max_context=8192, default_max_tokens=args.max_tokens)
    app = create_app(lm, cfg, model_id=model_id)
    hist = [list(h) for h in work["histories"]]
    records = []
    n = len(hist) * args.turns
    with LiveServer(app) as url, httpx.Client(base_url=url, timeout=600) as client, Progress(
        TextColumn(f"{label:>14}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=err
    ) as bar:  # fmt: skip
        task = bar.add_task(label, total=n)
        for turn in range(args.turns):
            for s in range(len(hist)):
                hist[s].append({"role": "user", "content": work["questions"][s][turn]})
                msgs = [{"role": "system", "content": work["system"]}, *hist[s]]
                rec = one_request(client, model_id, msgs, args.max_tokens)
                hist[s].append({"role": "assistant", "content": rec["reply"]})
                records.append({"session": s, "turn": turn + 1, **rec})
                bar.advance(task)
    return summarize(label, lm.block_size, cache_on, records, lm.cache.stats())


def summarize(
    label: str, bs: int, cache_on: bool, records: list[dict[str, Any]], stats: dict[str, Any]
) -> dict[str, Any]:
    ttft = [r["ttft_s"] for r in records]
    prompt = sum(r["prompt_tokens"] for r in records)
    cached = sum(r["cached_tokens"] for r in records)
    hits = [r for r in records if r["cached_tokens"] > 0]
    ratios = [r["ttft_s"] / r["timings"]["prefill_s"] for r in hits if r["timings"]["prefill_s"] > 0]
    turns = sorted({r["turn"] for r in records})
    return {
        "config": label, "cache": cache_on, "block_size": bs if cache_on else None, "requests": len(records),
        "ttft_p50_s": round(pct(ttft, 0.5), 4), "ttft_p95_s": round(pct(ttft, 0.95), 4),
        "ttft_mean_s": round(statistics.fmean(ttft), 4),
        "prompt_tokens": prompt, "cached_tokens": cached, "prefilled_tokens": prompt - cached,
        "token_reuse_ratio": round(cached / prompt, 4) if prompt else 0.0,
        "hit_requests": len(hits),
        "ttft_warm_p50_s": round(pct([r["ttft_s"] for r in hits], 0.5), 4) if hits else None,
        "ttft_over_suffix_prefill_p50": round(pct(ratios, 0.5), 3) if ratios else None,
        "ttft_over_suffix_prefill_p95": round(pct(ratios, 0.95), 3) if ratios else None,
        "ttft_over_suffix_prefill_total": round(sum(r["ttft_s"] for r in hits) / sum(r["timings"]["prefill_s"] for r in hits), 3)
        if hits else None,
        "per_turn_ttft_mean_s": [round(statistics.fmean(r["ttft_s"] for r in records if r["turn"] == t), 4) for t in turns],
        "cache_blocks": stats["blocks"], "cache_bytes": stats["bytes"],
        "records": records,
    }  # fmt: skip


def plot(runs: list[dict[str, Any]], default_bs: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for run in runs:
        if not run["cache"] or run["block_size"] == default_bs:
            turns = range(1, len(run["per_turn_ttft_mean_s"]) + 1)
            name = "cache off" if not run["cache"] else f"cache on (block {default_bs})"
            ax1.plot(turns, run["per_turn_ttft_mean_s"], marker="o", label=name)
    ax1.set(xlabel="turn", ylabel="mean TTFT (s)", title="TTFT per turn")
    ax1.set_ylim(bottom=0)
    ax1.legend()
    sweep = [r for r in runs if r["cache"]]
    xs = [str(r["block_size"]) for r in sweep]
    ax2.bar(xs, [r["ttft_p50_s"] for r in sweep], color="tab:blue", label="TTFT p50 (s)")
    ax2.set(xlabel="block size (tokens)", ylabel="TTFT p50 (s)", title="block-size sweep")
    ax3 = ax2.twinx()
    ax3.plot(xs, [r["token_reuse_ratio"] for r in sweep], color="tab:orange", marker="o", label="token reuse")
    ax3.set_ylim(0, 1)
    ax3.set_ylabel("token reuse (cached / prompt)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=None, help="local HF model directory (default: Gemma 3 270M)")
    ap.add_argument("--sessions", type=int, default=10)
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--max-tokens", type=int, default=8, help="reply length per turn")
    ap.add_argument("--block-sizes", default="16,32,64,128,256")
    ap.add_argument("--default-block-size", type=int, default=None, help="for the plot (default: the best measured)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=RESULTS / "ttft.json")
    ap.add_argument("--plot", type=Path, default=RESULTS / "ttft_per_turn.png")
    args = ap.parse_args()
    sizes = [int(x) for x in args.block_sizes.split(",")]
    if args.sessions < 1 or args.turns < 1 or args.max_tokens < 1 or any(b < 1 for b in sizes):
        ap.error("--sessions, --turns, --max-tokens and block sizes must be >= 1")
    path = resolve_model(args.model)
    base = CachedLM.from_pretrained(path, ContextCache.from_config({"block_size": 64}))
    model_id = model_id_for(path)
    work = make_workload(base.tokenizer, args.sessions, args.turns, args.seed)
    base.full_logits(base.encode([{"role": "system", "content": work["system"]}]))  # warm-up: first run is slow

    def lm_with(bs: int) -> CachedLM:
        cache = ContextCache.from_config({"block_size": bs, "tiers": [{"kind": "memory", "capacity": "6GiB"}]})
        return CachedLM(base.model, base.tokenizer, cache, max_context=8192)

    t0 = time.perf_counter()
    configs = [("cache off", 64, False)] + [(f"cache on, b{bs}", bs, True) for bs in sizes]
    runs = []
    for label, bs, on in configs:
        runs.append(run_config(lm_with(bs), model_id, work, args, label, cache_on=on))
        print(json.dumps({k: v for k, v in runs[-1].items() if k != "records"}), flush=True)
        gc.collect()  # drop this run's KV before the next one
    on = [r for r in runs if r["cache"]]
    # Among sizes reaching 0.80 reuse, the lowest TTFT of cache hits (the requests the block size
    # affects; cold first turns only add noise); within 5% of it, the largest block wins, since
    # fewer blocks mean less hashing, fewer index nodes and fewer tensors to join per request.
    ok = [r for r in on if r["token_reuse_ratio"] >= 0.80] or on
    fastest = min(r["ttft_warm_p50_s"] or float("inf") for r in ok)
    best = max(
        (r for r in ok if (r["ttft_warm_p50_s"] or float("inf")) <= 1.05 * fastest), key=lambda r: r["block_size"]
    )
    chosen = args.default_block_size or best["block_size"]
    main_on = next((r for r in on if r["block_size"] == chosen), best)
    off = runs[0]
    summary = {
        "summary": True, "sessions": args.sessions, "turns": args.turns, "max_tokens": args.max_tokens,
        "best_block_size": best["block_size"], "plotted_block_size": chosen,
        "ttft_p50_off_s": off["ttft_p50_s"], "ttft_p50_on_s": main_on["ttft_p50_s"],
        "ttft_warm_p50_on_s": main_on["ttft_warm_p50_s"],
        "ttft_p95_off_s": off["ttft_p95_s"], "ttft_p95_on_s": main_on["ttft_p95_s"],
        "speedup_p50": round(off["ttft_p50_s"] / main_on["ttft_p50_s"], 2),
        "token_reuse_ratio": main_on["token_reuse_ratio"],
        "ttft_over_suffix_prefill_p50": main_on["ttft_over_suffix_prefill_p50"],
        "prefilled_tokens_off": off["prefilled_tokens"], "prefilled_tokens_on": main_on["prefilled_tokens"],
        "wall_s": round(time.perf_counter() - t0, 1),
    }  # fmt: skip
    print(json.dumps(summary), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"model": model_id, "argv": sys.argv[1:], "when": time.strftime("%Y-%m-%dT%H:%M:%S")}
    args.out.write_text(json.dumps({"meta": meta, "summary": summary, "runs": runs}, indent=1) + "\n")
    plot(runs, chosen, args.plot)
    err.print(f"wrote {args.out} and {args.plot}")


if __name__ == "__main__":
    main()
