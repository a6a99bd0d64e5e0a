"""``CtxCacheConnector``: vLLM's KV-connector interface (v1) backed by a ContextCache.

vLLM builds one instance per role: SCHEDULER in the engine-core process (decides what to load and
save, see plan.py) and WORKER in each worker process (holds the cache, copies KV, see worker.py);
they talk through a Unix socket (lookup.py) and through the per-step metadata vLLM ships from the
scheduler to the workers. With tensor or pipeline parallelism each rank is a worker side of its own, with its
own keys, socket and disk directory, and the scheduler asks every rank (ranks.py).
Configuration comes from ``kv_connector_extra_config``:

- ``config``: a ctxcache config (TOML path or table: tiers, policy, watermarks, salt, hash);
  default one 4 GiB RAM tier. Its ``block_size`` defaults to vLLM's block size.
- ``block_size``: the ctxcache block size (a multiple of vLLM's), overriding the config's.
- ``socket``: the lookup socket path (default: per engine id under $TMPDIR/ctxcache-<uid>/; per rank
  with tensor parallelism).
- ``stats_path``: a JSON file the worker rewrites with its counters (twice a second at most; per rank).
- ``save_decode``: also store blocks of generated tokens (default true: the next chat turn reuses them).
- ``hma_segment``: with vLLM's hybrid KV manager (several KV-cache groups, e.g. Gemma 3's sliding
  windows), tokens between the points where sliding-window groups' blocks are kept (groups.py;
  default 1024 rounded up to whole blocks, a multiple of the block size; 0: only at each prompt's end).
- ``layerwise``: copy KV in and out layer by layer, overlapping the copies with the forward pass
  (layerwise.py; default false: whole-step copies before and after it; one KV-cache group only).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
    SupportsHMA,
)

from ...config import CacheConfig, load_config
from ...errors import ConfigError
from .groups import DEFAULT_SEGMENT, groups_of, zip_groups
from .lookup import default_socket_path
from .plan import LoadSpec, Planner, SaveSpec, block_ratio
from .ranks import AllRanksLookup, check_world, rank_path

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)
_DEFAULT = {"tiers": [{"kind": "memory", "capacity": "4GiB"}]}
_KEYS = {"config", "block_size", "socket", "stats_path", "save_decode", "hma_segment", "layerwise"}


@dataclass
class CtxCacheMetadata(KVConnectorMetadata):  # type: ignore[misc]
    loads: list[LoadSpec] = field(default_factory=list)
    saves: list[SaveSpec] = field(default_factory=list)
    drop: list[str] = field(default_factory=list)


def cache_config(extra: dict[str, Any], vllm_block: int) -> CacheConfig:
    """The ContextCache config of an engine, with its block size settled and checked."""
    unknown = set(extra) - _KEYS
    if unknown:
        raise ConfigError(f"unknown kv_connector_extra_config keys {sorted(unknown)}; known: {sorted(_KEYS)}")
    source = extra.get("config", _DEFAULT)
    cfg = load_config(source)
    explicit = isinstance(source, dict) and "block_size" in source
    if not isinstance(source, dict):  # a TOML file: did it set block_size?
        explicit = "block_size" in load_config_keys(source)
    bs = extra.get("block_size", cfg.block_size if explicit else vllm_block)
    block_ratio(bs, vllm_block)  # refuse a mismatch at startup
    return replace(cfg, block_size=bs)


def load_config_keys(path: str | Path) -> set[str]:
    import tomllib

    with open(path, "rb") as f:
        return set(tomllib.load(f))


def model_fingerprint(vllm_config: Any) -> str:
    """Model identity for the namespace: the weights (a local directory's files), dtype, revision."""
    mc = vllm_config.model_config
    name = str(mc.model)
    path = Path(name)
    if (path / "config.json").is_file():
        from ..model_store import fingerprint

        name = fingerprint(path)
    return f"vllm:{name}@{getattr(mc, 'revision', None)}:{mc.dtype}"


def _rank(tp: int) -> int:
    """This worker's flat rank, vLLM's own numbering: pipeline stage * TP size + TP rank."""
    from vllm.distributed.parallel_state import get_pp_group, get_tensor_model_parallel_rank

    return int(get_pp_group().rank_in_group) * tp + int(get_tensor_model_parallel_rank())


class CtxCacheConnector(KVConnectorBase_V1):  # type: ignore[misc]
    def __init__(self, vllm_config: Any, role: KVConnectorRole, kv_cache_config: Any = None) -> None:
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        tc = self._kv_transfer_config
        extra = dict(tc.kv_connector_extra_config or {})
        self._vllm_block = int(vllm_config.cache_config.block_size)
        self._cfg = cache_config(extra, self._vllm_block)
        pc = vllm_config.parallel_config
        self._tp, self._pp = int(pc.tensor_parallel_size), int(pc.pipeline_parallel_size)
        self._world = check_world(self._tp, self._pp)
        # Several groups: vLLM's hybrid KV manager (CtxCacheHybridConnector below), see groups.py.
        several = len(getattr(kv_cache_config, "kv_cache_groups", None) or []) > 1
        self._groups = groups_of(kv_cache_config, self._vllm_block) if several else None
        bs = self._cfg.block_size  # the default segment, rounded up to whole ctxcache blocks
        self._hma_segment = int(extra.get("hma_segment", -(-DEFAULT_SEGMENT // bs) * bs))
        if self._hma_segment < 0 or self._hma_segment % bs:
            raise ConfigError(f"hma_segment {self._hma_segment} must be a non-negative multiple of block_size {bs}")
        self._socket = Path(extra["socket"]) if "socket" in extra else default_socket_path(str(tc.engine_id))
        self._stats_path = Path(extra["stats_path"]) if extra.get("stats_path") else None
        self._num_blocks = int(getattr(kv_cache_config, "num_blocks", 0) or 0)
        self._fp = model_fingerprint(vllm_config)
        self._client: AllRanksLookup | None = None
        self._planner: Planner | None = None
        self._worker: Any = None
        self._layerwise = bool(extra.get("layerwise", False))
        if self._layerwise and self._groups is not None:  # layerwise.py copies one group's block ids
            raise ConfigError(
                "kv_connector_extra_config 'layerwise' supports one KV-cache group; with hybrid KV groups "
                f"({len(self._groups)} here) run whole-step (drop 'layerwise') or CtxCacheConnector"
            )
        self._layers: Any = None  # layerwise.LayerPipeline in layer-wise mode (worker side)
        if role == KVConnectorRole.SCHEDULER:
            if tc.kv_load_failure_policy != "recompute":
                # A cache is best effort: a block that fails to load is recomputed, never an error.
                log.info("ctxcache connector: kv_load_failure_policy %r -> 'recompute'", tc.kv_load_failure_policy)
                tc.kv_load_failure_policy = "recompute"
            self._client = AllRanksLookup([rank_path(self._socket, r, self._world) for r in range(self._world)])
            self._planner = Planner(
                self._cfg.block_size, self._vllm_block, self._client.lookup, bool(extra.get("save_decode", True))
            )

    # --- worker side ----------------------------------------------------------------------------
    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        from .worker import open_worker

        first = next(iter(kv_caches.values()))
        num_blocks = self._num_blocks or int(first.shape[0])
        rank = _rank(self._tp) if self._world > 1 else 0
        w = open_worker(self._cfg, self._fp, kv_caches, num_blocks, self._vllm_block, self._socket,
                        self._stats_path, rank, self._world, self._pp, self._groups, self._hma_segment)  # fmt: skip
        self._worker = w
        assert w.layout is not None
        if self._layerwise:
            from .layerwise import LayerPipeline

            self._layers = LayerPipeline(w, kv_caches)
        log.info("ctxcache connector: rank %d of %d, %d layers, block %d tokens (%d vLLM blocks), socket %s",
                 rank, self._world, len(w.layout.layers), w.cache.block_size, w.ratio, w.server.path)  # fmt: skip

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        meta = self._get_connector_metadata()
        if self._worker is not None and isinstance(meta, CtxCacheMetadata) and (meta.loads or meta.drop):
            if self._layers is not None:
                self._layers.start_load(meta.loads, meta.drop)
            else:
                self._worker.load(meta.loads, meta.drop)

    def bind_connector_metadata(self, connector_metadata: KVConnectorMetadata) -> None:
        super().bind_connector_metadata(connector_metadata)
        if self._layers is not None:
            self._layers.new_step()

    def wait_for_layer_load(self, layer_name: str) -> None:
        if self._layers is not None:  # whole-step: loads complete in start_load_kv, before the forward pass
            self._layers.wait_layer(layer_name)

    def save_kv_layer(self, layer_name: str, kv_layer: torch.Tensor, attn_metadata: Any, **kwargs: Any) -> None:
        if self._layers is not None:  # whole-step: blocks are copied out once per step, in wait_for_save
            meta = self._get_connector_metadata()
            if isinstance(meta, CtxCacheMetadata) and meta.saves:
                self._layers.save_layer(layer_name, meta.saves)

    def wait_for_save(self) -> None:
        meta = self._get_connector_metadata()
        if self._worker is not None and isinstance(meta, CtxCacheMetadata) and meta.saves:
            if self._layers is not None:
                self._layers.finish_save(meta.saves)
            else:
                self._worker.save(meta.saves)

    def get_block_ids_with_load_errors(self) -> set[int]:
        if self._layers is not None:  # every layer's copy is done before vLLM hears of errors
            self._layers.finish_load()
        return self._worker.take_errors() if self._worker is not None else set()

    def shutdown(self) -> None:
        if self._layers is not None:
            self._layers.close()
        if self._worker is not None:
            self._worker.close()
        if self._client is not None:
            self._client.close()

    # --- scheduler side -------------------------------------------------------------------------
    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> tuple[int | None, bool]:
        assert self._planner is not None
        return self._planner.matched(request, num_computed_tokens), False

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        assert self._planner is not None
        self._planner.allocated(request, num_external_tokens)

    def build_connector_meta(self, scheduler_output: Any) -> KVConnectorMetadata:
        assert self._planner is not None
        so = scheduler_output
        cached = so.scheduled_cached_reqs
        # One group: its block ids. Several (hybrid): one tuple of ids per block position (groups.py).
        pick: Callable[[Any], Any] = zip_groups if self._groups is not None else (lambda ids: ids[0])
        new = ((r.req_id, pick(r.block_ids), r.num_computed_tokens) for r in so.scheduled_new_reqs)
        old = (
            (rid, pick(ids) if ids is not None else None, rid in cached.resumed_req_ids, cached.num_computed_tokens[i])
            for i, (rid, ids) in enumerate(zip(cached.req_ids, cached.new_block_ids))
        )
        plan = self._planner.step(new, old, dict(so.num_scheduled_tokens))
        return CtxCacheMetadata(plan.loads, plan.saves, plan.drop)

    def update_connector_output(self, connector_output: Any) -> None:
        bad = getattr(connector_output, "invalid_block_ids", None)
        if bad and self._planner is not None:
            self._planner.load_failed(set(bad))

    def request_finished(self, request: Any, block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        if self._planner is not None:
            self._planner.finished(request.request_id)
        return False, None


class CtxCacheHybridConnector(CtxCacheConnector, SupportsHMA):  # type: ignore[misc]
    """The connector with vLLM's hybrid KV manager kept on (``SupportsHMA``; groups.py).

    Opt-in (``"kv_connector": "CtxCacheHybridConnector"``): vLLM decides from the connector's class
    whether to keep its hybrid manager, and with several KV-cache groups vLLM 0.32.0 cannot
    recompute a block that failed to load (docs/vllm.md, "Hybrid KV groups"), so the default
    connector keeps vLLM's hybrid manager off, as before.
    """

    def request_finished_all_groups(
        self, request: Any, block_ids: tuple[list[int], ...]
    ) -> tuple[bool, dict[str, Any] | None]:
        """The same as ``request_finished`` (saves happen per step, never after)."""
        return self.request_finished(request, [])

    def get_block_ids_with_load_errors(self) -> set[int]:
        bad = super().get_block_ids_with_load_errors()
        if bad and self._groups is not None:  # vLLM 0.32.0: Scheduler._handle_invalid_blocks raises
            log.error("ctxcache connector: %d blocks failed to load; with %d KV-cache groups vLLM cannot "
                      "recompute them and stops (docs/vllm.md, Hybrid KV groups)", len(bad), len(self._groups))  # fmt: skip
        return bad
