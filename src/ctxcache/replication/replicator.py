"""The replicator: the one writer of a region's metadata log and state.

Each step it (1) stamps the updates the region's workers submitted (the inbox), (2) pulls each
reachable peer's log from the last seq it applied, delivers what is ready in causal order
(state.py) and relays it into its own log, so updates travel on around a cut link, and (3)
applies each delivered update's effect to the region's shared tiers (``effects``), before the
commit: a crash in between re-reads the batch and applies it again, and effects are idempotent.

A cut link is a partition: the peer is marked down and retried every step; the region keeps
serving, and its log, read by nobody meanwhile, is the bounded, counted queue to that peer
(``queued``: head seq minus the seq the peer acknowledged; bounded by the log's MAXLEN). A peer
that comes back further behind than the log keeps is healed by a full sync: it joins the whole
state (``KeyState`` registers, mergeable in any order) and applies the effects it had missed.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from .log import LinkDown, RegionLog
from .ops import EFFECTS, Update, check_region
from .state import KeyState, RegionState

log = logging.getLogger("ctxcache.replication")
BATCH = 512


class Effects(Protocol):
    def apply(self, u: Update, ks: KeyState) -> dict[str, Any]: ...


class NoEffects:
    def apply(self, u: Update, ks: KeyState) -> dict[str, Any]:
        return {}


class Replicator:
    def __init__(
        self,
        region: str,
        own: RegionLog,
        peers: Mapping[str, RegionLog],
        effects: Effects | None = None,
        *,
        wall: Callable[[], float] = time.time,
        batch: int = BATCH,
        process: str = "replicator",
    ) -> None:
        self.region = check_region(region)
        for p in peers:
            check_region(p)
        if region in peers:
            raise ValueError(f"region {region} lists itself as a peer")
        self.own, self.peers = own, dict(peers)
        self.effects = effects or NoEffects()
        self.wall, self.batch, self.process = wall, batch, process
        self.state = RegionState(region)
        self.pos: dict[str, int] = {p: 0 for p in peers}
        self.inbox_pos = ""
        self.head = 0
        self.up: dict[str, bool] = {p: True for p in peers}
        self.stats: Counter[str] = Counter()  # full_syncs, bad_entries, link_errors, effect_errors
        self.lag: list[float] = []  # seconds from the origin's stamp to delivery here (recent)
        self._dirty: set[str] = set()
        self._restore: dict[str, Update] = {}  # registers whose effect a refused submit changed
        self.loaded = False

    # --- startup --------------------------------------------------------------------------------
    def load(self) -> None:
        """Rebuild from the region's own Redis (raises LinkDown when it is unreachable)."""
        state, meta = self.own.load()
        fresh = RegionState(self.region)  # what was delivered but never committed is dropped: redone
        fresh.counters, fresh.conflicts = self.state.counters, self.state.conflicts
        for key, raw in state.items():
            fresh.keys[key] = KeyState.decode(raw)
        self.state = fresh
        self._dirty.clear()
        restore, self._restore = self._restore, {}
        for key, u in sorted(restore.items()):
            ks = self.state.keys.get(key)
            if ks is not None and u.field in ks.regs:  # never set before: the cache keeps what it got
                self._apply_one(u, ks)
        self.head = int(meta.get("seq", 0))
        self.inbox_pos = meta.get("inbox", "")
        for p in self.peers:
            self.pos[p] = int(meta.get(f"pos:{p}", 0))
        self.loaded = True

    # --- local updates ----------------------------------------------------------------------------
    def submit(self, kind: str, target: str | bytes, value: Any = None) -> Update:
        """An update made here, now: stamped, applied, committed to the log."""
        if not self.loaded:
            self.load()
        u = self.state.local(kind, target, value, self.wall())
        self._apply([u])
        try:
            self._commit([u], {})
        except LinkDown:  # refused; a register's effect follows the committed value once reloaded
            if u.kind not in EFFECTS:
                self._restore[u.key] = u
            raise
        return u

    def _drain_inbox(self) -> int:
        if not self.loaded:
            self.load()
        got = self.own.inbox(self.inbox_pos, self.batch)
        if not got:
            return 0
        done: list[Update] = []
        for _, f in got:
            try:
                done.append(self.state.local(f["k"], f["t"], f["v"], self.wall()))
            except (ValueError, TypeError, KeyError) as exc:  # checked by the submitter: a bug or tampering
                self.stats["bad_entries"] += 1
                log.warning("region %s: inbox entry refused: %s", self.region, exc)
        last = got[-1][0]
        self._apply(done)
        self._commit(done, {"inbox": last})
        self.inbox_pos = last
        self.own.trim_inbox(last)
        return len(got)

    # --- peers ------------------------------------------------------------------------------------
    def pull(self, peer: str) -> int:
        """One batch of ``peer``'s log. Returns entries read (raises LinkDown)."""
        if not self.loaded:  # a commit failed: the state is the last committed one again first
            self.load()
        src, after = self.peers[peer], self.pos[peer]
        got = src.read(after, self.batch)
        if got and got[0][0] > after + 1:  # trimmed past what was read here
            return self.full_sync(peer)
        if not got:
            return 0
        delivered: list[Update] = []
        now = self.wall()
        for _, raw in got:
            try:
                u = Update.decode(raw)
            except ValueError as exc:
                self.stats["bad_entries"] += 1
                log.warning("region %s: bad entry in %s's log: %s", self.region, peer, exc)
                continue
            for d in self.state.receive(u):
                delivered.append(d)
                if d.origin != self.region:
                    self.lag.append(max(0.0, now - d.at))
        del self.lag[:-4096]
        self._apply(delivered)
        self.pos[peer] = got[-1][0]
        self._commit(delivered, {f"pos:{peer}": self.pos[peer]})
        with contextlib.suppress(LinkDown):
            src.ack(self.region, self.pos[peer])
        return len(got)

    def full_sync(self, peer: str) -> int:
        """The peer's log no longer holds what this region has not read: join its whole state."""
        state, meta = self.peers[peer].load()
        seq = int(meta.get("seq", 0))
        delivered: list[Update] = []
        for key, raw in state.items():
            delivered += self.state.merge_key(key, KeyState.decode(raw))
            self._dirty.add(key)
        self._apply(delivered)
        self.pos[peer] = seq
        self._commit(delivered, {f"pos:{peer}": seq})
        self.stats["full_syncs"] += 1
        log.warning("region %s: full sync from %s at seq %d (%d updates new here)", self.region, peer, seq,
                    len(delivered))  # fmt: skip
        return len(state)

    def step(self) -> int:
        """Inbox, then every peer once. Returns entries processed; a down peer is skipped."""
        if not self.loaded:
            self.load()
        n = self._drain_inbox()
        for peer in self.peers:
            try:
                n += self.pull(peer)
                self.up[peer] = True
            except LinkDown as exc:
                if self.up[peer]:
                    log.warning("region %s: link to %s down: %s", self.region, peer, exc)
                self.up[peer] = False
                self.stats["link_errors"] += 1
        return n

    def run(self, stop: threading.Event, interval: float = 0.05) -> None:
        while not stop.is_set():
            try:
                busy = self.step()
            except LinkDown as exc:  # the region's own Redis: nothing can be committed now
                log.warning("region %s: own Redis unreachable: %s", self.region, exc)
                busy = 0
                stop.wait(1.0)
            if not busy:
                stop.wait(interval)

    # --- internals --------------------------------------------------------------------------------
    def _apply(self, updates: list[Update]) -> None:
        for u in updates:
            self._dirty.add(u.key)
            self._apply_one(u, self.state.keys[u.key])

    def _apply_one(self, u: Update, ks: KeyState) -> None:
        try:
            result = self.effects.apply(u, ks)
        except Exception as exc:  # one bad effect must not stop replication: counted, reported
            self.stats["effect_errors"] += 1
            log.exception("region %s: applying %s failed", self.region, u.uid)
            result = {"error": type(exc).__name__, "verified": False}
        if result:
            with contextlib.suppress(LinkDown):
                self.own.put_result(u.uid, self.process, result)

    def _commit(self, updates: list[Update], meta: dict[str, Any]) -> None:
        state = {k: self.state.keys[k].encode() for k in self._dirty if k in self.state.keys}
        try:
            self.head = self.own.commit([u.encode() for u in updates], state, meta)
        except LinkDown:
            # Not committed: these updates are in the state but not in the log, so no peer would
            # ever read them (and a re-read inbox entry would be stamped again with the next
            # counter, leaving a gap that peers hold on forever). Reload before anything else:
            # the inbox and the peers' logs are read again from the committed positions.
            self.loaded = False
            raise
        self._dirty.clear()

    def queued(self) -> dict[str, int]:
        """Per peer: entries of this region's log the peer has not acknowledged."""
        try:
            acks = self.own.acks()
        except LinkDown:
            return {}
        return {p: max(0, self.head - acks.get(p, 0)) for p in self.peers}

    def status(self, digest: bool = True) -> dict[str, Any]:
        """Not thread-safe, like every method here: one thread drives a Replicator (the service
        takes a lock). ``digest=False`` for scrapes: hashing all metadata is O(keys)."""
        lag = sorted(self.lag)

        def pct(q: float) -> float | None:
            return round(lag[min(len(lag) - 1, int(q * len(lag)))], 6) if lag else None

        return {
            "region": self.region, "head": self.head, "keys": len(self.state.keys),
            "digest": self.state.digest() if digest else None,
            "peers": {p: {"up": self.up[p], "applied_seq": self.pos[p]} for p in self.peers},
            "queued": self.queued(), "pending": self.state.n_pending,
            "counters": dict(self.state.counters), "conflicts": dict(self.state.conflicts), "stats": dict(self.stats),
            "lag_p50_s": pct(0.5), "lag_p99_s": pct(0.99),
        }  # fmt: skip
