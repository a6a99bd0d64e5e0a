from __future__ import annotations

import pytest

from ctxcache.cli import default_trace
from ctxcache.sim.simulator import Trace
from ctxcache.sim.traces import read_mooncake


@pytest.fixture(scope="session")
def trace_head() -> Trace:
    """The first 3000 requests of the shared conversation trace (80,619 block accesses), the
    subsample the libCacheSim reference counts in these tests were computed on."""
    path = default_trace()
    assert path.is_file(), f"shared trace missing at {path}: tests read ../shared/traces"
    return Trace(list(read_mooncake(path, limit=3000)))
