"""Feed a CacheObserver from a live ContextCache's index: every block that enters or leaves.

The index is where a block's life begins and ends (tiers only move it), so observing its
insert and remove sees every block once, whatever tier it sits in. A removed block whose payload
had been lost (failed verification or load) counts as a ``corrupt`` eviction, any other as a
``capacity`` one; the group is the block's tenant (the index tag).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from .observer import CacheObserver

LOST = -1  # Node.tier of a block whose payload failed to load


def attach(cache: Any, observer: CacheObserver) -> None:
    """Wrap ``cache.index``'s insert and remove (instance attributes; the class is untouched).

    Runs under the cache's lock, like the calls it wraps; costs one dict operation per block."""
    index = cache.index
    if getattr(index, "_ctxcache_observed", None) is not None:
        raise RuntimeError("this cache already has an observer attached")
    insert, remove = index.insert, index.remove

    def observed_insert(key: Hashable, parent: Hashable, tokens: bytes, depth: int, tag: Any = None) -> Any:
        node = insert(key, parent, tokens, depth, tag)
        observer.block_inserted(key)
        return node

    def observed_remove(key: Hashable) -> Any:
        node = remove(key)
        reason = "corrupt" if getattr(node, "tier", 0) == LOST else "capacity"
        observer.block_evicted(key, getattr(node, "tag", None) or "default", reason)
        return node

    index.insert, index.remove = observed_insert, observed_remove
    index._ctxcache_observed = observer
    for key in list(getattr(index, "_nodes", {})):  # blocks already there (a restart's recovery)
        observer.block_inserted(key)
