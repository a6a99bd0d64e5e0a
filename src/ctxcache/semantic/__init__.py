"""Semantic response cache: answers keyed by meaning, with measured precision (docs/semantic-cache.md)."""

from __future__ import annotations

from .cache import DEFAULT_THRESHOLD, Lookup, Probe, SemanticCache
from .embedder import Embedder, Embedding, HashingEmbedder, MiniLMEmbedder
from .entry import Entry, SemanticQuery, normalize
from .index import AutoIndex, ExactIndex, HnswIndex, VectorIndex
from .store import EntryStore
from .thresholds import entry_threshold, wilson_upper
from .verifier import LexicalVerifier, Verifier

__all__ = [
    "DEFAULT_THRESHOLD",
    "AutoIndex",
    "Embedder",
    "Embedding",
    "Entry",
    "EntryStore",
    "ExactIndex",
    "HashingEmbedder",
    "HnswIndex",
    "LexicalVerifier",
    "Lookup",
    "MiniLMEmbedder",
    "Probe",
    "SemanticCache",
    "SemanticQuery",
    "Verifier",
    "VectorIndex",
    "entry_threshold",
    "normalize",
    "wilson_upper",
]
