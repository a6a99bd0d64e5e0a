"""The admin key: one shared secret for operator routes (/v1/admin/...), separate from tenant API keys.

Set by ``[admin] key = "..."`` in the server config or the ``CTXCACHE_ADMIN_KEY`` environment
variable (which wins). Without one the admin routes answer 403: nothing operator-only is open by
default. Tenancy (per-tenant admin scopes) can build on ``require_admin`` later.
"""

from __future__ import annotations

import hmac
import os

from fastapi import Request

from ..errors import ConfigError
from .deps import APIError

ENV = "CTXCACHE_ADMIN_KEY"


def admin_key(admin: dict[str, object]) -> str | None:
    key = os.environ.get(ENV) or admin.get("key")
    if key is None or key == "":
        return None
    if not isinstance(key, str) or len(key) < 8:
        raise ConfigError("[admin] key must be a string of at least 8 characters")
    bad = set(admin) - {"key"}
    if bad:
        raise ConfigError(f"unknown [admin] keys {sorted(bad)}; known: ['key']")
    return key


def require_admin(request: Request) -> None:
    """FastAPI dependency: the request carries the admin key (Bearer or ``x-admin-key``)."""
    key = admin_key(request.app.state.ctx.cfg.admin)
    if key is None:
        raise APIError(403, f"the admin API is disabled: set [admin] key in the config or {ENV}")
    auth = request.headers.get("authorization", "")
    given = auth[7:].strip() if auth.lower().startswith("bearer ") else request.headers.get("x-admin-key", "")
    if not given:
        raise APIError(401, "missing admin key: send 'Authorization: Bearer <admin key>' or 'x-admin-key'")
    if not hmac.compare_digest(key.encode(), given.encode()):
        raise APIError(401, "invalid admin key")
