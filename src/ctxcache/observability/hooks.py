"""Feed a CacheObserver from a live ContextCache's index: every block that enters or leaves.

The index is where a block's life begins and ends (tiers only move it), so observing its
insert and remove sees every block once, whatever tier it sits in. The eviction group is the
block's tenant (the index tag). Eviction counts by reason are the cache's own counters, read at
scrape time; the observer keeps only what the indicators need.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from .observer import CacheObserver


def attach(cache: Any, observer: CacheObserver) -> None:
    """Wrap ``cache.index``'s insert and remove (instance attributes; the class is untouched).

    Runs under the cache's lock, like the calls it wraps; costs one dict operation per block."""
    index = cache.index
    if getattr(index, "_ctxcache_observed", None) is not None:
        raise RuntimeError("this cache already has an observer attached")
    insert, remove = index.insert, index.remove
    # The hot path: bind the observer's containers once; per block, one hash test and at most
    # one dict store (births are sampled by key hash), per eviction one count in a dict.
    born, bucket, clock, mask = observer.ages.born, observer.entropy.bucket, observer.clock, observer.ages.sample_mask

    def observed_insert(
        key: Hashable, parent: Hashable, tokens: bytes, depth: int, tag: Any = None, _hash: Any = hash
    ) -> Any:
        node = insert(key, parent, tokens, depth, tag)
        if not _hash(key) & mask:
            born[key] = clock()  # the index refuses a key it holds, so this is the block's birth
        return node

    def observed_remove(key: Hashable, _hash: Any = hash) -> Any:
        node = remove(key)
        if not _hash(key) & mask:
            born.pop(key, None)
        bucket[0][node.tag] += 1  # a defaultdict(int): one C-level update
        return node

    index.insert, index.remove = observed_insert, observed_remove
    index._ctxcache_observed = observer
    for key in list(getattr(index, "_nodes", {})):  # blocks already there (a restart's recovery)
        observer.block_inserted(key)
