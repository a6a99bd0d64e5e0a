"""The deterministic simulation's bounded run (`make test`): seeds 0..39, 150 actions each
(~6 s of CPU), plus the seeds that found bugs, kept as regression cases.

Seeds that fail on today's code because of bugs the simulation found and that are not fixed yet
are marked xfail (strict: a fix makes them pass and the mark must go); docs/testing.md lists them.
"""

from __future__ import annotations

import pytest

from .__main__ import ACTIONS, BOUNDED
from .harness import Failure, run_seed

# seed -> the open bug it shows (docs/testing.md, "Deterministic simulation": open findings)
OPEN: dict[int, str] = {}

# seeds that found bugs now fixed (docs/testing.md): each must pass
FIXED = {
    1: "erase_tenant deleted blocks a held match pinned, from under the reader",
    4: "an expired block was served again through discovery (the walk cut it; storage still held it)",
}


@pytest.mark.parametrize("seed", sorted(set(range(BOUNDED)) | set(FIXED)))
def test_seed(seed: int) -> None:
    if seed in OPEN:
        pytest.xfail(OPEN[seed])
    try:
        run_seed(seed, ACTIONS)
    except Failure as f:
        pytest.fail(f"{f}\nreplay and shrink: make simtest SEED={seed}", pytrace=False)
