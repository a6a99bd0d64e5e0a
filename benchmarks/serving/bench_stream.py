"""Streaming decode overhead: time per output token through the server's SSE stream vs a bare loop.

One process loads the real model once. The bare loop iterates ``CachedLM.stream_tokens``; the
server path streams ``POST /v1/completions`` (same prompt token ids, same seed, so the same
tokens) from a live uvicorn server on loopback around the same CachedLM. Per-token time is the
span from the first to the last text delta over (tokens - 1), so the prefill is excluded and what
remains is the decode plus everything the server adds per token: the worker's event queue,
SSE framing, JSON, the HTTP write and the client's parse. Runs alternate (bare, server, bare, ...)
so load on the machine hits both alike; the median of --repeats is reported.

    python benchmarks/serving/bench_stream.py                 # 32 and 512 output tokens, 3 repeats
    python benchmarks/serving/bench_stream.py --tokens 32 --repeats 1

Prints one JSON line; writes benchmarks/results/stream.json and stream.png. Claim: overhead <= 5 %
at 512 tokens.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.progress import Progress

from ctxcache import ContextCache
from ctxcache.integrations import SamplingParams
from ctxcache.integrations.model_store import resolve_model
from ctxcache.integrations.transformers import CachedLM
from ctxcache.server import ServerConfig, create_app
from ctxcache.server.testing import LiveServer

RESULTS = Path(__file__).resolve().parents[1] / "results"
PROMPT = "The harbour town kept a diary of its winters. In the first year, the tide"
SEED = 1234


def bare(lm: CachedLM, ids: list[int], n: int) -> tuple[float, int]:
    stream = lm.stream_tokens(ids, SamplingParams(n, 1.0, 1.0, (), SEED), namespace="bench", use_cache=True)
    first = last = None
    for _ in stream:
        last = time.perf_counter()
        first = first or last
    assert stream.result is not None and first is not None and last is not None
    return last - first, len(stream.result.token_ids)


def served(client: httpx.Client, model: str, ids: list[int], n: int) -> tuple[float, int]:
    body = {"model": model, "prompt": ids, "max_tokens": n, "temperature": 1.0, "seed": SEED, "stream": True,
            "stream_options": {"include_usage": True}}  # fmt: skip
    first = last = None
    tokens = 0
    with client.stream("POST", "/v1/completions", json=body) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            elif chunk["choices"] and chunk["choices"][0]["text"]:
                last = time.perf_counter()
                first = first or last
    assert first is not None and last is not None
    return last - first, tokens


def _plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], [r["bare_ms_per_token"] for r in rows], 0.4, label="bare loop")
    ax.bar([x + 0.2 for x in xs], [r["server_ms_per_token"] for r in rows], 0.4, label="server SSE stream")
    ax.set_xticks(list(xs), [f"{r['max_tokens']} tokens\n+{r['overhead_pct']:.1f} %" for r in rows])
    ax.set_ylabel("ms per output token")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, nargs="+", default=[32, 512])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="stream")
    args = ap.parse_args()
    path = resolve_model(None, quiet=True)
    cache = ContextCache.from_config({"block_size": 32, "tiers": [{"kind": "memory", "capacity": "1GiB"}]})
    lm = CachedLM.from_pretrained(path, cache)
    ids = list(lm.tokenizer(PROMPT).input_ids)
    app = create_app(lm, ServerConfig(max_tokens_limit=4096), model_id="bench")
    rows = []
    with (
        LiveServer(app) as url,
        httpx.Client(base_url=url, timeout=600) as client,
        Progress(console=Console(stderr=True)) as bar,
    ):
        task = bar.add_task("stream overhead", total=len(args.tokens) * args.repeats * 2)
        bare(lm, ids, 4), served(client, "bench", ids, 4)  # warm-up: first calls pay one-off costs
        for n in args.tokens:
            b, s = [], []
            for _ in range(args.repeats):
                dt, k = bare(lm, ids, n)
                b.append(dt / max(1, k - 1))
                bar.advance(task)
                dt, k2 = served(client, "bench", ids, n)
                s.append(dt / max(1, k2 - 1))
                bar.advance(task)
                assert k == k2, f"the two paths generated {k} and {k2} tokens (same seed: they must agree)"
            bm, sm = statistics.median(b), statistics.median(s)
            rows.append({"max_tokens": n, "tokens": k, "bare_ms_per_token": round(bm * 1e3, 3),
                         "server_ms_per_token": round(sm * 1e3, 3), "overhead_pct": round((sm / bm - 1) * 100, 2),
                         "bare_runs_ms": [round(x * 1e3, 3) for x in b],
                         "server_runs_ms": [round(x * 1e3, 3) for x in s]})  # fmt: skip
    out = {"benchmark": "stream_overhead", "repeats": args.repeats,
           **{f"overhead_pct_{r['max_tokens']}": r["overhead_pct"] for r in rows},
           "claim_5pct_at_512": next((r["overhead_pct"] <= 5.0 for r in rows if r["max_tokens"] == 512), None),
           "rows": rows}  # fmt: skip
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.out}.json").write_text(json.dumps(out, indent=1) + "\n")
    _plot(rows, RESULTS / f"{args.out}.png")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
