"""The router's workers: health (active /readyz checks, passive errors), ejection, readmission, load.

A connection that cannot be made (refused, or not made in time) ejects the worker at once: a retry elsewhere is about to pay for it, and the next request should not. A
5xx or a broken stream counts; ``fail_threshold`` of them in a row eject it. Active: every
``check_interval_s`` each worker's ``/readyz`` is fetched; a failure counts like a passive one,
and an ejected worker is readmitted by its first passing check once ``eject_s`` has passed
(doubling, up to ``max_eject_s``, each time it is ejected again soon after a readmission).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from .score import Load

log = logging.getLogger("ctxcache.router")


@dataclass
class Upstream:
    url: str
    healthy: bool = True
    failures: int = 0  # in a row
    ejected_at: float = 0.0
    eject_for: float = 0.0
    ejections: int = 0
    readmitted_at: float = 0.0
    last_error: str = ""
    load: Load = field(default_factory=Load)
    requests: int = 0
    events_worker: str | None = None  # the KV-events worker id its /readyz reports (router/feed.py)

    @property
    def name(self) -> str:
        return self.url


class Pool:
    def __init__(
        self,
        urls: list[str],
        *,
        check_interval_s: float = 1.0,
        check_timeout_s: float = 2.0,
        fail_threshold: int = 3,
        eject_s: float = 2.0,
        max_eject_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        on_eject: Callable[[Upstream], None] | None = None,
        on_ready: Callable[[Upstream], None] | None = None,
    ) -> None:
        if not urls:
            raise ValueError("at least one --worker URL is needed")
        self.workers = {u.rstrip("/"): Upstream(u.rstrip("/")) for u in urls}
        self.check_interval_s, self.check_timeout_s = check_interval_s, check_timeout_s
        self.fail_threshold, self.eject_s, self.max_eject_s = fail_threshold, eject_s, max_eject_s
        self._clock = clock
        self._on_eject = on_eject
        self.on_ready = on_ready  # after each passing check (events_worker is fresh then)
        self._task: asyncio.Task[None] | None = None

    def healthy(self) -> list[Upstream]:
        return [w for w in self.workers.values() if w.healthy]

    # --- passive ---------------------------------------------------------------------------------------
    def failed(self, w: Upstream, why: str, *, connect: bool = False) -> None:
        w.failures += 1
        w.last_error = why
        if w.healthy and (connect or w.failures >= self.fail_threshold):
            self.eject(w, why)

    def succeeded(self, w: Upstream) -> None:
        w.failures = 0

    def eject(self, w: Upstream, why: str) -> None:
        now = self._clock()
        recent = w.readmitted_at and now - w.readmitted_at < 4 * w.eject_for
        w.eject_for = min(self.max_eject_s, w.eject_for * 2) if recent else self.eject_s
        w.healthy, w.ejected_at = False, now
        w.ejections += 1
        log.warning("worker %s ejected for %.0f s: %s", w.url, w.eject_for, why)
        if self._on_eject is not None:
            self._on_eject(w)

    # --- active ----------------------------------------------------------------------------------------
    async def check(self, client: httpx.AsyncClient, w: Upstream) -> bool:
        refused = False
        try:
            r = await client.get(f"{w.url}/readyz", timeout=self.check_timeout_s)
            ok = r.status_code == 200
            why = f"/readyz answered {r.status_code}"
        except httpx.HTTPError as exc:
            ok, why, refused = False, f"/readyz: {type(exc).__name__}", isinstance(exc, httpx.ConnectError)
        if not ok:
            self.failed(w, why, connect=refused)
            return False
        self.succeeded(w)
        w.events_worker = _events_worker(r)
        if self.on_ready is not None:
            self.on_ready(w)
        if not w.healthy and self._clock() - w.ejected_at >= w.eject_for:
            w.healthy, w.readmitted_at = True, self._clock()
            log.warning("worker %s readmitted", w.url)
        return True

    async def check_all(self, client: httpx.AsyncClient) -> None:
        await asyncio.gather(*(self.check(client, w) for w in self.workers.values()))

    def start(self, client: httpx.AsyncClient) -> None:
        async def loop() -> None:
            while True:
                await self.check_all(client)
                await asyncio.sleep(self.check_interval_s)

        self._task = asyncio.create_task(loop(), name="ctxcache-router-health")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def state(self) -> list[dict[str, object]]:
        return [
            {
                "url": w.url,
                "healthy": w.healthy,
                "failures": w.failures,
                "ejections": w.ejections,
                "last_error": w.last_error,
                "requests": w.requests,
                "prefill_tokens": w.load.prefill_tokens,
                "streaming": w.load.streaming,
                "events_worker": w.events_worker,
            }
            for w in self.workers.values()
        ]


def _events_worker(r: httpx.Response) -> str | None:
    """``events_worker`` from a /readyz body (a ctxcache serve worker with KV events on), else None."""
    try:
        body = r.json()
    except ValueError:
        return None
    got = body.get("events_worker") if isinstance(body, dict) else None
    return got if isinstance(got, str) and got else None
