"""Semantic response cache for the server: the [semantic] config table, the hook, the admin routes.

```toml
[semantic]
tenants = ["team-a"]        # opt-in per tenant ("*": every tenant); absent or empty: off
threshold = 0.86            # serve only at cosine >= threshold (1 = exact repeats only)
capacity = "256MiB"         # entries' bytes (stored block + vector); the policy evicts past it
policy = "lru"              # any name of ctxcache.policies
ttl = "1d"                  # optional; entries expire after it
embedder = "minilm"         # "minilm" (all-MiniLM-L6-v2, offline) or "hashing" (no model; tests)
store = { kind = "disk", path = "~/.cache/ctxcache/semantic" }   # or { kind = "redis", url = "..." }
```

A Redis store keeps the deletes that may not have landed (Redis down) in a local journal, ``journal``
in the store table (default: a file under ctxcache's home; false: none), so a restart never indexes
an entry erased during an outage. Erasures also leave tombstones in Redis, which the other servers
on the same prefix read every ``sync_interval`` seconds (store table, default 2) to drop those
entries from memory; the semantic counters are on /metrics (``ctxcache_semantic_*``).

Admin routes (admin key, see routes_admin.require_admin), under /v1/admin/semantic: GET stats, GET entries
(?tenant=&limit=&offset=), GET/DELETE entries/{id}, DELETE tenants/{tenant}/entries,
POST entries/{id}/feedback ({"similarity": s, "correct": bool}: vCache-style learning).
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Depends, FastAPI, Request
from pydantic import BaseModel, ConfigDict, Field

from ..config import parse_duration, parse_size
from ..errors import ConfigError, SemanticInputError
from ..observability.exporter import SemanticCollector
from ..semantic import DEFAULT_THRESHOLD, EntryStore, HashingEmbedder, SemanticCache
from .deps import APIError
from .replicate import submit
from .routes_admin import require_admin
from .semantic_hook import SemanticMiddleware, Settings

if TYPE_CHECKING:
    from ..semantic import Embedder, Entry

_KEYS = {"tenants", "threshold", "capacity", "policy", "ttl", "embedder", "store", "max_text_chars", "error_bound"}
router = APIRouter(prefix="/v1/admin/semantic", tags=["admin"], dependencies=[Depends(require_admin)])


def _embedder(name: str) -> Embedder:
    if name == "minilm":
        from ..semantic import MiniLMEmbedder

        return MiniLMEmbedder()
    if name == "hashing":
        return HashingEmbedder()
    raise ConfigError(f"[semantic] embedder must be 'minilm' or 'hashing', not {name!r}")


def _store_spec(spec: dict[str, Any], model_tag: str) -> dict[str, Any]:
    """The store table with its defaults: a disk store under ctxcache's home; a Redis store's
    failed deletes journaled there too (``journal = false``: not kept across a restart)."""
    from ..integrations.model_store import ctxcache_home

    store_spec = dict(spec.get("store") or {})
    if not store_spec:
        store_spec = {"kind": "disk", "path": str(ctxcache_home() / "semantic" / model_tag)}
    if store_spec.get("kind", "disk") == "disk" and "path" in store_spec:
        store_spec["path"] = str(Path(str(store_spec["path"])).expanduser())
    if store_spec.get("kind") == "redis":
        journal = store_spec.get("journal")
        if journal is None:  # one file per server and prefix: another store's deletes are not ours
            where = f"{store_spec.get('url', '')}\0{store_spec.get('prefix', '')}".encode()
            name = f"redis-{hashlib.blake2b(where, digest_size=8).hexdigest()}.pending-deletes"
            journal = ctxcache_home() / "semantic" / model_tag / name
        store_spec["journal"] = None if journal is False else str(Path(str(journal)).expanduser())
    return store_spec


def build_semantic(
    spec: dict[str, Any], model_tag: str, embedder: Embedder | None = None
) -> tuple[SemanticCache, Settings]:
    """A SemanticCache and hook settings from a [semantic] table (raises ConfigError when bad)."""
    bad = set(spec) - _KEYS
    if bad:
        raise ConfigError(f"unknown [semantic] keys {sorted(bad)}; known: {sorted(_KEYS)}")
    tenants = spec.get("tenants", [])
    if tenants != "*" and not (isinstance(tenants, list) and all(isinstance(t, str) and t for t in tenants)):
        raise ConfigError(f"[semantic] tenants must be a list of tenant ids or '*', got {tenants!r}")
    try:
        cache = SemanticCache(
            embedder or _embedder(str(spec.get("embedder", "minilm"))),
            EntryStore.from_config(_store_spec(spec, model_tag)),
            threshold=spec.get("threshold", DEFAULT_THRESHOLD),
            capacity=parse_size(spec.get("capacity", "256MiB")),
            policy=spec.get("policy", "lru"),
            ttl=None if spec.get("ttl") is None else parse_duration(spec["ttl"], "[semantic] ttl"),
            error_bound=spec.get("error_bound"),
            max_text_chars=int(spec.get("max_text_chars", 32_000)),
        )
    except SemanticInputError as exc:
        raise ConfigError(f"[semantic] {exc}") from None
    return cache, Settings(None if tenants == "*" else frozenset(tenants), model_tag)


def install(app: FastAPI, cache: SemanticCache, settings: Settings) -> None:
    """Put the hook in front of the chat routes and mount the admin routes (before the app starts)."""
    app.state.semantic = cache
    app.state.ctx.metrics.registry.register(SemanticCollector(cache.stats))  # the public /metrics
    app.add_middleware(SemanticMiddleware, cache=cache, settings=settings)
    app.include_router(router)


def _cache(request: Request) -> SemanticCache:
    cache: SemanticCache | None = getattr(request.app.state, "semantic", None)
    if cache is None:
        raise APIError(404, "the semantic cache is not enabled on this server ([semantic] in the config)")
    return cache


def _entry(cache: SemanticCache, entry_id: str) -> Entry:
    try:
        key = bytes.fromhex(entry_id)
    except ValueError:
        raise APIError(400, f"entry id must be 32 hex characters, got {entry_id!r}", param="entry_id") from None
    entry = cache.get(key) if len(key) == 16 else None
    if entry is None:
        raise APIError(404, f"no semantic-cache entry {entry_id}")
    return entry


class Feedback(BaseModel):
    model_config = ConfigDict(extra="forbid")
    similarity: float = Field(ge=0.0, le=1.0)
    correct: bool


@router.get("/stats")
async def stats(request: Request) -> dict[str, Any]:
    """Entries, bytes, hits, misses, bypasses, vetoes, evictions."""
    return _cache(request).stats()


@router.get("/entries")
async def list_entries(
    request: Request, tenant: str | None = None, limit: int = 100, offset: int = 0
) -> dict[str, Any]:
    """Entries, newest first (optionally one tenant's)."""
    if not 1 <= limit <= 1000 or offset < 0:
        raise APIError(400, "limit must be in [1, 1000] and offset >= 0")
    items = sorted(_cache(request).entries(tenant), key=lambda e: e.created, reverse=True)
    return {"total": len(items), "data": [e.summary() for e in items[offset : offset + limit]]}


@router.get("/entries/{entry_id}")
async def get_entry(request: Request, entry_id: str) -> dict[str, Any]:
    return _entry(_cache(request), entry_id).summary()


def _erase_one(cache: SemanticCache, key: bytes) -> dict[str, Any]:
    erased = cache.erase(key)
    return {"erased": int(erased), "verified": cache.erased_verified(key)}


@router.delete("/entries/{entry_id}")
async def delete_entry(request: Request, entry_id: str) -> dict[str, Any]:
    """Erase one entry from memory and from its store; ``verified``: its record is surely gone
    (false while its delete is pending: the store retries it)."""
    cache = _cache(request)
    entry = _entry(cache, entry_id)
    out = {**await asyncio.to_thread(_erase_one, cache, entry.id), "id": entry_id}
    rep = await submit(request, "sem_erase", entry.id)  # and in every region
    return out if rep is None else {**out, "replication": rep}


@router.delete("/tenants/{tenant}/entries")
async def erase_tenant(request: Request, tenant: str) -> dict[str, Any]:
    """Erase every entry of a tenant, from memory and the store (records other processes wrote
    included); ``verified`` only when a search of the store finds none and no delete is pending."""
    return await asyncio.to_thread(_cache(request).erase_tenant, tenant)


@router.post("/entries/{entry_id}/feedback")
async def feedback(request: Request, entry_id: str, body: Feedback) -> dict[str, Any]:
    """Whether a hit served at ``similarity`` was right: tightens (or, with evidence, loosens) its threshold."""
    cache = _cache(request)
    entry = _entry(cache, entry_id)
    out = {"id": entry_id, "threshold": cache.feedback(entry.id, body.similarity, body.correct)}
    rep = await submit(request, "sem_feedback", entry.id, body.correct)  # wrong: erased in every region
    return out if rep is None else {**out, "replication": rep}
