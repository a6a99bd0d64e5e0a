"""Timing audit (the vLLM cache_salt CVE-2025-46570 class of leak): can a tenant tell, by timing,
whether another tenant has cached a prompt?

200 probes of prompts another tenant has cached vs 200 probes of fresh prompts of equal length
(each probe a lookup + release, what every request does first), interleaved, then a two-sample
Kolmogorov-Smirnov test. Side by side in one run: isolation OFF (both tenants in one namespace:
the audit must find the difference, so it can fail) and ON (tenants from config: it must find
none). Writes benchmarks/results/timing_audit.json and .png; figures go to docs/security.md.

Run: .venv/bin/python benchmarks/serving/timing_audit.py [--quick]
"""

from __future__ import annotations

import json
import math
import random
import sys
import time
from pathlib import Path

from ctxcache import ContextCache
from ctxcache.engine.tenancy import load_tenancy
from ctxcache.tiers import MemoryTier

QUICK = "--quick" in sys.argv
PROBES, BS, BLOCKS = 200, 16, 32
ALPHA = 0.01
OUT = Path(__file__).resolve().parents[1] / "results"


def ks_2samp(x: list[float], y: list[float]) -> tuple[float, float]:
    """Two-sample KS statistic and its asymptotic p-value (Kolmogorov distribution)."""
    xs, ys = sorted(x), sorted(y)
    i = j = 0
    d = 0.0
    while i < len(xs) and j < len(ys):
        v = min(xs[i], ys[j])
        while i < len(xs) and xs[i] <= v:
            i += 1
        while j < len(ys) and ys[j] <= v:
            j += 1
        d = max(d, abs(i / len(xs) - j / len(ys)))
    en = math.sqrt(len(xs) * len(ys) / (len(xs) + len(ys)))
    lam = (en + 0.12 + 0.11 / en) * d
    p = 2 * sum((-1) ** (k - 1) * math.exp(-2 * k * k * lam * lam) for k in range(1, 101))
    return d, min(1.0, max(0.0, p))


def audit(isolated: bool, rng: random.Random) -> dict[str, float | bool]:
    tier = MemoryTier(1 << 30)
    if isolated:
        tenancy = load_tenancy({"victim": {}, "attacker": {}}, {"secret": "s"}, env={})
        cache = ContextCache([tier], block_size=BS, tenancy=tenancy)
        victim, attacker = "victim", "attacker"
    else:  # no isolation: one shared namespace, as a cache without tenants would have
        cache = ContextCache([tier], block_size=BS)
        victim = attacker = "shared"
    n = BS * BLOCKS
    cached = [[rng.randrange(1, 250_000) for _ in range(n)] for _ in range(PROBES)]
    fresh = [[rng.randrange(1, 250_000) for _ in range(n)] for _ in range(PROBES)]
    payload = b"kv" * 256
    for toks in cached:
        cache.store(cache.prompt(toks, victim), [payload] * BLOCKS)
    t_cached: list[float] = []
    t_fresh: list[float] = []
    for a, b in zip(cached, fresh):  # interleaved, so drift hits both samples alike
        for toks, out in ((a, t_cached), (b, t_fresh)):
            t0 = time.perf_counter()
            m = cache.lookup(cache.prompt(toks, attacker))
            cache.release(m)
            out.append(time.perf_counter() - t0)
    d, p = ks_2samp(t_cached, t_fresh)
    med = sorted(t_cached)[PROBES // 2], sorted(t_fresh)[PROBES // 2]
    cache.close()
    return {"isolated": isolated, "ks_d": round(d, 4), "p_value": float(f"{p:.3g}"), "difference_found": p < ALPHA,
            "median_cached_us": round(med[0] * 1e6, 2), "median_fresh_us": round(med[1] * 1e6, 2)}  # fmt: skip


def main() -> None:
    rng = random.Random(11)
    rows = [audit(False, rng), audit(True, rng)]
    ok = rows[0]["difference_found"] and not rows[1]["difference_found"]
    out = {"bench": "timing_audit", "probes": PROBES, "prompt_tokens": BS * BLOCKS, "alpha": ALPHA, "rows": rows,
           "audit_passes": ok}  # fmt: skip
    print(json.dumps(out), flush=True)
    OUT.mkdir(exist_ok=True)
    (OUT / "timing_audit.json").write_text(json.dumps(out, indent=1) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(6, 3.5))
    labels = ["isolation off", "isolation on"]
    ax.bar([x - 0.2 for x in range(2)], [r["median_cached_us"] for r in rows], 0.4, label="another tenant's prompt")
    ax.bar([x + 0.2 for x in range(2)], [r["median_fresh_us"] for r in rows], 0.4, label="fresh prompt")
    ax.set_xticks(range(2), [f"{lb}\nKS p={r['p_value']}" for lb, r in zip(labels, rows)])
    ax.set_ylabel("median lookup µs")
    ax.legend()
    fig.tight_layout()
    fig.savefig(OUT / "timing_audit.png", dpi=120)


if __name__ == "__main__":
    main()
