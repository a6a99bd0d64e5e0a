"""The Policy interface shared by the live cache and the trace simulator.

A policy only tracks order and picks victims; the tier owns storage and byte accounting
(cachetools' split). The owner calls ``on_insert`` / ``on_hit`` / ``on_remove`` as keys come,
get used and leave by other means, and ``evict`` when it needs room. ``can_evict`` lets the
owner veto candidates: the prefix cache only allows unpinned leaves of the radix index; the
object-semantics simulator passes ``None`` (everything may go).
"""

from __future__ import annotations

import heapq
import itertools
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterable
from typing import Any, ClassVar, Protocol, runtime_checkable

from .. import accel
from ..shardmap import ORDER_SHARDS
from ..units import Clock
from .replay import replay_reference

Key = Hashable
CanEvict = Callable[[Any], bool] | None

__all__ = ["CanEvict", "Clock", "Key", "Offline", "OrderedPolicy", "Policy", "ScoredPolicy", "as_offline"]


class Policy(ABC):
    """Base of every eviction policy. Subclasses register themselves in ``policies.registry``.

    Optional capabilities are declared, never probed with ``getattr``:
    ``offline`` (needs the future: implements ``Offline``; simulator only, the cache refuses it),
    ``needs_capacity`` (its constructor takes ``capacity=``, in blocks: the simulator passes it),
    and ``attach`` (policies that read the radix index's structure override it).
    """

    name: ClassVar[str] = ""
    offline: ClassVar[bool] = False
    needs_capacity: ClassVar[bool] = False

    def __init__(self, clock: Clock = time.monotonic) -> None:
        self.clock = clock

    @abstractmethod
    def on_insert(self, key: Key) -> None:
        """A new key is now resident."""

    @abstractmethod
    def on_hit(self, key: Key) -> None:
        """A resident key was used."""

    @abstractmethod
    def on_remove(self, key: Key) -> None:
        """A resident key left without this policy choosing it (deleted, moved, expired)."""

    @abstractmethod
    def peek(self, can_evict: CanEvict = None) -> Key | None:
        """The key ``evict`` would choose now, or None. Changes no state."""

    @abstractmethod
    def evict(self, can_evict: CanEvict = None) -> Key | None:
        """Choose a victim allowed by ``can_evict``, forget it and return it (None if none)."""

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def __contains__(self, key: object) -> bool: ...

    def on_hits(self, keys: Iterable[Key]) -> None:
        for key in keys:
            self.on_hit(key)

    def params(self) -> dict[str, Any]:
        """Tunable parameters, reported next to results."""
        return {}

    def attach(self, index: Any) -> None:
        """Called by the owner with its RadixIndex, for policies that use block structure
        (depth, children). Most policies ignore it."""

    def replay_object(self, requests: Iterable[Any], capacity: int, clock: Any) -> int:
        """The simulator's object semantics (every block id an independent object): replay
        ``requests`` (each with ``.time`` and ``.blocks``) through a cache of ``capacity`` keys,
        setting ``clock.t`` to each request's time first; returns the misses.

        This is the reference loop, through the public methods: one membership test per access,
        then ``on_hit``, or ``evict(None)`` once ``capacity`` keys are resident and ``on_insert``.
        (``__contains__`` runs before ``evict`` on a miss: ARC and 2Q use the missed key to steer
        their choice.) An ``offline`` policy has ``position`` set before each access. A policy may
        override it with the same loop fused into one function over its own structures (no method
        call per access); it must give the same misses and leave the same state (checked against
        this loop by tests/sim/test_replay_fused.py) and fall back here (``super()``) for cases it
        does not cover: ``fused_ok`` says whether a subclass changed a hook the fused loop inlines.
        """
        fut = as_offline(self) if self.offline else None
        assert fut is not None or not self.offline, "an offline policy implements Offline"
        return replay_reference(self, fut, requests, capacity, clock)  # policies/replay.py

    def fused_ok(self, owner: type, *extra: str) -> bool:
        """True when ``owner``'s fused ``replay_object`` may run for this instance: no class between
        ``type(self)`` and ``owner`` redefines a hook it inlines (the public methods, or ``extra``)."""
        names = (*_HOOKS, *extra)
        for klass in type(self).__mro__:
            if klass is owner:
                return True
            if any(m in klass.__dict__ for m in names):
                return False
        return False


@runtime_checkable
class Offline(Protocol):
    """What an ``offline`` policy adds: the future of the trace, and where the replay is."""

    position: int

    def set_future(self, next_use: Any) -> None:
        """``next_use[i]``: the position of the next access to the block accessed at ``i``."""


def as_offline(policy: Policy) -> Offline | None:
    """The policy as an ``Offline`` one when it declares ``offline``, else None."""
    if not policy.offline:
        return None
    if not isinstance(policy, Offline):
        raise TypeError(f"policy {policy.name!r} declares offline but has no set_future/position")
    return policy


_HOOKS = ("on_insert", "on_hit", "on_hits", "on_remove", "evict", "peek", "__contains__", "__len__", "replay_object")


class ScoredPolicy(Policy):
    """A policy whose victim is the lowest score, via a lazy min-heap.

    Subclasses give each key a score that does not change while the key is untouched (a
    time-invariant sort key, as in SGLang's radix cache); ties go to the older entry.
    """

    def __init__(self, clock: Clock = time.monotonic) -> None:
        super().__init__(clock)
        self._heap: list[tuple[float, int, Key]] = []
        self._entry: dict[Key, int] = {}  # key -> sequence number of its live heap entry
        self._seq = itertools.count()

    @abstractmethod
    def _score(self, key: Key, hit: bool) -> float:
        """Score after an insert (hit=False) or a hit (hit=True); may update per-key state."""

    def _forget(self, key: Key) -> None:
        """Drop per-key state when the key leaves."""

    def _push(self, key: Key, score: float) -> None:
        seq = next(self._seq)
        self._entry[key] = seq
        heapq.heappush(self._heap, (score, seq, key))
        if len(self._heap) > 2 * len(self._entry) + 64:
            self._heap = [e for e in self._heap if self._entry.get(e[2]) == e[1]]
            heapq.heapify(self._heap)

    def on_insert(self, key: Key) -> None:
        self._push(key, self._score(key, False))

    def on_hit(self, key: Key) -> None:
        self._push(key, self._score(key, True))

    def on_remove(self, key: Key) -> None:
        if self._entry.pop(key, None) is not None:
            self._forget(key)

    def __len__(self) -> int:
        return len(self._entry)

    def __contains__(self, key: object) -> bool:
        return key in self._entry

    def _refused(self, key: Key) -> None:
        """``evict`` was refused ``key``: it is in use (pinned, or a parent of live blocks). By
        default the refusal counts as a use, as ``on_hit``, so the key is rescored and not asked
        again on every call while it stays in use; left where it was, it stays the lowest score
        and every evict asks it first. Subclasses may override (say, to set the key aside)."""
        self.on_hit(key)

    def _find(self, can_evict: CanEvict, pop: bool) -> Key | None:
        """The lowest-scored key ``can_evict`` allows; popped and forgotten with ``pop``, and then
        every key refused on the way is passed to ``_refused``, after the search so that the heap
        does not change under it."""
        heap, entry = self._heap, self._entry
        skipped: list[tuple[float, int, Key]] = []
        found = None
        while heap:
            item = heap[0]
            if entry.get(item[2]) != item[1]:
                heapq.heappop(heap)  # stale: the key was touched or removed since
                continue
            if can_evict is None or can_evict(item[2]):
                found = item[2]
                if pop:
                    heapq.heappop(heap)
                    del entry[found]
                    self._forget(found)
                break
            skipped.append(heapq.heappop(heap))
        for item in skipped:
            heapq.heappush(heap, item)
        if pop:
            for item in skipped:
                self._refused(item[2])
        return found

    def peek(self, can_evict: CanEvict = None) -> Key | None:
        return self._find(can_evict, pop=False)

    def evict(self, can_evict: CanEvict = None) -> Key | None:
        return self._find(can_evict, pop=True)


class OrderedPolicy(Policy):
    """A policy over one global order of keys, victim at the front (LRU, FIFO).

    The order is split into ``ORDER_SHARDS`` plain dicts by ``shardmap.order_shard`` (one map of
    every block rebuilds its table, O(n), at each doubling). A dict keeps insertion order, so a move
    to the back is a delete and a re-insert. Each key carries a stamp
    (``_tick``), increasing with every insert or move to the back, so each shard is in stamp order
    and the global front is the shard front with the lowest stamp, found with a heap of
    ``(front stamp, shard)``.
    A heap entry may be stale (its shard's front was hit or removed since): stamps only grow, so
    a stale entry is older than its shard's real front and is corrected when it surfaces.

    That is the pure-Python order, the fallback and the reference. When ``ctxcache._native`` is
    built and on (accel.py), constructing a subclass gives an instance of its native twin instead:
    a subclass of ``_native.Order`` (native/ctxcache_order.c: the same order as a linked list over
    slot ids, no per-key Python work) and of the class asked for, so ``isinstance`` and ``name``
    hold; an instance keeps what it was made with (``accel.use_native``). A subclass that overrides
    an order method (say ``evict``, calling ``super().evict``) keeps the pure-Python order: the
    compiled methods would come first in its MRO and its ``super()`` would reach the Python ones.
    tests/policies/test_native_order.py checks one against the other on random operations.
    """

    # Set in the body of each class that implements the order (this one, LRU, FIFO): LRU's hit
    # moves the key to the back, FIFO's does nothing. _make_twin reads both.
    _hit_moves: ClassVar[bool] = True

    def __new__(cls, *args: Any, **kwargs: Any) -> OrderedPolicy:
        core = getattr(accel.native, "Order", None)
        if core is None or issubclass(cls, core):
            return super().__new__(cls)
        if cls not in _TWINS:
            _TWINS[cls] = _make_twin(cls, core)
        twin = _TWINS[cls]
        if twin is None:
            return super().__new__(cls)
        return core.__new__(twin)  # type: ignore[no-any-return]

    def __init__(self, clock: Clock = time.monotonic) -> None:
        super().__init__(clock)
        # Plain dicts, not OrderedDicts: a hit is a delete and an insert of the new stamp, where an
        # OrderedDict took a relink and then the stamp write, and a dict's rebuild copies its entries
        # in order where an OrderedDict's also relinks a node per key (docs/ARCHITECTURE.md, "The
        # index at scale").
        # Keys and int stamps only: the cyclic GC never tracks these dicts.
        self._shards: list[dict[Key, int]] = [{} for _ in range(ORDER_SHARDS)]
        self._heap: list[tuple[int, int]] = []  # at most one entry per shard
        self._queued = [False] * ORDER_SHARDS  # the shard has its heap entry
        self._tick = 0  # the next stamp: an int, not a count(), so on_hits keeps it in a local
        self._n = 0

    def on_insert(self, key: Key) -> None:
        s = hash(key) % 1021
        od = self._shards[s]
        if key in od:
            return  # already resident: it keeps its place
        stamp = self._tick
        self._tick = stamp + 1
        od[key] = stamp
        self._n += 1
        if not self._queued[s]:
            self._queued[s] = True
            heapq.heappush(self._heap, (stamp, s))

    def _to_back(self, key: Key) -> None:
        """``key`` (resident) moves to the back of the order. KeyError if it is not resident."""
        od = self._shards[hash(key) % 1021]
        del od[key]
        od[key] = self._tick
        self._tick += 1

    def on_remove(self, key: Key) -> None:
        if self._shards[hash(key) % 1021].pop(key, None) is not None:
            self._n -= 1

    def __len__(self) -> int:
        return self._n

    def __contains__(self, key: object) -> bool:
        return key in self._shards[hash(key) % 1021]

    def order_keys(self) -> list[Key]:
        """Every key, the next victim first (the compiled order has the same method)."""
        return [key for key, _ in heapq.merge(*(od.items() for od in self._shards), key=lambda kv: kv[1])]

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its class, its keys front first and its other attributes, alike for the
        Python and the compiled order, so either loads what the other saved."""
        state = {k: v for k, v in self.__dict__.items() if k not in _PY_ORDER}
        return (_restore, (getattr(self, "_asked", type(self)), self.order_keys()), state)

    def peek(self, can_evict: CanEvict = None) -> Key | None:
        """The next victim without reordering (a scan past refused keys: not for hot paths)."""
        merged = heapq.merge(*(od.items() for od in self._shards), key=lambda kv: kv[1])
        for key, _ in merged:
            if can_evict is None or can_evict(key):
                return key
        return None

    def _front(self) -> tuple[Key, int] | None:
        """The globally oldest key and its shard, with the heap's top entry made exact."""
        heap, shards = self._heap, self._shards
        while heap:
            stamp, s = heap[0]
            od = shards[s]
            if not od:
                heapq.heappop(heap)
                self._queued[s] = False
                continue
            key, front = next(iter(od.items()))
            if front == stamp:
                return key, s
            heapq.heapreplace(heap, (front, s))
        return None

    def evict(self, can_evict: CanEvict = None) -> Key | None:
        # A refused key is in use (a parent with children, or pinned): it goes to the back,
        # like a second chance, so long-lived ancestors are skipped once per cycle, not per call.
        for _ in range(self._n):
            got = self._front()
            if got is None:
                return None
            key, s = got
            od = self._shards[s]
            if can_evict is None or can_evict(key):
                del od[key]
                self._n -= 1
                if od:
                    heapq.heapreplace(self._heap, (next(iter(od.values())), s))
                else:
                    heapq.heappop(self._heap)
                    self._queued[s] = False
                return key
            self._to_back(key)
            heapq.heapreplace(self._heap, (next(iter(od.values())), s))
        return None


_PY_ORDER = frozenset({"_shards", "_heap", "_queued", "_tick", "_n"})  # OrderedPolicy's own fields


def _restore(cls: type[OrderedPolicy], keys: list[Key]) -> OrderedPolicy:
    """Unpickle an ordered policy (``OrderedPolicy.__reduce__``) over whichever order runs here;
    pickle then sets its other attributes."""
    policy = cls()
    for key in keys:
        policy.on_insert(key)
    return policy


_TWINS: dict[type, type | None] = {}
_ORDER_METHODS = ("on_insert", "on_hit", "on_hits", "on_remove", "evict", "peek", "__len__", "__contains__")


def _make_twin(cls: type[OrderedPolicy], core: Any) -> type | None:
    """``cls`` over the compiled order: ``core``'s methods come first in the MRO, ``cls`` gives the
    rest (name, params, registry identity); its ``__init__`` builds none of the Python order.
    None when a class below the order's own (LRU, FIFO) overrides an order method."""
    for klass in cls.__mro__:
        if "_hit_moves" in klass.__dict__:
            break
        if any(m in klass.__dict__ for m in _ORDER_METHODS):
            return None

    def __init__(self: Any, clock: Clock = time.monotonic) -> None:
        Policy.__init__(self, clock)
        self.move_on_hit = cls._hit_moves

    ns = {"__init__": __init__, "_asked": cls, "__module__": cls.__module__, "__qualname__": cls.__qualname__}
    ns["__doc__"] = cls.__doc__
    meta: Any = type(cls)  # ABCMeta
    twin: type = meta(cls.__name__, (core, cls), ns)
    return twin
