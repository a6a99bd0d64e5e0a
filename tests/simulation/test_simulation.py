"""The deterministic simulation in `make test`: seeds 0..99, 150 actions each (about 12 s of
CPU), and the shrunk action lists of the bugs it found (regressions.py), each fixed.

Seeds that fail on today's code because of bugs the simulation found and that are not fixed yet
are marked xfail (strict: a fix makes them pass, and then the mark must go); docs/testing.md lists
them under "open findings".
"""

from __future__ import annotations

import pytest

from .__main__ import ACTIONS, BOUNDED
from .harness import Failure, run_seed
from .model_gaps import MODEL_GAPS
from .regressions import FIXED

# seed -> the open finding it shows (docs/testing.md, "Open findings"), by the violation it ends on
OPEN: dict[int, str] = {}


@pytest.mark.parametrize("seed", range(BOUNDED))
def test_seed(seed: int) -> None:
    if seed in OPEN:
        try:
            run_seed(seed, ACTIONS)
        except Failure:
            pytest.xfail(OPEN[seed])
        pytest.fail(f"seed {seed} passes now: take it off OPEN ({OPEN[seed]})")
    try:
        run_seed(seed, ACTIONS)
    except Failure as f:
        pytest.fail(f"{f}\nreplay and shrink: make simtest SEED={seed}", pytrace=False)


@pytest.mark.parametrize("name", sorted(FIXED))
def test_fixed_bug_stays_fixed(name: str) -> None:
    seed, actions = FIXED[name]
    run_seed(seed, ACTIONS, actions=actions)


@pytest.mark.parametrize("name", sorted(MODEL_GAPS))
def test_model_gap_stays_closed(name: str) -> None:
    seed, actions = MODEL_GAPS[name]
    run_seed(seed, ACTIONS, actions=actions)
