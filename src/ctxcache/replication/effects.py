"""What a delivered update does to a region's caches, and the worker side that follows a log.

Effects are idempotent: applying one twice (a crash between effect and commit, a worker that
restarts before saving its position) leaves what applying it once did. A register's effect
applies the key's current value (``KeyState.value``), not the update's own: with concurrent TTLs
the shortest, whichever arrived last.

An erased or invalidated block is gone from a process once that process has applied the update;
``verified`` (from ``ContextCache.erase_tenant`` / ``invalidate``) is reported per process in the
region's ``results`` hash, so "complete in region B" is a fact a caller can read.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any

from .log import LinkDown, RegionLog
from .ops import Update
from .state import KeyState, RegionState

log = logging.getLogger("ctxcache.replication")


class CacheEffects:
    """Applies updates to a ContextCache (and optionally a semantic cache)."""

    def __init__(self, cache: Any, semantic: Any | None = None) -> None:
        self.cache, self.semantic = cache, semantic

    def apply(self, u: Update, ks: KeyState) -> dict[str, Any]:
        kind, target = u.kind, u.target
        if kind == "erase_tenant":
            out = dict(self.cache.erase_tenant(target))
            if self.semantic is not None:
                sem = self.semantic.erase_tenant(target)
                out["semantic_verified"] = bool(sem.get("verified", True))
            return out
        if kind == "invalidate":
            return dict(self.cache.invalidate(bytes.fromhex(target)))
        if kind == "ttl":
            if self.cache.tenancy is None or target not in self.cache.tenancy.tenants:
                return {"skipped": f"tenant {target!r} is not configured here"}
            return dict(self.cache.set_tenant_ttl(target, ks.value("ttl")))
        if kind == "pin":
            key = bytes.fromhex(target)
            pinned = ks.value("pin")
            n = self.cache.pin_prefix(key) if pinned else self.cache.unpin_prefix(key)
            return {"pinned": bool(pinned), "blocks": n}
        if kind in ("sem_erase", "sem_feedback"):
            if self.semantic is None:
                return {}
            if kind == "sem_feedback" and ks.value("fb") is not False:
                return {}
            entry = bytes.fromhex(target)  # erased, or reported wrong: served nowhere
            found = self.semantic.erase(entry)
            return {"found": found, "verified": self.semantic.erased_verified(entry)}
        return {}


class Follower:
    """A worker's side: tails its region's log and applies each update to the worker's own tiers
    (its RAM and local disk, which the replicator cannot reach). ``submit`` asks the region's
    replicator for a new update through the inbox.

    Start-up (``catch_up``) runs before the worker serves: the updates it missed while down are
    applied first, so a block erased meanwhile cannot be served from its disk. If its region's log
    was trimmed past the worker's position, every erasure the state holds is applied again: blocks
    stored after such an erasure may go too (a cache miss, never a resurrection).
    """

    def __init__(self, own: RegionLog, region: str, worker: str, effects: Any, batch: int = 512) -> None:
        self.own, self.worker, self.effects, self.batch = own, worker, effects, batch
        self.state = RegionState(region)
        self.pos = 0
        self.applied = 0
        self.errors = 0
        self.caught_up = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def catch_up(self) -> int:
        state, meta = self.own.load()
        for key, raw in state.items():
            self.state.keys[key] = KeyState.decode(raw)
        head, mine = int(meta.get("seq", 0)), self.own.follow_pos(self.worker)
        first = self.own.first_seq()
        n = 0
        if mine < head and first > mine + 1:  # trimmed: replay every erasure and register held
            for ks in self.state.keys.values():
                for reg in ks.regs.values():
                    for u in reg:
                        self._effect(u)
                        n += 1
        else:
            seq = mine
            while seq < head:
                got = self.own.read(seq, self.batch)
                if not got:
                    break
                for s, raw in got:
                    if s > head:
                        break
                    self._effect(Update.decode(raw))
                    n += 1
                    seq = s
        self.pos = head
        self.own.set_follow_pos(self.worker, head)
        self.caught_up = True
        return n

    def _effect(self, u: Update) -> None:
        ks = self.state.keys.get(u.key)
        if ks is None:
            return
        try:
            result = self.effects.apply(u, ks)
            self.applied += 1
        except Exception as exc:
            self.errors += 1
            log.exception("worker %s: applying %s failed", self.worker, u.uid)
            result = {"error": type(exc).__name__, "verified": False}
        if result:
            with contextlib.suppress(LinkDown):
                self.own.put_result(u.uid, self.worker, result)

    def poll(self) -> int:
        got = self.own.read(self.pos, self.batch)
        if got and got[0][0] > self.pos + 1:
            return self.catch_up()
        for s, raw in got:
            u = Update.decode(raw)
            for d in self.state.receive(u):
                self._effect(d)
            self.pos = s
        if got:
            self.own.set_follow_pos(self.worker, self.pos)
        return len(got)

    def submit(self, kind: str, target: str, value: Any = None) -> None:
        self.own.submit(kind, target, value)

    def start(self, interval: float = 0.05, caught_up: bool = False) -> None:
        self.caught_up = self.caught_up or caught_up

        def loop() -> None:
            while not self._stop.is_set():
                try:
                    n = self.poll() if self.caught_up else self.catch_up()
                except LinkDown:
                    n = 0
                    self._stop.wait(1.0)
                except Exception:
                    log.exception("worker %s: replication follower", self.worker)
                    n = 0
                    self._stop.wait(1.0)
                if not n:
                    self._stop.wait(interval)

        self._thread = threading.Thread(target=loop, name="ctxcache-region-follower", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def status(self) -> dict[str, Any]:
        return {"worker": self.worker, "applied_seq": self.pos, "applied": self.applied, "errors": self.errors,
                "digest": self.state.digest()}  # fmt: skip
