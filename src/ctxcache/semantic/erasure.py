"""A tenant's verified erasure from the semantic cache, on the KV side's contract (engine/erasure.py).

Every entry of the tenant leaves memory and the store; then the store is searched for the tenant's
records this process does not hold (another process on the same Redis prefix wrote them, or they
were stored while the erasure ran), which are deleted too, and searched again until a search finds
none. The result is ``verified`` only if that search could run (the store was reachable) and no
delete is pending afterwards (store.py keeps failed deletes and retries them once more here): a
record that may survive is never reported as erased. Each erasure writes one line to the
``ctxcache.audit`` log.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ..errors import CorruptBlockError
from .entry import decode_entry

if TYPE_CHECKING:
    from .cache import SemanticCache

audit = logging.getLogger("ctxcache.audit")


def _stored_of(cache: SemanticCache, tenant: str, keys: list[bytes]) -> list[bytes] | None:
    """The keys among ``keys`` whose record belongs to ``tenant``: known ones from memory, the rest
    read and decoded. None if the store stopped answering meanwhile."""
    store = cache._store
    with cache._lock:
        known = {k: cache._entries[k].tenant for k in keys if k in cache._entries}
    found = [k for k, t in known.items() if t == tenant]
    for key in keys:
        if key in known:
            continue
        payload = store.get(key)
        if payload is None:
            continue  # gone since the listing (or unreadable: ``reachable`` below tells which)
        try:
            entry, _ = decode_entry(key, payload)
        except CorruptBlockError:
            continue  # nothing in it can be attributed
        if entry.tenant == tenant:
            found.append(key)
    return found if store.reachable else None


def _erase_stored(cache: SemanticCache, tenant: str, rounds: int = 3) -> tuple[int, bool]:
    """Search the store for the tenant's records and delete them until a search finds none.
    Returns (records deleted, whether the last search found none)."""
    deleted = 0
    for _ in range(rounds):
        keys = cache._store.scan()
        found = None if keys is None else _stored_of(cache, tenant, keys)
        if found is None:
            return deleted, False
        if not found:
            return deleted, True
        with cache._lock:
            for key in found:
                cache._forget(key)  # if a store() put it back in memory meanwhile
            cache._store.erase_many(found)
            cache.counts["erased"] += len(found)
        deleted += len(found)
    return deleted, False


def erase_tenant(cache: SemanticCache, tenant: str) -> dict[str, Any]:
    with cache._lock:  # one batch of deletes (and tombstones) rather than a round trip per entry
        ids = [e.id for e in cache._entries.values() if e.tenant == tenant]
        gone = [eid for eid in ids if cache._forget(eid) is not None]
        cache._store.erase_many(gone)
        erased = len(gone)
        cache.counts["erased"] += erased
    found, clean = _erase_stored(cache, tenant)
    settled = cache._store.settled()  # any pending delete may be one of this tenant's records
    pending = len(cache._store.pending)
    verified = clean and settled
    audit.info(
        "semantic erase tenant=%s entries=%d found_in_storage=%d pending_deletes=%d verified=%s",
        tenant, erased + found, found, pending, verified,
    )  # fmt: skip
    return {"tenant": tenant, "erased": erased + found, "found_in_storage": found, "pending_deletes": pending,
            "verified": verified}  # fmt: skip
