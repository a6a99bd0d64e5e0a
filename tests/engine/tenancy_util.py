"""Helpers shared by the tenancy tests: tiers of every kind, a cache with tenants, one request."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from ctxcache import ContextCache
from ctxcache.engine.tenancy import load_tenancy
from ctxcache.tiers import DiskTier, MemoryTier, RedisTier, Tier

BS = 4
_prefix = itertools.count()


def tier_of(kind: str, tmp_path: Any, redis_url: str | None = None, capacity: int = 1 << 20, **kw: Any) -> Tier:
    if kind == "memory":
        return MemoryTier(capacity, **kw)
    if kind == "memory-warm":
        return MemoryTier(capacity, mode="warm", codec="raw", **kw)
    if kind == "disk":
        return DiskTier(capacity, path=tmp_path / f"disk{next(_prefix)}", fsync=False, **kw)
    assert redis_url is not None
    t = RedisTier(capacity, url=redis_url, prefix=f"tn{next(_prefix)}:", timeout=0.5, **kw)
    assert t.wait_ready()
    return t


def cache_with(tiers: list[Tier], tenants: dict[str, Any], clock: Any = None, **opts: Any) -> ContextCache:
    kw: dict[str, Any] = {"clock": clock} if clock is not None else {}
    sleep = opts.pop("sleep", None)
    env = {"CTXCACHE_MASTER_KEY": opts.pop("env_key")} if "env_key" in opts else {}
    cache = ContextCache(tiers, block_size=BS, tenancy=load_tenancy(tenants, opts, env=env), **kw)
    if sleep is not None:
        cache._engine.sleep = sleep
    return cache


def payloads(tokens: list[int], first: int = 0) -> list[list[np.ndarray]]:
    return [[np.full(16, tokens[i * BS], np.float32)] for i in range(first, len(tokens) // BS)]


def ask(cache: ContextCache, tenant: str, tokens: list[int], cache_salt: str | None = None) -> int:
    """One request: lookup, store the rest; returns the cached tokens it was served."""
    prompt = cache.prompt(tokens, tenant, cache_salt)
    with cache.lookup(prompt) as m:
        for i, p in enumerate(m.payloads):  # a hit is the block's own payload, never another's
            assert float(np.asarray(p[0])[0]) == tokens[i * BS]
        cache.store(prompt, payloads(tokens, m.n_blocks), first_block=m.n_blocks)
        return m.hit_tokens


def prompt_of(i: int, n_blocks: int = 4) -> list[int]:
    return [i * 1000 + j for j in range(n_blocks * BS)]
