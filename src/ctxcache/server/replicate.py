"""Submitting an update a route made here to the region's replicator (docs/regions.md)."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import Request

from .deps import APIError


async def submit(request: Request, kind: str, target: str | bytes, value: Any = None) -> dict[str, Any] | None:
    """Ship an update made here to the other regions (None without [replication])."""
    rep = getattr(request.app.state, "replication", None)
    if rep is None:
        return None
    from ..replication.config import Unreachable

    try:
        await asyncio.to_thread(rep.submit, kind, target, value)
    except Unreachable as exc:
        raise APIError(503, f"applied here, but the region's replication log is unreachable ({exc}); "
                            "retry: the call is idempotent", code="replication_unavailable") from None  # fmt: skip
    except ValueError as exc:
        raise APIError(400, str(exc)) from None
    return {"region": rep.cfg.region, "submitted": True}
