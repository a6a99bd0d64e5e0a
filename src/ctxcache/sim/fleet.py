"""The fleet simulator: N workers (sim/fleet_worker.py: real ContextCaches behind a cost model) and
one routing arm (sim/fleet_arms.py: the router's own decision code), driven by a workload
(sim/fleet_workloads.py) in a discrete-event loop (docs/routing.md, "Fleet simulation").

Deterministic: one simulated clock read by every cache, index, emitter and speculative entry;
one seeded RNG (the random arm's); no threads (the caches' movers are stepped in place); events
ordered by (time, insertion). Same requests, config and seed: the same result, field for field
(``wall_s`` aside).
"""

from __future__ import annotations

import heapq
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..router.score import ScoreConfig
from ..tiers.memory import MemoryTier
from .costmodel import CostModel
from .fleet_arms import EVENT_ARMS, Arm, Oracle, make_arm
from .fleet_worker import BS, Job, SharedStore, SimWorker, WorkerSpec, block_tokens
from .fleet_workloads import BLOCK, FleetRequest
from .regions_parts import SimCache

# Llama-3-8B-ish on one accelerator: the prefill rate of costmodel's llama3-8b-a100 preset
# (~9.7k tokens/s and its quadratic attention term) plus a fixed 20 ms per prefill call.
DEFAULT_COST = CostModel("fleet-default", a=2 * 8.0e9 / (0.5 * 312e12), b=2 * 4096 * 32 / (0.5 * 312e12), c0=0.02,
                         source="costmodel's llama3-8b-a100 + 20 ms overhead per prefill")  # fmt: skip

ARRIVE, PREFILLED, DONE, DELIVER, MARK = range(5)


class SimClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@dataclass
class FleetConfig:
    workers: int = 8
    spec: WorkerSpec = field(default_factory=lambda: WorkerSpec(DEFAULT_COST))
    score: ScoreConfig = field(default_factory=lambda: ScoreConfig(block_size=BLOCK))
    event_lag_s: float = 0.01  # a worker's change to the router's index: flush (5 ms) + transport
    seed: int = 0
    # The first fraction of requests (by arrival) runs but is not measured: the caches start cold,
    # and the compulsory misses of the first requests of every prefix are no arm's doing. Where
    # the workload is built for a ladder point (fleet_report.run_point), those requests also
    # arrive ``warmup_slowdown`` times slower (workloads.warmed).
    warmup: float = 0.25
    warmup_slowdown: float = 4.0


class Fleet:
    """One run: ``run(requests)`` once, then ``result()``."""

    def __init__(self, arm: str, cfg: FleetConfig) -> None:
        self.cfg = cfg
        self.clock = SimClock()
        names = [f"w{i}" for i in range(cfg.workers)]
        shared = SharedStore() if arm == "precise-shared" else None
        self.arm: Arm = make_arm(arm, names, self.clock, random.Random(cfg.seed), cfg.score)
        self.workers = [
            SimWorker(n, cfg.spec, self.clock, shared=shared, events=arm in EVENT_ARMS, cache=not self.arm.fixed_hit)
            for n in names
        ]
        self._keyer = SimCache([MemoryTier(1)], block_size=BS, clock=self.clock)  # the router's hasher
        self._heap: list[tuple[float, int, int, Any]] = []
        self._seq = 0
        self.jobs: list[Job] = []

    def _push(self, t: float, kind: int, item: Any) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, kind, item))

    def run(self, requests: Sequence[FleetRequest], progress: Callable[[int], None] | None = None) -> None:
        t0 = time.perf_counter()
        self.jobs = [Job(r, i) for i, r in enumerate(requests)]
        for j in self.jobs:
            self._push(j.req.time, ARRIVE, j)
        # The KV fill is read over the measured arrivals (from the first measured one to the last
        # arrival): the steady state, not the slower warm-up nor the drain after the last request.
        measured = self._measured()
        if measured:
            self._push(measured[0].req.time, MARK, None)
            self._push(max(j.req.time for j in self.jobs), MARK, None)
        self.marks: list[tuple[float, list[float]]] = []
        done = 0
        while self._heap:
            t, _, kind, item = heapq.heappop(self._heap)
            self.clock.t = t
            if kind == ARRIVE:
                self._arrive(item)
            elif kind == PREFILLED:
                w = self.workers[item.worker]
                w.prefilled(item)
                self.arm.first(item)
                self._push(t + item.req.output_length * self.cfg.spec.decode_s, DONE, item)
                self._start(w)
            elif kind == DONE:
                w = self.workers[item.worker]
                item.done = t
                w.finished(t, item)
                self.arm.done(item)
                self._start(w)
                done += 1
                if progress is not None and done % 100 == 0:
                    progress(100)
            elif kind == DELIVER:
                self.arm.apply(item)
            else:
                self.marks.append((t, [w.kv_area(t) for w in self.workers]))
        if progress is not None and done % 100:
            progress(done % 100)
        self.wall_s = time.perf_counter() - t0

    def _arrive(self, job: Job) -> None:
        keys = self._keyer.prompt(block_tokens(job.req)).keys() if self.arm.needs_keys else []
        job.worker, job.predicted = self.arm.pick(job, keys, self.workers, self.clock.t)
        self.arm.sent(job)
        w = self.workers[job.worker]
        w.enqueue(job)
        self._start(w)

    def _start(self, w: SimWorker) -> None:
        job = w.try_start(self.clock.t, self.arm.fixed_hit)
        if job is not None:
            self._push(job.first, PREFILLED, job)
        for batch in w.batches():
            self._push(self.clock.t + self.cfg.event_lag_s, DELIVER, batch)

    def result(self) -> dict[str, Any]:
        everyone, jobs = self.jobs, self._measured()
        finished = [j for j in jobs if j.done > 0]
        ttft = np.array([j.first - j.req.time for j in finished]) if finished else np.zeros(1)
        t_end = max((j.done for j in finished), default=0.0)
        t_first = min((j.req.time for j in jobs), default=0.0)
        inputs = sum(j.req.input_length for j in jobs)
        outputs = sum(j.req.output_length for j in finished)
        per_worker = [w.requests for w in self.workers]
        work = [w.busy_s for w in self.workers]
        fills = self._fills()
        out: dict[str, Any] = {
            "arm": self.arm.name,
            "workers": len(self.workers),
            "requests": len(everyone),
            "measured": len(jobs),
            "completed": len(finished),
            "refused": sum(1 for j in everyone if j.done <= 0),  # never by design: what does not fit waits
            "hit_ratio": round(sum(j.hit for j in jobs) / inputs, 6) if inputs else 0.0,
            "shared_hit_ratio": round(sum(j.shared_hit for j in jobs) / inputs, 6) if inputs else 0.0,
            "ttft_p50_s": _r(np.percentile(ttft, 50)),
            "ttft_p90_s": _r(np.percentile(ttft, 90)),
            "ttft_p99_s": _r(np.percentile(ttft, 99)),
            "ttft_mean_s": _r(float(ttft.mean())),
            "throughput_tok_s": _r(outputs / (t_end - t_first)) if t_end > t_first else 0.0,
            "makespan_s": _r(t_end - t_first),
            "kv_fill_mean": _r(sum(fills) / len(fills)),
            "kv_fill_max_worker": _r(max(fills)),
            "requests_per_worker": per_worker,
            "load_max_min": _r(max(per_worker) / min(per_worker)) if min(per_worker) else None,
            "prefill_s_max_min": _r(max(work) / min(work)) if min(work) else None,
            "predicted_hit_ratio": round(sum(j.predicted for j in jobs) / inputs, 6)
            if inputs and not self.arm.fixed_hit
            else None,
            "events_applied": self.arm.applied,
        }
        reasons = getattr(self.arm, "reasons", None)
        if reasons is not None:
            out["decisions"] = dict(sorted(reasons.items()))
            out["index_entries"] = int(self.arm.index.stats()["entries"])  # type: ignore[attr-defined]
        return out

    def _measured(self) -> list[Job]:
        return self.jobs[int(len(self.jobs) * self.cfg.warmup) :] or self.jobs

    def _fills(self) -> list[float]:
        """Per worker, the mean KV fill between the two marks (blocks held / capacity)."""
        if len(self.marks) < 2 or self.marks[1][0] <= self.marks[0][0]:
            return [0.0] * len(self.workers)
        (t0, a0), (t1, a1) = self.marks[0], self.marks[1]
        cap = self.cfg.spec.kv_blocks * (t1 - t0)
        return [(y - x) / cap for x, y in zip(a0, a1)]

    def close(self) -> None:
        for w in self.workers:
            w.close()
        self._keyer.close()
        if isinstance(self.arm, Oracle):
            self.arm.close()


def _r(x: float) -> float:
    return round(float(x), 6)


def simulate_fleet(
    requests: Sequence[FleetRequest], arm: str, cfg: FleetConfig | None = None,
    progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """One arm over ``requests``: the result's figures (see ``Fleet.result``) plus ``wall_s``."""
    fleet = Fleet(arm, cfg or FleetConfig())
    try:
        fleet.run(requests, progress)
        return {**fleet.result(), "wall_s": round(fleet.wall_s, 3)}
    finally:
        fleet.close()
