"""Futile deletes on a dead slow tier: the delete breaker (``Slot.may_delete``) against no breaker.

One slow tier (a ``FakeSlowTier`` of 2400 B, about 9 blocks) whose every delete raises for the
first 121 stores (a dead disk or Redis), then recovers for 79 more; one block per store, seeded
block sizes, a flush after each store (the setup fix-retry measured 12,544 refused deletes with,
6,328 without its refused-again pass). The engine's clock is a fake one moving ``STEP_S`` per
store (the breaker backs off in seconds of it). Side by side in one run, for each size mix:

- ``breaker``: the engine as it is;
- ``no_breaker``: ``Slot.may_delete`` always True and ``Slot.broken`` always False (the engine
  before the breaker: the baseline);
- ``no_breaker_no_refused_again``: also without ``Placement._refused_again`` (fix-retry's
  "count-only" variant, which leaves the tier over capacity after a refused retry).

Figures: delete calls refused, delete_errors, stores rejected during the outage and after it,
stores after recovery until the tier is within capacity again, the most bytes over capacity
during the outage against the bytes of the refused blocks it still holds (the breaker may not
overfill the tier), and ratios to the baseline. Writes benchmarks/results/bench_dead_tier_deletes.json
and .png. Runs in about a second.

Run: .venv/bin/python benchmarks/tiers/bench_dead_tier_deletes.py
"""

from __future__ import annotations

import contextlib
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ctxcache import ContextCache
from ctxcache.engine.placement import Placement
from ctxcache.engine.slot import Slot
from ctxcache.tiers.fake import FakeSlowTier, RefuseDeletes

OUT = Path(__file__).resolve().parents[1] / "results"
STORES, DEAD = 200, 121  # stores 0..120 find the tier refusing every delete
STEP_S = 1.0  # seconds of the engine's clock between two stores
MIXES = {"16": [16], "8-200": [8, 16, 64, 200]}  # float32 values per block (seeded choice)
VARIANTS = ("breaker", "no_breaker", "no_breaker_no_refused_again")


@contextlib.contextmanager
def variant(name: str) -> Iterator[None]:
    saved = Slot.may_delete, Slot.broken, Placement._refused_again
    if name != "breaker":
        Slot.may_delete = lambda self: True  # type: ignore[method-assign]
        Slot.broken = property(lambda self: False)  # type: ignore[assignment,method-assign]
    if name == "no_breaker_no_refused_again":
        Placement._refused_again = lambda self, t, key, nbytes: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        Slot.may_delete, Slot.broken, Placement._refused_again = saved  # type: ignore[method-assign]


def run(name: str, sizes: list[int], seed: int = 1) -> dict[str, Any]:
    rng = random.Random(seed)
    refuse = RefuseDeletes()
    tier = FakeSlowTier(6 * 400, on_call=refuse, high=1.0, low=1.0)
    with variant(name):
        now = [0.0]
        cache = ContextCache([tier], block_size=4, clock=lambda: now[0])
        flushed, over, over_kept, back_at, cumulative = True, 0, 0, None, []
        rejected = {"outage": 0, "after": 0}
        for i in range(STORES):
            refuse.on, now[0] = i < DEAD, i * STEP_S
            before = cache.stats()["rejected"]
            cache.store([i * 1000 + j for j in range(4)], [[np.full(rng.choice(sizes), i, np.float32)]], "default", 0)
            flushed &= cache.flush(10)
            rejected["outage" if refuse.on else "after"] += cache.stats()["rejected"] - before
            cumulative.append(len(refuse.refused))
            excess = tier.used_bytes - tier.capacity
            if refuse.on and excess > over:
                kept = set(refuse.refused) & set(tier.store)
                over, over_kept = excess, sum(len(tier.store[k]) for k in kept)  # type: ignore[index]
            if not refuse.on and back_at is None and tier.used_bytes <= tier.capacity:
                back_at = i - DEAD + 1
        s = cache.stats()
        out = {"variant": name, "refused_calls": len(refuse.refused), "delete_errors": s["delete_errors"],
               "rejected_outage": rejected["outage"], "rejected_after": rejected["after"],
               "stores_until_within_capacity": back_at, "max_over_capacity_b": over,
               "refused_blocks_held_then_b": over_kept, "flush_ok": flushed,
               "final_used_b": tier.used_bytes, "capacity_b": tier.capacity,
               "accounted": cache.slots[0].used() == tier.used_bytes, "cumulative": cumulative}  # fmt: skip
        cache.close()
    return out


def main() -> None:
    results: dict[str, dict[str, dict[str, Any]]] = {}
    for mix, sizes in MIXES.items():
        results[mix] = {v: run(v, sizes) for v in VARIANTS}
        base = results[mix]["no_breaker"]["refused_calls"]
        for r in results[mix].values():
            r["refused_vs_no_breaker"] = round(r["refused_calls"] / base, 4)
    OUT.mkdir(exist_ok=True)
    summary = {mix: {v: {k: x for k, x in r.items() if k != "cumulative"} for v, r in rs.items()}
               for mix, rs in results.items()}  # fmt: skip
    (OUT / "bench_dead_tier_deletes.json").write_text(json.dumps(results, indent=1) + "\n")
    _plot(results)
    print(
        json.dumps({"bench": "dead_tier_deletes", "stores": STORES, "dead": DEAD, "step_s": STEP_S, "results": summary})
    )


def _plot(results: dict[str, dict[str, dict[str, Any]]]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # the figures are in the JSON
        return
    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4), sharey=True)
    for ax, (mix, rs) in zip(axes, results.items()):
        for v, r in rs.items():
            ax.plot(range(STORES), r["cumulative"], label=f"{v} ({r['refused_calls']})")
        ax.axvline(DEAD, color="grey", linestyle=":", label="tier recovers")
        ax.set_yscale("symlog")
        ax.set_title(f"block sizes {mix} floats")
        ax.set_xlabel("store")
        ax.legend(fontsize=8)
    axes[0].set_ylabel("refused delete calls (cumulative)")
    fig.tight_layout()
    fig.savefig(OUT / "bench_dead_tier_deletes.png", dpi=120)


if __name__ == "__main__":
    main()
