"""Does the simulator predict the live cache? Hit tokens of ``simulate`` against a ContextCache.

The head of the conversation trace is replayed twice per online policy and size: through the
simulator, and through a ContextCache with one memory tier of 1-byte blocks (no watermarks) the
way a server drives it (lookup, store the rest, release), the trace's block ids spread over 4
tokens each. The claim: equal hit tokens for every online policy (ratio 1.0). w-tinylfu is the
known exception: its sketch hashes the key's bytes, and the engine's keys are chained hashes where
the simulator's are trace ids, so collisions, and so some admissions, differ.

Writes results/sim_vs_engine.json; prints one JSON line. ``--limit`` requests (default 3000).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ctxcache.cli import default_trace
from ctxcache.policies import POLICIES, Policy, make_policy, policy_names
from ctxcache.sim.engine_replay import engine_hit_tokens
from ctxcache.sim.simulator import Trace, simulate
from ctxcache.sim.traces import read_mooncake

RESULTS = Path(__file__).resolve().parents[1] / "results"


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _policy(name: str, clock: _Clock, cap: int) -> Policy:
    return make_policy(name, clock=clock, **({"capacity": cap} if POLICIES[name].needs_capacity else {}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=3000)
    args = ap.parse_args()
    trace = Trace(list(read_mooncake(default_trace(), limit=args.limit)))
    rows: list[dict[str, Any]] = []
    for name in [p for p in policy_names() if not POLICIES[p].offline]:
        for div in (20, 5):
            cap = trace.unique_blocks // div
            sim = simulate(trace, _policy(name, _Clock(), cap), cap).hit_tokens
            clock = _Clock()
            eng = engine_hit_tokens(trace, _policy(name, clock, cap), clock, cap)
            rows.append({"policy": name, "capacity": cap, "sim": sim, "engine": eng, "ratio": round(eng / sim, 4)})
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "sim_vs_engine.json").write_text(json.dumps({"requests": args.limit, "rows": rows}, indent=1) + "\n")
    differ = sorted({r["policy"] for r in rows if r["sim"] != r["engine"]})
    print(json.dumps({"benchmark": "sim_vs_engine", "requests": args.limit, "runs": len(rows), "differ": differ}))


if __name__ == "__main__":
    main()
