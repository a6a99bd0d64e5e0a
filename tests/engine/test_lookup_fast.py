"""The lookup's fast path (engine/lookup_simple.py, and the release's unpin in line) against the
general one (engine/lookup.py and ``RadixIndex.unpin``).

Two engines over one hot memory tier get the same random operations, one with ``fast_lookup``
off: lookups of cached, partly cached and unknown prompts given as lists, int32 and int64
arrays, Prompts, bad tokens and bad namespaces; matches held across stores, erasures, TTL ticks,
sweeps and evictions, then released in any order, some twice; operator pins, lost blocks and
blocks whose stored token bytes differ. After every step both must agree on what the call
returned (the Match's fields, its keys and what it pinned) or raised, and on the engine's state
(test_store_fast's snapshot: index and pins, tier, accounting, policy order, counters, TTLs,
KV event records), and the per-tenant lookup stats. A failing case names its seed.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from ctxcache.engine import Engine, lookup, lookup_simple
from ctxcache.engine.tenancy import load_tenancy
from ctxcache.keys import Prompt
from ctxcache.tiers import MemoryTier

from .test_store_fast import BS, TENANCY, TENANTS, Clock, Recorder, Twins, call, payloads_of, tokens_of

STEPS = 200
SEEDS = range(10)


def engine(policy: str, capacity: int, tenancy: bool, watch: bool, clock: Clock, fast: bool) -> Engine:
    ty = load_tenancy(TENANCY, {"secret": "s" * 32, "max_pinned": 96}) if tenancy else None
    e = Engine([MemoryTier(capacity, policy, name="memory")], background=False, block_size=BS, clock=clock, tenancy=ty)
    assert e.fast_lookup  # every configuration here is one the fast path serves
    e.fast_lookup = fast
    if watch:
        e.slots[0].watch = Recorder()
    return e


def described(got: Any) -> Any:
    if got[0] == "ok" and isinstance(got[1], Prompt):
        return ("ok", got[1].keys(), got[1].namespace)
    if got[0] != "ok" or not hasattr(got[1], "hit_tokens"):
        return got
    m = got[1]
    pays = [bytes(p) if isinstance(p, (bytes, bytearray, memoryview)) else id(p) for p in m.payloads]
    pinned = [(n.key, n.pins) for n in m._pinned]
    return ("ok", m.hit_tokens, m.n_blocks, m.usage, pays, m.namespace, m.keys, pinned, m.released, m._cache is None)


class Pair(Twins):
    described = staticmethod(described)

    def __init__(self, seed: int, policy: str, capacity: int, tenancy: bool, watch: bool) -> None:
        self.seed, self.rng, self.clock = seed, random.Random(seed), Clock()
        self.capacity, self.tenancy = capacity, tenancy
        self.fast = engine(policy, capacity, tenancy, watch, self.clock, True)
        self.slow = engine(policy, capacity, tenancy, watch, self.clock, False)
        self.held: list[tuple[Any, Any]] = []
        self.released: list[tuple[Any, Any]] = []
        self.recent: list[tuple[list[int], str]] = []

    def states(self) -> tuple[dict[str, Any], dict[str, Any]]:
        a, b = super().states()
        a["tenant_stats"], b["tenant_stats"] = self.fast.tenant_stats, self.slow.tenant_stats
        return a, b

    def step(self) -> str:
        rng = self.rng
        r = rng.random()
        tenant = rng.choice(TENANTS)
        if r < 0.3:
            return self._store(tenant)
        if r < 0.65:
            return self._lookup(tenant)
        if r < 0.78 and self.held:
            pair = self.held.pop(rng.randrange(len(self.held)))
            self.both("release", lambda e: call(e.release, pair[e is self.slow]))
            self.released.append(pair)
            return "release"
        if r < 0.8 and self.released:  # released again: an error, or another match's pin taken
            pair = rng.choice(self.released)
            self.both("release twice", lambda e: call(e.release, pair[e is self.slow]))
            return "release twice"
        if r < 0.86:
            return self.tick()
        if r < 0.88:
            self.both("erase", lambda e: call(lambda: e.erase_tenant(tenant)["erased_blocks"]))
            return f"erase {tenant}"
        if r < 0.93:
            self._damage(rng.random() < 0.4)
            return "damage"
        if r < 0.96:
            keys = sorted(n.key for n in self.fast.index)
            if keys:
                key = rng.choice(keys)
                fn = "unpin_prefix" if key in self.fast.pinned_prefixes() else "pin_prefix"
                self.both(fn, lambda e: call(getattr(e, fn), key))
            return "operator pin"
        if r < 0.97:
            self.both("evict_all", lambda e: call(e.evict_all))
            return "evict_all"
        if self.tenancy:
            ttl = rng.choice([None, 1.0, 4.0])
            self.both("ttl", lambda e: call(lambda: e.set_tenant_ttl(tenant, ttl)["tenant"]))
            return f"ttl {tenant} {ttl}"
        return "nothing"

    def _store(self, tenant: str) -> str:
        rng = self.rng
        toks = tokens_of(rng, rng.choice([1, 1, 2, 3, 4]))
        if self.recent and rng.random() < 0.3:  # a longer prompt over one stored before
            old, tenant = rng.choice(self.recent)
            toks = old[: len(old) // BS * BS] + toks[len(old) // BS * BS :]
        pays = payloads_of(rng, len(toks) // BS, self.capacity)
        self.both("store", lambda e: call(e.store, toks, pays, tenant, 0))
        self.recent = (self.recent + [(toks, tenant)])[-12:]
        return f"store {tenant}"

    def _lookup(self, tenant: str) -> str:
        rng = self.rng
        toks: Any = tokens_of(rng, rng.randint(1, 3))
        if self.recent and rng.random() < 0.75:
            toks, tenant = rng.choice(self.recent)
            toks = toks[: rng.choice([BS, len(toks), len(toks), len(toks) + 1])]
        how = rng.random()
        ns: Any = tenant
        if 0.4 <= how < 0.5:
            ns = self.recent[0][1] if self.recent else tenant
            got = self.both("prompt", lambda e: call(e.prompt, self.recent[0][0] if self.recent else [1] * BS, ns))
            toks = (got[0][1], got[1][1]) if got[0][0] == "ok" else toks
        elif how < 0.3:
            toks = np.array(toks, np.int32)
        elif how < 0.4:
            toks = np.array(toks, np.int64)  # not taken as is by the compiled hasher
        elif how < 0.53:
            toks = toks[:-1] + [-1] if toks else [-1]  # refused
        elif how < 0.56:
            ns = rng.choice([7, "nobody", None])  # refused, or unknown with tenancy
        if isinstance(toks, tuple):  # a Prompt each
            a, b = self.both("lookup", lambda e: call(e.lookup, toks[e is self.slow]))
        else:
            a, b = self.both("lookup", lambda e: call(e.lookup, toks, ns))
        if a[0] != "ok":
            return "lookup refused"
        if rng.random() < 0.6:
            self.held.append((a[1], b[1]))
        else:
            self.both("release", lambda e: call(e.release, (a, b)[e is self.slow][1]))
            self.released.append((a[1], b[1]))
        return f"lookup {tenant}"

    def _damage(self, collide: bool) -> None:
        keys = sorted(n.key for n in self.fast.index)
        if not keys:
            return
        self.harm(self.rng.choice(keys), collide)


@pytest.fixture
def paths(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Lookups by the road they took: the fast path's one block or miss in line, its longer
    matches (finish_simple), and those handed to the general path."""
    n = {"fast": 0, "longer": 0, "general": 0}
    fast, finish, general = lookup_simple.lookup, lookup_simple.finish_simple, lookup_simple._lookup.lookup

    def counted(key: str, fn: Any) -> Any:
        def wrapped(*args: Any) -> Any:
            n[key] += 1
            return fn(*args)

        return wrapped

    monkeypatch.setattr(lookup_simple, "lookup", counted("fast", fast))
    monkeypatch.setattr(lookup_simple, "finish_simple", counted("longer", finish))
    monkeypatch.setattr(lookup_simple, "_lookup", type("L", (), {"lookup": staticmethod(counted("general", general))}))
    assert lookup.lookup is general
    return n


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(
    "policy, capacity, tenancy, watch",
    [
        ("lru", 240, False, True),
        ("lru", 4096, True, False),
        ("fifo", 200, True, True),
        ("s3fifo", 220, False, True),
        ("sieve", 220, True, True),
        ("2q", 240, False, False),
        ("arc", 240, True, True),
        ("lfu", 320, False, True),
        ("w-tinylfu", 240, True, False),
    ],
)
def test_fast_lookup_does_what_the_general_lookup_does(
    seed: int, policy: str, capacity: int, tenancy: bool, watch: bool, paths: dict[str, int]
) -> None:
    pair = Pair(seed, policy, capacity, tenancy, watch)
    for i in range(STEPS):
        what = pair.step()
        pair.check(i, what)
    for held in pair.held:
        pair.both("release at the end", lambda e, held=held: call(e.release, held[e is pair.slow]))
    pair.check(STEPS, "released all")
    victims = []
    for e in (pair.fast, pair.slow):  # the whole order, victim by victim
        policy_ = e.slots[0].policy
        victims.append([policy_.evict(lambda k: True) for _ in range(len(policy_) + 1)])
    assert victims[0] == victims[1], f"seed {pair.seed}: victim order differs"
    assert paths["fast"] > paths["longer"] > 0 and paths["general"] > 0, paths  # every road taken
