"""The history checker's run of one seed (the model and the checks: sim/regions.py)."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import numpy as np

from ..engine.tenancy import load_tenancy
from ..replication.effects import CacheEffects
from ..replication.log import LIMIT, LinkDown
from ..replication.ops import Update
from ..replication.replicator import BATCH, Replicator
from ..replication.state import KeyState
from ..tiers import MemoryTier
from .regions_parts import (
    BS,
    EPOCH,
    ERASURES,
    OPS,
    PROMPTS,
    REGIONS,
    SKEW,
    TENANTS,
    TTLS,
    Link,
    Outcome,
    Served,
    SimCache,
    SimLog,
)  # fmt: skip


class Recorder:
    """The region's effects: ``CacheEffects`` on its cache, with each erasure's application step
    recorded and check (d) made right after it."""

    def __init__(self, sim: Sim, region: str, inner: CacheEffects) -> None:
        self.sim, self.region, self.inner = sim, region, inner

    def apply(self, u: Update, ks: KeyState) -> dict[str, Any]:
        out = self.inner.apply(u, ks)
        if u.kind in ERASURES:
            self.sim.applied[self.region].append((self.sim.step, u.kind, u.target, u.uid))
            self.sim.erasures.setdefault(u.uid, u)
            self.sim.applied_updates[self.region].append(u)
            self.sim.log(f"{self.region} applies {u.kind} {u.target[:12]} ({u.uid})")
            self.sim.check_gone(self.region, u)
        return out


class Sim:
    def __init__(self, seed: int, ops: int = OPS, skew: bool = False, verbose: bool = False) -> None:
        self.seed, self.n_ops, self.verbose = seed, ops, verbose
        self.rng = random.Random(seed)
        self.step = 0
        self.cut: set[tuple[str, str]] = set()
        self.skew = SKEW if skew else dict.fromkeys(REGIONS, 0.0)
        self.history: list[str] = []
        self.violations: list[str] = []
        self.served: list[Served] = []
        self.applied: dict[str, list[tuple[int, str, str, str]]] = {r: [] for r in REGIONS}
        self.ttl_set: set[str] = set()
        self.erasures: dict[str, Update] = {}  # every erasure applied anywhere
        self.applied_updates: dict[str, list[Update]] = {r: [] for r in REGIONS}
        tenants = {t: {"api_keys": [f"sk-{t}"]} for t in TENANTS}
        rng = self.rng
        # a short log (trimmed past what a peer read: a full sync) and small batches, some seeds
        limit, batch = rng.choice((LIMIT, LIMIT, 6, 24)), rng.choice((BATCH, BATCH, 2))
        self.committed: set[tuple[str, str]] = set()  # (uid, kind) of what some region's log held
        self.logs = {r: SimLog(limit, self.committed) for r in REGIONS}
        self.caches: dict[str, SimCache] = {}
        self.reps: dict[str, Replicator] = {}
        hot = rng.choice((8, 16, 64)) * 3 * 8  # blocks of three int64s: evictions when small
        warm = rng.choice((0, 32))
        for r in REGIONS:
            tiers = [MemoryTier(hot)] + ([MemoryTier(warm * 256, mode="warm", codec="raw")] if warm else [])
            ty = load_tenancy(tenants, {"secret": "one-deployment"}, env={})
            self.caches[r] = SimCache(tiers, block_size=BS, tenancy=ty, clock=self.now)
            peers = {p: Link(self.logs[p], p, r, self.cut) for p in REGIONS if p != r}
            self.reps[r] = Replicator(r, self.logs[r], peers, Recorder(self, r, CacheEffects(self.caches[r])),
                                      wall=self._wall(r), batch=batch)  # fmt: skip
        # block key -> (tenant, keys from the root to it): what each erasure covers
        self.chain: dict[str, tuple[str, tuple[str, ...]]] = {}
        self.keys: dict[str, list[list[str]]] = {}
        for t in TENANTS:
            per = []
            for toks in PROMPTS:
                ks = self.prompt_keys("A", toks, t)
                for r in REGIONS[1:]:
                    assert self.prompt_keys(r, toks, t) == ks, "a prompt's keys differ by region"
                for i, k in enumerate(ks):
                    self.chain[k] = (t, tuple(ks[: i + 1]))
                per.append(ks)
            self.keys[t] = per

    def prompt_keys(self, r: str, tokens: list[int], tenant: str) -> list[str]:
        return [k.hex() for k in self.caches[r].prompt(tokens, tenant).keys()]  # noqa: SIM118 (a Prompt method)

    # --- clocks ------------------------------------------------------------------------------------
    def now(self) -> float:
        return self.step * 0.25  # the caches' clock: a quarter second a step, the same in every region

    def _wall(self, r: str) -> Any:
        return lambda: EPOCH + self.skew[r] + self.step * 0.5

    def log(self, line: str) -> None:
        self.history.append(f"{self.step:4d} {line}")
        if self.verbose:
            print(self.history[-1])

    def fail(self, why: str) -> None:
        self.violations.append(f"seed {self.seed} step {self.step}: {why}")
        self.log(f"VIOLATION {why}")

    # --- coverage ------------------------------------------------------------------------------------
    def covers(self, kind: str, target: str, block: str) -> bool:
        tenant, chain = self.chain[block]
        return tenant == target if kind == "erase_tenant" else target in chain

    def check_served(self, s: Served) -> None:
        for key, stored in s.blocks:
            for a, kind, target, uid in self.applied[s.region]:
                if stored < a < s.step and self.covers(kind, target, key):
                    self.fail(f"{s.region} served {s.tenant}'s block {key[:12]} (prompt {s.prompt}) stored at "
                              f"step {stored}, after applying {uid} at step {a}")  # fmt: skip
                    return

    def check_gone(self, r: str, u: Update) -> None:
        e = self.caches[r]._engine
        now = self.now()
        for n in e.index:
            k = n.key.hex() if isinstance(n.key, bytes) else None
            if k in self.chain and self.covers(u.kind, u.target, k) and not e.expiry.expired(n.key, now):
                self.fail(f"{r} still indexes block {k[:12]} after applying {u.kind} {u.uid}")
                return

    # --- operations ----------------------------------------------------------------------------------
    def ask(self, r: str, tenant: str, i: int, store: bool = True) -> None:
        cache = self.caches[r]
        prompt = cache.prompt(PROMPTS[i], tenant)
        keys = [k.hex() for k in prompt.keys()]  # noqa: SIM118 (a Prompt method)
        with cache.lookup(prompt) as m:
            blocks = [(keys[j], int(np.asarray(p)[1])) for j, p in enumerate(m.payloads)]
            for j, p in enumerate(m.payloads):
                tag = np.asarray(p)
                if int(tag[0]) != REGIONS.index(r) or int(tag[2]) != j:
                    self.fail(f"{r} served a payload not its own or not this block's: {tag.tolist()}")
            if store:
                cache.store(prompt, [np.array([REGIONS.index(r), self.step, j], np.int64)
                                     for j in range(m.n_blocks, prompt.n_blocks)], first_block=m.n_blocks)  # fmt: skip
        s = Served(self.step, r, tenant, i, blocks)
        self.served.append(s)
        self.check_served(s)
        self.log(f"{r} ask {tenant} p{i}: hit {len(blocks)}/{prompt.n_blocks}"
                 + (f" stored at {sorted({b[1] for b in blocks})}" if blocks else ""))  # fmt: skip

    def update(self, r: str, kind: str, target: str | bytes, value: Any = None) -> None:
        inbox = self.rng.random() < 0.5
        shown = target.hex()[:12] if isinstance(target, bytes) else target
        try:
            if inbox:  # a worker asks; the replicator stamps it at its next step
                self.logs[r].submit(kind, target.hex() if isinstance(target, bytes) else target, value)
                self.log(f"{r} inbox {kind} {shown} {value}")
            else:
                u = self.reps[r].submit(kind, target, value)
                self.log(f"{r} submit {kind} {shown} {value} -> {u.uid}")
        except LinkDown:  # the region's own Redis is down: refused
            self.log(f"{r} {'inbox' if inbox else 'submit'} {kind} {shown} {value}: refused, own log down")
            return
        if kind == "ttl":
            self.ttl_set.add(str(target))

    def random_op(self) -> None:
        rng = self.rng
        r = rng.choice(REGIONS)
        t = rng.choice(TENANTS)
        x = rng.random() * 100
        if x < 40:
            self.ask(r, t, rng.randrange(len(PROMPTS)))
        elif x < 65:
            self.step_region(r)
        elif x < 67:
            self.update(r, "erase_tenant", t)
        elif x < 70:
            self.update(r, "invalidate", bytes.fromhex(self.random_key(t)))
        elif x < 76:
            self.update(r, "ttl", t, rng.choice(TTLS))
        elif x < 81:
            self.update(r, "pin", bytes.fromhex(self.random_key(t)), rng.random() < 0.6)
        elif x < 88:
            link = (rng.choice(REGIONS), r)
            if link[0] != r:
                self.cut.add(link)
                self.log(f"cut {link[0]}->{link[1]}")
        elif x < 95:
            if self.cut:
                link = rng.choice(sorted(self.cut))
                self.cut.discard(link)
                self.log(f"heal {link[0]}->{link[1]}")
        elif x < 97:
            self.cut |= {(r, p) for p in REGIONS if p != r} | {(p, r) for p in REGIONS if p != r}
            self.log(f"isolate {r}")
        elif x < 98:
            self.cut.clear()
            self.log("heal all")
        elif x < 99:  # the region's own Redis goes down or comes back
            self.logs[r].up = not self.logs[r].up
            self.log(f"{r} own log {'up' if self.logs[r].up else 'down'}")
        else:
            n = self.caches[r].sweep(self.now())
            self.log(f"{r} sweep: {n}")

    def step_region(self, r: str) -> int:
        try:
            n = self.reps[r].step()
        except LinkDown:
            self.log(f"{r} step: own log down")
            return 0
        self.log(f"{r} step: {n} entries")
        return n

    def random_key(self, tenant: str) -> str:
        ks = self.rng.choice(self.keys[tenant])
        return self.rng.choice(ks)

    # --- the run ---------------------------------------------------------------------------------------
    def settle(self, rounds: int = 200) -> bool:
        self.cut.clear()
        for lg in self.logs.values():
            lg.up = True
        self.log("heal all; settle")
        for _ in range(rounds):
            self.step += 1
            order = list(REGIONS)
            self.rng.shuffle(order)
            moved = sum(self.reps[r].step() for r in order)
            if not moved and not any(rep.state.n_pending for rep in self.reps.values()):
                return True
        return False

    def run(self) -> Outcome:
        for _ in range(self.n_ops):
            self.step += 1
            self.random_op()
        if not self.settle():
            self.fail("no quiescence after healing: updates still moving or held")
        self.step += 1
        self.check_final()
        conflicts: Counter[str] = Counter()
        counts: Counter[str] = Counter()
        for rep in self.reps.values():
            conflicts.update(rep.state.conflicts)
            counts.update({k: v for k, v in rep.state.counters.items() if k in ("held", "duplicates")})
            counts.update({k: v for k, v in rep.stats.items() if k == "full_syncs"})
        counts["served_blocks"] = sum(len(s.blocks) for s in self.served)
        counts["erasures_applied"] = sum(len(v) for v in self.applied.values())
        return Outcome(
            self.seed, self.n_ops, self.violations, conflicts, counts,
            {r: rep.state.digest() for r, rep in self.reps.items()},
            self.reps["A"].state.metadata(),
            [(s.step, s.region, s.tenant, s.prompt, s.blocks) for s in self.served],
            self.applied, self.history,
        )  # fmt: skip

    def check_final(self) -> None:
        states = {r: rep.state for r, rep in self.reps.items()}
        digests = {r: s.digest() for r, s in states.items()}
        if len(set(digests.values())) != 1:
            ref = states["A"].metadata()
            for r in REGIONS[1:]:
                md = states[r].metadata()
                diff = sorted(k for k in set(ref) | set(md) if ref.get(k) != md.get(k))
                if diff:
                    k = diff[0]
                    self.fail(f"metadata of A and {r} differ on {len(diff)} keys; {k}: A={ref.get(k)} {r}={md.get(k)}")
            self.fail(f"digests differ: {digests}")
        elif any(states[r].metadata() != states["A"].metadata() for r in REGIONS):
            self.fail("equal digests, unequal metadata")
        for r, rep in self.reps.items():
            errors = rep.stats.get("effect_errors", 0)
            if errors:
                self.fail(f"{r}: {errors} effects raised")
            cache = self.caches[r]
            assert cache.tenancy is not None
            for t in sorted(self.ttl_set):
                want = states[r].value(f"t:{t}", "ttl")
                got = cache.tenancy.get(t).ttl
                if got != want:
                    self.fail(f"{r}: tenant {t}'s TTL in the cache is {got}, the metadata says {want}")
        for r in REGIONS:  # (e): every erasure applied anywhere was applied here (or a later one of its key)
            mine = self.applied_updates[r]
            for uid, u in sorted(self.erasures.items()):
                if (uid, u.kind) not in self.committed:  # its submit was refused (own log down): no update
                    continue
                if not any(a.key == u.key and a.kind == u.kind and u.clock <= a.clock for a in mine):
                    self.fail(f"{r} never applied {u.kind} {uid}")
                    break
        for r in REGIONS:  # (c): probe every prompt; what is found must not predate an erasure
            for t in TENANTS:
                for i in range(len(PROMPTS)):
                    self.ask(r, t, i, store=False)


def run_seed(seed: int, ops: int = OPS, skew: bool = False, verbose: bool = False) -> Outcome:
    sim = Sim(seed, ops, skew, verbose)
    try:
        return sim.run()
    finally:
        for c in sim.caches.values():
            c.close()
