"""A seeded history checker for regions (replication/): three regions, random operations,
random partitions and heals, then checks of what every region served and holds.

``python -m ctxcache.sim.regions --seeds N [--start S] [--ops K] [--skew]`` runs seeds S..S+N-1 and
prints one JSON line (seeds, failures, failed seeds, operations, conflicts by rule, seconds);
``--seed S`` replays one seed exactly and prints its history. One ``random.Random(seed)`` drives
every choice, region wall clocks are injected (``--skew``: A one hour ahead, C one hour behind)
and the caches run without threads on a clock the checker steps, so a seed replays exactly.

The world. Regions A, B and C each have a MemoryLog, a real ContextCache (memory tiers, tenants
t0..t2 configured, one shared secret so a prompt's block keys are the same in every region) and a
Replicator whose effects are ``CacheEffects`` on that cache. A region's replicator reads a peer's
log through a directed link (``Link``) that raises LinkDown while that link is cut. Operations,
one per step: ask (lookup a tenant's prompt, record what was served, store the rest), erase a
tenant, invalidate a block key (the block and its subtree), change a tenant's TTL (a duration
or None), pin or unpin a prefix, through the replicator at once or through the region's inbox,
run one region's replicator step, cut or heal a link, isolate a region, take a region's own log
down or up (its own Redis), sweep expired blocks.

Every block a region stores carries a payload naming the region and the step that stored it, so
a served block says which store wrote it. Blocks are never replicated, only metadata.

Checked (a violation names the seed, the step and the rule):

(a) convergence: after healing every link and stepping every region until a whole round moves
    nothing and nothing is held, every region's ``RegionState.digest()`` and ``metadata()`` are
    equal, and each region's cache has the TTL the metadata says for every tenant a TTL was set for.
(b) no resurrection: an erasure E (erase_tenant T, or invalidate k) is *applied* in region R at the
    step R's replicator delivers it (``Effects.apply``; a region's own update at the step it is made
    or taken from the inbox). A block b is *covered* by E when b is tenant T's, or b is k or under
    k in the prompt chain. A block served in R at step s whose payload was stored in R at step t
    is a violation when some erasure covering b was applied in R at a step a with t < a < s: the
    data existed in R when R applied the erasure, so it had to go. A block stored in R after R
    applied the erasure (t > a) is new data, causally after the erasure there, and may be served.
    So an erasure dominates every store concurrent with it: whatever a region holds when the
    erasure arrives goes, wherever and whenever it was stored.
(c) nothing left: after convergence every region's cache is probed with every prompt, and (b) is
    checked for what the probe finds.
(d) gone when applied: right after an erasure's effect, the region's index holds no unexpired
    block it covers; and no effect raised (the replicator counts that as ``effect_errors``).
(e) applied everywhere: after convergence, every erasure applied in any region and committed
    to its log (a submit refused because the region's own log is down is no update) was applied in
    every region (itself, or a later erasure of the same key: a full sync delivers only the
    latest erasures of a key, and the effect is the same).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections import Counter

from .regions_parts import OPS, REGIONS, Outcome, report
from .regions_sim import Sim, run_seed

__all__ = ["OPS", "REGIONS", "Outcome", "Sim", "main", "report", "run_seed"]


def _fixed_hashes(argv: list[str]) -> None:
    """Re-run under PYTHONHASHSEED=0 when it is not set, as tests/simulation does: the engine
    iterates sets of keys, and a fixed hash seed makes a replay exact whatever that order."""
    if os.environ.get("PYTHONHASHSEED") is None:
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable, "-m", "ctxcache.sim.regions", *argv])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ctxcache.sim.regions", description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=100)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--ops", type=int, default=OPS)
    ap.add_argument("--skew", action="store_true", help="A's wall clock 1 h ahead, C's 1 h behind")
    ap.add_argument("--seed", type=int, help="replay one seed and print its whole history")
    ap.add_argument("--minutes", type=float, help="run seeds from --start until this much time has passed")
    args = ap.parse_args(argv)
    if argv is None:
        _fixed_hashes(sys.argv[1:])
    logging.getLogger("ctxcache.replication").setLevel(logging.ERROR)  # every cut link is logged
    if args.seed is not None:
        o = run_seed(args.seed, args.ops, args.skew, verbose=True)
        print(report(o) if o.violations else f"seed {args.seed}: {o.ops} operations, every check held")
        return 1 if o.violations else 0

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    t0 = time.monotonic()
    deadline = None if args.minutes is None else t0 + 60 * args.minutes
    failed: list[int] = []
    conflicts: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    ops = ran = 0
    con = Console(stderr=True)
    with Progress(TextColumn("regions"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), console=con,
                  transient=True, disable=not con.is_terminal) as bar:  # fmt: skip
        task = bar.add_task("seeds", total=None if deadline else args.seeds)
        seed = args.start
        while (seed < args.start + args.seeds) if deadline is None else time.monotonic() < deadline:
            o = run_seed(seed, args.ops, args.skew)
            ran, ops = ran + 1, ops + o.ops
            conflicts.update(o.conflicts)
            counts.update(o.counts)
            if o.violations:
                failed.append(seed)
                if len(failed) <= 3:
                    print(report(o), file=sys.stderr)
            bar.advance(task)
            seed += 1
    print(json.dumps({
        "seeds": ran, "start": args.start, "skew": args.skew, "failures": len(failed), "failed_seeds": failed[:50],
        "ops": ops, "conflicts": dict(sorted(conflicts.items())),
        "counts": dict(sorted(counts.items())), "seconds": round(time.monotonic() - t0, 2),
    }))  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
