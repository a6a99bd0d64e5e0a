from __future__ import annotations

import numpy as np
import pytest

from ctxcache.errors import ConfigError
from ctxcache.semantic import AutoIndex, HnswIndex
from ctxcache.semantic import index as index_mod
from ctxcache.semantic.index import scaled_ef


def _unit(rng: np.random.Generator, n: int, dim: int = 8) -> np.ndarray:
    x = rng.standard_normal((n, dim)).astype(np.float32)
    return np.asarray(x / np.linalg.norm(x, axis=1, keepdims=True), dtype=np.float32)


def test_scaled_ef_is_64_for_small_partitions_then_grows_as_sqrt_n_up_to_512() -> None:
    assert [scaled_ef(n) for n in (0, 1, 1000, 4096)] == [64, 64, 64, 64]
    # x2 per x4 entries above 4,096 (AutoIndex's switch to HNSW); docs/semantic-cache.md has the figures
    assert [scaled_ef(n) for n in (16_384, 65_536, 100_000, 262_144)] == [128, 256, 316, 512]
    assert scaled_ef(1_000_000) == scaled_ef(10**8) == 512
    sizes = range(0, 3_000_000, 7_919)
    assert all(scaled_ef(a) <= scaled_ef(b) for a, b in zip(sizes, sizes[1:]))


def test_default_index_searches_with_the_ef_its_live_size_calls_for(monkeypatch: pytest.MonkeyPatch) -> None:
    # The rule is stubbed so a handful of vectors reach sizes where it differs from 64.
    monkeypatch.setattr(index_mod, "scaled_ef", lambda n: 20 + n)
    ix, vecs = HnswIndex(8), _unit(np.random.default_rng(1), 30)
    for i, v in enumerate(vecs):
        ix.add(i, v)
    assert ix.ef_search == 50
    ix.search(vecs[0], 3)
    assert ix._ix.ef == 50
    for i in range(10):
        ix.remove(i)  # deleted entries no longer count
    ix.search(vecs[20], 3)
    assert ix.ef_search == ix._ix.ef == 40


def test_cache_partitions_scale_ef_after_the_switch_to_hnsw(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index_mod, "scaled_ef", lambda n: 100 + n)
    auto, vecs = AutoIndex(8, switch_at=16), _unit(np.random.default_rng(2), 40)
    for i, v in enumerate(vecs):
        auto.add(i, v)
    assert auto.kind == "hnsw"
    assert auto.search(vecs[5], 1)[0][0] == 5
    assert auto._ix._ix.ef == 140  # type: ignore[union-attr]


def test_a_fixed_ef_stays_fixed_and_a_large_k_raises_it_for_that_search_only() -> None:
    ix, vecs = HnswIndex(8, ef_search=40), _unit(np.random.default_rng(3), 100)
    for i, v in enumerate(vecs):
        ix.add(i, v)
    assert len(ix.search(vecs[0], 60)) == 60  # hnswlib needs ef >= k
    assert ix._ix.ef == 60
    ix.search(vecs[0], 1)
    assert ix.ef_search == ix._ix.ef == 40  # the earlier large k did not stick
    ix.ef_search = None
    assert ix.ef_search == scaled_ef(100)


@pytest.mark.parametrize("bad", [0, -5, 1.5, True, "64"])
def test_a_bad_ef_search_is_a_config_error(bad: object) -> None:
    with pytest.raises(ConfigError, match="ef_search"):
        HnswIndex(8, ef_search=bad)  # type: ignore[arg-type]
    ix = HnswIndex(8)
    with pytest.raises(ConfigError, match="ef_search"):
        ix.ef_search = bad  # type: ignore[assignment]
