"""CachedLM: a Hugging Face causal LM whose prompt prefixes are served from a ContextCache.

Per request: look up the longest cached block prefix, rebuild a transformers ``DynamicCache`` from
the stored blocks, prefill only the rest at the right positions, store the new full blocks, decode.

A block's payload is every layer's K and V for its tokens: a list of per-layer ``(K, V)`` CPU
tensors shaped ``[1, kv_heads, block_size, head_dim]``. All layers keep all tokens, the sliding-
window ones too (Gemma 3: window 512), because a config-less ``DynamicCache`` enforces the window
through the attention mask rather than by dropping K/V; so the cache can be rebuilt at any block
boundary and the logits equal a full recompute. A ``DynamicCache(config=...)``, which is what
``model()`` builds when given none, keeps only the last 511 tokens of sliding layers and cannot be
cut into blocks.

Not thread-safe: one model, one caller at a time (the server runs a single worker thread).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..cache import ContextCache, Match, Prompt
from ..keys import Namespace
from ..usage import Usage
from . import Detokenizer, Generation, SamplingParams, Timings
from .chat import FALLBACK_TEMPLATE, chat_template_for, encode_chat, model_type
from .kv_blocks import block_payload, join_blocks
from .model_store import INSTALL_HINT, ModelError
from .tokenizer_cache import load_tokenizer

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local directory only; never reach for a model hub
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Spinning OpenMP workers make prefill ~4x slower on a busy or oversubscribed CPU (measured on a
# shared 2-core box: 256 tokens in 8-14 s instead of 1.8 s). Only effective if torch is not loaded yet.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
try:
    import torch
    from transformers import AutoModelForCausalLM, DynamicCache
except ImportError as _exc:  # pragma: no cover - exercised only without the model extra
    raise ImportError(
        f"ctxcache.integrations.transformers needs torch and transformers ({_exc}); {INSTALL_HINT}"
    ) from _exc

__all__ = ["CachedLM", "Generation", "GenerationStream", "Prefill", "SamplingParams", "Timings", "sample_token"]

# End-of-turn markers of common chat templates: a base model may keep talking past the turn.
_TURN_ENDS = ("<end_of_turn>", "<|im_end|>", "<|eot_id|>", "<|end|>", "<|endoftext|>")


@dataclass
class Prefill:
    tokens: list[int]
    kv: Any  # the DynamicCache, now holding every prompt token
    logits: Any  # [keep_logits, vocab] float tensor for the last prompt positions
    usage: Usage
    timings: Timings
    cached_blocks: int  # full prompt blocks in the cache after this call (hit + stored)
    prompt: Prompt  # the cache's view of the tokens: validated once, keys hashed at most once


def sample_token(logits: Any, temperature: float, top_p: float, generator: Any = None) -> int:
    """Greedy when temperature is 0, else temperature + nucleus (top-p) sampling.

    A tiny temperature (1e-300) scales logits to inf and the softmax to nan; its limit is greedy.
    """
    if temperature <= 0.0:
        return int(torch.argmax(logits))
    scaled = logits.float() / temperature
    if not bool(torch.isfinite(scaled.max())):  # -inf entries (masked tokens) alone are fine
        return int(torch.argmax(logits))
    probs = torch.softmax(scaled, dim=-1)
    if top_p >= 1.0:
        return int(torch.multinomial(probs, 1, generator=generator))
    sp, si = torch.sort(probs, descending=True)
    keep = (torch.cumsum(sp, 0) - sp) < top_p  # the most likely token is always kept
    return int(si[torch.multinomial(sp * keep, 1, generator=generator)])


class GenerationStream:
    """Iterate for text deltas; ``result`` (a Generation) is set once the iterator is exhausted."""

    def __init__(self, lm: CachedLM, prompt: list[int], params: SamplingParams, **kw: Any) -> None:
        self.lm, self.prompt, self.params, self.kw = lm, prompt, params, kw
        self.result: Generation | None = None
        self.first_token_at: float | None = None  # time.perf_counter() when the first token was sampled
        self.request: Prompt | None = None  # set by the prefill: pins reuse its keys (server/pins.py)
        self._it = self._run()

    def __iter__(self) -> Iterator[str]:
        return self._it

    def __next__(self) -> str:
        return next(self._it)

    def _run(self) -> Iterator[str]:
        lm, p, prompt = self.lm, self.params, self.prompt
        should_stop: Callable[[], bool] = self.kw.get("should_stop") or (lambda: False)
        t0 = time.perf_counter()
        # manual_seed takes 64 bits; API seeds are any integer (OpenAI's clients send up to int64 and beyond).
        gen = torch.Generator().manual_seed(p.seed % 2**64) if p.seed is not None else None
        first: list[int] = []

        def sample_first(logits: Any) -> None:
            first.append(sample_token(logits[-1], p.temperature, p.top_p, gen))
            self.first_token_at = time.perf_counter()

        pf = lm.prefill(
            prompt, namespace=self.kw["namespace"], store_upto=self.kw.get("store_upto"),
            use_cache=self.kw["use_cache"], on_logits=sample_first,
        )  # fmt: skip
        token = first[0]
        self.request = pf.prompt
        assert self.first_token_at is not None
        if self.kw.get("on_prefill") is not None:
            self.kw["on_prefill"](pf.usage)
        tm = pf.timings
        tm.first_token_s = self.first_token_at - t0
        out: list[int] = []
        detok = Detokenizer(lm.tokenizer, p.stop)
        finish, stop_seq, pos = "length", None, len(prompt)
        while True:
            if token in lm.stop_token_ids:
                finish = "stop"
                break
            out.append(token)
            delta, stop_seq = detok.push(out)
            if delta:
                yield delta
            if stop_seq is not None:
                finish = "stop"
                break
            if len(out) >= p.max_new_tokens or pos + 1 >= lm.max_context:
                break
            if should_stop():
                finish = "cancelled"
                break
            token = sample_token(lm._forward([token], pf.kv, pos)[-1], p.temperature, p.top_p, gen)
            pos += 1
        tail = detok.flush()
        if tail:
            yield tail
        t_dec = time.perf_counter()
        tm.decode_s = t_dec - self.first_token_at
        kept = 0
        n_prompt_blocks = len(prompt) // lm.block_size
        if self.kw.get("store_generated") and pf.cached_blocks == n_prompt_blocks:
            # The next turn's prompt usually repeats this reply verbatim: keep its full blocks too.
            kept = lm._store(pf.prompt.extend(out[: pos - len(prompt)]), pf.kv, n_prompt_blocks)
        tm.store_s += time.perf_counter() - t_dec
        tm.total_s = time.perf_counter() - t0
        self.result = Generation(
            detok.text, out, finish, stop_seq, len(prompt), pf.usage, tm, generated_cached_tokens=kept
        )


class CachedLM:
    """A causal LM plus a ContextCache: prompts reuse the K/V of their longest cached block prefix."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        cache: ContextCache,
        *,
        chat_template: str | None = None,
        max_context: int | None = None,
        prefill_chunk: int = 2048,
    ) -> None:
        if not isinstance(cache, ContextCache):
            raise TypeError(f"cache must be a ContextCache, not {type(cache).__name__}")
        self.model, self.tokenizer, self.cache = model, tokenizer, cache
        self.block_size = cache.block_size
        self.chat_template = chat_template or getattr(tokenizer, "chat_template", None) or FALLBACK_TEMPLATE
        limit = getattr(model.config, "max_position_embeddings", None) or 4096
        self.max_context = min(max_context or limit, limit)
        if prefill_chunk < 1:
            raise ValueError(f"prefill_chunk must be >= 1, got {prefill_chunk}")
        self.prefill_chunk = prefill_chunk
        self.vocab_size = int(model.config.vocab_size)
        self.stop_token_ids = self._stop_ids()

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike[str], cache: ContextCache, **kw: Any) -> CachedLM:
        """Load a local Hugging Face causal-LM directory (float32, CPU, eval mode)."""
        p = Path(path)
        if not (p / "config.json").is_file():
            raise ModelError(f"{p} is not a Hugging Face model directory (no config.json)")
        tok = load_tokenizer(p)
        model: Any = AutoModelForCausalLM.from_pretrained(p, dtype=kw.pop("dtype", torch.float32))
        model.eval()
        kw["chat_template"] = chat_template_for(tok, model_type(p), kw.get("chat_template"))
        return cls(model, tok, cache, **kw)

    def _stop_ids(self) -> frozenset[int]:
        ids: set[int] = set()
        for src in (getattr(self.model, "generation_config", None), self.model.config, self.tokenizer):
            eos = getattr(src, "eos_token_id", None)
            ids.update([eos] if isinstance(eos, int) else (eos or []))
        vocab = self.tokenizer.get_vocab()
        ids.update(vocab[t] for t in _TURN_ENDS if t in vocab)
        return frozenset(ids)

    # --- prompts ------------------------------------------------------------------------------------
    def encode(self, messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool = True) -> list[int]:
        """Token ids of a conversation rendered with the chat template (BOS included once)."""
        return encode_chat(self.tokenizer, self.chat_template, messages, add_generation_prompt=add_generation_prompt)

    def _check_tokens(self, tokens: Sequence[int]) -> list[int]:
        ids = [int(t) for t in tokens]
        if not ids:
            raise ValueError("the prompt is empty: at least one token is needed")
        if len(ids) >= self.max_context:
            raise ValueError(f"the prompt has {len(ids)} tokens; the context limit is {self.max_context}")
        bad = [t for t in ids if not 0 <= t < self.vocab_size]
        if bad:
            raise ValueError(f"token ids out of range [0, {self.vocab_size}): {bad[:5]}")
        return ids

    # --- the cached prefill -------------------------------------------------------------------------
    @torch.no_grad()
    def _forward(self, ids: list[int], kv: Any, start: int, keep: int = 1) -> Any:
        """Run ``ids`` at positions ``start..`` on top of ``kv`` (extended in place); last ``keep`` logits."""
        step = len(ids) if keep > 1 else self.prefill_chunk
        for s in range(0, len(ids), step):
            chunk = ids[s : s + step]
            pos = torch.arange(start + s, start + s + len(chunk)).unsqueeze(0)
            out = self.model(
                input_ids=torch.tensor([chunk]), cache=kv, position_ids=pos, use_cache=True, logits_to_keep=keep
            )
        return out.logits[0]

    def _rebuild(self, payloads: list[Any]) -> Any:
        kv = DynamicCache()  # no config: every layer keeps every token (see the module docstring)
        for li in range(len(payloads[0])):
            kv.update(join_blocks([p[li][0] for p in payloads]), join_blocks([p[li][1] for p in payloads]), li)
        return kv

    def _store(self, prompt: Prompt, kv: Any, first: int) -> int:
        """Store full blocks ``first``.. of ``prompt`` from ``kv``; returns the tokens newly cached."""
        bs, last = self.block_size, len(prompt) // self.block_size
        if last <= first:
            return 0
        layers = [(layer.keys, layer.values) for layer in kv.layers]
        blocks = [block_payload(layers, b * bs, (b + 1) * bs) for b in range(first, last)]
        return self.cache.store(prompt.prefix(last * bs), blocks, first_block=first).cache_creation_tokens

    def prefill(
        self,
        tokens: Sequence[int],
        *,
        namespace: str | Namespace = "default",
        store_upto: int | None = None,
        use_cache: bool = True,
        keep_logits: int = 1,
        on_logits: Callable[[Any], None] | None = None,
    ) -> Prefill:
        """Prefill a prompt, reusing and then extending the cache.

        store_upto: store full blocks only up to this token (None: all; 0: none). The last prompt
        token is always prefilled, since its logits start the decode. ``on_logits`` runs before
        the new blocks are stored, so a caller can sample its first token without waiting for that.
        """
        ids = self._check_tokens(tokens)
        tm = Timings()
        t0 = time.perf_counter()
        req = self.cache.prompt(ids, namespace)  # validated once; keys hashed lazily, at most once
        m: Match | None = self.cache.lookup(req.prefix(len(ids) - 1)) if use_cache else None
        try:
            t1 = time.perf_counter()
            kv: Any = self._rebuild(m.payloads) if m and m.n_blocks else DynamicCache()
            t2 = time.perf_counter()
            start = m.hit_tokens if m else 0
            logits = self._forward(ids[start:], kv, start, max(1, min(keep_logits, len(ids) - start)))
            t3 = time.perf_counter()
            if on_logits is not None:
                on_logits(logits)
            t3b = time.perf_counter()
            if any(layer.keys is None or layer.keys.shape[-2] != len(ids) for layer in kv.layers):
                raise ModelError(
                    f"{type(self.model).__name__}'s cache does not keep every token's K/V in every layer; "
                    "ctxcache needs a plain per-layer KV cache"
                )
            limit = len(ids) if store_upto is None else max(0, min(store_upto, len(ids)))
            hit_blocks = m.n_blocks if m else 0
            created = self._store(req.prefix(limit), kv, hit_blocks) if use_cache else 0
            # Blocks that were already cached are not "created"; undercounting them only means a
            # caller skips storing the reply's blocks (store_generated), never a wrong store.
            cached_blocks = hit_blocks + created // self.block_size
            t4 = time.perf_counter()
        finally:
            if m is not None:
                self.cache.release(m)
        tm.lookup_s, tm.load_s, tm.prefill_s, tm.store_s = t1 - t0, t2 - t1, t3 - t2, t4 - t3b
        hit = m.hit_tokens if m else 0
        by_tier = dict(m.usage.by_tier) if m else {}
        usage = Usage(
            cache_read_tokens=hit, cache_creation_tokens=created, uncached_tokens=len(ids) - hit, by_tier=by_tier
        )
        return Prefill(ids, kv, logits, usage, tm, cached_blocks, req)

    # --- generation ---------------------------------------------------------------------------------
    def stream_tokens(
        self,
        prompt: Sequence[int],
        params: SamplingParams | None = None,
        *,
        namespace: str | Namespace = "default",
        store_upto: int | None = None,
        store_generated: bool = False,
        use_cache: bool = True,
        should_stop: Callable[[], bool] | None = None,
        on_prefill: Callable[[Usage], None] | None = None,
    ) -> GenerationStream:
        """Stream the completion of a tokenized prompt. ``should_stop`` is polled between tokens;
        ``on_prefill`` gets the prompt's Usage as soon as the first token is sampled (before any text)."""
        ids = self._check_tokens(prompt)
        return GenerationStream(
            self, ids, params or SamplingParams(), namespace=namespace, store_upto=store_upto,
            store_generated=store_generated and store_upto is None, use_cache=use_cache, should_stop=should_stop,
            on_prefill=on_prefill,
        )  # fmt: skip

    def stream(
        self,
        messages: Sequence[Mapping[str, Any]],
        max_new_tokens: int = 128,
        temperature: float = 0.0,
        top_p: float = 1.0,
        stop: str | Sequence[str] | None = None,
        seed: int | None = None,
        *,
        namespace: str | Namespace = "default",
    ) -> GenerationStream:
        """Stream a chat reply: ``for delta in lm.stream(msgs): ...``, then ``stream.result``."""
        stops = (stop,) if isinstance(stop, str) else tuple(stop or ())
        params = SamplingParams(max_new_tokens, temperature, top_p, stops, seed)
        return self.stream_tokens(self.encode(messages), params, namespace=namespace, store_generated=True)

    def generate(
        self,
        messages: Sequence[Mapping[str, Any]],
        max_new_tokens: int = 128,
        temperature: float = 0.0,
        top_p: float = 1.0,
        stop: str | Sequence[str] | None = None,
        seed: int | None = None,
        *,
        namespace: str | Namespace = "default",
    ) -> Generation:
        """A chat reply, with usage (cached / created / uncached tokens, by tier) and timings."""
        s = self.stream(messages, max_new_tokens, temperature, top_p, stop, seed, namespace=namespace)
        for _ in s:
            pass
        assert s.result is not None
        return s.result

    @torch.no_grad()
    def full_logits(self, tokens: Sequence[int], keep_logits: int = 1) -> Any:
        """Reference logits from a full recompute, bypassing the cache (for checks and tests)."""
        ids = self._check_tokens(tokens)
        return self._forward(ids, DynamicCache(), 0, max(1, min(keep_logits, len(ids))))
