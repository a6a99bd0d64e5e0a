"""The server's shared state and the chat job that runs on the model thread."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..engine.tenancy import PinnedQuotaError
from ..observability.service import Observability
from ..usage import Usage
from .config import ServerConfig
from .memory import trimmer
from .metrics import Metrics
from .pins import PinManager
from .worker import Event, Job, JobContext, ModelWorker

if TYPE_CHECKING:
    from ..integrations import Generation, SamplingParams
    from ..integrations.transformers import CachedLM

Messages = list[dict[str, str]]
LARGE_PROMPT_CHARS = 32_768  # prompts past this many characters are tokenized in the slow lane


@dataclass
class Breakpoint:
    """A cache_control mark: the conversation up to it, rendered without a generation prompt."""

    prefix: Messages
    ttl: str  # "5m" or "1h"
    ttl_s: float


@dataclass
class ChatJob:
    messages: Messages
    params: SamplingParams
    tenant: str
    arrived: float  # time.perf_counter() when the HTTP request came in
    breakpoints: list[Breakpoint] = field(default_factory=list)
    clamp_max_tokens: bool = False  # max_tokens was not given: fit the default into the context
    cache_salt: str | None = None  # OpenAI-compatible per-request salt (validated by the route)
    request_id: str | None = None
    # Set by tokenize(), on the tokenizer thread: the prompt's ids and its breakpoints' positions.
    ids: list[int] = field(default_factory=list)
    marks: list[tuple[int, str]] = field(default_factory=list)
    tokenize_s: float = 0.0
    # A raw prompt (/v1/completions): its own encoder and its size in characters, instead of messages.
    encode: Callable[[], list[int]] | None = None
    size: int | None = None


@dataclass
class Outcome:
    generation: Generation
    ttft_s: float | None  # arrival to first token, queueing included
    queued_s: float
    tokenize_s: float
    created_by_ttl: dict[str, int]
    pinned_tokens: int

    @property
    def usage(self) -> Usage:
        return self.generation.usage

    def extension(self) -> dict[str, Any]:
        """The ``ctxcache`` field of responses: usage by tier and per-phase timings."""
        t = self.generation.timings.to_dict()
        t.update(queue_s=round(self.queued_s, 6), tokenize_s=round(self.tokenize_s, 6))
        if self.ttft_s is not None:
            t["ttft_s"] = round(self.ttft_s, 6)
        return {
            "usage": self.usage.to_dict(),
            "generated_cached_tokens": self.generation.generated_cached_tokens,
            "pinned_tokens": self.pinned_tokens,
            "timings": t,
        }


class ServerState:
    def __init__(self, lm: CachedLM, cfg: ServerConfig, model_id: str) -> None:
        self.lm, self.cfg, self.model_id = lm, cfg, model_id
        self.created = int(time.time())
        self.model_names = list(dict.fromkeys([model_id, *cfg.model_aliases]))  # the served name first
        self.max_context = min(cfg.max_context, lm.max_context)
        self.worker = ModelWorker(cfg.max_queue, after_job=trimmer())
        # Prompts are tokenized off the model thread, so an over-long one is refused without making
        # every other tenant wait; large prompts take their own lane, so small ones never queue behind them.
        self.tokenizer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ctxcache-tokenize")
        self.tokenizer_large = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ctxcache-tokenize-large")
        cache = lm.cache
        self.pins = PinManager(cache, int(cfg.max_pinned_fraction * cache.tiers[0].capacity))
        self.metrics = Metrics(cache.stats, lambda: self.worker.depth)
        self.obs: Observability  # set by create_app

    @property
    def max_tokens_limit(self) -> int:
        return min(self.cfg.max_tokens_limit, self.max_context - 1)

    def check_max_tokens(self, max_tokens: int, field_name: str) -> None:
        from .deps import APIError

        limit = self.max_tokens_limit
        if not 1 <= max_tokens <= limit:
            raise APIError(400, f"{field_name} must be between 1 and {limit}, got {max_tokens}", param=field_name)

    def check_model(self, model: str) -> None:
        from .deps import APIError

        if model not in self.model_names:
            raise APIError(
                404,
                f"model {model!r} not found; this server serves {self.model_id!r}",
                param="model",
                code="model_not_found",
            )


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def _created_by_ttl(usage: Usage, marks: list[tuple[int, str]]) -> dict[str, int]:
    """Split the created range [hit, hit + created) over the breakpoint segments, by their ttl."""
    out = {"5m": 0, "1h": 0}
    lo, hi = usage.cache_read_tokens, usage.cache_read_tokens + usage.cache_creation_tokens
    if not marks:
        out["5m"] = hi - lo  # automatic caching reports as the default ttl
        return out
    start = 0
    for pos, ttl in marks:
        out[ttl] += max(0, min(hi, pos) - max(lo, start))
        start = max(start, pos)
    return out


def tokenize(state: ServerState, job: ChatJob) -> None:
    """Fill in ``job.ids`` and ``job.marks``; an over-long prompt is a 400 here (runs on the tokenizer thread)."""
    from .deps import APIError

    lm = state.lm
    t0 = time.perf_counter()
    ids = job.encode() if job.encode is not None else lm.encode(job.messages)
    if not ids:  # a raw prompt whose text has no tokens (a tokenizer without BOS)
        raise APIError(400, "prompt: the prompt has no tokens", param="prompt")
    if job.clamp_max_tokens and len(ids) < state.max_context:
        job.params = replace(job.params, max_new_tokens=min(job.params.max_new_tokens, state.max_context - len(ids)))
    want = len(ids) + job.params.max_new_tokens
    if want > state.max_context:
        raise APIError(
            400,
            f"this model's context limit is {state.max_context} tokens, but the request needs {want} "
            f"({len(ids)} in the prompt + {job.params.max_new_tokens} max tokens): shorten the prompt or "
            "lower max_tokens",
            param="messages" if job.encode is None else "prompt",
            code="context_length_exceeded",
        )
    job.marks = sorted(
        (common_prefix(ids, lm.encode(bp.prefix, add_generation_prompt=False)), bp.ttl) for bp in job.breakpoints
    )
    job.ids = ids
    job.tokenize_s = time.perf_counter() - t0


def chat_job(state: ServerState, job: ChatJob) -> Callable[[JobContext], None]:
    """The work of one chat request, run on the model thread; results come back as events."""

    def run(ctx: JobContext) -> None:
        group = state.obs.group_for(job.tenant)
        with state.obs.cache_for(state.lm, group):
            _run(ctx, group)

    def _run(ctx: JobContext, group: str) -> None:
        lm, cfg = state.lm, state.cfg
        state.pins.sweep()
        ids, params, marks = job.ids, job.params, job.marks
        if marks:
            store_upto: int | None = marks[-1][0]  # explicit breakpoints: cache exactly what they mark
        else:
            store_upto = None if cfg.auto_cache else 0
        ctx.emit("prompt", len(ids))
        stream = lm.stream_tokens(
            ids,
            params,
            namespace=lm.cache.namespace(job.tenant, job.cache_salt) if job.cache_salt else job.tenant,
            store_upto=store_upto,
            store_generated=cfg.cache_generated and not marks,
            use_cache=cfg.cache,
            should_stop=ctx.cancelled,
            on_prefill=lambda usage: ctx.emit("usage", usage),
        )
        try:
            for delta in stream:
                ctx.emit("delta", delta)
        except PinnedQuotaError as exc:  # a class-0 tenant over the cap on pinned bytes
            ctx.emit("error", (429, str(exc)))
            return
        gen = stream.result
        assert gen is not None
        pinned = 0
        if cfg.cache and group == "a" and stream.request is not None:  # pins live in the main cache; group b's has none
            ttl_s = {bp.ttl: bp.ttl_s for bp in job.breakpoints}
            for pos, ttl in marks:  # the prefill's Prompt: its keys are reused, not recomputed
                pinned = max(pinned, state.pins.keep(stream.request.prefix(pos), job.tenant, ttl_s[ttl]))
        ttft = stream.first_token_at - job.arrived if stream.first_token_at is not None else None
        created = _created_by_ttl(gen.usage, marks) if cfg.cache else {"5m": 0, "1h": 0}
        outcome = Outcome(gen, ttft, ctx.queued_s, job.tokenize_s, created, pinned)
        state.obs.request_done(job.tenant, group, outcome, job.arrived)
        ctx.emit("done", outcome)

    return run


async def start(state: ServerState, job: ChatJob) -> Job:
    """Tokenize and check a chat job off the model thread, queue it, and wait until it starts."""
    from .deps import APIError
    from .worker import QueueFullError

    size = job.size if job.size is not None else sum(len(m["content"]) for m in job.messages)
    lane = state.tokenizer_large if size > LARGE_PROMPT_CHARS else state.tokenizer
    await asyncio.get_running_loop().run_in_executor(lane, tokenize, state, job)
    try:
        tenancy = state.lm.cache.tenancy
        priority = tenancy.priority(job.tenant) if tenancy else 2
        handle = state.worker.submit(chat_job(state, job), job.request_id, priority=priority)
    except QueueFullError as exc:
        raise APIError(429, str(exc), headers={"Retry-After": str(exc.retry_after)}) from None
    first = await handle.next()
    if first.kind == "error":
        status, message = first.data
        raise APIError(status, message)
    if first.kind != "prompt":
        raise APIError(503, "the request was cancelled before it ran")
    return handle


async def events(handle: Job) -> AsyncIterator[Event]:
    """A job's events after the prompt, up to (not including) its end."""
    while (ev := await handle.next()).kind != "end":
        yield ev


def record(state: ServerState, out: Outcome) -> None:
    state.metrics.observe(out.usage, out.generation.completion_tokens, out.ttft_s, out.queued_s)


async def collect(state: ServerState, handle: Job) -> tuple[str, Outcome]:
    """A non-streaming reply: the whole text and the outcome, with metrics recorded."""
    from .deps import APIError

    parts: list[str] = []
    out: Outcome | None = None
    try:
        async for ev in events(handle):
            if ev.kind == "delta":
                parts.append(ev.data)
            elif ev.kind == "done":
                out = ev.data
            elif ev.kind == "error":
                raise APIError(ev.data[0], ev.data[1])
    finally:
        handle.cancel()
    if out is None:
        raise APIError(500, "the model worker ended without a result")
    record(state, out)
    return "".join(parts), out
