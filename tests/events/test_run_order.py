"""The engine thread's runs (events/watch.py): a store's charged keys ("c"/"k") and a room-making
pass's removals ("X") may both be open; whatever closes them, each key's own records stay in the
order they happened (a consumer that applied them in another order would hold the wrong state)."""

from __future__ import annotations

from ctxcache.cache import ContextCache
from ctxcache.events import ListSink
from ctxcache.events.emitter import Emitter
from ctxcache.events.watch import EngineWatch

K1, K2, K3 = b"\x01" * 16, b"\x02" * 16, b"\x03" * 16


def _watch(chains: bool = True) -> EngineWatch:
    cache = ContextCache.from_config({"block_size": 4, "tiers": [{"kind": "memory", "capacity": "1MiB"}]})
    watch = EngineWatch(cache._engine, Emitter("w", [ListSink()]))
    watch.attach()
    watch._chains = chains
    return watch


def _log(watch: EngineWatch) -> list[tuple]:
    """The records as (kind, keys): one key for "a"/"x", the run's for "c"/"X"."""
    return [(r[0], tuple(r[2]) if r[0] in "cX" else (r[2],)) for r in watch.em._records]


def test_a_key_stored_in_the_open_run_then_leaving_is_recorded_stored_first():
    watch = _watch()
    watch.begin()
    watch.admitted(0, K1)
    watch.left(0, K2)  # another key: joins the removals' run, the store's stays open
    watch.admitted(0, K3)
    watch.left(0, K1)  # K1 is in the open store run: both close, removals first, then K1's removal
    watch.end()
    assert _log(watch) == [("X", (K2,)), ("c", (K1, K3)), ("X", (K1,))]


def test_a_removal_run_closes_before_a_lone_store_record():
    watch = _watch(chains=False)  # as with token ids: a record per stored key
    watch.begin()
    watch.left(0, K1)
    watch.admitted(0, K1)  # stored again after it left: the removal must come first
    watch.end()
    assert _log(watch) == [("X", (K1,)), ("a", (K1,))]


def test_removals_of_another_tier_or_reason_start_a_new_run():
    watch = _watch()
    watch.begin()
    watch.left(0, K1)
    watch.left(0, K2)
    watch.e.leaving = "erased"
    watch.left(0, K3)
    watch.e.leaving = None
    watch.end()
    assert _log(watch) == [("X", (K1, K2)), ("X", (K3,))]
    assert [r[3] for r in watch.em._records] == ["evicted", "erased"]


class Checked(EngineWatch):
    """Holds each reason a room-making pass hands over (``why``) to the one the watch reads itself."""

    checked: list[str] = []

    def left(self, pos, key, why=""):
        if why and not self.e.leaving:
            assert why == self._reason(pos, key), (pos, why, self._reason(pos, key))
            self.checked.append(why)
        super().left(pos, key, why)


def test_the_reason_a_pass_hands_over_is_the_one_the_index_gives(tmp_path):
    tiers = [
        {"kind": "memory", "capacity": "3KiB", "name": "hot"},
        {"kind": "memory", "capacity": "6KiB", "name": "warm"},
        {"kind": "disk", "path": str(tmp_path), "capacity": "12KiB", "fsync": False},
    ]
    cache = ContextCache.from_config({"block_size": 4, "tiers": tiers})
    watch = Checked(cache._engine, Emitter("w", [ListSink()]))
    watch.attach()
    for i in range(300):
        base = (i * 7919) % 40 * 1000
        n = 1 + i % 6
        cache.store(list(range(base, base + 4 * n)), [bytes([i % 251]) * (100 + i % 300) for _ in range(n)])
        if i % 5 == 0:
            cache.release(cache.lookup(list(range(base, base + 8))))
    cache.close()
    assert {"evicted", "demoted"} <= set(Checked.checked) and len(Checked.checked) > 200


def test_a_slot_appends_to_the_open_removal_run_only_for_its_tier_and_reason():
    watch = _watch()
    e, slot = watch.e, watch.e.slots[0]
    for k in (K1, K2, K3):
        slot.charge(k, "t", 10)  # depth 0: an "a" record each
    watch.em._records.clear()
    watch.begin()
    slot.evicted(K1, "evicted")  # opens the run: the slot appends the next ones itself
    with e.leaving_as("erased"):  # an erasure's reason wins over the pass's
        slot.evicted(K2, "evicted")
    slot.evicted(K3, "demoted")  # another reason: its own run
    watch.end()
    assert [(r[0], tuple(r[2]), r[3]) for r in watch.em._records] == [
        ("X", (K1,), "evicted"),
        ("X", (K2,), "erased"),
        ("X", (K3,), "demoted"),
    ]
