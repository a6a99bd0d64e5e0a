"""Batch notifications are only a speed-up: every batch method a policy has (``on_hits`` today)
must leave it exactly as the single-key method called once per key, in the same order, would.

The live cache and the simulator call the batch method, while most unit tests call the single
one; a batch method that drifts (replaced by ``pass``, or reordering keys) turned LRU into FIFO in
every real run with the whole suite green. These tests compare the two side by side, for every
registered policy: on a random history at the policy level, through the simulator, and through
ContextCache.
"""

from __future__ import annotations

import inspect
import pickle
import random
from collections.abc import Callable, Iterable
from typing import Any

import pytest

from ctxcache.policies import POLICIES, Policy, make_policy, policy_names
from ctxcache.sim.simulator import Trace, simulate
from ctxcache.sim.traces import Request

from ..conftest import FakeClock
from .helpers import block_ids, conversations, drain

ALL = policy_names()
# Policies sized by a block count (the simulator passes it; the live cache lets them size themselves).
SIZED = [n for n in ALL if "capacity" in inspect.signature(POLICIES[n]).parameters]


def batch_methods() -> list[tuple[str, str]]:
    """(batch, single) method pairs of the Policy interface: ``on_hits`` -> ``on_hit``, and any
    batch variant added later (``on_inserts``, ``on_removes``) is picked up without editing this."""
    names = {n for n in dir(Policy) if n.startswith("on_")}
    return sorted((n, n[:-1]) for n in names if n.endswith("s") and n[:-1] in names)


BATCH = batch_methods()


def test_the_interface_has_the_batch_method_the_live_path_calls():
    assert ("on_hits", "on_hit") in BATCH


def one_by_one(pol: Policy, single: str) -> Callable[[Iterable[Any]], None]:
    """The reference batch method: the single-key method once per key, in the given order."""
    fn = getattr(pol, single)

    def run(keys: Iterable[Any]) -> None:
        for k in keys:
            fn(k)

    return run


def pair(name: str, capacity: int | None) -> tuple[Policy, Policy]:
    kw: dict[str, Any] = {} if capacity is None else {"capacity": capacity}
    return make_policy(name, clock=FakeClock(), **kw), make_policy(name, clock=FakeClock(), **kw)


def clone(p: Policy) -> Policy:
    """An independent copy to drain (pickle: much faster than deepcopy on w-tinylfu's sketch)."""
    copied: Policy = pickle.loads(pickle.dumps(p))
    return copied


def veto(key: Any) -> bool:
    """Refuses a third of the keys (module level, so policies that remember it still pickle)."""
    return key % 3 != 0


def same_state(a: Policy, b: Policy, can: Callable[[Any], bool]) -> None:
    """Same resident set, same next victim, same full eviction order (on copies, with and
    without a veto), so the next notification finds them in the same state too."""
    assert len(a) == len(b)
    assert a.peek() == b.peek() and a.peek(can) == b.peek(can)
    assert drain(clone(a)) == drain(clone(b))
    assert drain(clone(a), can) == drain(clone(b), can)


def batch_keys(batch: str, rng: random.Random, resident: list[int], fresh: Iterable[int]) -> list[int]:
    """Keys a batch call of this kind may get: resident keys for hits and removals, new ones for
    inserts. A batch method without a case here fails the test until one is written."""
    n = rng.randint(1, min(8, len(resident)))
    if batch in ("on_hits", "on_removes"):
        return rng.sample(resident, n)
    if batch == "on_inserts":
        return [next(iter(fresh)) for _ in range(n)]
    raise AssertionError(f"no contract case for the batch method {batch!r}: add one to batch_keys")


def history(seed: int, a: Policy, b: Policy, batch: str, single: str, cap: int) -> int:
    """Drive ``a`` with the batch method and ``b`` one key at a time through the same random
    history (inserts, batches in random order, removals, evictions with and without a veto, time
    passing); compare them after every batch. Returns how many batches were compared."""
    rng = random.Random(seed)
    ref = one_by_one(b, single)
    resident: list[int] = []
    fresh = iter(range(10**6))
    can = veto
    checked = 0
    for _ in range(160):
        op = rng.random()
        if op < 0.35 or len(resident) < 4:
            if len(resident) >= cap:
                v = a.evict()
                assert v == b.evict() and v is not None
                resident.remove(v)
            k = next(fresh)
            a.on_insert(k)
            b.on_insert(k)
            resident.append(k)
        elif op < 0.8:
            keys = batch_keys(batch, rng, resident, fresh)
            # A one-shot iterator, as the callers pass (``reversed(...)``): a batch method that
            # iterates its argument twice sees nothing the second time.
            getattr(a, batch)(iter(keys))
            ref(keys)
            if batch == "on_inserts":
                resident += keys
            elif batch == "on_removes":
                resident = [k for k in resident if k not in keys]
            checked += 1
            same_state(a, b, can)
        elif op < 0.88:
            k = rng.choice(resident)
            a.on_remove(k)
            b.on_remove(k)
            resident.remove(k)
        else:
            use = can if rng.random() < 0.5 else None
            v = a.evict(use)
            assert v == b.evict(use)
            if v is not None:
                resident.remove(v)
        if rng.random() < 0.3:
            dt = rng.choice([0.5, 1.0, 30.0, 400.0])
            a.clock.advance(dt)  # type: ignore[attr-defined]
            b.clock.advance(dt)  # type: ignore[attr-defined]
        assert len(a) == len(b) == len(resident)
    return checked


CASES = [(n, None) for n in ALL] + [(n, 24) for n in SIZED]


@pytest.mark.parametrize(("batch", "single"), BATCH)
@pytest.mark.parametrize(("name", "capacity"), CASES, ids=[f"{n}-{c or 'unsized'}" for n, c in CASES])
def test_batch_equals_one_call_per_key_in_order(name, capacity, batch, single):
    for seed in range(3):
        a, b = pair(name, capacity)
        cap = capacity or 40
        assert history(seed, a, b, batch, single, cap) > 30


@pytest.fixture(scope="module")
def traces(trace_head: Trace) -> dict[str, Trace]:
    """The head of the real conversation trace, and a small chat whose hit blocks are re-used
    soon (where LRU and FIFO part ways; on the first 800 real requests they give equal counts)."""
    chat = block_ids(conversations(7, 4, n=600), 4)
    return {
        "mooncake": Trace(trace_head.requests[:800]),
        "chat": Trace([Request(float(i), 4 * len(b), 0, b) for i, b in enumerate(chat)], block_size=4),
    }


def sized(name: str, cap: int) -> dict[str, Any]:
    return {"capacity": cap} if name in SIZED else {}


@pytest.mark.parametrize("trace", ["mooncake", "chat"])
@pytest.mark.parametrize("name", [n for n in ALL if not getattr(POLICIES[n], "offline", False)])
def test_the_simulator_gets_the_same_result_from_batch_and_single_hits(name, trace, traces):
    """Prefix semantics, with the radix index attached (prefix-aware classes a request's blocks
    by the order its notifications come in): the simulator calls ``on_hits``."""
    tr = traces[trace]
    cap = max(40, tr.unique_blocks // 50)
    got = simulate(tr, make_policy(name, clock=FakeClock(), **sized(name, cap)), cap)
    ref = make_policy(name, clock=FakeClock(), **sized(name, cap))
    ref.on_hits = one_by_one(ref, "on_hit")  # type: ignore[method-assign]
    want = simulate(tr, ref, cap)
    assert (got.misses, got.hit_tokens) == (want.misses, want.hit_tokens)
    assert 0 < got.hit_tokens < got.input_tokens
