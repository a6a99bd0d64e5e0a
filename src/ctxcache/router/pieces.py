"""A rendered chat prompt's ids, a turn at a time: only a conversation's new turns are tokenized.

The backend tokenizer cuts its input at every added token before it normalizes and runs BPE on
the text between them, so a text cut right after a special token (one that strips no space and
matches only whole) tokenizes as the concatenation of its pieces' ids. Cut after the template's
end-of-turn token, a multi-turn conversation is one piece per turn, and every turn but the new
ones is in a bounded LRU from the conversation's previous request (docs/routing.md, "Router
overhead"). A run of pieces not in the cache is encoded as one text and its ids cut after each
occurrence of the cut token's id: the same cut, since the token's text always encodes to it. A cut anywhere else (a space, a newline) is exact only where no token spans it,
which depends on the vocabulary: not done.

The cut token is found by rendering a probe conversation with the chat template, and the cache
is used only when the probe's ids, cut and whole, are the same (``for_template``); otherwise the
router tokenizes whole, as before.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import accel
from ..keys import Tokens

Encoder = Callable[[str], Tokens]
BatchEncoder = Callable[[list[str]], list[list[int]]]

_PROBE = "ctxcache probe 1"


def _int32(ids: Sequence[int]) -> bytes:
    native = accel.native
    got = native.token_bytes(ids) if native is not None else None
    return got if got is not None else np.asarray(ids, np.int32).tobytes()


class PieceCache:
    """``text -> ids`` (an Encoder: an int32 array) through a cache of pieces cut after ``cut``,
    at most ``capacity_tokens`` ids kept (least recently used go first).

    A piece's ids are kept as int32 bytes, not as the backend's list: Python ints held for later
    cost the requests that allocate after them (same-run, a router on fresh 4k-token prompts:
    +0.1-0.3 ms of tokenizer-thread CPU per request over no cache with 1-6 M tokens kept as
    lists, +0.06-0.1 ms as bytes; converting 4k ids takes ~4 us)."""

    def __init__(self, encode_batch: BatchEncoder, cut: str, cut_id: int, capacity_tokens: int = 4 << 20) -> None:
        self._encode_batch, self.cut, self.cut_id, self.capacity_tokens = encode_batch, cut, cut_id, capacity_tokens
        self._lru: OrderedDict[str, bytes] = OrderedDict()
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

    def __call__(self, text: str) -> np.ndarray:
        pieces = self.pieces(text)
        got: list[bytes | None] = []
        with self._lock:
            lru = self._lru
            for p in pieces:
                ids = lru.get(p)
                if ids is not None:
                    lru.move_to_end(p)
                got.append(ids)
        runs = _runs(got)
        if runs:
            new = self._encode_runs(pieces, runs)
            got = [new[p] if ids is None else ids for p, ids in zip(pieces, got)]
            self._keep(new)
        return np.frombuffer(b"".join(got), np.int32)  # type: ignore[arg-type]  # read-only: bytes

    def _encode_runs(self, pieces: list[str], runs: list[tuple[int, int]]) -> dict[str, bytes]:
        """The pieces of each run of consecutive misses, encoded as one text (one batch call for
        all runs): a batch of many short texts costs more CPU than their concatenation. A run's
        ids are cut after each cut token's id, one piece each."""
        texts = ["".join(pieces[i:j]) for i, j in runs]
        out: dict[str, bytes] = {}
        for (i, j), ids in zip(runs, self._encode_batch(texts)):
            buf = _int32(ids)
            ends = (np.flatnonzero(np.frombuffer(buf, np.int32) == self.cut_id) + 1).tolist()
            if not pieces[j - 1].endswith(self.cut):
                ends.append(len(ids))
            if len(ends) != j - i or ends[-1] != len(ids):  # not when the probe agreed: one by one
                missing = [p for i, j in runs for p in pieces[i:j]]
                return {p: _int32(ids) for p, ids in zip(missing, self._encode_batch(missing))}
            for p, a, b in zip(pieces[i:j], [0, *ends], ends):
                out[p] = buf[4 * a : 4 * b]
        return out

    def _keep(self, new: dict[str, bytes]) -> None:
        with self._lock:
            self.misses += len(new)
            lru = self._lru
            for p, ids in new.items():
                n = len(ids) // 4
                if n > self.capacity_tokens or p in lru:
                    continue
                lru[p] = ids
                self.tokens += n
            while self.tokens > self.capacity_tokens:
                self.tokens -= len(lru.popitem(last=False)[1]) // 4


def _runs(got: list[bytes | None]) -> list[tuple[int, int]]:
    """[start, end) of each run of consecutive None in ``got``."""
    runs, start = [], None
    for i, ids in enumerate(got):
        if ids is None and start is None:
            start = i
        elif ids is not None and start is not None:
            runs.append((start, i))
            start = None
    if start is not None:
        runs.append((start, len(got)))
    return runs


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


def for_template(tokenizer: Any, template: str, encode: Encoder, capacity_tokens: int = 4 << 20) -> Encoder:
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

    cut_id = tokenizer._tokenizer.token_to_id(cut)
    if cut_id is None:
        return encode
    cache = PieceCache(batch, cut, cut_id, capacity_tokens)
    probe = [{"role": r, "content": f"{_PROBE} {r} \n{cut} x"} for r in ("user", "assistant", "user")]
    text = tokenizer.apply_chat_template(probe, chat_template=template, tokenize=False, add_generation_prompt=True)
    if cache(text).tolist() != list(encode(text)) or len(cache.pieces(text)) < 3:
        return encode
    cache.clear()
    return cache
