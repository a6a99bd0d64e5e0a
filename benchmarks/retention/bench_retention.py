"""Retention quality on Gemma 3 270M: perplexity per policy and budget, and passkey retrieval.

Perplexity: per text, a ``--ctx``-token context is prefilled once with eager attention (scores for
every policy from the same pass), then forked per (policy, budget): compressed to the budget, the
next ``--eval`` tokens are scored ``--step`` at a time, compressing again after each step. Budget
100 % is checked bit for bit against a plain forward with no retention at all.

Passkey: a key hidden at a depth of filler text; the context is prefilled once per trial, forked
per config, compressed, then the question and the key are teacher-forced: a hit means greedy
decoding would produce every digit of the key. Warm-store variants recall the top blocks by their
Quest bound before answering and record which blocks the question really needed.

  python benchmarks/retention/bench_retention.py --part ppl
  python benchmarks/retention/bench_retention.py --part passkey   # 1k, 4k, 8k tokens x depths 0.1, 0.5, 0.9
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from typing import Any

from retention_common import RESULTS, load_model, progress, texts, write

POLICIES = ("streaming", "h2o", "snapkv", "entropy")
BUDGETS = (0.5, 0.25, 0.125)


def _plain_nll(model: Any, ids: list[int], ctx: int, step: int) -> float:
    import torch
    from transformers import DynamicCache

    kv = DynamicCache()
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids[:ctx]]), cache=kv, use_cache=True, logits_to_keep=1)
        prev, total = out.logits[0, -1], 0.0
        for s in range(ctx, len(ids), step):
            piece = ids[s : s + step]
            pos = torch.arange(s, s + len(piece))[None]
            lg = model(input_ids=torch.tensor([piece]), cache=kv, position_ids=pos, use_cache=True,
                       logits_to_keep=len(piece)).logits[0]  # fmt: skip
            pred = torch.cat([prev[None], lg[:-1]]).to(torch.float64)
            total -= float(torch.log_softmax(pred, -1)[torch.arange(len(piece)), torch.tensor(piece)].sum())
            prev = lg[-1]
    return total


def run_ppl(model: Any, tok: Any, a: argparse.Namespace) -> dict[str, Any]:
    from ctxcache.integrations.retained import RetentionSession, nll
    from ctxcache.integrations.retention import RetentionConfig

    rows, checks, cost = [], [], []
    corpus = list(texts().items())[: a.texts]
    configs = [("full", 1.0)] + [(p, b) for p in POLICIES for b in BUDGETS]
    with progress() as bar:
        task = bar.add_task("perplexity", total=len(corpus) * (len(configs) + 1))
        for name, text in corpus:
            ids = tok(text).input_ids[: a.ctx + a.eval]
            t0 = time.perf_counter()
            base = RetentionSession(model, RetentionConfig("h2o", 1.0, recent=a.recent), chunk=a.ctx)
            base.feed(ids[: a.ctx])  # one chunk, as the plain reference runs it: budget 100 % must match bit for bit
            t_scored = time.perf_counter() - t0
            model.set_attn_implementation("sdpa")
            t0 = time.perf_counter()
            RetentionSession(model, RetentionConfig("streaming", 1.0)).feed(ids[: a.ctx])
            t_sdpa = time.perf_counter() - t0
            model.set_attn_implementation("eager")
            cost.append({"text": name, "eager_scored_prefill_s": t_scored, "sdpa_prefill_s": t_sdpa})
            plain = _plain_nll(model, ids, a.ctx, a.step)
            bar.advance(task)
            n_eval = len(ids) - a.ctx
            for policy, budget in configs:
                s = base.fork(RetentionConfig(policy, budget, recent=a.recent))
                s.compress()
                total, n = nll(s, ids[a.ctx :], step=a.step)
                rows.append({"text": name, "policy": policy, "budget": budget, "ppl": math.exp(total / n),
                             "nll_sum": total, "n": n, "kept_at_end": s.kept, "length_at_end": s.length})  # fmt: skip
                if budget == 1.0:
                    checks.append({"text": name, "policy": policy, "bit_identical": total == plain})
                bar.advance(task)
            rows.append({"text": name, "policy": "none (plain)", "budget": 1.0, "ppl": math.exp(plain / n_eval),
                         "nll_sum": plain, "n": n_eval})  # fmt: skip
    return {"rows": rows, "budget_100_checks": checks, "eager_cost": cost}


_FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
_INTRO = "There is an important piece of information hidden inside a lot of irrelevant text. Find it and memorize it. "


def _passkey_prompt(tok: Any, n_tokens: int, depth: float, key: str) -> tuple[list[int], list[int], list[int]]:
    filler = tok(_FILLER, add_special_tokens=False).input_ids
    needle = tok(f"The pass key is {key}. Remember it. {key} is the pass key. ", add_special_tokens=False).input_ids
    intro = tok(_INTRO).input_ids
    question = tok("What is the pass key? The pass key is", add_special_tokens=False).input_ids
    n_fill = max(0, n_tokens - len(intro) - len(needle) - len(question))
    body = (filler * (n_fill // len(filler) + 1))[:n_fill]
    at = int(depth * n_fill)
    answer = tok(f" {key}", add_special_tokens=False).input_ids
    return intro + body[:at] + needle + body[at:], question, answer


def _answer(s: Any, question: list[int], answer: list[int], warm_k: int) -> tuple[bool, dict[str, Any]]:
    import torch

    from ctxcache.integrations.warm_kv import recall_feed

    info: dict[str, Any] = {}
    if warm_k:
        lg, st = recall_feed(s, question, top_k=warm_k, measure=True, tau=0.05)
        info = {"entries": st.entries, "needed": len(st.needed), "recalled": len(st.recalled),
                "needed_and_recalled": len(set(st.needed) & set(st.recalled))}  # fmt: skip
    else:
        lg = s.feed(question)
    first = int(torch.argmax(lg[-1]))
    rest = s.feed(answer[:-1], keep_logits=len(answer) - 1).argmax(-1).tolist() if len(answer) > 1 else []
    return [first, *rest] == answer, info


def run_passkey(model: Any, tok: Any, a: argparse.Namespace) -> dict[str, Any]:
    from ctxcache.integrations.retained import RetentionSession
    from ctxcache.integrations.retention import RetentionConfig
    from ctxcache.integrations.warm_kv import WarmStore

    rng = random.Random(11)
    full_layers = [i for i, t in enumerate(model.config.layer_types) if t == "full_attention"]
    configs = [("full", 1.0, 0)] + [(p, b, 0) for p in POLICIES for b in BUDGETS]
    configs += [(p, b, a.warm_k) for p in ("streaming", "snapkv") for b in BUDGETS]
    lengths = [int(x) for x in a.lengths.split(",")]
    depths = [float(x) for x in a.depths.split(",")]
    # Depth outermost, so every length is covered early; partial rows are saved after each prompt
    # (a long run stopped midway still leaves a usable result).
    prompts = [(n, d, t) for t in range(a.trials) for d in depths for n in lengths]
    rows: list[dict[str, Any]] = []
    with progress() as bar:
        task = bar.add_task("passkey", total=len(prompts) * len(configs))
        for n, depth, trial in prompts:
            key = str(rng.randrange(10000, 99999))
            ctx, question, answer = _passkey_prompt(tok, n, depth, key)
            t0 = time.perf_counter()
            base = RetentionSession(model, RetentionConfig("h2o", 1.0, recent=a.recent), chunk=512)
            base.feed(ctx)
            t_prefill = time.perf_counter() - t0
            for policy, budget, warm_k in configs:
                warm = WarmStore(full_layers, block_size=64) if warm_k else None
                s = base.fork(RetentionConfig(policy, budget, recent=a.recent), warm=warm)
                s.compress()
                ok, info = _answer(s, question, answer, warm_k)
                rows.append({"length": len(ctx), "target": n, "depth": depth, "trial": trial,
                             "policy": policy + ("+warm" if warm_k else ""), "budget": budget, "hit": ok,
                             "prefill_s": t_prefill, **info})  # fmt: skip
                bar.advance(task)
            (RESULTS / "retention_passkey.partial.json").write_text(json.dumps({"rows": rows}))
    return {"rows": rows}


def _plot_ppl(res: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = res["rows"]
    names = sorted({r["text"] for r in rows})
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.6), squeeze=False)
    for ax, name in zip(axes[0], names):
        full = next(r["ppl"] for r in rows if r["text"] == name and r["policy"] == "full")
        for p in POLICIES:
            pts = sorted((r["budget"], r["ppl"]) for r in rows if r["text"] == name and r["policy"] == p)
            pts.append((1.0, full))
            ax.plot([x * 100 for x, _ in pts], [y for _, y in pts], marker="o", label=p)
        ax.set_xscale("log", base=2)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("KV budget (% of context)")
    axes[0][0].set_ylabel("perplexity")
    axes[0][0].legend(fontsize=8)
    fig.suptitle("Gemma 3 270M perplexity under KV retention (lower is better)")
    fig.tight_layout()
    fig.savefig(RESULTS / "retention_ppl.png", dpi=110)


def _plot_passkey(res: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = res["rows"]
    pols = list(dict.fromkeys(r["policy"] for r in rows if r["policy"] != "full"))
    full = [r["hit"] for r in rows if r["policy"] == "full"]
    fig, ax = plt.subplots(figsize=(7, 3.8))
    w = 0.8 / len(BUDGETS)
    for i, b in enumerate(BUDGETS):
        acc = [sum(r["hit"] for r in rows if r["policy"] == p and r["budget"] == b) /
               max(1, sum(1 for r in rows if r["policy"] == p and r["budget"] == b)) for p in pols]  # fmt: skip
        ax.bar([j + i * w for j in range(len(pols))], acc, w, label=f"{b:.1%}")
    ax.axhline(sum(full) / max(1, len(full)), color="k", ls="--", label="full KV")
    ax.set_xticks([j + w for j in range(len(pols))], pols, rotation=20, fontsize=8)
    ax.set_ylabel("passkey accuracy")
    ax.set_title(f"Passkey retrieval ({len(full)} prompts per bar)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(RESULTS / "retention_passkey.png", dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=("ppl", "passkey"), required=True)
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--eval", type=int, default=256)
    ap.add_argument("--step", type=int, default=128)
    ap.add_argument("--texts", type=int, default=3)
    ap.add_argument("--recent", type=int, default=32)
    ap.add_argument("--lengths", default="1024,4096,8192")
    ap.add_argument("--depths", default="0.1,0.5,0.9")
    ap.add_argument("--trials", type=int, default=1)
    ap.add_argument("--warm-k", type=int, default=2)
    a = ap.parse_args()
    model, tok = load_model("eager")
    t0 = time.perf_counter()
    if a.part == "ppl":
        res = run_ppl(model, tok, a)
        _plot_ppl(res)
    else:
        res = run_passkey(model, tok, a)
        _plot_passkey(res)
    res.update({"part": a.part, "args": vars(a), "wall_s": time.perf_counter() - t0})
    write(f"retention_{a.part}", res)
    if a.part == "passkey":
        (RESULTS / "retention_passkey.partial.json").unlink(missing_ok=True)


if __name__ == "__main__":
    main()
