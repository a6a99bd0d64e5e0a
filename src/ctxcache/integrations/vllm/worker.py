"""The worker side: the ContextCache, the lookup service, loads into and saves out of vLLM's KV.

Loads run synchronously before the forward pass (the copy is the whole cost: the blocks were
read and verified by the lookup the scheduler asked for, and stay pinned until copied). Saves
copy the finished blocks out of vLLM's tensors after the forward pass, on the engine's thread
(vLLM may reuse those blocks next step), and hand them to a saver thread that does the hashing,
indexing, encoding and tier writes, so the engine waits for the copy only. A full saver queue
drops the save (counted), never blocks the engine.

Failures never reach vLLM as exceptions: a block that is missing, corrupt (checksums, token
bytes), of the wrong shape, or lost with a dead tier is reported by
:meth:`WorkerSide.take_errors` and vLLM recomputes it (kv_load_failure_policy "recompute").
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from ...cache import ContextCache, Match
from ...config import CacheConfig
from ...keys import as_token_array
from .groups import DEFAULT_SEGMENT, Group, HybridLayout, flat_ids
from .kv import KVLayout
from .lookup import LookupServer, Stash
from .plan import LoadSpec, SaveSpec, block_ratio
from .ranks import rank_config, rank_model, rank_path

log = logging.getLogger(__name__)
_COUNTERS = (
    "load_requests", "loaded_blocks", "load_errors", "saved_blocks", "save_requests", "saves_dropped",
    "store_errors", "stored_blocks", "load_s", "load_max_s", "save_copy_s", "save_copy_max_s", "store_s",
    "saved_bytes",
)  # fmt: skip


def open_worker(
    cfg: CacheConfig,
    model_fp: str,
    kv_caches: dict[str, torch.Tensor],
    num_blocks: int,
    vllm_block: int,
    socket_path: Path,
    stats_path: Path | None = None,
    rank: int = 0,
    world: int = 1,
    pp: int = 1,
    groups: Sequence[Group] | None = None,
    hma_segment: int = DEFAULT_SEGMENT,
) -> WorkerSide:
    """One worker rank's side, as ``register_kv_caches`` builds it: its cache (namespace: the model
    fingerprint, the KV layout, and with ``world`` > 1 the rank, of ``pp`` pipeline stages; ranks.py),
    its lookup socket and stats file (per rank with ``world`` > 1). With several KV-cache ``groups``
    (vLLM's hybrid manager) the layout is per group (groups.py) and the namespace names the groups."""
    layout: KVLayout | HybridLayout
    if groups is not None and len(groups) > 1:
        layout = HybridLayout(kv_caches, groups, num_blocks, vllm_block, cfg.block_size, hma_segment)
    else:
        layout = KVLayout(kv_caches, num_blocks, vllm_block)
    model = rank_model(f"{cfg.model}|{model_fp}|{layout.fingerprint()}", rank, world, pp)
    cache = ContextCache.from_config(replace(rank_config(cfg, rank, world), model=model))
    stats = rank_path(stats_path, rank, world) if stats_path is not None else None
    worker = WorkerSide(cache, vllm_block, rank_path(socket_path, rank, world), stats)
    worker.layout = layout
    if isinstance(layout, HybridLayout):  # a hit needs every sliding-window group's blocks
        worker.stash.usable = layout.usable_tokens
    return worker


class WorkerSide:
    def __init__(
        self,
        cache: ContextCache,
        vllm_block: int,
        socket_path: Path,
        stats_path: Path | None = None,
        queue_size: int = 256,
    ) -> None:
        self.cache = cache
        self.ratio = block_ratio(cache.block_size, vllm_block)
        self.vllm_block = vllm_block
        self.layout: KVLayout | HybridLayout | None = None
        self.stash = Stash(cache)
        self.server = LookupServer(self.stash, socket_path, self.stats)
        self.stats_path = stats_path
        self.c: dict[str, float] = dict.fromkeys(_COUNTERS, 0)
        self._errors: set[int] = set()
        self._q: queue.Queue[tuple[str, Any, list[list[torch.Tensor]], int] | None] = queue.Queue(queue_size)
        self._saver = threading.Thread(target=self._save_loop, name="ctxcache-saver", daemon=True)
        self._saver.start()
        self._last_stats = 0.0
        self._closed = False

    def register(self, kv_caches: dict[str, torch.Tensor], num_blocks: int) -> None:
        self.layout = KVLayout(kv_caches, num_blocks, self.vllm_block)

    # --- loads ----------------------------------------------------------------------------------
    def load(self, specs: Sequence[LoadSpec], drop: Sequence[str] = ()) -> None:
        if drop:
            self.stash.drop(list(drop))
        for spec in specs:
            t0 = time.perf_counter()
            self._load_one(spec)
            dt = time.perf_counter() - t0
            self.c["load_s"] += dt
            self.c["load_max_s"] = max(self.c["load_max_s"], dt)
            self.c["load_requests"] += 1

    def checked(self, spec: LoadSpec, match: Match) -> tuple[list[int], list[tuple[list[torch.Tensor], int]]]:
        """The vLLM blocks of ``spec`` whose payloads in ``match`` pass the layout's check, with each
        one's (payload, offset in its ctxcache block); the others become load errors. Whole-step and
        layer-wise loads (layerwise.py) both check this way."""
        assert self.layout is not None, "register_kv_caches was not called"
        r = self.ratio
        ok_ids: list[int] = []
        parts: list[tuple[list[torch.Tensor], int]] = []
        checked: dict[int, list[torch.Tensor] | None] = {}
        for i, bid in enumerate(spec.block_ids):
            v = spec.first_vblock + i
            cb = v // r
            if cb not in checked:
                checked[cb] = self.layout.check(match.payloads[cb], r) if cb < match.n_blocks else None
            payload = checked[cb]
            if payload is None:
                self._errors.add(bid)
                continue
            ok_ids.append(bid)
            parts.append((payload, v % r))
        return ok_ids, parts

    def pinned(self, spec: LoadSpec) -> Match:
        """The match the scheduler's lookup pinned for ``spec``, or a new lookup when it expired."""
        match = self.stash.take(spec.req_id, spec.tokens)
        return match if match is not None else self.cache.lookup(spec.tokens, spec.tenant)

    def _load_one(self, spec: LoadSpec) -> None:
        assert self.layout is not None, "register_kv_caches was not called"
        match: Match | None = None
        try:
            match = self.pinned(spec)
            ok_ids, parts = self.checked(spec, match)
            missing = self.layout.scatter(ok_ids, parts)  # hybrid: a group's layers vLLM needs, not stored
            if missing:
                self._errors.update(missing)
                self.c["load_errors"] += len(missing)
            self.c["loaded_blocks"] += len(ok_ids)
            self.c["load_errors"] += len(spec.block_ids) - len(ok_ids)
        except Exception as exc:  # a dead tier, a bug: vLLM recomputes, the engine keeps running
            log.warning("ctxcache load for %s failed (%s): vLLM recomputes", spec.req_id, exc)
            self._errors.update(spec.block_ids)
            self.c["load_errors"] += len(spec.block_ids)
        finally:
            if match is not None and not match.released:
                self.cache.release(match)

    def take_errors(self) -> set[int]:
        errors, self._errors = self._errors, set()
        return {x for e in errors for x in flat_ids(e)}  # hybrid: a position's ids, one per group

    # --- saves ----------------------------------------------------------------------------------
    def save(self, specs: Sequence[SaveSpec]) -> None:
        assert self.layout is not None, "register_kv_caches was not called"
        for spec in specs:
            t0 = time.perf_counter()
            if isinstance(self.layout, HybridLayout):
                payloads = self.layout.gather(spec.block_ids, self.ratio, spec.first_block, spec.prompt_len)
            else:
                payloads = self.layout.gather(spec.block_ids, self.ratio)
            dt = time.perf_counter() - t0
            self.c["save_copy_s"] += dt
            self.c["save_copy_max_s"] = max(self.c["save_copy_max_s"], dt)
            self.queue_store(spec, payloads)
        self._maybe_write_stats()

    def queue_store(self, spec: SaveSpec, payloads: list[list[torch.Tensor]]) -> None:
        """Hand copied blocks (``[block][layer]``) to the saver thread (also layerwise.py's way)."""
        self.c["save_requests"] += 1
        self.c["saved_blocks"] += len(payloads)
        self.c["saved_bytes"] += sum(int(t.nbytes) for p in payloads for t in p)
        try:
            self._q.put_nowait((spec.tenant, as_token_array(spec.tokens), payloads, spec.first_block))
        except queue.Full:
            self.c["saves_dropped"] += len(payloads)

    def _save_loop(self) -> None:
        while True:
            item = self._q.get()
            try:
                if item is None:
                    return
                tenant, tokens, payloads, first = item
                t0 = time.perf_counter()
                n = len(payloads)
                tokens = tokens[: (first + n) * self.cache.block_size]
                usage = self.cache.store(tokens, payloads, tenant, first_block=first)
                self.c["stored_blocks"] += usage.cache_creation_tokens // self.cache.block_size
                self.c["store_s"] += time.perf_counter() - t0
            except Exception as exc:  # a tier error must not kill the saver
                self.c["store_errors"] += 1
                log.warning("ctxcache store failed: %s", exc)
            finally:
                self._q.task_done()

    def flush(self) -> None:
        """Wait until every queued save is stored."""
        self._q.join()

    # --- introspection and shutdown --------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        st = self.stash
        timing = {"lookups": st.lookups, "lookup_s": st.lookup_s, "lookup_max_s": st.lookup_max_s}
        out: dict[str, Any] = {"connector": {**self.c, **timing}, "stashed": len(st), "queued": self._q.qsize()}
        out["closed"] = self._closed
        out["layout"] = self.layout.fingerprint() if self.layout is not None else None  # hybrid: "|hma:g0=..."
        out["cache"] = self.cache.stats()
        return out

    def _maybe_write_stats(self, force: bool = False) -> None:
        now = time.monotonic()
        if self.stats_path is None or (not force and now - self._last_stats < 0.5):
            return
        self._last_stats = now
        tmp = self.stats_path.with_name(f"{self.stats_path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self.stats(), default=str))
        os.replace(tmp, self.stats_path)

    def close(self) -> None:
        """Store what is queued, write the final stats, close the cache (RAM spills to local disk)."""
        if self._closed:
            return
        self._closed = True
        t0 = time.perf_counter()
        self.server.close()
        self._q.put(None)
        self._saver.join(timeout=60)
        self.stash.close()
        self.c["close_saver_s"] = time.perf_counter() - t0
        self._final_stats()
        t1 = time.perf_counter()
        self.cache.close()
        # vLLM gives the worker a few seconds (docs/vllm.md, Restarts): how long each part took.
        self.c["close_cache_s"] = time.perf_counter() - t1
        self._final_stats()

    def _final_stats(self) -> None:
        try:
            self._maybe_write_stats(force=True)
        except Exception as exc:  # stats are best effort
            log.warning("ctxcache could not write final stats: %s", exc)
