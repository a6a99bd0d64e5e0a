"""Every exception ctxcache raises on purpose derives from :class:`CtxCacheError`.

Bad arguments raise the built-in ``ValueError``/``TypeError`` subclasses below, so callers that
catch the built-ins keep working while ``except CtxCacheError`` still catches everything of ours.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence


class CtxCacheError(Exception):
    """Base class of all ctxcache errors."""


class ConfigError(CtxCacheError, ValueError):
    """A configuration value is missing, malformed or out of range."""


class InvalidTokensError(CtxCacheError, ValueError):
    """Token ids are not non-negative 32-bit integers."""


class TokenTypeError(CtxCacheError, TypeError):
    """Tokens were not given as a sequence of ints or an integer numpy array."""


class PayloadError(CtxCacheError, ValueError):
    """Payloads do not match the blocks they are stored for, or cannot be sized."""


class UnknownPolicyError(CtxCacheError, ValueError):
    """A policy name is not in the registry."""


class UnknownTierError(CtxCacheError, ValueError):
    """A tier kind is not in the registry."""


class MatchReleasedError(CtxCacheError, RuntimeError):
    """A Match was released twice, or used after release."""


class TraceError(CtxCacheError, ValueError):
    """A trace file is missing or has a malformed record."""


class CorruptBlockError(CtxCacheError, ValueError):
    """A stored block failed validation (bad magic, header, length or checksum) and was not used.

    The only exception the codec's decoder raises: an untrusted or damaged blob can never do
    more than fail to decode.
    """


class MissingDependencyError(ConfigError, ImportError):
    """A configured feature needs an optional package that is not installed."""


class TierUnavailableError(CtxCacheError, RuntimeError):
    """A slow tier's backend could not be reached; the operation was skipped, not retried."""


class DeleteFailedError(TierUnavailableError):
    """A batch delete did not land for ``failed`` (the caller's keys, some or all of the batch: a
    Redis Cluster master down, the server unreachable, a refused command). Those may still be
    stored and stay charged by the tier; every other key was deleted and is no longer charged
    (``deleted`` of them were there). A caller retries ``failed`` only."""

    def __init__(self, message: str, failed: Sequence[Hashable] = (), deleted: int = 0) -> None:
        super().__init__(message)
        self.failed: tuple[Hashable, ...] = tuple(failed)
        self.deleted = deleted


class SemanticInputError(CtxCacheError, ValueError):
    """A semantic-cache request or setting is unusable (empty or oversized text, threshold outside [0, 1])."""


class EventDecodeError(CtxCacheError, ValueError):
    """A KV-event payload (vLLM's ZMQ wire form) is not valid msgpack, not one of the shapes vLLM
    has published, or breaks a limit. A consumer counts it and goes on: never a crashed loop."""
