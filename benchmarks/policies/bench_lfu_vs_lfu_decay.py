"""Why lfu and lfu-decay are equal on the synthetic trace at 1 % and 5 % (docs/policies.md).

Per size, both policies replay the synthetic trace (prefix semantics) with their victims recorded
per request. For lfu-decay a shadow lfu gets the same calls, so each eviction can be checked: did
the decay override the count (a victim used more often than the least-used evictable key)? Every
500th eviction also samples how many resident blocks were used more than once and how many of
those could be evicted at all (leaves, not parents of resident blocks). A sweep of half-lives,
with lfu's figure as the baseline in the same run, shows where decay starts to matter.

Writes results/lfu_vs_lfu_decay.json and .png; prints one JSON line.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

from ctxcache.cli import default_trace
from ctxcache.policies.base import Policy
from ctxcache.policies.lfu import LFU
from ctxcache.policies.lfu_decay import LFUDecay
from ctxcache.sim.simulator import SimResult, Trace, simulate
from ctxcache.sim.traces import read_mooncake

SIZES = (0.01, 0.05, 0.1, 0.2)
HALF_LIVES = (0.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 3600.0)  # 0 = no decay; 600 is the default
RESULTS = Path(__file__).resolve().parents[1] / "results"


class _ShadowedDecay(LFUDecay):
    """lfu-decay with a shadow lfu that counts the same uses, to see when the decay overrides them."""

    name = "lfu-decay"

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.shadow = LFU()
        self.overrides = 0
        self.evictions = 0
        self.samples: list[tuple[int, int]] = []  # (used more than once, of those evictable)

    def on_insert(self, key: Any) -> None:
        self.shadow.on_insert(key)
        super().on_insert(key)

    def on_hit(self, key: Any) -> None:  # refusals come here too (ScoredPolicy._refused)
        self.shadow.on_hit(key)
        super().on_hit(key)

    def on_remove(self, key: Any) -> None:
        self.shadow.on_remove(key)
        super().on_remove(key)

    def evict(self, can_evict: Any = None) -> Any:
        counts = self.shadow._count
        self.evictions += 1
        if can_evict is not None and self.evictions % 500 == 0:
            multi = [k for k, c in counts.items() if c > 1]
            self.samples.append((len(multi), sum(1 for k in multi if can_evict(k))))
        least = self.shadow.peek(can_evict)
        least_count = counts[least] if least is not None else 0
        key = super().evict(can_evict)
        if key is not None:
            self.overrides += int(counts[key] > least_count)
            self.shadow.on_remove(key)
        return key


def _recorded(trace: Trace, policy: Policy, cap: int) -> tuple[SimResult, dict[int, list[Any]], list[int]]:
    """Run ``policy``; victims by request index (a request's store runs after its hits are counted)."""
    victims: dict[int, list[Any]] = {}
    hits: list[int] = []
    evict = policy.evict

    def recording_evict(can_evict: Any = None) -> Any:
        key = evict(can_evict)
        if key is not None:
            victims.setdefault(len(hits) - 1, []).append(key)
        return key

    policy.evict = recording_evict  # type: ignore[method-assign]
    res = simulate(trace, policy, cap, on_request=lambda _r, h: hits.append(h))
    return res, victims, hits


def compare(trace: Trace, size: float) -> dict[str, Any]:
    cap = trace.capacity(size)
    dec = _ShadowedDecay()
    a, va, ha = _recorded(trace, LFU(), cap)
    b, vb, hb = _recorded(trace, dec, cap)
    later: dict[Any, list[int]] = {}
    for i, r in enumerate(trace.requests):
        for blk in r.blocks:
            later.setdefault(blk, []).append(i)
    differ = [i for i in sorted(set(va) | set(vb)) if set(va.get(i, ())) != set(vb.get(i, ()))]
    only = [(i, k) for i in differ for k in set(va.get(i, ())) ^ set(vb.get(i, ()))]
    n_multi = [m for m, _ in dec.samples] or [0]
    n_evictable = [e for _, e in dec.samples] or [0]
    out: dict[str, Any] = {
        "size": size,
        "blocks": cap,
        "token_miss": {"lfu": 1 - a.token_hit_ratio, "lfu-decay": 1 - b.token_hit_ratio},
        "misses": {"lfu": a.misses, "lfu-decay": b.misses},
        "evictions": {"lfu": sum(map(len, va.values())), "lfu-decay": sum(map(len, vb.values()))},
        "decay_overrode_count": dec.overrides,
        "requests_with_other_victims": len(differ),
        "victims_of_one_only": len(only),
        "of_those_requested_again": sum(1 for i, k in only if later[k][-1] > i),
        "requests_with_other_hits": sum(1 for x, y in zip(ha, hb, strict=True) if x != y),
        "sampled_used_twice_or_more_mean": sum(n_multi) / len(n_multi),
        "sampled_of_those_evictable_mean": sum(n_evictable) / len(n_evictable),
    }
    return out


def sweep(trace: Trace) -> dict[str, dict[str, float]]:
    """size -> {"lfu": token miss, half-life: lfu-decay's token miss}."""
    out: dict[str, dict[str, float]] = {}
    for size in SIZES:
        cap = trace.capacity(size)
        row = {"lfu": 1 - simulate(trace, "lfu", cap).token_hit_ratio}
        for hl in HALF_LIVES:
            spec = {"name": "lfu-decay", "decay": math.log(2) / hl if hl else 0.0}
            row[f"{hl:g}"] = 1 - simulate(trace, spec, cap).token_hit_ratio
        out[f"{size:g}"] = row
        print(f"sweep @ {size:g}: {row}", file=sys.stderr, flush=True)
    return out


def plot(curves: dict[str, dict[str, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(curves), figsize=(3.6 * len(curves), 3.6), dpi=110)
    xs = [hl for hl in HALF_LIVES if hl]
    for ax, (size, row) in zip(axes, curves.items(), strict=True):
        ax.plot(xs, [row[f"{hl:g}"] for hl in xs], "o-", label="lfu-decay")
        ax.axhline(row["lfu"], color="k", linestyle="--", label="lfu (= half-life inf)")
        ax.axvline(600, color="grey", linestyle=":", label="default half-life")
        ax.set_xscale("log")
        ax.set_xlabel("half-life (s)")
        ax.set_title(f"synthetic, size {size}")
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("token miss ratio")
    axes[0].legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)


def main() -> None:
    path = default_trace("mooncake_synthetic_trace.jsonl")
    if not path.is_file():
        sys.exit(f"error: trace file not found: {path}")
    trace = Trace(list(read_mooncake(path)))
    span = trace.requests[-1].time - trace.requests[0].time
    sizes = []
    for s in SIZES:
        sizes.append(compare(trace, s))
        print(json.dumps(sizes[-1]), file=sys.stderr, flush=True)
    curves = sweep(trace)
    RESULTS.mkdir(exist_ok=True)
    full = {"trace": path.name, "span_s": span, "default_half_life_s": 600.0, "sizes": sizes, "half_life_sweep": curves}
    (RESULTS / "lfu_vs_lfu_decay.json").write_text(json.dumps(full, indent=1) + "\n")
    plot(curves, RESULTS / "lfu_vs_lfu_decay.png")
    keys = ("decay_overrode_count", "requests_with_other_victims", "requests_with_other_hits")
    summary = {f"{d['size']:g}": {k: d[k] for k in ("token_miss", *keys)} for d in sizes}
    print(json.dumps({"benchmark": "lfu_vs_lfu_decay", "span_s": round(span, 1), "sizes": summary}))


if __name__ == "__main__":
    main()
