"""/openapi.json says what this server accepts: what comes from its configuration (the largest
max_tokens, the served model names) is written into the published schema."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

# (schema, property) pairs bounded by the server's max_tokens limit.
_MAX_TOKENS_FIELDS = [
    ("ChatCompletionRequest", "max_tokens"),
    ("ChatCompletionRequest", "max_completion_tokens"),
    ("MessagesRequest", "max_tokens"),
    ("CompletionRequest", "max_tokens"),
]


def _bound(prop: dict[str, Any], limit: int) -> None:
    for branch in prop.get("anyOf", [prop]):
        if branch.get("type") == "integer":
            branch["maximum"] = limit


def _bound_ids(prop: dict[str, Any] | None, vocab: int) -> None:
    for branch in (prop or {}).get("anyOf", [prop or {}]):
        items = branch.get("items") if branch.get("type") == "array" else None
        if items is not None:
            items["maximum"] = vocab - 1
            items["description"] = f"a token id of this model (0..{vocab - 1})"


def publish_limits(app: FastAPI, max_tokens: int, models: list[str], vocab: int | None = None) -> None:
    """Replace ``app.openapi`` with one that carries ``max_tokens``'s bound, the model names and
    the vocabulary's size (token-id prompts)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            spec = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
            schemas = spec.get("components", {}).get("schemas", {})
            for name, field in _MAX_TOKENS_FIELDS:
                prop = schemas.get(name, {}).get("properties", {}).get(field)
                if prop is not None:
                    _bound(prop, max_tokens)
                    prop["description"] = f"at most {max_tokens} on this server"
            for name in ("ChatCompletionRequest", "MessagesRequest", "CompletionRequest", "CountTokensRequest"):
                prop = schemas.get(name, {}).get("properties", {}).get("model")
                if prop is not None:
                    prop["enum"] = list(models)
                    prop["description"] = "a model this server serves (see /v1/models)"
            if vocab is not None:
                _bound_ids(schemas.get("CompletionRequest", {}).get("properties", {}).get("prompt"), vocab)
                _bound_ids(schemas.get("DetokenizeRequest", {}).get("properties", {}).get("tokens"), vocab)
            app.openapi_schema = spec
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
