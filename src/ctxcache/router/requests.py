"""A request's block keys, computed as its worker will compute them.

The router parses a body with the server's own schemas and message conversion (routes_openai /
routes_anthropic ``to_messages``), renders it with the same tokenizer and chat template
(integrations/chat.py), and hashes the ids under the namespace the worker would use: the same
[cache] config (block size, hash, salt, model fingerprint, tenants and their secret) and the
same API key -> tenant table. Keys that differ from the worker's would only cost cache hits,
never correctness, and tests/router/test_requests.py checks that they do not differ.

A body the schemas refuse gets no keys: the router sends it on, and the worker answers with
the error in its API's shape (one place decides what is valid).
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..cache import ContextCache
from ..errors import CtxCacheError
from ..integrations.chat import chat_template_for, model_type, render_chat, text_encoder
from ..server.config import DEFAULT_TENANT, ServerConfig
from ..server.deps import APIError
from ..server.routes_anthropic import to_messages as anthropic_messages
from ..server.routes_openai import to_messages as openai_messages
from ..server.schemas import ChatCompletionRequest, MessagesRequest
from .pieces import Encoder, for_template


@dataclass
class Keyed:
    tokens: int  # prompt tokens
    keys: list[bytes]  # full blocks' keys, in chain order
    tenant: str
    session: str | None  # OpenAI ``user`` / Anthropic ``metadata.user_id``: the affinity tie-break


class RequestKeys:
    def __init__(self, tokenizer: Any, template: str, cfg: ServerConfig, model_fingerprint: str,
                 piece_cache_tokens: int = 4 << 20) -> None:  # fmt: skip
        self.tokenizer, self.template, self.cfg = tokenizer, template, cfg
        # a conversation's earlier turns from the previous request's pieces (pieces.py says when)
        self._encode: Encoder = text_encoder(tokenizer)
        if piece_cache_tokens > 0:
            self._encode = for_template(tokenizer, template, self._encode, piece_cache_tokens)
        cache_cfg = cfg.cache_dict(model_fingerprint)
        # Only the key derivation is needed: a token-sized RAM tier, never written.
        cache_cfg["tiers"] = [{"kind": "memory", "capacity": "1MiB"}]
        self._cache = ContextCache.from_config(cache_cfg)
        self.block_size = self._cache.block_size

    @classmethod
    def from_model_dir(cls, path: Path, cfg: ServerConfig, piece_cache_tokens: int = 4 << 20) -> RequestKeys:
        from ..integrations.model_store import fingerprint
        from ..integrations.tokenizer_cache import load_tokenizer

        tok = load_tokenizer(path)
        return cls(tok, chat_template_for(tok, model_type(path)), cfg, fingerprint(path), piece_cache_tokens)

    def tenant(self, headers: Mapping[str, str]) -> str | None:
        """The tenant of the request's API key, as the worker decides it; None when the worker
        will refuse the key (the router routes it anyway, the worker answers 401/403)."""
        keys, tenancy = self.cfg.api_keys, self._cache.tenancy
        if not keys and tenancy is None:
            return DEFAULT_TENANT
        auth = headers.get("authorization", "")
        given = auth[7:].strip() if auth.lower().startswith("bearer ") else headers.get("x-api-key", "")
        if not given:
            return None
        found = tenancy.authenticate(given) if tenancy is not None else None
        if found is not None:
            return found
        tenant = None
        for key, t in keys.items():
            if hmac.compare_digest(key.encode(), given.encode()):
                tenant = t
        if tenant is not None and tenancy is not None and tenant not in tenancy.tenants:
            return None
        return tenant

    def compute(self, api: str, body: Any, headers: Mapping[str, str]) -> Keyed | None:
        """Keys of an OpenAI (``api="openai"``) or Anthropic (``"anthropic"``) chat body; None when
        the body is invalid or its key unknown (the worker will say why)."""
        tenant = self.tenant(headers)
        if tenant is None or not isinstance(body, dict):
            return None
        try:
            if api == "openai":
                req = ChatCompletionRequest.model_validate(body)
                msgs, salt, session = openai_messages(req), req.cache_salt, req.user
            else:
                areq = MessagesRequest.model_validate(body)
                msgs, _ = anthropic_messages(areq)
                salt, session = None, _user_id(areq.metadata)
            ids = self._encode(render_chat(self.tokenizer, self.template, msgs))
            ns = self._cache.namespace(tenant, salt)
        except (ValidationError, APIError, CtxCacheError, ValueError, KeyError):
            return None
        return Keyed(len(ids), self._cache.hasher.keys(ids, ns), tenant, session)

    def close(self) -> None:
        self._cache.close()


def _user_id(metadata: dict[str, Any] | None) -> str | None:
    uid = (metadata or {}).get("user_id")
    return uid if isinstance(uid, str) else None
