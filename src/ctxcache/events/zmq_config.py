"""The ZMQ keys of the ``[events]`` config section, and the sink they build (docs/events-vllm.md).

    [events]
    zmq = "tcp://127.0.0.1:5557"          # PUB endpoint, bound by the worker; absent: no ZMQ sink
    zmq_replay = "tcp://127.0.0.1:5558"   # ROUTER replay endpoint (optional)
    zmq_topic = "kv-events"               # first frame of every message (default "")
    zmq_buffer = 10000                    # batches kept for replay
    zmq_queue = 10000                     # batches waiting to be sent; more are dropped, counted
    zmq_encoding = "map"                  # "map" (vLLM >= PR #42892, vllm 0.32) or "array" (older)
    zmq_hashes = "int"                    # "int" (vLLM's default: low 64 bits) or "bytes" (16-byte keys)
    token_ids = false                     # the section's opt-in: send prompt tokens to subscribers

The section's own parser (events helper) owns the other keys; :func:`parse_zmq` reads only these.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ..errors import ConfigError, MissingDependencyError

if TYPE_CHECKING:
    from .zmq import ZmqSink

# The same literals as vllm_format's, without importing msgspec to parse a config.
ENCODINGS = ("map", "array")
HASH_FORMS = ("int", "bytes")

ZMQ_KEYS = ("zmq", "zmq_replay", "zmq_topic", "zmq_buffer", "zmq_queue", "zmq_encoding", "zmq_hashes")
_SCHEMES = ("tcp://", "ipc://", "inproc://")


@dataclass(frozen=True, slots=True)
class ZmqSettings:
    endpoint: str
    replay_endpoint: str | None = None
    topic: str = ""
    buffer_steps: int = 10_000
    max_queue: int = 10_000
    encoding: Literal["map", "array"] = "map"
    hashes: Literal["int", "bytes"] = "int"
    token_ids: bool = False


def _endpoint(section: Mapping[str, Any], key: str) -> str | None:
    v = section.get(key)
    if v is None:
        return None
    if not isinstance(v, str) or not v.startswith(_SCHEMES) or len(v) > 512:
        raise ConfigError(f"events.{key} must be a ZMQ endpoint ({', '.join(s + '...' for s in _SCHEMES)}), got {v!r}")
    return v


def _positive(section: Mapping[str, Any], key: str, default: int) -> int:
    v = section.get(key, default)
    if type(v) is not int or v < 1:
        raise ConfigError(f"events.{key} must be a positive integer, got {v!r}")
    return v


def _choice(section: Mapping[str, Any], key: str, choices: tuple[str, ...]) -> Any:
    v = section.get(key, choices[0])
    if v not in choices:
        raise ConfigError(f"events.{key} must be one of {', '.join(choices)}, got {v!r}")
    return v


def parse_zmq(section: Mapping[str, Any]) -> ZmqSettings | None:
    """The ZMQ sink's settings from an ``[events]`` table, or None when ``zmq`` is not set."""
    endpoint = _endpoint(section, "zmq")
    if endpoint is None:
        if any(k in section for k in ZMQ_KEYS):
            raise ConfigError(
                f"events: {sorted(k for k in ZMQ_KEYS if k in section)} need events.zmq (the PUB endpoint)"
            )
        return None
    topic = section.get("zmq_topic", "")
    if not isinstance(topic, str):
        raise ConfigError(f"events.zmq_topic must be a string, got {topic!r}")
    token_ids = section.get("token_ids", False)
    if not isinstance(token_ids, bool):
        raise ConfigError(f"events.token_ids must be true or false, got {token_ids!r}")
    return ZmqSettings(
        endpoint=endpoint,
        replay_endpoint=_endpoint(section, "zmq_replay"),
        topic=topic,
        buffer_steps=_positive(section, "zmq_buffer", 10_000),
        max_queue=_positive(section, "zmq_queue", 10_000),
        encoding=_choice(section, "zmq_encoding", ENCODINGS),
        hashes=_choice(section, "zmq_hashes", HASH_FORMS),
        token_ids=token_ids,
    )


def build_zmq_sink(settings: ZmqSettings) -> ZmqSink:
    """Bind the sockets; raises ConfigError when an endpoint cannot be bound (port taken), and
    MissingDependencyError without the ``events`` extra (pyzmq, msgspec)."""
    try:
        from .zmq import ZmqSink
    except ImportError as exc:
        raise MissingDependencyError(
            f"events.zmq needs pyzmq and msgspec: pip install 'ctxcache[events]' ({exc})"
        ) from None
    try:
        return ZmqSink(
            settings.endpoint,
            replay_endpoint=settings.replay_endpoint,
            topic=settings.topic,
            buffer_steps=settings.buffer_steps,
            max_queue=settings.max_queue,
            encoding=settings.encoding,
            hashes=settings.hashes,
            token_ids=settings.token_ids,
        )
    except OSError as exc:
        raise ConfigError(str(exc)) from None
