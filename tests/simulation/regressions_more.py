"""More engine bugs the simulation found, kept as in regressions.py (which merges these into
``FIXED``; split off at its 400-line limit). Each fails on the code before its fix."""

from __future__ import annotations

from .plan import Action, plan

MORE: dict[str, tuple[int, list[Action]]] = {
    # an eviction's delete batch on Redis, during which a lookup read the block corrupt (the tier
    # dropped it); the delete refused (DeleteFailedError), it was taken as kept and charged again
    # with nothing stored. Found by the 10-minute run from 306000 (seeds 306272, 307396, 308063).
    # Now a named refusal of a key the tier no longer charges asks whether the block is still there
    "refused_named_delete_of_vanished": (306272, [
        ("master", 0, 2, True), ("store", "a", 3, 0), ("step", 2, 441580666, []), ("corrupt", 0, 35),
        ("store", "a", 4, 1), ("faults", 0, 1.0, 1.0), ("store", "c", 4, 2),
        ("step", 2, 501974960, [("store", "a", 1, 0), ("store", "a", 3, 0)]), ("step", 3, 224540422, []),
    ]),
    # a store whose parent block was gone when it ran (nothing placed, its blocks counted as
    # rejected) was not counted in ``stores`` (ctxcache_stores_total: "store calls"). Found by the
    # 10-minute run from 306000 (seed 309031); it did not shrink: its first 137 planned actions
    "store_without_parent_counted": (309031, plan(309031, 150)[1][:137]),
}  # fmt: skip
