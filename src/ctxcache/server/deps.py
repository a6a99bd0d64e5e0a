"""Errors in each API's own shape, and API-key authentication (a key names a tenant = a cache namespace)."""

from __future__ import annotations

import hmac
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from ..engine.tenancy import InvalidSaltError
from .config import DEFAULT_TENANT

# status -> (OpenAI type, OpenAI code, Anthropic type): one table for both APIs' vocabularies.
# A raise may name a more specific OpenAI code (model_not_found, context_length_exceeded,
# unsupported_parameter); the Anthropic type depends on the status alone, as in Anthropic's API.
ERROR_KINDS: dict[int, tuple[str, str, str]] = {
    400: ("invalid_request_error", "invalid_value", "invalid_request_error"),
    401: ("invalid_request_error", "invalid_api_key", "authentication_error"),
    403: ("invalid_request_error", "permission_denied", "permission_error"),
    404: ("invalid_request_error", "not_found", "not_found_error"),
    405: ("invalid_request_error", "method_not_allowed", "invalid_request_error"),
    413: ("invalid_request_error", "request_too_large", "request_too_large"),
    422: ("invalid_request_error", "invalid_value", "invalid_request_error"),
    429: ("requests", "rate_limit_exceeded", "rate_limit_error"),
    500: ("server_error", "internal_error", "api_error"),
    503: ("server_error", "overloaded", "overloaded_error"),
}


class APIError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.headers = status, message, param, code, headers


def is_anthropic(path: str) -> bool:
    return path.startswith("/v1/messages")


def error_body(path: str, status: int, message: str, *, param: str | None = None, code: str | None = None) -> Any:
    """OpenAI's ``{"error": {...}}`` everywhere, except Anthropic's ``{"type": "error", ...}`` on /v1/messages."""
    oa_type, oa_code, an_type = ERROR_KINDS.get(status, ERROR_KINDS[400] if status < 500 else ERROR_KINDS[500])
    if is_anthropic(path):
        return {"type": "error", "error": {"type": an_type, "message": message}}
    return {"error": {"message": message, "type": oa_type, "param": param, "code": code or oa_code}}


def internal_message(request_id: str | None) -> str:
    """What a client sees of a server fault: no exception types or messages (they go to the log)."""
    rid = f" (request id {request_id})" if request_id else ""
    return f"internal error{rid}; the details are in the server log"


def error_response(request: Request, status: int, message: str, **kw: Any) -> JSONResponse:
    body = error_body(request.url.path, status, message, param=kw.get("param"), code=kw.get("code"))
    return JSONResponse(body, status_code=status, headers=kw.get("headers"))


def describe_validation(exc: RequestValidationError) -> str:
    """One line per problem, naming the field: 'messages.0.role: Input should be ...'."""
    from .schemas import UNSUPPORTED_FIELDS

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
        elif loc and loc[0] in UNSUPPORTED_FIELDS:
            parts.append(f"{loc[0]}: not supported by this server; leave it out (or send its 'off' value)")
        else:
            where = ".".join(loc) or "body"
            parts.append(f"{where}: {e.get('msg')}")
    return "; ".join(dict.fromkeys(parts)) or "invalid request"


def unsupported_field(exc: RequestValidationError) -> str | None:
    """The first field the request set that this server does not implement (schemas.UNSUPPORTED_FIELDS)."""
    from .schemas import UNSUPPORTED_FIELDS

    for e in exc.errors():
        loc = [x for x in e.get("loc", ()) if x != "body"]
        if len(loc) >= 1 and loc[0] in UNSUPPORTED_FIELDS:
            return str(loc[0])
    return None


def invalid_field(exc: RequestValidationError) -> str | None:
    """The top-level request field of the first problem (OpenAI's ``param``), if one is named."""
    for e in exc.errors():
        loc = [x for x in e.get("loc", ()) if x != "body"]
        if loc and e.get("type") != "json_invalid":
            return str(loc[0])
    return None


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
