"""Promises of the Policy interface (docs/policies.md, policies/base.py) checked for every
registered policy on random histories, where the unit tests only check one scene each:

- ``peek(can_evict)`` names the key ``evict(can_evict)`` would take, and one ``can_evict`` allows;
- a ``can_evict`` that allows everything is no veto at all (the live cache always passes one);
- a key that left by ``on_remove`` and comes back is a new key (no state outlives the key);
- ``params()`` are the parameters docs/policies.md lists, with its defaults, and rebuild the policy;
- a bad parameter is a ``ConfigError`` that names it;
- a refused key is in use, so refusals cost amortized O(1) and ``evict`` is None only when nothing may go.
"""

from __future__ import annotations

import ast
import inspect
import math
import pickle
import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ctxcache.errors import ConfigError
from ctxcache.policies import POLICIES, Policy, make_policy, policy_names
from ctxcache.policies.base import as_offline

from ..conftest import FakeClock
from .helpers import drain, evict_refusing_every_tenth

ALL = policy_names()
SIZED = [n for n in ALL if "capacity" in inspect.signature(POLICIES[n]).parameters]
CASES = [(n, None) for n in ALL] + [(n, 12) for n in SIZED]
IDS = [f"{n}-{c or 'unsized'}" for n, c in CASES]
DOC = Path(__file__).resolve().parents[2] / "docs" / "policies.md"


def build(name: str, capacity: int | None) -> Policy:
    kw: dict[str, Any] = {} if capacity is None else {"capacity": capacity}
    return make_policy(name, clock=FakeClock(), **kw)


def veto(key: Any) -> bool:
    return key % 3 != 0


def allow_all(key: Any) -> bool:
    return True


def step(rng: random.Random, pols: list[Policy], resident: list[int], gone: list[int], fresh: Any, cap: int) -> None:
    """One random event, the same for every policy in ``pols``: an insert (a new key or one evicted
    before, so ghosts are hit), after an eviction when full, or a batch of hits; time passes."""
    if rng.random() < 0.5 or len(resident) < 4:
        if len(resident) >= cap:
            victims = [p.evict() for p in pols]
            assert victims[0] is not None and victims.count(victims[0]) == len(victims)
            resident.remove(victims[0])
            gone.append(victims[0])
        key = gone.pop(rng.randrange(len(gone))) if gone and rng.random() < 0.4 else next(fresh)
        for p in pols:
            assert key not in p  # the simulator asks before it makes room (ARC reads the hint)
            p.on_insert(key)
        resident.append(key)
    else:
        keys = rng.sample(resident, rng.randint(1, min(5, len(resident))))
        for p in pols:
            p.on_hits(reversed(keys))
    if rng.random() < 0.3:
        dt = rng.choice([1.0, 5.0, 60.0])
        for p in pols:
            p.clock.advance(dt)  # type: ignore[attr-defined]


@pytest.mark.parametrize(("name", "capacity"), CASES, ids=IDS)
def test_peek_with_a_veto_names_the_key_evict_takes(name, capacity):
    cap = capacity or 20
    for seed in range(4):
        rng, pol = random.Random(seed), build(name, capacity)
        resident: list[int] = []
        gone: list[int] = []
        fresh = iter(range(10**6))
        for _ in range(150):
            step(rng, [pol], resident, gone, fresh, cap)
            if len(resident) < 4:
                continue
            want = pol.peek(veto)
            assert want is None or veto(want), f"{name}: peek named a key the veto refuses"
            got = pickle.loads(pickle.dumps(pol)).evict(veto)
            assert got == want, f"{name}: peek said {want}, evict took {got}"
            assert got is not None or not any(veto(k) for k in resident), f"{name}: None while {resident} may go"


@pytest.mark.parametrize(("name", "capacity"), CASES, ids=IDS)
def test_a_veto_that_allows_everything_is_no_veto(name, capacity):
    # The live cache always passes can_evict (pins, leaves); the simulator in object semantics
    # passes None. When nothing is refused the two must be the same policy.
    cap = capacity or 20
    for seed in range(4):
        rng = random.Random(seed)
        free, vetoed = build(name, capacity), build(name, capacity)
        resident: list[int] = []
        gone: list[int] = []
        fresh = iter(range(10**6))
        for _ in range(200):
            step(rng, [free, vetoed], resident, gone, fresh, cap)
            if rng.random() < 0.2 and len(resident) > 4:
                victim = free.evict()
                assert vetoed.evict(allow_all) == victim
                resident.remove(victim)
                gone.append(victim)
        assert drain(free) == drain(vetoed, allow_all)


REMEMBERS_EVERY_KEY = {"w-tinylfu": "its frequency sketch counts keys whether resident or not (by design)"}


@pytest.mark.parametrize(("name", "capacity"), [c for c in CASES if c[0] not in REMEMBERS_EVERY_KEY], ids=str)
def test_a_removed_key_that_comes_back_is_a_new_key(name, capacity):
    """on_remove: the key left (deleted, moved to another tier). Stored again later, it is a new
    block: the policy must treat it exactly as a key it never saw."""
    cap = capacity or 20
    for seed in range(4):
        rng = random.Random(seed)
        same, other = build(name, capacity), build(name, capacity)
        resident: list[int] = []
        gone: list[int] = []
        fresh = iter(range(10**6))
        for _ in range(120):
            step(rng, [same, other], resident, gone, fresh, cap)
        back, new = rng.choice(resident), -1  # -1: no other key is negative; veto() allows both
        same.on_remove(back)
        other.on_remove(back)
        same.on_insert(back)
        other.on_insert(new)
        hits = rng.sample([k for k in resident if k != back], 4)
        same.on_hits(reversed(hits))
        other.on_hits(reversed(hits))
        order = [new if k == back else k for k in drain(same)]
        assert order == drain(other), f"{name}: {back} remembered something from before its removal"


def documented() -> dict[str, dict[str, str | None]]:
    """policy -> {parameter: documented default or None}, from the table in docs/policies.md."""
    out: dict[str, dict[str, str | None]] = {}
    for name, cell in re.findall(r"^\| `([\w-]+)` \| \w+\.py \| [^|]+ \| ([^|]+) \|$", DOC.read_text(), re.M):
        params: dict[str, str | None] = {}
        for pname, rest in re.findall(r"`(\w+)`([^`]*)", cell):
            m = re.search(r"\((.*)\)", rest)
            params[pname] = m.group(1) if m else None
        out[name] = params
    return out


def value(text: str) -> Any:
    """A documented default as a value: literals, true/false, and "ln 2 / N: comment"."""
    text = text.split(":")[0].strip()
    if text.startswith("ln 2 / "):
        return math.log(2) / float(text[len("ln 2 / ") :])
    return ast.literal_eval({"true": "True", "false": "False"}.get(text, text))


@pytest.mark.parametrize("name", [n for n in ALL if n != "prefix-aware"])  # its own table: test_params_and_state
def test_params_are_the_documented_parameters_with_their_defaults(name):
    doc = documented()
    assert name in doc, f"{name} is missing from the table in docs/policies.md"
    params = make_policy(name).params()
    assert sorted(params) == sorted(doc[name])
    for pname, default in doc[name].items():
        if default is not None:
            got = params[pname]
            want = value(default)
            assert (list(got) if isinstance(got, tuple | list) else got) == pytest.approx(
                list(want) if isinstance(want, tuple) else want
            ), f"{name}.{pname}"


@pytest.mark.parametrize("name", ALL)
def test_params_rebuild_the_same_policy(name):
    """Results report params(); a table carrying them must build the same policy again."""
    pol = build(name, 50 if name in SIZED else None)
    again = make_policy({"name": name, **pol.params()})
    assert again.params() == pol.params()


BAD = [
    ("ttl", "ttl", 0),
    ("lfu-decay", "decay", -1.0),
    ("arc", "capacity", 0),
    ("2q", "capacity", 0),
    ("2q", "in_ratio", 1.5),
    ("2q", "out_ratio", -0.5),
    ("lirs", "capacity", 0),
    ("lirs", "hir_ratio", 1.0),
    ("s3fifo", "capacity", 0),
    ("s3fifo", "small_ratio", 1.0),
    ("s3fifo", "ghost_ratio", -1.0),
    ("s3fifo", "move_threshold", 0),
    ("s3fifo", "max_freq", 0),
    ("w-tinylfu", "capacity", 1),
    ("w-tinylfu", "window", 0.0),
    ("w-tinylfu", "error", 1.0),
    ("w-tinylfu", "slru", (0, 4)),
]


@pytest.mark.parametrize(("name", "param", "bad"), BAD, ids=[f"{n}-{p}" for n, p, _ in BAD])
def test_a_bad_parameter_is_a_config_error_that_names_it(name, param, bad):
    with pytest.raises(ConfigError) as err:
        make_policy({"name": name, param: bad})
    assert name in str(err.value) and param in str(err.value)


N_REFUSAL = 1000


@pytest.mark.parametrize("name", ALL)
def test_a_refused_key_is_in_use_so_refusals_cost_amortised_constant(name):
    """docs/policies.md: every policy treats a vetoed key as in use, so a key refused once is not
    asked again on every call: long-lived ancestors and pinned blocks cost O(1) amortized, and
    ``evict`` returns None only when nothing may go."""
    pol = build(name, N_REFUSAL if name in SIZED else None)
    oracle = as_offline(pol)
    rng = random.Random(5)
    if oracle is not None:  # a future in which every key is used again, at a random distance
        oracle.set_future(np.array([i + 1 + rng.randrange(10**6) for i in range(2 * N_REFUSAL)]))
    for pos, k in enumerate(range(N_REFUSAL)):
        if oracle is not None:
            oracle.position = pos
        pol.on_insert(k)
        if k % 4 == 0:  # a few hits, so scores and counts differ
            pol.on_hits([rng.randrange(k + 1)])
        pol.clock.advance(rng.choice([0.0, 1.0]))  # type: ignore[attr-defined]
    evict_refusing_every_tenth(pol, N_REFUSAL, name)
    assert sorted(drain(pol)) == list(range(0, N_REFUSAL, 10))
