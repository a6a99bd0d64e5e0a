"""``python -m tests.simulation``: run the simulation (``make simtest``).

--seed N          replay seed N exactly; on failure, shrink it and print the shortest actions
--keep 3,7,9      with --seed: run only those actions (a shrunk sequence's positions)
--minutes M       run seeds from --start on until M minutes have passed; report each failure
--seeds K         run seeds --start .. --start+K-1 (default: the bounded set `make test` runs)
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from .harness import Failure, run_seed
from .plan import plan
from .shrink import kind, shrink

ACTIONS = 150  # actions per seed
BOUNDED = 100  # seeds `make test` runs (tests/simulation/test_simulation.py)


def report(f: Failure, shrink_s: float) -> None:
    setup = plan(f.seed, ACTIONS)[0]
    print(f"FAIL seed {f.seed} at action {f.step}: {f.why}")
    print(f"  tiers: {[(t.name, t.blocks, t.policy) for t in setup.tiers]}")
    print(f"  tenants: {[(t.id, t.priority, t.ttl, t.quota) for t in setup.tenants]}")
    actions, best = shrink(f.seed, ACTIONS, f, shrink_s)
    planned = plan(f.seed, ACTIONS)[1]
    print(f"  shrunk to {len(actions)} actions (fails at the last: {best.why}):")
    for a in actions:
        print(f"    {a!r}")
    keep = [i for a in actions for i, p in enumerate(planned) if p is a]  # shrunk nested lists are new
    if len(keep) == len(actions):
        print(f"  replay: make simtest SEED={f.seed} KEEP={','.join(map(str, keep))}")
    print(f"  replay the whole run: make simtest SEED={f.seed}")


def _fixed_hashes() -> None:
    """Re-run under PYTHONHASHSEED=0 when it is not set: the engine iterates dicts and sets of keys,
    whose order could follow str/bytes hashing (runs were found identical under 4 hash seeds; a
    fixed one makes a replay exact whatever that order)."""
    if os.environ.get("PYTHONHASHSEED") is None:
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable, "-m", "tests.simulation", *sys.argv[1:]])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.simulation")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--keep", type=str, default="")
    ap.add_argument("--minutes", type=float)
    ap.add_argument("--seeds", type=int, default=BOUNDED)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--shrink-seconds", type=float, default=60.0)
    args = ap.parse_args(argv)
    if args.seed is not None:
        keep = [int(i) for i in args.keep.split(",")] if args.keep else None
        try:
            run_seed(args.seed, ACTIONS, keep)
        except Failure as f:
            report(f, 0 if keep else args.shrink_seconds)
            return 1
        print(f"seed {args.seed}: {ACTIONS if keep is None else len(keep)} actions, every invariant held")
        return 0
    deadline = None if args.minutes is None else time.monotonic() + 60 * args.minutes
    seed, ran, kinds = args.start, 0, {}
    while (seed < args.start + args.seeds) if deadline is None else time.monotonic() < deadline:
        try:
            run_seed(seed, ACTIONS)
        except Failure as f:
            k = kind(f.why)
            kinds.setdefault(k, []).append(seed)
            if len(kinds[k]) == 1:
                report(f, args.shrink_seconds)
        seed, ran = seed + 1, ran + 1
    failed = sum(len(v) for v in kinds.values())
    print(f"{ran} seeds ({args.start}..{seed - 1}), {ACTIONS} actions each: {failed} failed, {len(kinds)} kinds")
    for k, seeds in kinds.items():
        print(f"  {len(seeds)} x {k!r}: seeds {seeds[:10]}")
    return 1 if failed else 0


if __name__ == "__main__":
    _fixed_hashes()
    sys.exit(main())
