"""A stand-in for CachedLM with the same surface the server uses, and a real ContextCache.

Tokens are characters of a Gemma-style rendering, payloads are bytes, and the reply is canned, so
server tests are fast and exact about usage numbers. ``gate`` holds jobs to test queueing.
"""

from __future__ import annotations

import threading
import time
import types

from ctxcache import ContextCache
from ctxcache.integrations import Generation, SamplingParams, Timings
from ctxcache.usage import Usage

REPLY = ["Hello", " from", " the", " fake", " model", "."]


def render(messages, add_generation_prompt=True) -> str:
    out = "".join(f"<{m['role']}>{m['content'].strip()}</>" for m in messages)
    return out + ("<model>" if add_generation_prompt else "")


class FakeStream:
    def __init__(self, lm, ids, params, kw):
        self.lm, self.ids, self.params, self.kw = lm, ids, params, kw
        self.result = None
        self.first_token_at = None
        self.request = None  # the cache's Prompt, set by the prefill as CachedLM does

    def __iter__(self):
        lm, ids, kw = self.lm, self.ids, self.kw
        if lm.gate is not None:
            lm.gate.wait(timeout=30)
        lm.order.append(getattr(kw["namespace"], "tenant", kw["namespace"]) + ":" + str(len(ids)))
        bs = lm.block_size
        hit = created = 0
        by_tier = {}
        req = self.request = lm.cache.prompt(ids, kw["namespace"])
        if kw["use_cache"]:
            with lm.cache.lookup(req.prefix(len(ids) - 1)) as m:
                hit, by_tier = m.hit_tokens, dict(m.usage.by_tier)
                limit = len(ids) if kw["store_upto"] is None else kw["store_upto"]
                n = limit // bs
                if n > m.n_blocks:
                    payloads = [b"kv" * 64] * (n - m.n_blocks)
                    created = lm.cache.store(req.prefix(n * bs), payloads, first_block=m.n_blocks).cache_creation_tokens
        usage = Usage(hit, created, len(ids) - hit, by_tier)
        time.sleep(lm.prefill_delay)  # a slow model: a long prefill before the first token
        self.first_token_at = time.perf_counter()
        if kw.get("on_prefill"):
            kw["on_prefill"](usage)
        out, text, stop_seq = [], "", None
        for piece in REPLY[: self.params.max_new_tokens]:
            if kw.get("should_stop") and kw["should_stop"]():
                break
            hit_stop = next((s for s in self.params.stop if s in text + piece), None)
            if hit_stop:
                stop_seq = hit_stop
                break
            time.sleep(lm.token_delay)
            out.append(len(out) + 10)
            text += piece
            yield piece
        finish = "stop" if stop_seq or len(out) < self.params.max_new_tokens else "length"
        self.result = Generation(text, out, finish, stop_seq, len(ids), usage, Timings(first_token_s=0.001))


class FakeTokenizer:
    """Characters are tokens (id = code point mod 1000), like FakeLM.encode; no BOS."""

    def __call__(self, text, add_special_tokens=True):
        return types.SimpleNamespace(input_ids=[ord(c) % 1000 for c in text])

    def decode(self, ids, skip_special_tokens=False):
        return "".join(chr(i) for i in ids)


class FakeLM:
    def __init__(self, block_size: int = 8, max_context: int = 512, capacity: int = 1 << 20):
        self.cache = ContextCache.from_config(
            {"block_size": block_size, "tiers": [{"kind": "memory", "capacity": capacity}]}
        )
        self.block_size = block_size
        self.max_context = max_context
        self.gate: threading.Event | None = None
        self.token_delay = 0.0
        self.prefill_delay = 0.0
        self.tokenizer = FakeTokenizer()
        self.vocab_size = 1000
        self.order: list[str] = []

    def encode(self, messages, *, add_generation_prompt=True):
        return [ord(c) % 1000 for c in render(messages, add_generation_prompt)]

    def stream_tokens(self, prompt, params: SamplingParams | None = None, **kw):
        return FakeStream(self, list(prompt), params or SamplingParams(), kw)
