"""What a seed means: a setup (tiers in one of the orders the config allows, their capacities and
policies, tenants with quotas, TTLs and priorities, a pool of prompts sharing prefixes) and a list
of actions. Both are drawn from ``random.Random(seed)`` alone, so a seed is its whole run.

An action is a tuple, first the kind:
  ("store", tenant, prompt, version)   lookup, store the rest of the prompt, release
  ("lookup", tenant, prompt, hold)     hold: keep the match (its pins) until a "release"
  ("release", i)                       release held match i (modulo how many are held)
  ("step", n, seed, nested)            run up to n mover batches; at its I/O points run ``nested``
                                       actions (requests during a slow write or delete)
  ("tick", seconds)                    the injected clock moves
  ("faults", tier, p_write, p_delete)  chance each write / delete there is refused
  ("down", tier, on) / ("master", tier, m, on)   a tier (or one Cluster master) down and back
  ("corrupt", tier, i)                 flip a byte of the i-th stored block there
  ("erase", tenant) / ("sweep",) / ("drain",) / ("restart",)
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

BLOCK = 4  # tokens per block: small prompts, many blocks
TENANTS = ("a", "b", "c")
ORDERS = (  # fastest first: every memory tier before any slow one; slow ones in either order
    ("memory",), ("memory", "disk"), ("memory", "redis"), ("memory", "disk", "redis"), ("memory", "redis", "disk"),
    ("disk",), ("redis",), ("disk", "redis"), ("redis", "disk"), ("memory", "memory", "disk"),
    ("memory", "memory", "redis", "disk"),
)  # fmt: skip
POLICIES = ("lru", "lru", "fifo", "lfu", "arc", "s3fifo", "sieve", "lirs", "2q", "prefix-aware")

Action = tuple[Any, ...]


@dataclass
class TierSpec:
    kind: str  # memory | disk | redis
    name: str
    blocks: int  # capacity in blocks of the largest payload
    policy: str
    write: str | None = None  # slow tiers: "through" | "demote" (drawn in ``plan``); None: memory


@dataclass
class TenantSpec:
    id: str
    priority: int
    ttl: float | None
    quota: dict[str, int] = field(default_factory=dict)  # tier name -> blocks


@dataclass
class Setup:
    tiers: list[TierSpec]
    tenants: list[TenantSpec]
    prompts: list[list[int]]  # token ids, whole blocks


def payload_size(version: int) -> int:
    return 32 * (2 + version)


def make_setup(rng: random.Random) -> Setup:
    order = rng.choice(ORDERS)
    tiers, seen = [], 0
    for i, kind in enumerate(order):
        name = f"mem{seen}" if kind == "memory" else kind
        seen += kind == "memory"
        tiers.append(TierSpec(kind, name, rng.randint(3, 9) + 2 * i, rng.choice(POLICIES)))
    tenants = []
    for tid in TENANTS:
        prio = rng.choice((1, 2, 2, 0)) if tid != "a" else 2
        ttl = rng.choice((None, None, 3.0, 8.0)) if prio else rng.choice((2.0, 5.0))  # class 0: always expires
        quota = {t.name: rng.randint(2, t.blocks) for t in tiers if rng.random() < 0.3}
        tenants.append(TenantSpec(tid, prio, ttl, quota))
    prompts: list[list[int]] = []
    for _ in range(rng.randint(4, 9)):
        base = rng.choice(prompts)[: BLOCK * rng.randint(0, 3)] if prompts and rng.random() < 0.7 else []
        extra = [rng.randrange(1, 30000) for _ in range(BLOCK * rng.randint(1, 3))]
        prompts.append(base + extra)
    return Setup(tiers, tenants, prompts)


def _request(rng: random.Random, setup: Setup) -> Action:
    tenant, prompt = rng.choice(TENANTS), rng.randrange(len(setup.prompts))
    r = rng.random()
    if r < 0.5:
        return ("store", tenant, prompt, rng.choice((0, 0, 1, 2)))
    if r < 0.85:
        return ("lookup", tenant, prompt, rng.random() < 0.3)
    return ("release", rng.randrange(8))


def _fault(rng: random.Random, setup: Setup) -> Action:
    slow = [i for i, t in enumerate(setup.tiers) if t.kind != "memory"]
    if not slow:
        return ("tick", rng.choice((0.5, 1.0)))
    t = rng.choice(slow)
    r = rng.random()
    if r < 0.45:
        return ("faults", t, rng.choice((0.0, 0.0, 0.3, 1.0)), rng.choice((0.0, 0.0, 0.3, 1.0)))
    if r < 0.65:
        return ("down", t, rng.random() < 0.5)
    if r < 0.8 and setup.tiers[t].kind == "redis":
        return ("master", t, rng.randrange(3), rng.random() < 0.5)
    return ("corrupt", t, rng.randrange(64))


def make_actions(rng: random.Random, setup: Setup, n: int) -> list[Action]:
    out: list[Action] = []
    for _ in range(n):
        r = rng.random()
        if r < 0.45:
            out.append(_request(rng, setup))
        elif r < 0.65:
            nested = [_request(rng, setup) for _ in range(rng.choice((0, 0, 1, 2, 3)))]
            nested += [("tick", 0.25)] * (rng.random() < 0.2)  # a slow write: the clock moves meanwhile
            out.append(("step", rng.randint(1, 3), rng.randrange(1 << 30), nested))
        elif r < 0.77:
            out.append(_fault(rng, setup))
        elif r < 0.85:
            out.append(("tick", rng.choice((0.5, 1.0, 2.0, 4.0))))
        elif r < 0.89:
            out.append(("sweep",))
        elif r < 0.93:
            out.append(("erase", rng.choice(TENANTS)))
        elif r < 0.97:
            out.append(("drain",))
        else:
            out.append(("restart",))
    return out


def draw_writes(seed: int, setup: Setup) -> None:
    """Each slow tier's write policy, from an RNG of its own: the rest of a seed's setup and its
    actions stay what they were before the policy was drawn (a seed's findings keep their meaning)."""
    rng = random.Random(f"{seed}/write")
    for t in setup.tiers:
        if t.kind != "memory":
            t.write = rng.choice(("through", "demote"))


def plan(seed: int, n: int) -> tuple[Setup, list[Action]]:
    rng = random.Random(seed)
    setup = make_setup(rng)
    draw_writes(seed, setup)
    return setup, make_actions(rng, setup, n)
