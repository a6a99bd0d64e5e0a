"""ContextCache, the public API: match -> load -> store across tiers.

A prompt is cut into blocks of ``block_size`` tokens, each keyed by a chained hash under a
namespace (model, tenant, salt). ``lookup`` finds, loads and pins the longest cached prefix from
any tier; the caller prefills only the rest and ``store``s the new blocks' payloads (one per full
block, any object for a RAM tier: KV tensors, numpy arrays, bytes); ``release`` unpins::

    cache = ContextCache.from_config({"block_size": 256, "tiers": [
        {"kind": "memory", "capacity": "2GiB"},
        {"kind": "disk", "capacity": "20GiB", "path": "~/.cache/kv"},
    ]})
    prompt = cache.prompt(token_ids, "tenant-a")   # validated once, hashed at most once
    with cache.lookup(prompt) as m:                 # m.hit_tokens, m.payloads, m.usage
        kv = prefill(token_ids[m.hit_tokens:], past=m.payloads)
        cache.store(prompt, new_block_payloads, first_block=m.n_blocks)
    cache.close()                                   # flush writes, spill RAM to disk

Every method is thread-safe. Payloads are handed out as stored (no copy) or as zero-copy views of
encoded blocks; a Match keeps its blocks from being evicted until released. The work is done by
the engine (``ctxcache.engine``): slots (tier + policy + counters), placement, lookup, store and
the background mover; this class only validates arguments and delegates.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from typing import Any, Unpack

from .config import CacheConfig, load_config
from .engine import Engine, Match, Slot
from .engine import erasure as _erasure
from .engine.factory import engine_options, make_tier
from .engine.options import EngineOptions
from .engine.tenancy import Tenancy
from .errors import MatchReleasedError
from .index import RadixIndex
from .keys import BlockHasher, Namespace, Prompt, Tokens
from .tiers import Tier
from .units import Clock
from .usage import Usage

__all__ = ["ContextCache", "EngineOptions", "Match", "Prompt"]


class ContextCache:
    """A context (KV) cache over tiers listed fastest first (memory, then disk / redis).

    tiers: storage tiers, each built with its capacity, watermarks and policy.
    options: keyword options, all optional (block_size, model, salt, tenancy, ...), typed by
    ``EngineOptions``, where each one and its default are documented.
    """

    def __init__(self, tiers: Sequence[Tier], **options: Unpack[EngineOptions]) -> None:
        self._engine = Engine(tiers, **options)  # the engine checks and applies them

    @classmethod
    def from_config(
        cls, source: Mapping[str, Any] | str | os.PathLike[str] | CacheConfig, *, clock: Clock = time.monotonic
    ) -> ContextCache:
        """Build from a config mapping, a TOML path or a CacheConfig (see docs/configuration.md)."""
        cfg = source if isinstance(source, CacheConfig) else load_config(source)
        options = engine_options(cfg)  # before the tiers: a bad tenant table opens nothing
        options["clock"] = clock
        tiers: list[Tier] = []
        try:
            for i, tc in enumerate(cfg.tiers):
                tiers.append(make_tier(i, tc, cfg.block_size, clock))
            return cls(tiers, **options)
        except BaseException:
            for tier in tiers:  # release what was opened (disk locks, redis connections)
                tier.close()
            raise

    # --- what it is made of ---------------------------------------------------------------------------
    @property
    def tiers(self) -> list[Tier]:
        """The storage tiers, fastest first."""
        return self._engine.tiers

    @property
    def slots(self) -> list[Slot]:
        """Each tier with its policy, limits and counters (``slot.policy``, ``slot.stats()``)."""
        return self._engine.slots

    @property
    def index(self) -> RadixIndex:
        return self._engine.index

    @property
    def hasher(self) -> BlockHasher:
        return self._engine.hasher

    @property
    def block_size(self) -> int:
        return self._engine.block_size

    @property
    def model(self) -> str:
        return self._engine.model

    @property
    def salt(self) -> bytes:
        return self._engine.salt

    @property
    def clock(self) -> Clock:
        return self._engine.clock

    @property
    def tenancy(self) -> Tenancy | None:
        """The configured tenants (None: one implicit tenant per namespace name)."""
        return self._engine.tenancy

    def namespace(self, namespace: str | Namespace = "default", cache_salt: str | None = None) -> Namespace:
        """The namespace of a tenant name (cached), or ``namespace`` itself. With tenants
        configured, an unknown tenant raises ``UnknownTenantError``."""
        return self._engine.namespace(namespace, cache_salt)

    # --- the request path -----------------------------------------------------------------------------
    def prompt(
        self, tokens: Tokens | Prompt, namespace: str | Namespace = "default", cache_salt: str | None = None
    ) -> Prompt:
        """Validate ``tokens`` once for a whole request. Pass the Prompt to ``lookup``, ``store``
        and to prefixes (``prompt.prefix(n)``): its block keys are hashed at most once.
        ``cache_salt`` (vLLM's per-request salt) narrows sharing within the tenant."""
        return self._engine.prompt(tokens, namespace, cache_salt)

    def lookup(self, tokens: Tokens | Prompt, namespace: str | Namespace = "default") -> Match:
        """Find and pin the longest cached prefix of ``tokens``, from any tier. Call ``release``."""
        return self._engine.lookup(tokens, namespace)

    def release(self, match: Match) -> None:
        """Unpin a Match's blocks. Releasing twice is an error."""
        if match.released:
            raise MatchReleasedError("this Match was already released")
        self._engine.release(match)

    def store(
        self,
        tokens: Tokens | Prompt,
        payloads: Sequence[Any],
        namespace: str | Namespace = "default",
        first_block: int = 0,
    ) -> Usage:
        """Store payloads for full blocks ``first_block``.. of ``tokens``.

        Blocks before ``first_block`` must already be cached (normally: pinned by a Match).
        Blocks that are already cached are kept as they are; a cached block whose payload was
        lost (failed verification) is repaired. Storing stops at the first block that cannot be
        placed (no room, or a hash collision), since later blocks would be unreachable without it.
        """
        return self._engine.store(tokens, payloads, namespace, first_block)

    # --- maintenance ----------------------------------------------------------------------------------
    def evict_all(self) -> int:
        """Evict every unpinned block (tests, admin). Returns blocks removed from the index."""
        return self._engine.evict_all()

    def erase_tenant(self, tenant: str) -> dict[str, Any]:
        """Remove every block of ``tenant`` from every tier (RAM, disk files, Redis keys), wait for
        the deletes and check each persistent tier again (``verified``). Logged to the audit log."""
        return self._engine.erase_tenant(tenant)

    def invalidate(self, key: bytes) -> dict[str, Any]:
        """Withdraw a block (a document or system prompt no longer valid) and everything cached
        under it: every block whose prefix continues it, in the index and in persistent storage,
        including blocks another process sharing the Redis prefix (or an earlier run's disk) wrote.
        Waits for the deletes and searches every persistent tier again (``verified``). Blocks a
        lookup holds are misses from now on and leave once released (``in_use``). Idempotent: an
        unknown or already invalidated key gives ``erased_blocks=0, verified=True``. Storing the
        same tokens later caches them anew (new content, not a ban). An operator pin over them
        ends. Returns {"key": hex, "erased_blocks", "found_in_storage", "in_use", "verified"};
        logged to the audit log. Cost: one scan of the index and, per persistent tier, one read of
        every stored block's header (Redis SCAN): an admin operation, not a request-path one."""
        if not isinstance(key, bytes):
            raise TypeError(f"key must be bytes (a block key), not {type(key).__name__}")
        return self._engine.invalidate(key)

    def set_tenant_ttl(self, tenant: str, ttl: float | None) -> dict[str, Any]:
        """Change a configured tenant's default block TTL (seconds; None: no TTL) now. Its blocks
        are re-stamped: last use + the new TTL, so a shorter TTL expires idle blocks at once and
        the sweep (started if it was not running) reclaims them. Raises ``UnknownTenantError``
        for a tenant that is not configured. Returns {"tenant", "ttl", "blocks_restamped"}."""
        return self._engine.set_tenant_ttl(tenant, ttl)

    def pin_prefix(self, key: bytes) -> int:
        """Keep the prefix ending at block ``key`` (its blocks from the root down) from eviction
        and demotion until ``unpin_prefix``. A set, not a refcount: pinning twice then unpinning
        once leaves it unpinned, and ``release`` of a Match never unpins it. Erasure, invalidation
        and a block's TTL win: the pin ends when one of its blocks is erased or expires. Not kept
        over a restart. Returns the blocks the pin covers (0: ``key`` is not indexed here, and
        nothing is pinned); the same again for a prefix already pinned."""
        return self._engine.pin_prefix(key)

    def unpin_prefix(self, key: bytes) -> int:
        """End the operator pin on the prefix ending at ``key``; returns the blocks it covered
        (0: it was not pinned). Blocks another pinned prefix shares stay pinned."""
        return self._engine.unpin_prefix(key)

    def pinned_prefixes(self) -> list[bytes]:
        """The keys of the prefixes pinned by ``pin_prefix`` now."""
        return [k for k in self._engine.pinned_prefixes() if isinstance(k, bytes)]

    def clear(self) -> dict[str, Any]:
        """Erase every unpinned block of every tenant from every tier, like ``erase_tenant``."""
        return _erasure.flush_all(self._engine)

    def tenant_usage(self, tenant: str) -> dict[str, Any]:
        """Bytes and quota per tier, blocks, lookups and hit tokens of one tenant."""
        return self._engine.tenant_usage(tenant)

    def sweep(self, now: float | None = None) -> int:
        """Reclaim expired blocks now (a background thread does it every second)."""
        return self._engine.sweep(now)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued write and delete has reached its tier. False on timeout."""
        return self._engine.flush(timeout)

    def stats(self) -> dict[str, Any]:
        """Counters (lookups, hits, evictions, demotions, ...), bytes, and per-tier stats."""
        return self._engine.stats()

    def close(self) -> None:
        """Write RAM blocks down to local disk if that is the first persistent tier (so a restart
        finds them), flush queued writes, stop the mover, close every tier. Idempotent."""
        self._engine.close()

    def __enter__(self) -> ContextCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
