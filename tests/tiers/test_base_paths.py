"""The limits every tier is built with (checked once, in the Tier base): a positive capacity and
watermarks with 0 < low <= high <= 1. The engine drains a tier from above ``high`` down to
``low``; a low watermark of 0 would make it empty the whole tier at every pass."""

from __future__ import annotations

import pytest

from ctxcache.errors import ConfigError
from ctxcache.tiers import MemoryTier


@pytest.mark.parametrize(("low", "high"), [(0.7, 0.85), (0.5, 0.5), (0.001, 1.0), (1.0, 1.0)])
def test_watermarks_in_range_are_kept(low, high):
    t = MemoryTier(1 << 20, low=low, high=high)
    assert (t.low, t.high) == (low, high)


@pytest.mark.parametrize(("low", "high"), [(0.0, 0.5), (-0.1, 0.5), (0.6, 0.5), (0.5, 1.01)])
def test_watermarks_out_of_range_are_refused(low, high):
    with pytest.raises(ConfigError, match=r"watermarks need 0 < low <= high <= 1"):
        MemoryTier(1 << 20, low=low, high=high)


@pytest.mark.parametrize("capacity", [0, -1, True, 1.5, "1GB"])
def test_capacity_must_be_a_positive_int(capacity):
    with pytest.raises(ConfigError, match="tier capacity must be a positive number of bytes"):
        MemoryTier(capacity)
