"""Model integrations, and the framework-independent types they share.

``ctxcache.integrations.transformers`` (CachedLM) needs torch and transformers;
``ctxcache.integrations.model_store`` prepares model directories. The types here (sampling
parameters, per-phase timings, a generation's result, incremental detokenization with stop
strings) import nothing heavy, so the server and tests can use them freely.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ..usage import Usage

__all__ = ["Detokenizer", "Generation", "SamplingParams", "Timings"]


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int = 128
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be an int >= 1, got {self.max_new_tokens!r}")
        if not 0.0 <= self.temperature <= 100.0:
            raise ValueError(f"temperature must be in [0, 100], got {self.temperature!r}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ValueError(f"stop must be non-empty strings, got {self.stop!r}")
        if self.seed is not None and not isinstance(self.seed, int):
            raise ValueError(f"seed must be an int or None, got {self.seed!r}")


@dataclass
class Timings:
    """Seconds spent per phase of one request; first_token_s counts from the request's start."""

    lookup_s: float = 0.0
    load_s: float = 0.0
    prefill_s: float = 0.0
    store_s: float = 0.0
    first_token_s: float = 0.0
    decode_s: float = 0.0
    total_s: float = 0.0

    def to_dict(self) -> dict[str, float]:
        return {k: round(v, 6) for k, v in asdict(self).items()}


@dataclass
class Generation:
    text: str
    token_ids: list[int]
    finish_reason: str  # "stop" (end of turn or a stop string), "length" or "cancelled"
    stop_sequence: str | None
    prompt_tokens: int
    usage: Usage
    timings: Timings
    generated_cached_tokens: int = 0  # tokens of output blocks stored for the next turn

    @property
    def completion_tokens(self) -> int:
        return len(self.token_ids)


class Detokenizer:
    """Incremental text for a growing token list, holding back what may be the start of a stop string.

    Linear in the output: each push decodes only a short window, from the last token whose text
    was final (``_prefix``) to the end, and compares it with the window's text before the new
    tokens (``_read``): decoding both from the same first token keeps tokenizers that drop a
    leading space at the start of a decode honest. A window whose text ends in U+FFFD is an
    incomplete UTF-8 sequence and waits for its next token. Stop strings are searched only where
    a new one could end.
    """

    def __init__(self, tokenizer: Any, stops: Sequence[str]) -> None:
        self.tok, self.stops, self.sent, self.text = tokenizer, tuple(stops), 0, ""
        self._prefix = self._read = 0
        self._longest = max((len(s) for s in self.stops), default=0)
        self._ids: list[int] = []

    def _advance(self, ids: list[int], final: bool = False) -> None:
        self._ids = ids
        before = self.tok.decode(ids[self._prefix : self._read], skip_special_tokens=True)
        after = self.tok.decode(ids[self._prefix :], skip_special_tokens=True)
        if len(after) > len(before) and (final or not after.endswith("\ufffd")):
            self.text += after[len(before) :]
            self._prefix, self._read = self._read, len(ids)

    def push(self, ids: list[int]) -> tuple[str, str | None]:
        self._advance(ids)
        text, start = self.text, max(0, self.sent - self._longest)
        hits = [(i, s) for s in self.stops if (i := text.find(s, start)) >= 0]
        if hits:
            cut, stop = min(hits)
            self.text = text[: max(cut, self.sent)]
            return self._take(len(self.text)), stop
        hold = max((k for s in self.stops for k in range(1, len(s)) if text.endswith(s[:k])), default=0)
        return self._take(len(text) - hold), None

    def _take(self, end: int) -> str:
        delta = self.text[self.sent : end] if end > self.sent else ""
        self.sent = max(self.sent, end)
        return delta

    def flush(self) -> str:
        if self._read < len(self._ids):  # a trailing incomplete sequence: emit what it decodes to
            self._advance(self._ids, final=True)
        return self._take(len(self.text))
