"""Shrinking a failing run: drop actions (chunks, then single ones, then nested requests) while
the run still fails with the same kind of violation. The setup stays the seed's."""

from __future__ import annotations

import time

from .harness import Failure, run_seed
from .plan import Action, plan


def kind(why: str) -> str:
    """A violation's kind: its message without the figures, which shrinking may change."""
    return "".join(c for c in why if not c.isdigit())[:60]


def fails(seed: int, n: int, actions: list[Action], want: str) -> Failure | None:
    try:
        run_seed(seed, n, actions=actions)
    except Failure as f:
        return f if kind(f.why) == want else None
    return None


def shrink(seed: int, n: int, failure: Failure, budget_s: float = 60.0) -> tuple[list[Action], Failure]:
    """The shortest failing action list found within ``budget_s``, and its failure."""
    deadline = time.monotonic() + budget_s
    want = kind(failure.why)
    actions = plan(seed, n)[1][: failure.step + 1]
    best = failure
    chunk = max(1, len(actions) // 2)
    while chunk >= 1 and time.monotonic() < deadline:
        i, changed = 0, False
        while i < len(actions) and time.monotonic() < deadline:
            trial = actions[:i] + actions[i + chunk :]
            got = fails(seed, n, trial, want) if trial else None
            if got is not None:
                actions, best, changed = trial[: got.step + 1], got, True
            else:
                i += chunk
        if not changed:
            chunk //= 2
    for i, a in enumerate(actions):  # nested requests of mover steps
        if a[0] != "step":
            continue
        j = 0
        while j < len(a[3]) and time.monotonic() < deadline:
            trial_a = (*a[:3], a[3][:j] + a[3][j + 1 :])
            trial = actions[:i] + [trial_a] + actions[i + 1 :]
            got = fails(seed, n, trial, want)
            if got is not None:
                actions, a, best = trial, trial_a, got
            else:
                j += 1
    return actions, best
