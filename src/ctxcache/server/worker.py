"""One model worker fed by an asyncio queue.

The model is not thread-safe, so every job (tokenize, cached prefill, decode, store) runs on a
single dedicated thread, in priority order (a tenant's class: 0 system, 1 SLO, 2 best effort),
then arrival order: a class-1 request waiting behind class-2 work goes first, between jobs,
never preempting one mid-forward. The event loop only moves jobs into that thread and
events out of it (``call_soon_threadsafe``), so it never blocks on the model. A bounded queue turns
overload into an immediate 429 instead of unbounded latency.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from .deps import internal_message

log = logging.getLogger("ctxcache.server")


class QueueFullError(Exception):
    def __init__(self, retry_after: int) -> None:
        super().__init__(f"the request queue is full; retry after {retry_after} s")
        self.retry_after = retry_after


@dataclass
class Event:
    kind: str  # "prompt", "usage", "delta", "done", "error", "end"
    data: Any = None


class JobContext:
    """What a job running on the model thread sees: a way to send events and a cancel flag."""

    def __init__(self, job: Job) -> None:
        self._job = job

    def emit(self, kind: str, data: Any = None) -> None:
        self._job.loop.call_soon_threadsafe(self._job.events.put_nowait, Event(kind, data))

    def cancelled(self) -> bool:
        return self._job.cancel_flag.is_set()

    @property
    def queued_s(self) -> float:
        return self._job.started_at - self._job.enqueued_at


@dataclass
class Job:
    fn: Callable[[JobContext], None]
    loop: asyncio.AbstractEventLoop
    id: int
    events: asyncio.Queue[Event] = field(default_factory=asyncio.Queue)
    cancel_flag: threading.Event = field(default_factory=threading.Event)
    enqueued_at: float = field(default_factory=time.perf_counter)
    started_at: float = 0.0
    request_id: str | None = None  # names the HTTP request in the log

    async def next(self) -> Event:
        return await self.events.get()

    def cancel(self) -> None:
        """The client went away: skip the job if still queued, stop decoding if running."""
        self.cancel_flag.set()


class ModelWorker:
    def __init__(self, max_queue: int, after_job: Callable[[], None] | None = None) -> None:
        self.max_queue = max_queue
        self._after_job = after_job  # runs on the model thread after every job (memory.trimmer)
        self._queue: asyncio.PriorityQueue[tuple[int, int, Job]] | None = None
        self._task: asyncio.Task[None] | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ctxcache-model")
        self._ids = itertools.count(1)
        self.busy = False
        self.busy_since: float | None = None  # monotonic start of the running job (readiness)
        self.jobs_done = 0
        self._avg_job_s = 2.0  # a prior for Retry-After until jobs have been timed

    @property
    def depth(self) -> int:
        """Jobs waiting (not counting the one running)."""
        return self._queue.qsize() if self._queue is not None else 0

    async def start(self) -> None:
        self._queue = asyncio.PriorityQueue(maxsize=self.max_queue)
        self._task = asyncio.create_task(self._loop(), name="ctxcache-model-worker")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._executor.shutdown(wait=True, cancel_futures=True)

    def submit(self, fn: Callable[[JobContext], None], request_id: str | None = None, *, priority: int = 2) -> Job:
        """Queue a job (lower ``priority`` runs first); raises QueueFullError (with a Retry-After
        estimate) when the queue is full."""
        if self._queue is None:
            raise RuntimeError("the model worker is not running (the app's lifespan has not started)")
        job = Job(fn, asyncio.get_running_loop(), next(self._ids), request_id=request_id)
        try:
            self._queue.put_nowait((priority, job.id, job))
        except asyncio.QueueFull:
            wait = (self.depth + 1) * self._avg_job_s
            raise QueueFullError(max(1, round(wait))) from None
        return job

    async def _loop(self) -> None:
        assert self._queue is not None
        loop = asyncio.get_running_loop()
        while True:
            _, _, job = await self._queue.get()
            if job.cancel_flag.is_set():
                job.events.put_nowait(Event("end"))
                continue
            self.busy, self.busy_since = True, time.monotonic()
            try:
                await loop.run_in_executor(self._executor, self._run, job)
            finally:
                self.busy, self.busy_since = False, None

    def _run(self, job: Job) -> None:
        ctx = JobContext(job)
        job.started_at = time.perf_counter()
        try:
            job.fn(ctx)
        except Exception:  # a failed request must not take the worker down
            # The client gets no exception text (it may hold internals); the log has all of it.
            log.exception("job %d (request %s) failed", job.id, job.request_id)
            ctx.emit("error", (500, internal_message(job.request_id)))
        finally:
            dt = time.perf_counter() - job.started_at
            self._avg_job_s = 0.8 * self._avg_job_s + 0.2 * dt
            self.jobs_done += 1
            ctx.emit("end")
            if self._after_job is not None:
                self._after_job()
