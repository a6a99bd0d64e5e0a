"""The deterministic simulation of the engine (docs/testing.md, "Deterministic simulation").

One seed drives everything: the setup, the actions, every fault a slow tier shows (each action
reseeds the tiers' fault draws from the seed and its position), the injected clock, and the
interleaving of requests with the mover's I/O (the engine runs without threads: the harness
steps the mover, and runs requests at its tiers' I/O points). After every action, and at every
I/O point, the invariants of model.py and storage.py are checked; a violation or any exception
from the engine ends the run with a ``Failure`` naming the seed and the action.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import shutil
import tempfile
from typing import Any

from ctxcache.engine import Engine
from ctxcache.engine.tenancy import Tenancy, Tenant
from ctxcache.tiers import MemoryTier, Tier
from ctxcache.tiers.base import key_bytes

from .model import Model, Violation, check_accounting, check_counters, check_pins
from .plan import BLOCK, Action, Setup, plan
from .simtiers import Faults, SimDisk, SimRedis
from .storage import check_idle

LOG = logging.getLogger("ctxcache")  # breaker and outage lines: thousands per run, silenced while one runs
# SIM_NO_JOURNAL=1: run without the engine's erasure journal (shows what it is for: docs/testing.md)
NOJ = bool(os.environ.get("SIM_NO_JOURNAL"))
UNIT = {"memory": 128, "disk": 256, "redis": 256}  # bytes per block of capacity (payloads up to 128 B)


class Failure(Exception):
    def __init__(self, seed: int, step: int, action: Action, why: str) -> None:
        super().__init__(f"seed {seed}: action {step} {action!r}: {why}")
        self.seed, self.step, self.action, self.why = seed, step, action, why


class Sim:
    def __init__(self, seed: int, setup: Setup, actions: list[Action]) -> None:
        self.seed, self.setup, self.actions = seed, setup, actions
        self.now = 1000.0
        self.model = Model(setup)
        self.dir = tempfile.mkdtemp(prefix="ctxcache-sim-")
        self.backends: dict[int, dict[bytes, bytes]] = {}
        self.dead: dict[int, set[bytes]] = {}  # SimRedis tombstone sets, kept across restarts
        self.faults: dict[int, Faults] = {}
        for pos, t in enumerate(setup.tiers):
            if t.kind != "memory":
                f = self.faults[pos] = Faults()
                f.point, f.kept = self._point, self.model.kept
                f.on_refused_write = lambda kb, pos=pos: self._refused_write(pos, kb)
                self.backends[pos], self.dead[pos] = {}, set()
        self.held: list[Any] = []
        self.nested: list[Action] = []
        self.point_rng = random.Random(0)
        self.in_point = False
        self.raised: Exception | None = None  # a violation (or error) at an I/O point, inside the mover
        self.refused_held: set[bytes] = set()  # refused writes of blocks another tier held then, not reported yet
        # tenant -> the slow tiers its last erasure could not search (down, a Cluster master down),
        # and whether a restart came since (docs/testing.md, "erasure journal")
        self.unsearched: dict[str, tuple[set[int], bool]] = {}
        self.corrupted: dict[tuple[int, bytes], bytes] = {}  # (tier, key) -> the corrupt blob written there
        self.e = self._open()

    # --- building the engine -------------------------------------------------------------------------
    def _tier(self, pos: int) -> Tier:
        t = self.setup.tiers[pos]
        cap = t.blocks * UNIT[t.kind]
        if t.kind == "memory":
            return MemoryTier(cap, t.policy, name=t.name)
        if t.kind == "disk":
            return SimDisk(cap, t.policy, faults=self.faults[pos], path=f"{self.dir}/disk", name=t.name, write=t.write)
        backend, dead = self.backends[pos], self.dead[pos]
        return SimRedis(cap, t.policy, backend=backend, faults=self.faults[pos], dead=dead, name=t.name, write=t.write)

    def _tenancy(self) -> Tenancy:
        units = {t.name: UNIT[t.kind] for t in self.setup.tiers}
        tenants = {
            t.id: Tenant(t.id, quota={n: b * units[n] for n, b in t.quota.items()}, priority=t.priority, ttl=t.ttl)
            for t in self.setup.tenants
        }
        return Tenancy(tenants, secret=b"simulation")

    def _open(self) -> Engine:
        tiers = [self._tier(pos) for pos in range(len(self.setup.tiers))]
        e = Engine(
            tiers, background=False, clock=lambda: self.now, block_size=BLOCK, tenancy=self._tenancy(),
            erasure_journal=None if NOJ else f"{self.dir}/erasures",  # a local file the process keeps (engine/journal.py)
        )  # fmt: skip
        mover = e.placement.mover
        report = mover.done

        def done(m: Any) -> None:  # a refused write judged again at its report (``_refused_write``)
            kb = key_bytes(m.key)
            if kb in self.refused_held and not m.ok:
                self.refused_held.discard(kb)
                if not self._copy_elsewhere(m.dst, kb):
                    self.model.allowed_lost += 1
            report(m)

        mover.done = done
        return e

    # --- running -------------------------------------------------------------------------------------
    def run(self) -> None:
        level = LOG.level
        LOG.setLevel(logging.CRITICAL)
        try:
            for i, action in enumerate(self.actions):
                self.step_no, self.action = i, action
                for f in self.faults.values():
                    f.rng = random.Random(hash((self.seed, i)))
                self.do(action)
                self.check()
        finally:
            self.close()
            LOG.setLevel(level)

    def close(self) -> None:
        with contextlib.suppress(Exception):  # already failing: that failure is reported, not this
            self.e.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def check(self) -> None:
        if self.raised is not None:
            raise self.raised
        e = self.e
        check_accounting(e)
        check_pins(e, self.held)
        check_counters(e, self.model)
        mover = e.placement.mover
        if not mover.queue and not mover.busy:
            for pos in self.backends:  # an earlier run's block charged again is no orphan any more
                charged = {key_bytes(k) for k in e.tiers[pos].keys()}  # noqa: SIM118 - a Tier
                self.model.orphans[pos] = self.model.orphans.get(pos, set()) - charged
            check_idle(e, self.model)

    def _point(self, tier: Tier, what: str) -> None:
        """A slow tier is inside the mover's I/O (lock free): check, and maybe run a request now."""
        if self.in_point:
            return
        self.in_point = True
        try:
            check_accounting(self.e)
            if self.nested and self.point_rng.random() < 0.6:
                self.do(self.nested.pop(0))
                check_accounting(self.e)
                check_pins(self.e, self.held)
        except Exception as exc:  # the mover would take it for the tier's failure: kept, raised after
            self.raised = self.raised or exc
            raise
        finally:
            self.in_point = False

    def _refused_write(self, pos: int, kb: bytes) -> None:
        """A refused write loses a block only when no other tier charges and holds a copy of it:
        when it is refused, or when it reports (the mover's report comes after the whole batch,
        and a request may meanwhile have let the faster copy go, counting on the queued write:
        RAM evicts a block whose write-through copy is queued; a loss then, as a demotion's)."""
        if self._copy_elsewhere(pos, kb):
            self.refused_held.add(kb)
        else:
            self.model.allowed_lost += 1

    def _copy_elsewhere(self, pos: int, kb: bytes) -> bool:
        """Another tier holds a copy the engine may serve: not an erased blob a refused delete kept
        (its payload stored before the tenant's last erasure), which must not be served."""
        return any(
            other != pos and kb in tier and tier.nbytes(kb) and self._valid(other, tier, kb)
            for other, tier in enumerate(self.e.tiers)
        )

    def _valid(self, pos: int, tier: Tier, kb: bytes) -> bool:
        """Also no copy: a block found at start in a tier an erasure of its tenant could not search
        (the engine deletes those: it cannot tell them from blocks that erasure missed)."""
        if not isinstance(tier, (SimDisk, SimRedis)):
            return True  # RAM holds what the engine stored there; erasure deletes it at once
        if pos in self.e.placement.erased.get(kb, ()):
            # An erased or expired blob a refused delete kept (the sweep at a close, seed 200214):
            # no copy. Its payload may equal one stored since (the same version stored again), so
            # the model cannot tell it from a fresh blob by its bytes: the engine's mark decides
            return False
        blob = tier.stored().get(kb)
        try:
            block = tier._codec.decode(blob, kb) if blob is not None else None
        except Exception:  # noqa: BLE001 - corrupt: no copy
            return False
        if block is None:
            return False
        dark, restarted = self.unsearched.get(block.tenant.decode(), (set(), False))
        if restarted and pos in dark:
            return False
        data = bytes(memoryview(block.payload))
        return any(data in vs for vs in self.model.versions.values())

    # --- the actions ---------------------------------------------------------------------------------
    def do(self, a: Action) -> None:
        getattr(self, "_" + a[0])(*a[1:])

    def _lookup_into(self, tenant: str, prompt: int) -> Any:
        tokens = self.setup.prompts[prompt]
        m = self.e.lookup(tokens, tenant)
        self.model.served(tenant, prompt, m.payloads, self.now)
        mc = self.model.count
        mc("lookups")
        mc("hits", m.n_blocks)
        mc("misses", len(tokens) // BLOCK - m.n_blocks)
        mc("hit_tokens", m.hit_tokens)
        mc("lookup_tokens", len(tokens))
        return m

    def _store(self, tenant: str, prompt: int, version: int) -> None:
        tokens = self.setup.prompts[prompt]
        m = self._lookup_into(tenant, prompt)
        try:
            unknown = self.model.unknown_ttls(tenant, prompt)
            payloads = self.model.stored(tenant, prompt, m.n_blocks, len(tokens) // BLOCK, version, self.now)
            self.e.store(tokens, payloads, tenant, m.n_blocks)
            self.model.count("stores")
            # A block whose TTL a restart made unknown is known again only if the store reached it
            # (it stops at the first block it cannot place): else storage keeps the old blob, which
            # discovery may serve later with a TTL from then (seed 200340)
            keys, dl = self.e.prompt(tokens, tenant).keys(), self.e.expiry.deadline
            self.model.still_unknown(tenant, prompt, [i for i in unknown if dl.get(keys[i]) is None])
        finally:
            self.e.release(m)

    def _lookup(self, tenant: str, prompt: int, hold: bool) -> None:
        m = self._lookup_into(tenant, prompt)
        if hold and m.n_blocks:
            self.held.append(m)
        else:
            self.e.release(m)

    def _release(self, i: int) -> None:
        if self.held:
            self.e.release(self.held.pop(i % len(self.held)))

    def _step(self, n: int, seed: int, nested: list[Action]) -> None:
        self.nested, self.point_rng = list(nested), random.Random(seed)
        mover = self.e.placement.mover
        for _ in range(n):
            if not mover.step():
                break
        rest, self.nested = self.nested, []
        for a in rest:  # requests the I/O points did not take run after the steps
            self.do(a)

    def _tick(self, dt: float) -> None:
        self.now += dt

    def _faults(self, pos: int, p_write: float, p_delete: float) -> None:
        self.faults[pos].p_write, self.faults[pos].p_delete = p_write, p_delete

    def _down(self, pos: int, on: bool) -> None:
        self.faults[pos].down = on

    def _master(self, pos: int, m: int, on: bool) -> None:
        (self.faults[pos].masters_down.add if on else self.faults[pos].masters_down.discard)(m)

    def _corrupt(self, pos: int, i: int) -> None:
        tier = self.e.tiers[pos]
        assert isinstance(tier, (SimDisk, SimRedis))
        keys = sorted(tier.stored())
        if not keys:
            return
        kb = keys[i % len(keys)]
        if isinstance(tier, SimDisk):
            tier.corrupt_file(kb)
        else:
            blob = bytearray(tier.backend[kb])
            blob[-1] ^= 0xFF
            tier.backend[kb] = bytes(blob)
        self.corrupted[(pos, kb)] = tier.stored()[kb]
        self.model.allowed_lost += 1

    def _erase(self, tenant: str) -> None:
        dark = {pos for pos, f in self.faults.items() if f.down or f.masters_down}
        self.unsearched[tenant] = (dark, False)
        self.e.erase_tenant(tenant)
        self.model.erased(tenant)

    def _sweep(self) -> None:
        self.e.sweep()

    def _drain(self) -> None:
        self.e.flush()

    def _restart(self) -> None:
        self.e.close()
        self.held.clear()
        self.model.restarted(self.now)
        # a corrupt blob still stored may be found (and its block lost) after the restart (seed 200482)
        stored = {pos: self.e.tiers[pos].stored() for pos in self.backends}  # type: ignore[attr-defined]
        self.corrupted = {(pos, kb): b for (pos, kb), b in self.corrupted.items() if stored[pos].get(kb) == b}
        self.model.allowed_lost = len(self.corrupted)
        self.refused_held.clear()
        self.unsearched = {t: (dark, True) for t, (dark, _) in self.unsearched.items() if dark}
        for pos, backend in self.backends.items():
            self.model.orphans[pos] = set(backend)
        self.e = self._open()


def run_seed(seed: int, n: int, keep: list[int] | None = None, actions: list[Action] | None = None) -> None:
    """Run one seed (``keep``: only those actions; ``actions``: these instead); raises Failure."""
    setup, planned = plan(seed, n)
    if actions is None:
        actions = planned if keep is None else [planned[i] for i in keep]
    sim = Sim(seed, setup, actions)
    try:
        sim.run()
    except Failure:
        raise
    except Violation as exc:
        raise Failure(seed, sim.step_no, sim.action, str(exc)) from exc
    except Exception as exc:  # noqa: BLE001 - any engine exception is a failure of the run
        raise Failure(seed, sim.step_no, sim.action, f"{type(exc).__name__}: {exc}") from exc
