"""Model gaps the simulation showed: runs the harness failed although the engine was right, each
kept as the shrunk action list that showed it (replayed with its seed's setup, as regressions.py's
engine bugs are). Each fails on the harness before its fix (docs/testing.md, "Deterministic
simulation")."""

from __future__ import annotations

from .plan import Action

# Model gaps: runs the harness failed although the engine was right; each fails on the harness
# before its fix (docs/testing.md, "Deterministic simulation")
MODEL_GAPS: dict[str, tuple[int, list[Action]]] = {
    # a block live at a restart (TTL unknown) whose store stopped early (no room: class-0 blocks
    # fill Redis) stayed unknown to the engine, which found it later and served it with a TTL from
    # then; the model had taken the failed store for a touch
    "unknown_ttl_store_stopped_early": (200340, [
        ("store", "c", 3, 0), ("restart",), ("store", "c", 2, 0), ("step", 1, 795467630, [("store", "c", 3, 1)]),
        ("tick", 2.0), ("step", 1, 924859164, [("store", "c", 3, 1)]),
    ]),
    # an erased (or expired) blob a refused delete kept on disk/Redis is no copy, even when its
    # bytes equal a block stored since (the same version stored again): the model counted it as a
    # copy and then found "more lost than allowed" (seed 200214); the engine's erased mark decides
    "erased_blob_kept_is_no_copy": (200214, [
        ('faults', 1, 0.0, 1.0), ('step', 2, 212542688, [('store', 'b', 0, 0)]), ('erase', 'b'), ('step', 1, 135093691, [('store', 'a', 3, 0), ('store', 'a', 1, 2), ('tick', 0.25)]),
        ('tick', 0.5), ('tick', 2.0), ('step', 1, 239929651, [('tick', 0.25)]), ('restart',),
        ('step', 3, 212371603, []), ('store', 'a', 3, 0), ('down', 0, True), ('step', 1, 496292893, []),
    ]),
    # a block corrupted on disk before a restart, read (and lost) after it: the model reset its
    # allowance for lost blocks at every restart; a corrupt blob still stored now carries one over
    # (seeds 200482, 200772)
    "corrupt_before_restart_lost_after": (200482, [
        ("step", 3, 819125459, [("store", "c", 3, 2)]), ("drain",), ("corrupt", 1, 27), ("restart",),
        ("lookup", "c", 2, False), ("store", "b", 1, 0), ("lookup", "c", 1, True),
    ]),
}  # fmt: skip
