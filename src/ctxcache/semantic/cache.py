"""SemanticCache: responses keyed by meaning, served only above an explicit similarity threshold.

Lookup: validate; bypass (temperature > 0, tools, or the request says so); embed the query text
(plus an optional image embedding, weighted); search the query's partition (tenant, model,
context, params, context class, modality: exact match); walk candidates by similarity and serve
the first one that clears its threshold (the global ``threshold`` or a learned per-entry one),
has not expired, and passes the verifier. An exact repeat (same normalized text) is a hit at
similarity 1 without search. ``threshold = 1`` serves exact repeats only. Texts longer than the
embedder's window are exact-only too: their vectors only saw a prefix.

Storage: every entry is one block in a persistent tier (disk or Redis, see store.py), written
before the entry becomes visible and read back at start-up, so entries survive a restart.
Capacity is in bytes (stored block + vector); the eviction order comes from a policy of
``policies/`` (``make_policy``); TTLs use the injected wall clock. Thread-safe: one lock guards
the in-memory state; embedding and tier I/O happen outside it.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import CorruptBlockError, SemanticInputError
from ..policies import Policy, make_policy
from .embedder import Embedder
from .entry import Entry, SemanticQuery, decode_entry, encode_entry
from .erasure import erase_tenant
from .index import AutoIndex
from .store import EntryStore
from .thresholds import entry_threshold
from .verifier import LexicalVerifier, Verifier

# chosen by benchmarks/semantic/bench_semantic.py: precision >= 0.98, see docs/semantic-cache.md
DEFAULT_THRESHOLD = 0.86
CANDIDATES = 8


@dataclass(frozen=True)
class Probe:
    """A query's embedding and partition, computed once for lookup and reused by store."""

    query: SemanticQuery
    partition: str
    entry_id: bytes
    vector: np.ndarray
    exact_only: bool


@dataclass(frozen=True)
class Lookup:
    """The outcome: a hit (``entry``, ``similarity``), a miss (``probe`` to store with), or a bypass."""

    hit: Entry | None = None
    similarity: float = 0.0
    probe: Probe | None = None
    bypass: str | None = None
    vetoed: int = 0  # candidates above threshold the verifier refused


def _check_threshold(t: Any, name: str = "threshold") -> float:
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0.0 <= float(t) <= 1.0:
        raise SemanticInputError(f"{name} must be a number in [0, 1] (1 = exact repeats only), got {t!r}")
    return float(t)


class SemanticCache:
    def __init__(
        self,
        embedder: Embedder,
        store: EntryStore,
        *,
        threshold: float = DEFAULT_THRESHOLD,
        capacity: int = 256 << 20,
        policy: str | dict[str, Any] = "lru",
        ttl: float | None = None,
        verifier: Verifier | None = None,
        image_embedder: Embedder | None = None,
        image_weight: float = 0.3,
        error_bound: float | None = None,
        max_text_chars: int = 32_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.threshold = _check_threshold(threshold)
        if not isinstance(capacity, int) or capacity <= 0:
            raise SemanticInputError(f"capacity must be a positive number of bytes, got {capacity!r}")
        if ttl is not None and not ttl > 0:
            raise SemanticInputError(f"ttl must be a positive number of seconds or None, got {ttl!r}")
        if not 0.0 <= image_weight < 1.0:
            raise SemanticInputError(f"image_weight must be in [0, 1), got {image_weight!r}")
        self.error_bound = None if error_bound is None else _check_threshold(error_bound, "error_bound")
        self.embedder, self.image_embedder, self.image_weight = embedder, image_embedder, image_weight
        self._store, self.capacity, self.ttl, self.clock = store, capacity, ttl, clock
        self.verifier: Verifier = verifier if verifier is not None else LexicalVerifier()
        self.max_text_chars = max_text_chars
        self.policy: Policy = make_policy(policy, clock=time.monotonic)
        self._lock = threading.RLock()
        self._entries: dict[bytes, Entry] = {}
        self._by_label: dict[int, bytes] = {}
        self._parts: dict[str, AutoIndex] = {}
        self._expiry: list[tuple[float, bytes]] = []  # lazy heap: stale items are skipped
        self._next_label = 0
        self.used_bytes = 0
        self.counts = {"hits": 0, "misses": 0, "bypassed": 0, "stored": 0, "evicted": 0, "expired": 0,
                       "vetoed": 0, "corrupt": 0, "erased": 0, "erased_elsewhere": 0}  # fmt: skip
        self._recover()

    # --- validation and embedding ------------------------------------------------------------------
    def _validate(self, q: SemanticQuery) -> None:
        if not isinstance(q.text, str) or not q.text.strip():
            raise SemanticInputError("text must be a non-empty string")
        if len(q.text) > self.max_text_chars:
            raise SemanticInputError(f"text has {len(q.text):,} characters; the limit is {self.max_text_chars:,}")
        if not q.tenant or not q.model:
            raise SemanticInputError("tenant and model must be non-empty")
        if q.image is not None and self.image_embedder is None:
            raise SemanticInputError("this cache has no image embedder: send text only")

    def probe(self, q: SemanticQuery) -> Probe:
        """Embed a (validated) query: the composite vector is [sqrt(1-w)*text, sqrt(w)*image], so
        its inner product is the weighted mean of the text and image cosines."""
        self._validate(q)
        emb = self.embedder.embed([q.text])
        vec, exact_only = emb.vectors[0], emb.truncated[0]
        if q.image is not None and self.image_embedder is not None:
            img = self.image_embedder.embed([q.image])  # type: ignore[list-item]
            w = self.image_weight
            vec = np.concatenate([np.sqrt(1 - w) * vec, np.sqrt(w) * img.vectors[0]]).astype(np.float32)
        name = self.embedder.name
        if q.image is not None and self.image_embedder is not None:
            name += f"+{self.image_embedder.name}@{self.image_weight}"
        part = q.partition(name)
        return Probe(q, part, q.entry_id(part), vec, exact_only)

    # --- lookup --------------------------------------------------------------------------------------
    def lookup(self, q: SemanticQuery, *, threshold: float | None = None) -> Lookup:
        """Serve ``q`` from the cache if a close enough, verified, live entry exists."""
        t = self.threshold if threshold is None else _check_threshold(threshold)
        why = q.bypass_reason()
        if why is not None:
            self._validate(q)
            with self._lock:
                self.counts["bypassed"] += 1
            return Lookup(bypass=why)
        p = self.probe(q)
        self._store.retry()  # pending deletes, at most every retry_interval: hits alone never write
        self._sync()  # other processes' erasures, at most every sync_interval: no round trip otherwise
        now = self.clock()
        vetoed = 0
        with self._lock:
            exact = self._entries.get(p.entry_id)
            if exact is not None and not self._expired(exact, now):
                return self._hit(exact, 1.0, p, vetoed)
            cands = [] if (t >= 1.0 or p.exact_only) else self._candidates(p)
        for entry, sim in cands:
            if entry.exact_only or sim < entry_threshold(t, entry.observations, self.error_bound):
                continue
            if not self.verifier(q.text, entry.text):
                vetoed += 1
                continue
            with self._lock:
                if entry.id in self._entries and not self._expired(entry, now):
                    return self._hit(entry, sim, p, vetoed)
        with self._lock:
            self.counts["misses"] += 1
            self.counts["vetoed"] += vetoed
        return Lookup(probe=p, vetoed=vetoed)

    def _candidates(self, p: Probe) -> list[tuple[Entry, float]]:
        ix = self._parts.get(p.partition)
        if ix is None:
            return []
        found = ix.search(p.vector, CANDIDATES)
        return [(self._entries[self._by_label[lab]], sim) for lab, sim in found if lab in self._by_label]

    def _hit(self, entry: Entry, sim: float, p: Probe, vetoed: int) -> Lookup:
        entry.served += 1
        self.policy.on_hit(entry.id)
        self.counts["hits"] += 1
        self.counts["vetoed"] += vetoed
        return Lookup(hit=entry, similarity=min(1.0, sim), probe=p, vetoed=vetoed)

    def _expired(self, entry: Entry, now: float) -> bool:
        if entry.expires is None or now < entry.expires:
            return False
        self._drop(entry.id, "expired")
        return True

    # --- store ---------------------------------------------------------------------------------------
    def store(self, q: SemanticQuery | Probe, response: Any) -> Entry | None:
        """Cache ``response`` (anything JSON-serializable) for a query or a miss's probe. Returns the
        entry, or None when the query bypasses the cache or the entry cannot fit."""
        p = q if isinstance(q, Probe) else None
        query = p.query if p is not None else q
        assert isinstance(query, SemanticQuery)
        if query.bypass_reason() is not None:
            return None
        p = p or self.probe(query)
        now = self.clock()
        entry = Entry(p.entry_id, p.partition, query.tenant, query.model, query.text, response, now,
                      None if self.ttl is None else now + self.ttl, exact_only=p.exact_only)  # fmt: skip
        try:
            payload = encode_entry(entry, p.vector)
        except (TypeError, ValueError) as exc:
            raise SemanticInputError(f"response must be JSON-serializable: {exc}") from None
        entry.nbytes = self._store.size(payload) + p.vector.nbytes
        if entry.nbytes > self.capacity:
            return None
        written = self._store.put(entry.id, payload)  # before it is visible: a crash loses nothing served
        entry.nbytes = written + p.vector.nbytes
        with self._lock:
            self._sweep(now)
            self._insert(entry, p.vector)
            self.counts["stored"] += 1
            self._make_room(keep=entry.id)
        return entry

    def _insert(self, entry: Entry, vector: np.ndarray) -> None:
        if entry.id in self._entries:
            self._forget(entry.id)
        entry.label, self._next_label = self._next_label, self._next_label + 1
        self._entries[entry.id] = entry
        self._by_label[entry.label] = entry.id
        if not entry.exact_only:
            ix = self._parts.get(entry.partition)
            if ix is None:
                ix = self._parts[entry.partition] = AutoIndex(len(vector))
            ix.add(entry.label, vector)
        if entry.expires is not None:
            heapq.heappush(self._expiry, (entry.expires, entry.id))
        self.used_bytes += entry.nbytes
        self.policy.on_insert(entry.id)

    def _forget(self, eid: bytes) -> Entry | None:
        """Remove from memory (index, maps, accounting); the caller deletes the stored block."""
        entry = self._entries.pop(eid, None)
        if entry is None:
            return None
        self._by_label.pop(entry.label, None)
        ix = self._parts.get(entry.partition)
        if ix is not None:
            ix.remove(entry.label)
            if len(ix) == 0:
                del self._parts[entry.partition]
        self.used_bytes -= entry.nbytes
        if eid in self.policy:
            self.policy.on_remove(eid)
        return entry

    def _drop(self, eid: bytes, reason: str) -> bool:
        if self._forget(eid) is None:
            return False
        self._store.delete(eid, erase=reason == "erased")
        self.counts[reason] += 1
        return True

    def _make_room(self, keep: bytes) -> None:
        while self.used_bytes > self.capacity:
            victim = self.policy.evict(lambda k: k != keep)
            if not isinstance(victim, bytes):
                break
            self._drop(victim, "evicted")

    def _sweep(self, now: float) -> None:
        """Drop expired entries: O(expired log n) through the expiry heap."""
        while self._expiry and self._expiry[0][0] <= now:
            _, eid = heapq.heappop(self._expiry)
            entry = self._entries.get(eid)
            if entry is not None and entry.expires is not None and entry.expires <= now:
                self._drop(eid, "expired")

    def sweep(self) -> None:
        with self._lock:
            self._sweep(self.clock())
        self._store.retry()
        self._sync()

    def _sync(self) -> None:
        """Drop the entries another process erased (its tombstones, see store.sync). After a gap
        in which a tombstone may have expired unseen, drop every entry whose record is gone too."""
        new, stale = self._store.sync()
        present = self._store.scan() if stale else None
        if not new and present is None:
            return
        held = None if present is None else set(present)
        with self._lock:
            gone = [k for k in self._entries if k in new or (held is not None and k not in held)]
            for key in gone:
                self._forget(key)
            self.counts["erased_elsewhere"] += len(gone)

    # --- feedback, admin -----------------------------------------------------------------------------
    def feedback(self, entry_id: bytes, similarity: float, correct: bool) -> float:
        """Record whether a hit served at ``similarity`` was right; returns the entry's new threshold."""
        _check_threshold(similarity, "similarity")
        with self._lock:
            entry = self._entries.get(entry_id)
            if entry is None:
                raise KeyError(entry_id.hex())
            entry.observations = [*entry.observations[-255:], (float(similarity), bool(correct))]
            vec = self._vector(entry)
        if vec is not None:
            self._store.put(entry.id, encode_entry(entry, vec))
        return entry_threshold(self.threshold, entry.observations, self.error_bound)

    def _vector(self, entry: Entry) -> np.ndarray | None:
        got = self._store.get(entry.id)
        return None if got is None else np.asarray(got["vec"], dtype=np.float32)

    def get(self, entry_id: bytes) -> Entry | None:
        with self._lock:
            return self._entries.get(entry_id)

    def entries(self, tenant: str | None = None) -> Iterator[Entry]:
        with self._lock:
            items = list(self._entries.values())
        return (e for e in items if tenant is None or e.tenant == tenant)

    def erase(self, entry_id: bytes) -> bool:
        """Forget the entry and delete its record; whether it was here. ``erased_verified`` tells
        whether the record is surely gone."""
        with self._lock:
            return self._drop(entry_id, "erased")

    def erased_verified(self, entry_id: bytes) -> bool:
        """No delete of ``entry_id``'s record is pending (after one more try)."""
        return self._store.settled([entry_id])

    def erase_tenant(self, tenant: str) -> dict[str, Any]:
        """Every entry of ``tenant``, from memory and the store, ``verified`` or not (see erasure.py)."""
        return erase_tenant(self, tenant)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {
                "entries": len(self._entries),
                "partitions": len(self._parts),
                "bytes": self.used_bytes,
                "capacity": self.capacity,
                "threshold": self.threshold,
                "policy": self.policy.name,
                "embedder": self.embedder.name,
                **self.counts,
                **self._store.stats(),
            }

    # --- restart -------------------------------------------------------------------------------------
    def _recover(self) -> None:
        """Index every entry the store holds, oldest first; drop expired and foreign blocks."""
        now = self.clock()
        found: list[tuple[Entry, np.ndarray]] = []
        for key, payload in self._store.items():
            try:
                entry, vec = decode_entry(key, payload)
            except CorruptBlockError:
                self.counts["corrupt"] += 1
                self._store.delete(key)
                continue
            if entry.expires is not None and entry.expires <= now:
                self._store.delete(key)
                self.counts["expired"] += 1
                continue
            entry.nbytes = (self._store.nbytes(key) or self._store.size(payload)) + vec.nbytes
            found.append((entry, vec))
        for entry, vec in sorted(found, key=lambda ev: ev[0].created):
            self._insert(entry, vec)
        self._make_room(keep=b"")
        self.recovered = len(self._entries)

    def close(self) -> None:
        self._store.close()
