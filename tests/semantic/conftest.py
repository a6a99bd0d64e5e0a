from __future__ import annotations

import pytest

from ctxcache.semantic import EntryStore, MiniLMEmbedder, SemanticCache


@pytest.fixture(scope="session")
def minilm() -> MiniLMEmbedder:
    """The real embedder, loaded once per test session (~2 s)."""
    return MiniLMEmbedder()


class Clock:
    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def make_cache(tmp_path, minilm, clock):
    """A cache on a disk store under tmp_path; call again with the same path to 'restart'."""
    made: list[SemanticCache] = []

    def make(path=None, embedder=None, **kw) -> SemanticCache:
        kw.setdefault("clock", clock)
        c = SemanticCache(embedder or minilm, EntryStore.disk(path or tmp_path / "sem", fsync=False), **kw)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


@pytest.fixture
def made():
    """Caches a test opened itself (the Redis-store tests): closed after it."""
    caches: list[SemanticCache] = []
    yield caches
    for c in caches:
        c.close()
