"""Fairness: a tenant flooding with unique prompts at 10x the rate must leave a well-behaved
tenant's hit ratio within 5 % of what it gets running alone.

One RAM tier of 256 blocks. Tenant "good" asks for 24 prompts of 4 blocks (Zipf-like popularity,
seeded); tenant "flood" sends 10 unique 4-block prompts per request of "good". Side by side in
one run: good alone; good + flood with tenancy (flood's quota = a quarter of the tier); good +
flood with tenancy but no quota (weighted shares only); good + flood without tenancy (plain LRU,
the contrast). Figures: good's token hit ratio in each, and the gap to alone. Writes
benchmarks/results/bench_fairness.json and .png.

Run: .venv/bin/python benchmarks/serving/bench_fairness.py [--quick]
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

from ctxcache import ContextCache
from ctxcache.engine.tenancy import load_tenancy
from ctxcache.tiers import MemoryTier

QUICK = "--quick" in sys.argv
BS, BLOCKS, CAP_BLOCKS, PROMPTS = 16, 4, 256, 24
GOOD_REQUESTS = 300 if QUICK else 1500
FLOOD_RATE = 10
OUT = Path(__file__).resolve().parents[1] / "results"
PAYLOAD = b"k" * 512  # bytes per block in the hot tier


def build(mode: str) -> ContextCache:
    tier = MemoryTier(CAP_BLOCKS * len(PAYLOAD))
    if mode == "no tenancy":
        return ContextCache([tier], block_size=BS)
    flood: dict[str, Any] = {"quota": {"memory": CAP_BLOCKS // 4 * len(PAYLOAD)}} if mode == "quota" else {}
    tenancy = load_tenancy({"good": {"priority": 1}, "flood": {"priority": 2, **flood}}, env={})
    return ContextCache([tier], block_size=BS, tenancy=tenancy)


def ask(cache: ContextCache, tenant: str, tokens: list[int]) -> tuple[int, int]:
    p = cache.prompt(tokens, tenant)
    with cache.lookup(p) as m:
        cache.store(p, [PAYLOAD] * (BLOCKS - m.n_blocks), first_block=m.n_blocks)
        return m.hit_tokens, len(tokens)


def run(mode: str, flood: bool) -> float:
    rng = random.Random(7)
    cache = build(mode)
    weights = [1 / (i + 1) for i in range(PROMPTS)]
    good = [[g * 100_000 + j for j in range(BS * BLOCKS)] for g in range(PROMPTS)]
    hit = total = 0
    unique = 10**7
    for r in range(GOOD_REQUESTS):
        if flood:
            for _ in range(FLOOD_RATE):
                unique += 1
                ask(cache, "flood", [unique * 100 + j for j in range(BS * BLOCKS)])
        h, n = ask(cache, "good", rng.choices(good, weights)[0])
        if r >= PROMPTS * 2:  # after warm-up
            hit, total = hit + h, total + n
    cache.close()
    return hit / total


def main() -> None:
    try:
        from rich.progress import track
    except ImportError:  # pragma: no cover
        track = None  # type: ignore[assignment]
    cases = [("alone", "quota", False), ("flood, quota", "quota", True), ("flood, shares", "shares", True),
             ("flood, no tenancy", "no tenancy", True)]  # fmt: skip
    it = track(cases, description="fairness") if track else cases
    ratios = {name: round(run(mode, flood), 4) for name, mode, flood in it}
    alone = ratios["alone"]
    out = {"bench": "fairness", "good_hit_ratio": ratios, "flood_rate": FLOOD_RATE,
           "gap_quota": round(alone - ratios["flood, quota"], 4), "gap_shares": round(alone - ratios["flood, shares"], 4),
           "gap_no_tenancy": round(alone - ratios["flood, no tenancy"], 4),
           "within_5pct": abs(alone - ratios["flood, quota"]) <= 0.05 * alone, "requests_good": GOOD_REQUESTS}  # fmt: skip
    print(json.dumps(out), flush=True)
    OUT.mkdir(exist_ok=True)
    (OUT / "bench_fairness.json").write_text(json.dumps(out, indent=1) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    ax.bar(list(ratios), list(ratios.values()), color=["grey", "tab:green", "tab:olive", "tab:red"])
    ax.set_ylabel("well-behaved tenant's token hit ratio")
    ax.set_title(f"a tenant flooding unique prompts at {FLOOD_RATE}x the rate")
    ax.set_ylim(0, 1)
    fig.tight_layout()
    fig.savefig(OUT / "bench_fairness.png", dpi=120)


if __name__ == "__main__":
    main()
