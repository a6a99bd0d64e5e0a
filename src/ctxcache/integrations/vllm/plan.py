"""The scheduler side's bookkeeping, free of vLLM imports (unit-tested with plain objects).

Per request it remembers what ctxcache holds (from the lookup), what to load (decided when vLLM
allocates blocks), the request's vLLM block ids, and how many ctxcache blocks are already stored.
Each step it turns vLLM's scheduler output into load and save specs for the worker:

- load: the vLLM blocks between vLLM's own prefix-cache hit and ctxcache's hit (never what vLLM
  already holds), copied before the forward pass;
- save: every ctxcache block that became complete in this step (prompt chunks and, unless
  disabled, generated tokens), so a prompt prefilled in several chunks is stored completely.

Block sizes: a ctxcache block is ``ratio`` whole vLLM blocks (ratio >= 1); anything else is refused
at startup (see :func:`block_ratio`). Loads may start and end inside a ctxcache block, at vLLM block
boundaries, because vLLM's own hit is counted in vLLM blocks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...errors import ConfigError


def block_ratio(cc_block: int, vllm_block: int) -> int:
    """vLLM blocks per ctxcache block; sizes that are not whole multiples are refused."""
    if not isinstance(cc_block, int) or not isinstance(vllm_block, int) or cc_block < 1 or vllm_block < 1:
        raise ConfigError(f"block sizes must be positive ints, got ctxcache {cc_block!r}, vLLM {vllm_block!r}")
    if cc_block % vllm_block:
        raise ConfigError(
            f"ctxcache block_size {cc_block} is not a multiple of vLLM's block_size {vllm_block}: "
            f"a ctxcache block must be whole vLLM blocks (use {vllm_block}, {2 * vllm_block}, "
            f"{4 * vllm_block}, ...), or change vLLM's --block-size"
        )
    return cc_block // vllm_block


def tenant_for(cache_salt: str | None, lora_name: str | None = None) -> str:
    """The namespace tenant of a request: vLLM's cache_salt and LoRA adapter both change its KV."""
    parts = ["vllm"]
    if lora_name:
        parts.append(f"lora={lora_name}")
    if cache_salt:
        parts.append(f"salt={cache_salt}")
    return "/".join(parts)


@dataclass
class LoadSpec:
    req_id: str
    tenant: str
    tokens: list[int]  # the prefix the loaded blocks belong to (ends at the last loaded token)
    first_vblock: int  # request-relative index of the first vLLM block to fill
    block_ids: list[int]  # vLLM block ids to fill, one per vLLM block from first_vblock on


@dataclass
class SaveSpec:
    req_id: str
    tenant: str
    tokens: list[int]  # the prefix up to the end of the last block to save
    first_block: int  # ctxcache block index of the first block to save
    block_ids: list[int]  # vLLM block ids of those ctxcache blocks, ``ratio`` per block
    prompt_len: int = 0  # the request's prompt length (hybrid KV groups: which window blocks to keep)


@dataclass
class StepPlan:
    loads: list[LoadSpec] = field(default_factory=list)
    saves: list[SaveSpec] = field(default_factory=list)
    drop: list[str] = field(default_factory=list)  # stashed lookups nobody will load


@dataclass
class _Req:
    request: Any
    tenant: str
    hit_end: int = 0  # tokens ctxcache holds (a multiple of its block size)
    load: tuple[int, int] | None = None  # token range to load, set after allocation
    loaded: list[int] = field(default_factory=list)  # vLLM block ids the last load filled
    load_first: int = 0
    block_ids: list[int] = field(default_factory=list)
    saved: int = 0  # ctxcache blocks known to be stored (a prefix)


class Planner:
    def __init__(
        self, cc_block: int, vllm_block: int, lookup: Callable[[str, str, list[int]], int], save_decode: bool = True
    ) -> None:
        self.cc_block, self.vllm_block = cc_block, vllm_block
        self.ratio = block_ratio(cc_block, vllm_block)
        self.lookup, self.save_decode = lookup, save_decode
        self.reqs: dict[str, _Req] = {}
        self._drop: list[str] = []
        self.lookups = self.hit_tokens = self.load_tokens = 0

    # --- the scheduler connector's calls --------------------------------------------------------
    def matched(self, request: Any, num_computed: int) -> int:
        """Tokens ctxcache can add beyond vLLM's own ``num_computed`` hit."""
        tokens = list(request.all_token_ids)
        tenant = tenant_for(getattr(request, "cache_salt", None), _lora_name(request))
        st = self.reqs.get(request.request_id)
        if st is None:
            st = self.reqs[request.request_id] = _Req(request, tenant)
        # vLLM must compute at least the last token (it needs its logits).
        usable = (len(tokens) - 1) // self.cc_block * self.cc_block
        hit = self.lookup(request.request_id, tenant, tokens[:usable]) if usable > 0 else 0
        self.lookups += 1
        st.hit_end = hit - hit % self.cc_block
        st.saved = st.hit_end // self.cc_block
        return max(0, st.hit_end - num_computed)

    def allocated(self, request: Any, num_external: int) -> None:
        st = self.reqs.get(request.request_id)
        if st is None:
            return
        if num_external > 0:
            st.load = (st.hit_end - num_external, st.hit_end)
        else:
            self._drop.append(request.request_id)

    def finished(self, req_id: str) -> None:
        if self.reqs.pop(req_id, None) is not None:
            self._drop.append(req_id)

    def load_failed(self, bad_block_ids: set[int]) -> None:
        """Blocks that failed to load are not stored: save them again once recomputed."""
        for st in self.reqs.values():
            bad = [i for i, b in enumerate(st.loaded) if _ids_of(b) & bad_block_ids]
            if bad:
                st.saved = min(st.saved, (st.load_first + bad[0]) // self.ratio)

    # --- one step -------------------------------------------------------------------------------
    def step(
        self,
        new_reqs: Iterable[tuple[str, Sequence[int], int]],
        cached_reqs: Iterable[tuple[str, Sequence[int] | None, bool, int]],
        scheduled: dict[str, int],
    ) -> StepPlan:
        """``new_reqs``: (req id, vLLM block ids, computed tokens); ``cached_reqs``: (req id, new
        block ids or None, resumed, computed tokens); ``scheduled``: tokens scheduled per request."""
        plan = StepPlan(drop=self._drop)
        self._drop = []
        for req_id, block_ids, computed in new_reqs:
            st = self.reqs.get(req_id)
            if st is None:
                continue
            st.block_ids = list(block_ids)
            if st.load is not None:
                plan.loads.append(self._load_spec(req_id, st))
            self._save(plan, req_id, st, computed + scheduled.get(req_id, 0))
        for req_id, new_ids, resumed, computed in cached_reqs:
            st = self.reqs.get(req_id)
            if st is None:
                continue
            if resumed:
                st.block_ids = list(new_ids or ())
            elif new_ids:
                st.block_ids.extend(new_ids)
            if st.load is not None:
                plan.loads.append(self._load_spec(req_id, st))
            self._save(plan, req_id, st, computed + scheduled.get(req_id, 0))
        return plan

    def _load_spec(self, req_id: str, st: _Req) -> LoadSpec:
        assert st.load is not None
        start, end = st.load
        st.load = None
        first, last = start // self.vllm_block, end // self.vllm_block
        st.loaded, st.load_first = st.block_ids[first:last], first
        self.hit_tokens += st.hit_end
        self.load_tokens += end - start
        return LoadSpec(req_id, st.tenant, list(st.request.all_token_ids[:end]), first, st.loaded)

    def _save(self, plan: StepPlan, req_id: str, st: _Req, done_tokens: int) -> None:
        tokens = st.request.all_token_ids
        limit = len(tokens) if self.save_decode else len(getattr(st.request, "prompt_token_ids", None) or tokens)
        done = min(done_tokens, limit, len(st.block_ids) * self.vllm_block) // self.cc_block
        if done <= st.saved:
            return
        r = self.ratio
        prompt_len = len(getattr(st.request, "prompt_token_ids", None) or tokens)
        plan.saves.append(
            SaveSpec(
                req_id, st.tenant, list(tokens[: done * self.cc_block]), st.saved, st.block_ids[st.saved * r : done * r],
                prompt_len,
            )
        )  # fmt: skip
        st.saved = done


def _ids_of(b: Any) -> set[int]:
    """A block position's vLLM ids: an int, or (hybrid KV groups) one id per group."""
    return {b} if isinstance(b, int) else set(b)


def _lora_name(request: Any) -> str | None:
    lora = getattr(request, "lora_request", None)
    return str(getattr(lora, "lora_name", "")) or None if lora is not None else None
