"""Fleet simulations in grids (a QPS ladder, a fleet-size sweep), issue 27's goals read from them,
and their plot: what `ctxcache fleet-sim` and benchmarks/fleet/bench_fleet_sim.py print."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from .fleet import FleetConfig, simulate_fleet
from .fleet_arms import ARMS
from .fleet_workloads import make_workload, warmed

ROUTERS = tuple(a for a in ARMS if a != "oracle")  # the arms a deployment could run
FILL = 0.70  # issue 27: the comparison holds at >= 70 % KV fill
MARKERS = "ovs^Dx*"  # one per arm, in ARMS order


def run_point(
    shape: str, workers: int, qps_per_worker: float, n: int, arms: Sequence[str], cfg: FleetConfig,
    progress: Callable[[int], None] | None = None, traces: Path | None = None,
) -> list[dict[str, Any]]:  # fmt: skip
    """Every arm on the same ``n`` requests of ``shape`` at ``qps_per_worker`` x ``workers`` (the
    unmeasured warm-up fraction slower: ``FleetConfig.warmup_slowdown``)."""
    qps = qps_per_worker * workers
    reqs = make_workload(shape, n, qps, workers=workers, seed=cfg.seed, traces=traces)
    reqs = warmed(reqs, cfg.warmup, cfg.warmup_slowdown)
    out = []
    for arm in arms:
        r = simulate_fleet(reqs, arm, replace(cfg, workers=workers), progress)
        out.append({"shape": shape, "qps": round(qps, 6), "qps_per_worker": qps_per_worker, **r})
    return out


def _by(rows: Sequence[dict[str, Any]], arm: str) -> dict[str, Any]:
    return next(r for r in rows if r["arm"] == arm)


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b else None


def goals(ladder: Sequence[dict[str, Any]], sweep: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """Issue 27's goals for one shape's ladder (and fleet-size sweep), each {met, figures}.

    The high-load point: the lowest QPS at which the precise arm's mean KV fill is >= 70 %
    (none: the highest QPS, and the goals that need the fill are not judged: ``met`` None). Low load: the lowest
    QPS. ``precise`` is judged; ``precise-shared`` is reported beside it."""
    qs = sorted({r["qps"] for r in ladder})
    points = {q: [r for r in ladder if r["qps"] == q] for q in qs}
    filled = [q for q in qs if _by(points[q], "precise")["kv_fill_mean"] >= FILL]
    q_hi = filled[0] if filled else qs[-1]
    hi = points[q_hi]
    p, rnd, apx, orc = (_by(hi, a) for a in ("precise", "random", "approximate", "oracle"))
    fill_ok = bool(filled)
    out: dict[str, Any] = {
        "high_load_qps": q_hi,
        "high_load_qps_per_worker": p["qps_per_worker"],
        "kv_fill_precise": p["kv_fill_mean"],
        "fill_reached": fill_ok,
    }

    def at_fill(ok: bool) -> bool | None:  # not judged where the KV never reached the fill asked for
        return bool(ok) if fill_ok else None

    vs_random_p90 = _ratio(rnd["ttft_p90_s"], p["ttft_p90_s"])
    out["precise_vs_random_p90"] = _goal(at_fill(vs_random_p90 is not None and vs_random_p90 >= 10), vs_random_p90,
                                         ">= 10x lower")  # fmt: skip
    tput = _ratio(p["throughput_tok_s"], rnd["throughput_tok_s"])
    out["precise_vs_random_throughput"] = _goal(at_fill(tput is not None and tput >= 1.5), tput, ">= 1.5x")
    vs_apx = _ratio(apx["ttft_p90_s"], p["ttft_p90_s"])
    out["precise_vs_approximate_p90"] = _goal(at_fill(vs_apx is not None and vs_apx >= 3), vs_apx, ">= 3x lower")
    hit = _ratio(p["hit_ratio"], orc["hit_ratio"])
    out["hit_vs_oracle"] = _goal(hit is not None and hit >= 0.9, hit, ">= 0.90 of the oracle's")
    p90 = _ratio(p["ttft_p90_s"], orc["ttft_p90_s"])
    out["p90_vs_oracle"] = _goal(p90 is not None and p90 <= 1.5, p90, "<= 1.5x the oracle's")
    lo = points[qs[0]]
    best = min(_by(lo, a)["ttft_p90_s"] for a in ROUTERS)
    low = _ratio(_by(lo, "precise")["ttft_p90_s"], best)
    out["low_load_vs_best"] = _goal(low is not None and low <= 1.05, low, f"<= 1.05x the best arm's p90 at {qs[0]} QPS")
    everything = [*ladder, *sweep]
    refused = sum(r["refused"] for r in everything)
    out["no_request_refused"] = _goal(refused == 0, refused, "0 refused, every arm and point")
    worst = max((r["load_max_min"] or float("inf")) for r in [*hi, *sweep] if r["arm"] == "precise")
    out["balance_max_min"] = _goal(worst <= 1.5, round(worst, 3), "<= 1.5 (precise, high load and fleet sizes)")
    return out


def _goal(met: bool | None, value: Any, goal: str) -> dict[str, Any]:
    """met: None where the goal's condition (>= 70 % KV fill) was never reached."""
    return {"met": met if met is None else bool(met), "value": value, "goal": goal}


def plot(shapes: dict[str, dict[str, Any]], path: Path) -> None:
    """Per shape: hit ratio and TTFT p90 vs QPS per arm (the ladder), and vs workers (the sweep)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(shapes), 4, figsize=(20, 4.2 * len(shapes)), squeeze=False)
    for row, (shape, data) in zip(axes, shapes.items()):
        for x, key, rows in (("qps", "ladder", data["ladder"]), ("workers", "sweep", data.get("sweep", []))):
            col = 0 if key == "ladder" else 2
            for arm in ARMS:
                pts = sorted((r[x], r["hit_ratio"], r["ttft_p90_s"]) for r in rows if r["arm"] == arm)
                if not pts:
                    continue
                # Distinct markers: the cache-aware arms often lie on top of each other and the oracle.
                style: dict[str, Any] = {"marker": MARKERS[ARMS.index(arm)], "markerfacecolor": "none"}
                if arm == "oracle":
                    style.update(linestyle="--", color="black")
                row[col].plot([p[0] for p in pts], [p[1] for p in pts], label=arm, **style)
                row[col + 1].plot([p[0] for p in pts], [p[2] for p in pts], label=arm, **style)
            what = "QPS (8 workers)" if key == "ladder" else "workers (high-load QPS per worker)"
            row[col].set(title=f"{shape}: hit ratio", xlabel=what, ylabel="token hit ratio")
            row[col + 1].set(title=f"{shape}: TTFT p90", xlabel=what, ylabel="seconds", yscale="log")
            if key == "sweep":
                sizes = sorted({r["workers"] for r in rows})
                for ax in (row[col], row[col + 1]):
                    ax.set_xscale("log", base=2)
                    ax.set_xticks(sizes, [str(n) for n in sizes])
        row[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
