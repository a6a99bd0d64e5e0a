"""Readiness: is this server able to take requests now? Each check names what is wrong."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any


def readiness(
    *,
    model_loaded: bool,
    worker_running: bool,
    busy_since: float | None,
    stall_s: float,
    tiers: Mapping[str, Mapping[str, Any]],
    now: float | None = None,
) -> tuple[bool, dict[str, Any]]:
    """(ready, body). ``busy_since``: monotonic start of the job the worker runs, None if idle."""
    now = time.monotonic() if now is None else now
    problems: list[str] = []
    checks: dict[str, Any] = {"model": {"ok": model_loaded}}
    if not model_loaded:
        problems.append("the model is not loaded")
    running_s = None if busy_since is None else round(now - busy_since, 3)
    stuck = running_s is not None and running_s > stall_s
    checks["worker"] = {"ok": worker_running and not stuck, "running": worker_running, "job_running_s": running_s}
    if not worker_running:
        problems.append("the model worker is not running")
    elif stuck:
        problems.append(f"the model worker has run one job for {running_s:.0f} s (limit {stall_s:.0f} s): stuck?")
    tier_checks = {}
    for name, ts in tiers.items():
        up = bool(ts.get("healthy", True))
        tier_checks[name] = {"ok": up, "kind": ts.get("kind"), "corrupt_blocks": ts.get("corrupt", 0)}
        if ts.get("masters_down"):  # a Cluster serving from its other masters: ready, degraded
            tier_checks[name]["masters_down"] = list(ts["masters_down"])
        if not up:
            problems.append(f"tier {name} ({ts.get('kind')}) is unreachable")
    checks["tiers"] = tier_checks
    ok = not problems
    return ok, {"status": "ready" if ok else "not ready", "problems": problems, "checks": checks}
