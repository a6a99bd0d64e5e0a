"""A tenant's default TTL changed at run time (an operator, or the region replicator applying a
TTL register): the new TTL applies to the blocks the tenant already holds, not only to new ones.

A block's deadline is its last use (store or hit) plus the TTL, so the last use is recovered from
the old deadline and the old TTL, and the block is re-stamped with last use plus the new TTL: a
shorter TTL makes blocks that have idled longer than it expired at once (the sweep reclaims them),
a longer one keeps them for longer, as if it had always been configured. A block with no deadline
(the tenant had no TTL) is stamped from now. ``None`` drops every deadline.

A block whose deadline has already passed is left as it is: it is a miss already, and it may be
an erased or invalidated block a lookup still holds (marked expired, its deadline -inf), which a
new TTL must never bring back. Blocks not in the index (charged to the tenant from an earlier
run's disk, never indexed) have no deadline to change: they only leave by eviction or erasure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .tenancy import UnknownTenantError

if TYPE_CHECKING:
    from .core import Engine


def set_tenant_ttl(e: Engine, tenant: str, ttl: float | None) -> dict[str, Any]:
    if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not ttl > 0):
        raise ValueError(f"ttl must be a positive number of seconds or None, got {ttl!r}")
    if e.tenancy is None or tenant not in e.tenancy.tenants:
        raise UnknownTenantError(f"unknown tenant {tenant!r}: a TTL can only be set for a configured tenant")
    restamped = 0
    with e.lock:
        t = e.tenancy.tenants[tenant]
        old, now, dl = t.ttl, e.clock(), e.expiry.deadline
        t.ttl = None if ttl is None else float(ttl)
        for node in e.index:
            if node.tag != tenant:
                continue
            d = dl.get(node.key)
            if d is not None and d <= now:
                continue  # expired already (or erased while held): stays a miss
            if ttl is None:
                if d is not None:
                    e.expiry.forget(node.key)
                    restamped += 1
                continue
            used = d - old if d is not None and old is not None else now
            e.expiry.set(node.key, used + ttl, node.depth)
            restamped += 1
    if ttl is not None:
        e.ensure_sweeper()  # a tenancy without TTLs started none
    return {"tenant": tenant, "ttl": t.ttl, "blocks_restamped": restamped}
