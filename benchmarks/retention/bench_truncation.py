"""Cache-aware progressive truncation vs naive "drop the oldest tokens", over 5 -> 200 turn sessions.

Sessions are built from real text (Debian licence texts and Python stdlib sources, cut at blank
lines): a system prompt, then user / assistant turns in Gemma's chat format. Each user turn is a
request whose prompt is the conversation so far, truncated to ``--limit`` tokens by one of:

- naive:  the system prompt + the newest tokens that fit (the cut moves with every turn);
- stable: the system prompt + whole turns from a cut that only moves when a prompt overflows,
          and then far enough (to ``--low`` of the limit) to serve the next turns too.

Reuse: every prompt goes through a real ContextCache (64-token blocks, RAM), looked up and then
stored as CachedLM does; we report cached / prompt tokens and prefilled tokens per request.
Quality (model): NLL of the assistant's reply after each truncated prompt, on ``--quality-turns``
exchanges of one session, with the real prefill time through CachedLM and its cache.

  python benchmarks/retention/bench_truncation.py
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Any

import numpy as np
from retention_common import RESULTS, load_model, progress, texts, write

SYSTEM = "You are a careful assistant. Answer from the documents quoted in this conversation."


def _turn(tok: Any, role: str, text: str) -> list[int]:
    return list(tok(f"<start_of_turn>{role}\n{text.strip()}<end_of_turn>\n", add_special_tokens=False).input_ids)


def paragraphs(tok: Any, max_tokens: int = 160) -> list[str]:
    out = []
    # Licences first, then Python sources (the order the published results were built with).
    for _, text in sorted(texts().items(), key=lambda kv: not kv[0].startswith("license:")):
        for para in text.split("\n\n"):
            para = para.strip()
            if len(para) > 20 and len(tok(para, add_special_tokens=False).input_ids) <= max_tokens:
                out.append(para)
    return out


def session(tok: Any, paras: list[str], n: int, offset: int) -> tuple[list[int], list[list[int]], list[list[int]]]:
    """(system tokens, user turns, assistant turns) of an n-exchange conversation."""
    system = [tok.bos_token_id, *_turn(tok, "system", SYSTEM)]
    users = [_turn(tok, "user", paras[(offset + 2 * i) % len(paras)]) for i in range(n)]
    replies = [_turn(tok, "model", paras[(offset + 2 * i + 1) % len(paras)]) for i in range(n)]
    return system, users, replies


def prompts(tok: Any, system: list[int], users: list[list[int]], replies: list[list[int]], how: str,
            limit: int, low: float) -> list[list[int]]:  # fmt: skip
    from ctxcache.integrations.truncation import naive_prompt, stable_prompt

    gen = list(tok("<start_of_turn>model\n", add_special_tokens=False).input_ids)
    out = []
    for k in range(len(users)):
        turns = [t for i in range(k) for t in (users[i], replies[i])] + [users[k] + gen]
        out.append(naive_prompt(system, turns, limit) if how == "naive" else stable_prompt(system, turns, limit, low))
    return out


def reuse(ps: list[list[int]], block: int) -> dict[str, Any]:
    from ctxcache import ContextCache

    cache = ContextCache.from_config({"block_size": block, "tiers": [{"kind": "memory", "capacity": "1GiB"}]})
    hits, uncached = [], []
    for p in ps:
        with cache.lookup(p[:-1]) as m:  # the last token is always prefilled
            hits.append(m.hit_tokens)
            n_full = len(p) // block
            cache.store(p, [np.zeros(1, np.float32)] * n_full, first_block=0)
        uncached.append(len(p) - m.hit_tokens)
    total = sum(len(p) for p in ps)
    return {"requests": len(ps), "prompt_tokens": total, "reuse_ratio": sum(hits) / total,
            "prefill_tokens_per_request": sum(uncached) / len(ps), "max_prompt": max(len(p) for p in ps)}  # fmt: skip


def quality(model: Any, tok: Any, a: argparse.Namespace, paras: list[str], bar: Any) -> dict[str, Any]:
    import torch

    from ctxcache import ContextCache
    from ctxcache.integrations.transformers import CachedLM

    system, users, replies = session(tok, paras, a.quality_turns, offset=7)
    out: dict[str, Any] = {"exchanges": a.quality_turns, "limit": a.quality_limit}
    task = bar.add_task("reply NLL per strategy", total=2 * a.quality_turns)
    for how in ("naive", "stable"):
        lm = CachedLM(model, tok, ContextCache.from_config({"block_size": a.block}))
        ps = prompts(tok, system, users, replies, how, a.quality_limit - 160, a.low)  # room for the reply
        nll = n = 0.0
        t_prefill, evaluated = 0.0, 0
        for k, p in enumerate(ps):
            reply = replies[k]
            with torch.no_grad():
                pf = lm.prefill(p + reply, keep_logits=len(reply) + 1, store_upto=len(p))
            lp = torch.log_softmax(pf.logits[:-1].double(), -1)
            nll -= float(lp[torch.arange(len(reply)), torch.tensor(reply)].sum())
            n += len(reply)
            t_prefill += pf.timings.prefill_s
            evaluated += 1
            bar.advance(task)
        out[how] = {"reply_ppl": math.exp(nll / n), "reply_tokens": int(n), "prefill_s": t_prefill,
                    "requests": evaluated}  # fmt: skip
    return out


def _plot(rows: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.6))
    for how in ("naive", "stable"):
        pts = [(r["turns"], r[how]) for r in rows]
        a1.plot([t for t, _ in pts], [h["reuse_ratio"] for _, h in pts], marker="o", label=how)
        a2.plot([t for t, _ in pts], [h["prefill_tokens_per_request"] for _, h in pts], marker="o", label=how)
    for ax, label in ((a1, "prefix reuse ratio"), (a2, "prefilled tokens per request")):
        ax.set_xscale("log")
        ax.set_xlabel("turns per session")
        ax.set_ylabel(label)
        ax.legend()
    fig.suptitle("Truncation at a fixed window: stable cuts vs dropping the oldest tokens")
    fig.tight_layout()
    fig.savefig(RESULTS / "truncation.png", dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", default="5,10,20,50,100,200")
    ap.add_argument("--sessions", type=int, default=3)
    ap.add_argument("--limit", type=int, default=2048)
    ap.add_argument("--low", type=float, default=0.6)
    ap.add_argument("--block", type=int, default=64)
    ap.add_argument("--quality-turns", type=int, default=16)
    ap.add_argument("--quality-limit", type=int, default=1024)
    a = ap.parse_args()
    model, tok = load_model("sdpa")
    paras = paragraphs(tok)
    t0 = time.perf_counter()
    rows = []
    turns = [int(x) for x in a.turns.split(",")]
    with progress() as bar:
        task = bar.add_task("sessions", total=len(turns) * a.sessions)
        for n in turns:
            agg: dict[str, list[dict[str, Any]]] = {"naive": [], "stable": []}
            for s in range(a.sessions):
                system, users, replies = session(tok, paras, n, offset=101 * s)
                for how in agg:
                    agg[how].append(reuse(prompts(tok, system, users, replies, how, a.limit, a.low), a.block))
                bar.advance(task)
            row: dict[str, Any] = {"turns": n}
            for how, rs in agg.items():
                tot = sum(r["prompt_tokens"] for r in rs)
                row[how] = {"reuse_ratio": sum(r["reuse_ratio"] * r["prompt_tokens"] for r in rs) / tot,
                            "prefill_tokens_per_request": float(np.mean([r["prefill_tokens_per_request"] for r in rs])),
                            "mean_prompt_tokens": tot / sum(r["requests"] for r in rs),
                            "max_prompt": max(r["max_prompt"] for r in rs)}  # fmt: skip
            rows.append(row)
        q = quality(model, tok, a, paras, bar) if a.quality_turns else None
    _plot(rows)
    write("truncation", {"rows": rows, "quality": q, "paragraphs": len(paras), "args": vars(a),
                         "wall_s": time.perf_counter() - t0})  # fmt: skip


if __name__ == "__main__":
    main()
