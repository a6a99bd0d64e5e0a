"""Helpers shared by the policy tests."""

from __future__ import annotations

import random
from typing import Any


def access(pol: Any, key: Any, cap: int) -> bool:
    """One object-semantics access, as the simulator does it: True on a hit."""
    if key in pol:
        pol.on_hit(key)
        return True
    if len(pol) >= cap:
        pol.evict()
    pol.on_insert(key)
    return False


def mixed_stream(n: int = 20000, seed: int = 12345) -> list[int]:
    """Deterministic (no RNG library): a skewed hot set, then a loop, then a scan, repeating."""
    x, out = seed, []
    for i in range(n):
        x = (x * 6364136223846793005 + 1442695040888963407) % 2**64
        r = x >> 24
        phase = (i // 1500) % 4
        if phase == 3:
            out.append(10_000 + i)
        elif phase == 2 and r % 3:
            out.append(1_000 + i % 140)
        else:
            out.append((r % 400) * ((r >> 20) % 400) // 400)
    return out


def drain(p: Any, can_evict: Any = None) -> list[Any]:
    """Evict until nothing is left; the victims in order."""
    out = []
    while (k := p.evict(can_evict)) is not None:
        out.append(k)
    return out


def conversations(seed: int, block_size: int, n: int = 240) -> list[list[int]]:
    """Token lists of a small multi-user chat: a shared system prompt per user group (two blocks),
    each user's history growing by a block per turn and sometimes starting over."""
    rng = random.Random(seed)
    bs = block_size
    system = [[1000 * s + i for i in range(2 * bs)] for s in range(4)]
    history: dict[int, list[int]] = {}
    out = []
    for r in range(n):
        u = rng.randrange(24)
        if u not in history or rng.random() < 0.1:
            history[u] = list(system[u % 4])
        history[u] += [100_000 + r * bs + i for i in range(bs)]
        out.append(list(history[u]))
    return out


def block_ids(requests: list[list[int]], block_size: int) -> list[tuple[int, ...]]:
    """Each request's full blocks as trace ids: equal prefixes get equal ids, as chained hashes do."""
    ids: dict[tuple[int, ...], int] = {}
    return [
        tuple(ids.setdefault(tuple(toks[: (i + 1) * block_size]), len(ids)) for i in range(len(toks) // block_size))
        for toks in requests
    ]


def evict_refusing_every_tenth(pol: Any, n: int, label: str = "") -> None:
    """Keys 0..n-1 resident, ``k % 10 == 0`` in use (refused): every other key leaves, refusals
    cost amortised O(1) (under 3 checks per key in all), and the refused keys stay."""
    calls = 0

    def in_use_every_tenth(key: Any) -> bool:
        nonlocal calls
        calls += 1
        return bool(key % 10 != 0)

    out = [pol.evict(in_use_every_tenth) for _ in range(n - n // 10)]
    assert sorted(out) == [k for k in range(n) if k % 10]
    assert calls < 3 * n, f"{label}: {calls} can_evict calls for {len(out)} evictions"
    assert pol.evict(in_use_every_tenth) is None and len(pol) == n // 10
