"""A rendered chat prompt's ids, a turn at a time: only a conversation's new turns are tokenized.

The backend tokenizer cuts its input at every added token before it normalizes and runs BPE on
the text between them, so a text cut right after a special token (one that strips no space and
matches only whole) tokenizes as the concatenation of its pieces' ids. Cut after the template's
end-of-turn token, a multi-turn conversation is one piece per turn, and every turn but the new
ones is in a bounded LRU from the conversation's previous request (docs/routing.md, "Router
overhead"). A cut anywhere else (a space, a newline) is exact only where no token spans it,
which depends on the vocabulary: not done.

The cut token is found by rendering a probe conversation with the chat template, and the cache
is used only when the probe's ids, cut and whole, are the same (``for_template``); otherwise the
router tokenizes whole, as before.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

Encoder = Callable[[str], list[int]]
BatchEncoder = Callable[[list[str]], list[list[int]]]

_PROBE = "ctxcache probe 1"


class PieceCache:
    """``text -> ids`` (an Encoder) through a cache of pieces cut after ``cut``, at most
    ``capacity_tokens`` ids kept (least recently used go first)."""

    def __init__(self, encode_batch: BatchEncoder, cut: str, capacity_tokens: int = 1 << 20) -> None:
        self._encode_batch, self.cut, self.capacity_tokens = encode_batch, cut, capacity_tokens
        self._lru: OrderedDict[str, list[int]] = OrderedDict()
        self._lock = threading.Lock()  # the router tokenizes on a pool of threads
        self.tokens = 0
        self.misses = 0  # pieces encoded: for tests and the profile

    def clear(self) -> None:
        with self._lock:
            self._lru.clear()
            self.tokens = self.misses = 0

    def pieces(self, text: str) -> list[str]:
        cut = self.cut
        parts = text.split(cut)
        out = [p + cut for p in parts[:-1]]
        if parts[-1]:
            out.append(parts[-1])
        return out

    def __call__(self, text: str) -> list[int]:
        pieces = self.pieces(text)
        got: list[list[int] | None] = []
        with self._lock:
            lru = self._lru
            for p in pieces:
                ids = lru.get(p)
                if ids is not None:
                    lru.move_to_end(p)
                got.append(ids)
        missing = [p for p, ids in zip(pieces, got) if ids is None]
        if missing:  # one batch call for all of them (a repeated piece is encoded once)
            new = dict(zip(missing, self._encode_batch(missing)))
            got = [new[p] if ids is None else ids for p, ids in zip(pieces, got)]
            self._keep(new)
        if len(got) == 1:
            return list(got[0])  # type: ignore[arg-type]
        out: list[int] = []
        for ids in got:
            out += ids  # type: ignore[arg-type]
        return out

    def _keep(self, new: dict[str, list[int]]) -> None:
        with self._lock:
            self.misses += len(new)
            lru = self._lru
            for p, ids in new.items():
                if len(ids) > self.capacity_tokens or p in lru:
                    continue
                lru[p] = ids
                self.tokens += len(ids)
            while self.tokens > self.capacity_tokens:
                self.tokens -= len(lru.popitem(last=False)[1])


def end_of_turn(tokenizer: Any, template: str) -> str | None:
    """The special token the chat template writes right after a message's text, if any."""
    backend = getattr(tokenizer, "_tokenizer", None)
    if backend is None:
        return None
    msgs = [{"role": "user", "content": _PROBE}]
    text = tokenizer.apply_chat_template(msgs, chat_template=template, tokenize=False, add_generation_prompt=True)
    after = text.partition(_PROBE)[2]
    found = [
        t.content
        for t in backend.get_added_tokens_decoder().values()
        if t.special and t.content and not (t.lstrip or t.rstrip or t.single_word) and after.startswith(t.content)
    ]
    return max(found, key=len) if found else None


def for_template(tokenizer: Any, template: str, encode: Encoder, capacity_tokens: int = 1 << 20) -> Encoder:
    """A PieceCache over the backend's batch encoder when the template has an end-of-turn special
    token and a probe conversation cut at it tokenizes as whole; else ``encode`` itself."""
    fast = getattr(getattr(tokenizer, "_tokenizer", None), "encode_batch_fast", None)
    try:
        cut = end_of_turn(tokenizer, template) if fast is not None else None
    except Exception:  # noqa: BLE001 - a template that cannot render the probe: tokenize whole
        return encode
    if cut is None or fast is None:
        return encode

    def batch(texts: list[str]) -> list[list[int]]:
        return [e.ids for e in fast(texts, add_special_tokens=False)]

    cache = PieceCache(batch, cut, capacity_tokens)
    probe = [{"role": r, "content": f"{_PROBE} {r} \n{cut} x"} for r in ("user", "assistant", "user")]
    text = tokenizer.apply_chat_template(probe, chat_template=template, tokenize=False, add_generation_prompt=True)
    if cache(text) != encode(text) or len(cache.pieces(text)) < 3:
        return encode
    cache.clear()
    return cache
