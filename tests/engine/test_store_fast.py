"""The store's fast path (engine/store_simple.py) against the general one (engine/store.py).

Two engines over one hot memory tier get the same random operations, one with ``fast_store``
off: stores of 1-4 block prompts sharing prefixes (first_block 0, a held match's length, or
any), lookups held across stores and released, small capacities that evict, tenants with
quotas, TTLs, a pinned class and its cap, erase_tenant while blocks are held, operator pins,
lost blocks, forced hash collisions, bad payloads. After every step both must agree on what
the call returned or raised, the index, the tier, the slot's accounting, the policy's order,
the counters, the TTL deadlines and the KV event records. A failing case names its seed.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import xxhash

from ctxcache.engine import Engine, store_simple
from ctxcache.engine.tenancy import load_tenancy
from ctxcache.keys import BlockHasher, Namespace
from ctxcache.tiers import MemoryTier

BS = 4
STEPS = 160
SEEDS = range(12)
TENANTS = ("a", "b", "c")
TENANCY = {
    "a": {"quota": {"memory": 72}, "ttl": "5s"},  # a quota: stores past it take the general path
    "b": {"priority": 0},  # pinned class: its bytes are capped (max_pinned)
    "c": {"ttl": "3s", "priority": 1},
}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Recorder:
    """A Watcher (engine/slot.py) that keeps what EngineWatch would send, in order: a store's keys
    charged in a row as one run ("c"), others one by one ("a"), removals ("x")."""

    def __init__(self) -> None:
        self.log: list[tuple[Any, ...]] = []
        self.run: list[Any] | None = None
        self.run_pos = 0
        self.depth = 0
        self.xrun: list[Any] | None = None
        self.xkey = None  # no runs of removals: each one told

    def _close(self) -> None:
        if self.run is not None:
            self.log.append(("c", self.run_pos, self.run))
            self.run = None

    def admitted(self, pos: int, key: Any) -> None:
        if self.run is not None and pos == self.run_pos:
            self.run.append(key)
            return
        self._close()
        if self.depth:
            self.run, self.run_pos = [key], pos
        else:
            self.log.append(("a", pos, key))

    def left(self, pos: int, key: Any, why: str = "") -> None:
        self._close()
        self.log.append(("x", pos, key))

    def landed(self, pos: int, key: Any) -> None:
        self._close()
        self.log.append(("l", pos, key))

    def chain(self, pos: int, keys: list[Any], parents: list[Any], sizes: list[int]) -> None:
        self._close()  # what the general path's run of the same keys records (its parents and
        self.log.append(("c", pos, list(keys)))  # sizes: tests/events/test_chain_record.py)

    def begin(self) -> None:
        self.depth += 1

    def end(self) -> None:
        self.depth -= 1
        if not self.depth:
            self._close()


class WeakHasher(BlockHasher):
    """Keys of one byte: distinct blocks share keys all the time (hash collisions, and a key
    indexed under another parent while its own parent is absent)."""

    def __init__(self) -> None:
        super().__init__(BS)
        self._native = None  # the walk and Prompt.keys go through _stream

    def _stream(self, buf: bytes, ns: Namespace, parent: bytes, start: int, stop: int) -> Iterator[bytes]:
        s = self._stride
        for off in range(start * s, stop * s, s):
            parent = xxhash.xxh3_128_digest(parent + buf[off : off + s])[:1]
            yield parent


def engine(
    policy: str, capacity: int, tenancy: bool, watch: bool, clock: Clock, fast: bool, weak: bool = False
) -> Engine:
    ty = load_tenancy(TENANCY, {"secret": "s" * 32, "max_pinned": 96}) if tenancy else None
    e = Engine([MemoryTier(capacity, policy, name="memory")], background=False, block_size=BS, clock=clock, tenancy=ty)
    assert e.fast_store  # every configuration here is one the fast path serves
    e.fast_store = fast
    if weak:
        e.hasher = WeakHasher()
    if watch:
        e.slots[0].watch = Recorder()
    return e


def order(e: Engine) -> list[Any]:
    policy = e.slots[0].policy
    if hasattr(policy, "order_keys"):
        return list(policy.order_keys())
    return [policy.peek(), len(policy)]


def snapshot(e: Engine) -> dict[str, Any]:
    slot, tier = e.slots[0], e.tiers[0]
    stored = list(tier.keys())  # a tier has no __iter__
    nodes = sorted((n.key, n.parent, n.depth, n.tier, n.pins, n.children, n.tag, n.tokens) for n in e.index)
    watch = slot.watch
    return {
        "index": nodes,
        "tier": sorted((k, tier.nbytes(k)) for k in stored),
        "used": (tier.used_bytes, slot.used(), slot.inflow, slot.outflow),
        "by_tenant": dict(slot.by_tenant),
        "owners": sorted(slot.owners.items()),
        "order": order(e),
        "counters": e.counters.as_dict(),
        "slot": (slot.hits, slot.evictions),
        "deadlines": sorted(e.expiry.deadline.items()),
        "events": list(watch.log) if isinstance(watch, Recorder) else None,
        "pins": e.pinned_prefixes(),
    }


def tokens_of(rng: random.Random, n: int) -> list[int]:
    """Blocks drawn from three per position: prompts share prefixes; a partial block sometimes."""
    out = [rng.randrange(3) * 100 + i * 10 + j for i in range(n) for j in range(BS)]
    return out + [7] * rng.choice([0, 0, 1, 3])


def payloads_of(rng: random.Random, n: int, capacity: int) -> list[Any]:
    out: list[Any] = []
    for _ in range(n):
        r = rng.random()
        if r < 0.7:
            out.append(bytes(rng.choice([8, 16, 24, 40])))
        elif r < 0.85:
            out.append([np.zeros(rng.choice([2, 4]), np.float32)])  # a list of arrays: measured by size_of
        elif r < 0.9:
            out.append(bytearray(16))
        elif r < 0.94:
            out.append("not a payload")  # refused before anything is stored
        elif r < 0.97:
            out.append(bytes(capacity + 1))  # larger than the tier
        else:
            out.append(memoryview(bytes(12)))
    if rng.random() < 0.03:
        out.append(b"one too many")
    return out


def call(fn: Any, *args: Any) -> Any:
    try:
        return ("ok", fn(*args))
    except Exception as exc:  # both engines must raise the same
        return ("raised", type(exc).__name__, str(exc))


def described(got: Any) -> Any:
    if got[0] == "ok" and hasattr(got[1], "hit_tokens"):
        m = got[1]
        return (
            "ok",
            m.hit_tokens,
            m.n_blocks,
            m.usage,
            [bytes(p) if isinstance(p, bytes) else id(p) for p in m.payloads],
        )
    return got


class Twins:
    """Two engines, the fast path on (``fast``) and off (``slow``): each operation on both, their
    results (as ``described`` tells them apart) and their states equal after every step."""

    seed: int
    rng: random.Random
    clock: Clock
    fast: Engine
    slow: Engine
    described = staticmethod(described)

    def both(self, what: str, fn: Any) -> tuple[Any, Any]:
        a, b = fn(self.fast), fn(self.slow)
        assert self.described(a) == self.described(b), f"seed {self.seed}: {what} returned differently"
        return a, b

    def states(self) -> tuple[dict[str, Any], dict[str, Any]]:
        return snapshot(self.fast), snapshot(self.slow)

    def check(self, step: int, what: str) -> None:
        a, b = self.states()
        for k in a:
            assert a[k] == b[k], f"seed {self.seed} step {step} ({what}): {k} differs"

    def tick(self) -> str:
        """Time passes on the shared clock; half the time both sweep (TTLs)."""
        self.clock.now += self.rng.choice([0.5, 1.0, 2.5])
        if self.rng.random() < 0.5:
            self.both("sweep", lambda e: call(e.sweep))
        return "tick"

    def harm(self, key: Any, collide: bool) -> None:
        """The same damage to ``key`` in both: its load failed (lost), or its stored token bytes
        differ from its chain's (what a hash collision looks like)."""
        for e in (self.fast, self.slow):
            with e.lock:
                node = e.index.get(key)
                if collide:
                    node.tokens = bytes(len(node.tokens))
                elif node.tier == 0:
                    e.placement.lose(node, 0)


class Pair(Twins):
    """One operation on both engines; the step's results and states must be equal."""

    def __init__(self, seed: int, policy: str, capacity: int, tenancy: bool, watch: bool, weak: bool = False) -> None:
        self.seed, self.rng, self.clock = seed, random.Random(seed), Clock()
        self.capacity = capacity
        self.fast = engine(policy, capacity, tenancy, watch, self.clock, True, weak)
        self.slow = engine(policy, capacity, tenancy, watch, self.clock, False, weak)
        self.held: list[tuple[Any, Any, list[int], str]] = []
        self.recent: list[tuple[list[int], str]] = []
        self.tenancy = tenancy

    def step(self, i: int) -> str:
        rng = self.rng
        r = rng.random()
        tenant = rng.choice(TENANTS)
        if r < 0.4:
            return self._store(tenant)
        if r < 0.65:
            return self._lookup(tenant)
        if r < 0.73 and self.held:
            a, b, _, _ = self.held.pop(rng.randrange(len(self.held)))
            self.fast.release(a)
            self.slow.release(b)
            return "release"
        if r < 0.8:
            return self.tick()
        if r < 0.83:
            return self._erase(tenant)
        if r < 0.9:
            self._damage(rng.random() < 0.4)
            return "damage"
        if r < 0.94:
            key = self._some_key()
            if key is not None:
                fn = "unpin_prefix" if key in self.fast.pinned_prefixes() else "pin_prefix"
                self.both(fn, lambda e: call(getattr(e, fn), key))
            return "operator pin"
        if r < 0.95:
            self.both("evict_all", lambda e: call(e.evict_all))
            return "evict_all"
        if self.tenancy and r < 0.98:
            ttl = rng.choice([None, 1.0, 4.0])
            self.both("ttl", lambda e: call(lambda: e.set_tenant_ttl(tenant, ttl)["tenant"]))
            return f"ttl {tenant} {ttl}"
        return "nothing"

    def _store(self, tenant: str) -> str:
        rng = self.rng
        n = rng.randint(1, 4)
        toks, first, how = tokens_of(rng, n), 0, rng.random()
        if how < 0.3 and self.held:  # a reply after a held match: stored from its end, or all again
            ma, _, held, tenant = rng.choice(self.held)
            first = ma.n_blocks if rng.random() < 0.6 else 0
            n = max(n, ma.n_blocks)
            toks = held[: ma.n_blocks * BS] + tokens_of(rng, n)[ma.n_blocks * BS :]
        elif how < 0.5 and self.recent:  # a prompt stored before: cached, in part or whole
            toks, tenant = rng.choice(self.recent)
            toks = toks[: rng.randint(1, len(toks) // BS) * BS] + tokens_of(rng, 4)[len(toks) // BS * BS :][:BS]
        elif how < 0.65:
            first = rng.randint(0, n)
        n = len(toks) // BS
        first = min(first, n)
        pays = payloads_of(rng, n - first, self.capacity)
        self.both("store", lambda e: call(e.store, toks, pays, tenant, first))
        self.recent = (self.recent + [(toks, tenant)])[-12:]
        return f"store {tenant} {n} blocks from {first}"

    def _lookup(self, tenant: str) -> str:
        rng = self.rng
        toks = tokens_of(rng, rng.randint(1, 4))
        if self.recent and rng.random() < 0.75:
            toks, tenant = rng.choice(self.recent)
        a, b = self.both("lookup", lambda e: call(e.lookup, toks, tenant))
        if a[0] != "ok" or b[0] != "ok":
            return f"lookup {tenant}"
        if rng.random() < 0.6 and a[1].n_blocks:  # held across later stores; the rest stored now or not
            self.held.append((a[1], b[1], toks, tenant))
            if rng.random() < 0.5:
                pays = payloads_of(rng, len(toks) // BS - a[1].n_blocks, self.capacity)
                self.both("store after lookup", lambda e: call(e.store, toks, pays, tenant, a[1].n_blocks))
        else:
            self.fast.release(a[1])
            self.slow.release(b[1])
        return f"lookup {tenant}"

    def _erase(self, tenant: str) -> str:
        held = self.rng.choice(self.held) if self.held and self.rng.random() < 0.7 else None
        tenant = held[3] if held is not None else tenant
        self.both("erase", lambda e: call(lambda: e.erase_tenant(tenant)["erased_blocks"]))
        if held is not None:  # its blocks were in use: erased once released (ERASED_IN_USE); stored again
            toks = held[2]
            pays = payloads_of(self.rng, len(toks) // BS, self.capacity)
            self.both("store erased", lambda e: call(e.store, toks, pays, tenant, 0))
        return f"erase {tenant}"

    def _some_key(self) -> Any:
        keys = sorted(n.key for n in self.fast.index)
        return self.rng.choice(keys) if keys else None

    def _damage(self, collide: bool) -> None:
        """The same damage to both: a block whose load failed (lost), or one whose stored token
        bytes differ from its chain's (what a hash collision looks like to a store)."""
        inner = sorted(n.key for n in self.fast.index if n.children or n.pins)  # kept, lost: repaired
        key = self.rng.choice(inner) if inner and self.rng.random() < 0.7 else self._some_key()
        if key is not None:
            self.harm(key, collide)


def run(pair: Pair) -> None:
    for i in range(STEPS):
        what = pair.step(i)
        pair.check(i, what)
    for a, b, _, _ in pair.held:
        pair.fast.release(a)
        pair.slow.release(b)
    pair.check(STEPS, "released all")
    victims = []
    for e in (pair.fast, pair.slow):  # the whole order, victim by victim
        policy = e.slots[0].policy
        victims.append([policy.evict(lambda k: True) for _ in range(len(policy) + 1)])
    assert victims[0] == victims[1], f"seed {pair.seed}: victim order differs"


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How many fast-path stores handed over to the general path."""
    n = {"stores": 0, "handed": 0}
    store, place_chain = store_simple.store, store_simple.place_chain

    def counted_store(*args: Any) -> Any:
        n["stores"] += 1
        return store(*args)

    def counted_place_chain(*args: Any) -> Any:
        n["handed"] += 1
        return place_chain(*args)

    monkeypatch.setattr(store_simple, "store", counted_store)
    monkeypatch.setattr(store_simple, "place_chain", counted_place_chain)
    return n


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(
    "policy, capacity, tenancy, watch, weak",
    [
        ("lru", 160, False, True, False),
        ("lru", 4096, False, False, False),
        ("fifo", 120, True, True, False),
        ("lru", 200, True, False, False),
        ("s3fifo", 140, False, True, False),
        ("sieve", 140, True, True, False),
        ("2q", 160, False, False, False),
        ("arc", 160, True, True, False),
        ("lfu", 120, False, True, False),
        ("w-tinylfu", 160, False, False, False),
        ("lru", 4096, False, True, True),
        ("fifo", 240, True, True, True),
    ],
)
def test_fast_store_does_what_the_general_store_does(
    seed: int, policy: str, capacity: int, tenancy: bool, watch: bool, weak: bool, counting: dict[str, int]
) -> None:
    run(Pair(seed, policy, capacity, tenancy, watch, weak))
    assert counting["stores"] > counting["handed"] > 0  # both roads taken
