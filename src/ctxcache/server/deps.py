"""Errors in each API's own shape, and API-key authentication (a key names a tenant = a cache namespace)."""

from __future__ import annotations

import hmac
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from ..engine.tenancy import InvalidSaltError
from .config import DEFAULT_TENANT

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
}


class APIError(Exception):
    def __init__(self, status: int, message: str, *, param: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.headers = status, message, param, headers


def error_response(request: Request, status: int, message: str, **kw: Any) -> JSONResponse:
    """OpenAI's ``{"error": {...}}`` everywhere, except Anthropic's ``{"type": "error", ...}`` on /v1/messages."""
    kind = _TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")
    if request.url.path.startswith("/v1/messages"):
        body: dict[str, Any] = {"type": "error", "error": {"type": kind, "message": message}}
    else:
        body = {"error": {"message": message, "type": kind, "param": kw.get("param"), "code": None}}
    return JSONResponse(body, status_code=status, headers=kw.get("headers"))


def describe_validation(exc: RequestValidationError) -> str:
    """One line per problem, naming the field: 'messages.0.role: Input should be ...'."""
    parts = []
    for e in exc.errors():
        loc = [str(x) for x in e.get("loc", ()) if x != "body"]
        if e.get("type") == "json_invalid":
            ctx = e.get("ctx") or {}
            parts.append(
                f"malformed JSON body: {ctx.get('error', e.get('msg'))} (at character {loc[-1] if loc else '?'})"
            )
        elif e.get("type") == "missing" and not loc:
            parts.append("the request body is missing: send a JSON object")
        else:
            where = ".".join(loc) or "body"
            parts.append(f"{where}: {e.get('msg')}")
    return "; ".join(dict.fromkeys(parts)) or "invalid request"


def given_key(request: Request) -> str:
    auth = request.headers.get("authorization", "")
    return auth[7:].strip() if auth.lower().startswith("bearer ") else request.headers.get("x-api-key", "")


def main_cache(request: Request) -> Any:
    """The server's own cache. Not ``lm.cache``: while a job of A/B group b runs, the model thread
    swaps that for group b's cache (``Observability.cache_for``), which holds no tenancy, so keys
    read from it mid-job would authenticate nobody's tenants (or everybody as the default one)."""
    return request.app.state.obs.cache


def check_cache_salt(state: Any, tenant: str, salt: str | None) -> str | None:
    """A request's ``cache_salt``, validated (400 naming the field), or None."""
    if salt is None:
        return None
    try:
        state.obs.cache.namespace(tenant, salt)
    except InvalidSaltError as exc:
        raise APIError(400, str(exc), param="cache_salt") from None
    return salt


def tenant_for(request: Request) -> str:
    """The tenant of a request's API key (``Authorization: Bearer`` or ``x-api-key``): configured
    tenants' keys (compared as SHA-256 digests) first, then the ``[api_keys]`` table."""
    keys: dict[str, str] = request.app.state.ctx.cfg.api_keys
    tenancy = main_cache(request).tenancy
    if not keys and tenancy is None:
        return DEFAULT_TENANT
    given = given_key(request)
    if not given:
        raise APIError(401, "missing API key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'")
    found: str | None = tenancy.authenticate(given) if tenancy is not None else None
    if found is not None:
        return found
    tenant = None
    for key, t in keys.items():  # compare with every key, in constant time per key
        if hmac.compare_digest(key.encode(), given.encode()):
            tenant = t
    if tenant is None:
        raise APIError(401, "invalid API key")
    if tenancy is not None and tenant not in tenancy.tenants:
        raise APIError(403, f"the API key's tenant {tenant!r} is not configured in [cache.tenants]")
    return tenant
