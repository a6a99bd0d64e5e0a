"""Semantic-cache requests, entries, and their stored form.

An entry is persisted as one codec block (checksummed, see codec.py) whose payload is a dict of
two arrays: ``meta`` (UTF-8 JSON: partition fields, text, response, times) and ``vec`` (the
composite embedding, float32). No pickle: a damaged or foreign block can only fail to decode.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import CorruptBlockError

_SPACE = re.compile(r"\s+")


def normalize(text: str) -> str:
    """What 'the same text' means for exact hits: case-folded, whitespace collapsed, no final ?.!"""
    return _SPACE.sub(" ", text).strip().rstrip("?.! ").casefold()


def _canon(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


@dataclass(frozen=True)
class SemanticQuery:
    """One request to the semantic cache.

    ``text`` is what is compared by meaning (e.g. the last user message). Everything else must
    match exactly for a hit: tenant, model, ``context`` (system prompt and earlier turns),
    ``params`` (generation parameters that change the answer), ``features`` (the context class:
    device, locale, ...) and whether an image is part of the key. ``temperature > 0``, ``tools``
    or ``bypass`` mean: never serve from, never store into the cache.
    """

    tenant: str
    model: str
    text: str
    context: str = ""
    params: Mapping[str, Any] = field(default_factory=dict)
    features: Mapping[str, str] = field(default_factory=dict)
    temperature: float = 0.0
    tools: bool = False
    bypass: bool = False
    image: bytes | None = None

    def bypass_reason(self) -> str | None:
        if self.bypass:
            return "request"
        if self.tools:
            return "tools"
        if not math.isfinite(self.temperature) or self.temperature > 0:
            return "temperature"
        return None

    def partition(self, embedder: str) -> str:
        """Exact-match part of the key: entries only meet queries of the same partition."""
        fields_ = {
            "tenant": self.tenant,
            "model": self.model,
            "context": hashlib.blake2b(self.context.encode(), digest_size=16).hexdigest(),
            "params": _canon(dict(self.params)),
            "features": _canon(dict(self.features)),
            "modality": "text+image" if self.image is not None else "text",
            "embedder": embedder,
        }
        return hashlib.blake2b(_canon(fields_).encode(), digest_size=12).hexdigest()

    def entry_id(self, partition: str) -> bytes:
        """Same partition and same normalized text (and image): same entry, replaced on store."""
        h = hashlib.blake2b(digest_size=16)
        h.update(partition.encode() + b"\0" + normalize(self.text).encode())
        if self.image is not None:
            h.update(b"\0" + hashlib.blake2b(self.image, digest_size=16).digest())
        return h.digest()


@dataclass
class Entry:
    id: bytes
    partition: str
    tenant: str
    model: str
    text: str
    response: Any
    created: float
    expires: float | None
    exact_only: bool = False
    nbytes: int = 0
    served: int = 0  # hits served from this entry (since start-up)
    label: int = -1
    # vCache-style evidence: (similarity, was the served answer right?) from verified feedback.
    observations: list[tuple[float, bool]] = field(default_factory=list)

    def meta(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "tenant": self.tenant,
            "model": self.model,
            "text": self.text,
            "response": self.response,
            "created": self.created,
            "expires": self.expires,
            "exact_only": self.exact_only,
            "observations": self.observations,
        }

    def summary(self) -> dict[str, Any]:
        """What the admin API shows (no vector)."""
        return {"id": self.id.hex(), "served": self.served, "bytes": self.nbytes, **self.meta()}


def encode_entry(entry: Entry, vector: np.ndarray) -> dict[str, np.ndarray]:
    meta = json.dumps(entry.meta(), separators=(",", ":")).encode()
    return {"meta": np.frombuffer(meta, dtype=np.uint8), "vec": np.asarray(vector, dtype=np.float32)}


def decode_entry(key: bytes, payload: Any) -> tuple[Entry, np.ndarray]:
    """An entry and its vector from a stored payload; CorruptBlockError if it is not one of ours."""
    try:
        meta = json.loads(bytes(payload["meta"]).decode())
        vec = np.asarray(payload["vec"], dtype=np.float32).reshape(-1)
        entry = Entry(
            id=key,
            partition=str(meta["partition"]),
            tenant=str(meta["tenant"]),
            model=str(meta["model"]),
            text=str(meta["text"]),
            response=meta["response"],
            created=float(meta["created"]),
            expires=None if meta["expires"] is None else float(meta["expires"]),
            exact_only=bool(meta.get("exact_only", False)),
            observations=[(float(s), bool(ok)) for s, ok in meta.get("observations", [])],
        )
    except (KeyError, TypeError, ValueError, UnicodeDecodeError, AttributeError) as exc:
        raise CorruptBlockError(f"not a semantic-cache entry: {exc}") from None
    if not np.all(np.isfinite(vec)):
        raise CorruptBlockError("semantic-cache entry has a non-finite vector")
    return entry, vec
