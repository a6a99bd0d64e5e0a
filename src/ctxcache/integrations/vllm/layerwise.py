"""Layer-wise transfer (``kv_connector_extra_config {"layerwise": true}``): loads and saves layer by layer.

In whole-step mode (the default, worker.py) ``start_load_kv`` copies every layer of every planned
block into vLLM's KV before the forward pass, and ``wait_for_save`` copies the finished blocks out
of every layer after it. In layer-wise mode:

- ``start_load_kv`` resolves the step's loads (the pinned lookups, shape checks: the same as
  whole-step) and hands the copies to a background thread, which copies layer 0, then layer 1, ...
  and marks each layer done; ``wait_for_layer_load(layer)``, which vLLM calls inside each attention
  layer (``maybe_transfer_kv_layer``, vLLM 0.32.0), waits for that layer only, so layer i+1's copy
  runs while layer i computes.
- ``save_kv_layer(layer)``, called by vLLM right after each attention layer, queues that layer's
  copy out of vLLM's KV to the same thread (the layer's KV for this step is written by then, and
  nothing writes it again in this step); ``wait_for_save`` waits for the thread, copies any layer
  the hook never saw synchronously (so a stored block is always complete), assembles the blocks
  (``[block][layer]``, the same tensors as whole-step) and queues them to the worker's saver thread.
  Keys, payloads and their format are those of whole-step mode: a block stored in one mode loads
  in the other.

Failures: a layer copy that raises (it should not: payloads were checked in ``start_load_kv``)
marks every vLLM block of that step's loads as a load error; later layers skip them; vLLM hears of
them through ``get_block_ids_with_load_errors`` (which first waits for every layer's copy) and, with
the ``recompute`` policy, discards the step's output for those requests and recomputes from the
first bad block, overwriting every layer of it. So a block with some layers loaded and others not
is never used for an output. A layer vLLM never waits for (no hook: another attention path) is
still copied before the step ends; its attention, though, may have read it early: layer-wise mode
relies on vLLM calling the hooks (docs/vllm.md, "Layer-wise transfer").
"""

from __future__ import annotations

import logging
import queue
import re
import threading
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch

from ...errors import ConfigError
from .kv import KVLayout
from .plan import LoadSpec, SaveSpec

if TYPE_CHECKING:
    from ...cache import Match
    from .worker import WorkerSide

log = logging.getLogger(__name__)
LAYER_COUNTERS = (
    "layer_waits", "layer_wait_s", "layer_wait_max_s", "layer_saves", "layer_copy_s", "layer_save_wait_s",
    "layer_fallbacks",
)  # fmt: skip


def _host_bytes(t: torch.Tensor) -> np.ndarray | None:
    """A numpy view of a CPU tensor's bytes (any dtype, bfloat16 included), or None (device tensor,
    a last axis that is not contiguous)."""
    if t.device.type != "cpu" or t.dim() == 0 or (t.stride(-1) != 1 and t.shape[-1] != 1):
        return None
    try:
        with warnings.catch_warnings():  # read-only views of a stored blob; only read there
            warnings.simplefilter("ignore", UserWarning)
            return t.detach().view(torch.uint8).numpy()
    except (RuntimeError, TypeError):
        return None


def _natural(name: str) -> list[Any]:
    """Sort key: layers.2 before layers.10 (the forward order of numbered layers)."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


@dataclass
class _Load:
    """One step's loads: what each layer copies, and which layers are done."""

    block_ids: list[int]  # vLLM blocks to fill (all specs of the step)
    parts: list[tuple[list[torch.Tensor], int]]  # (checked payload, vLLM block inside it) per block id
    matches: list[Match]
    done: list[threading.Event]
    failed: bool = False


@dataclass
class _Save:
    """One step's saves: per stored block, per layer, the copied tensor (None until copied)."""

    specs: list[SaveSpec]
    block_ids: list[int]  # ``ratio`` vLLM blocks per ctxcache block, all specs of the step
    parts: list[list[torch.Tensor | None]] = field(default_factory=list)  # [block][layer]
    queued: set[int] = field(default_factory=set)  # layers handed to the thread


class LayerPipeline:
    """Layer-by-layer loads and saves for one worker side (``WorkerSide``), on one copy thread."""

    def __init__(self, worker: WorkerSide, kv_caches: dict[str, torch.Tensor] | None = None) -> None:
        layout = worker.layout
        assert layout is not None, "register the KV caches first"
        # One KV-cache group only: the connector refuses layer-wise with hybrid groups at startup.
        if not isinstance(layout, KVLayout):
            raise ConfigError("layer-wise transfer supports one KV-cache group, not vLLM's hybrid groups")
        self.w, self.layout = worker, layout
        n = len(layout.layers)
        # Copy order: the forward order of numbered layer names (dict order is not guaranteed to be).
        self.order = sorted(range(n), key=lambda i: _natural(layout.names[i]))
        by_ptr = {t.data_ptr(): i for i, t in enumerate(layout.layers)}
        self.index = {name: i for i, name in enumerate(layout.names)}
        for name, t in (kv_caches or {}).items():  # layers sharing another layer's KV tensor
            self.index.setdefault(name, by_ptr.get(t.data_ptr(), -1))
        for k in LAYER_COUNTERS:
            worker.c.setdefault(k, 0)
        self._errors: set[int] = set()  # written by the copy thread, merged on the engine's thread
        self._load: _Load | None = None
        self._save: _Save | None = None
        self._jobs: queue.Queue[Any] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="ctxcache-layers", daemon=True)
        self._thread.start()

    # --- the copy thread --------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            kind, arg = job
            t0 = time.perf_counter()
            try:
                if kind == "load":
                    self._load_layers(arg)
                elif kind == "save":
                    try:
                        self._save_layer(*arg)
                    except Exception as exc:  # wait_for_save copies the layer again, on its own thread
                        log.warning("ctxcache layer-wise save of layer %s failed (%s)", self.layout.names[arg[1]], exc)
                        arg[0].queued.discard(arg[1])
                elif kind == "sync":
                    arg.set()
            finally:
                self.w.c["layer_copy_s"] += time.perf_counter() - t0

    def _load_layers(self, ld: _Load) -> None:
        idx = torch.tensor(ld.block_ids, dtype=torch.long, device=self.layout.device)
        for li in self.order:
            try:
                if not ld.failed:
                    self._copy_layer(li, idx, ld.parts)
            except Exception as exc:  # a bug, memory: vLLM recomputes every block of this step's loads
                log.warning("ctxcache layer-wise load of layer %s failed (%s): vLLM recomputes",
                            self.layout.names[li], exc)  # fmt: skip
                ld.failed = True
                self._errors.update(ld.block_ids)
            finally:
                ld.done[li].set()

    def _copy_layer(self, li: int, idx: torch.Tensor, parts: Sequence[tuple[list[torch.Tensor], int]]) -> None:
        """Write one layer of the step's loaded vLLM blocks (what ``KVLayout.scatter`` does per layer)."""
        t, axis = self.layout.layers[li], self.layout.axes[li]
        dst = _host_bytes(t)
        if dst is not None and all(p[li].dtype == t.dtype for p, _ in parts):
            # CPU: plain memcpy per vLLM block, one thread (numpy, GIL released). A torch op here can
            # start an OpenMP team of its own for this thread, competing with the forward pass's.
            for bid, (p, sub) in zip(idx.tolist(), parts):
                src = _host_bytes(p[li])
                assert src is not None
                if axis == 0:
                    dst[bid] = src[sub]
                else:
                    dst[:, bid] = src[:, sub]
            return
        src_t = torch.cat([p[li].narrow(axis, sub, 1) for p, sub in parts], dim=axis)
        if src_t.dtype != t.dtype:  # bfloat16 blocks come back from a serializing tier as float32
            src_t = src_t.to(t.dtype)
        if t.device.type != "cpu":  # pragma: no cover - needs a GPU (default stream: correct, no overlap)
            src_t = src_t.pin_memory().to(t.device, non_blocking=True)
            t.index_copy_(axis, idx, src_t)
            torch.cuda.current_stream(t.device).synchronize()
            return
        t.index_copy_(axis, idx, src_t)

    def _save_layer(self, sv: _Save, li: int) -> None:
        t, axis, r = self.layout.layers[li], self.layout.axes[li], self.w.ratio
        src = _host_bytes(t)
        for b in range(len(sv.parts)):  # one tensor per block and layer, as KVLayout.gather
            ids = sv.block_ids[b * r : (b + 1) * r]
            if src is not None:  # CPU: one thread, as in _copy_layer
                part = torch.empty(self.layout.block_shape(li, r), dtype=t.dtype)
                out = _host_bytes(part)
                assert out is not None
                np.take(src, ids, axis=axis, out=out)
            else:
                part = t.index_select(axis, torch.tensor(ids, dtype=torch.long, device=t.device))
                part = part if part.device.type == "cpu" else part.cpu()
            sv.parts[b][li] = part

    def _sync(self) -> None:
        """Wait until the copy thread has done every job queued so far."""
        ev = threading.Event()
        self._jobs.put(("sync", ev))
        ev.wait()

    # --- loads (engine thread) ------------------------------------------------------------------
    def start_load(self, specs: Sequence[LoadSpec], drop: Sequence[str] = ()) -> None:
        self.finish_load()  # the previous step's, if nobody collected it
        if drop:
            self.w.stash.drop(list(drop))
        if not specs:
            return
        t0 = time.perf_counter()
        ids: list[int] = []
        parts: list[tuple[list[torch.Tensor], int]] = []
        matches: list[Match] = []
        for spec in specs:
            self._prepare(spec, ids, parts, matches)
            self.w.c["load_requests"] += 1
        n = len(self.layout.layers)
        ld = _Load(ids, parts, matches, [threading.Event() for _ in range(n)])
        if ids:
            self._load = ld
            self._jobs.put(("load", ld))
        else:
            self._release(matches)
        dt = time.perf_counter() - t0
        self.w.c["load_s"] += dt
        self.w.c["load_max_s"] = max(self.w.c["load_max_s"], dt)

    def _prepare(self, spec: LoadSpec, ids: list[int], parts: list[Any], matches: list[Match]) -> None:
        """The blocks of one load spec that can be copied (checked payloads); the rest are errors.
        The same checks as ``WorkerSide._load_one``."""
        w = self.w
        match: Match | None = None
        try:
            match = w.pinned(spec)
            ok_ids, ok_parts = w.checked(spec, match)  # the failed checks are the worker's load errors now
            w.c["load_errors"] += len(spec.block_ids) - len(ok_ids)
        except Exception as exc:  # a dead tier, a bug: vLLM recomputes
            log.warning("ctxcache load for %s failed (%s): vLLM recomputes", spec.req_id, exc)
            self._errors.update(spec.block_ids)
            if match is not None and not match.released:
                w.cache.release(match)
            return
        ids.extend(ok_ids)
        parts.extend(ok_parts)
        matches.append(match)

    def wait_layer(self, layer_name: str) -> None:
        ld = self._load
        if ld is None:
            return
        li = self.index.get(layer_name, -1)
        if li < 0:
            return
        t0 = time.perf_counter()
        self.w.c["layer_waits"] += 1
        ld.done[li].wait()
        dt = time.perf_counter() - t0
        self.w.c["layer_wait_s"] += dt
        self.w.c["layer_wait_max_s"] = max(self.w.c["layer_wait_max_s"], dt)
        self.w.c["load_s"] += dt

    def finish_load(self) -> None:
        """Wait for every layer of this step's loads, release the pinned blocks, hand errors to the
        worker (``WorkerSide.take_errors``). Before vLLM asks for the load errors, every step."""
        ld, self._load = self._load, None
        if ld is not None:
            for ev in ld.done:
                ev.wait()
            self._release(ld.matches)
            bad = set(ld.block_ids) if ld.failed else set()
            self.w.c["loaded_blocks"] += len(ld.block_ids) - len(bad)
        errors, self._errors = self._errors, set()
        self.w.c["load_errors"] += len(errors)
        self.w._errors.update(errors)

    def _release(self, matches: Sequence[Match]) -> None:
        for m in matches:
            if not m.released:
                self.w.cache.release(m)

    # --- saves ----------------------------------------------------------------------------------
    def save_layer(self, layer_name: str, specs: Sequence[SaveSpec]) -> None:
        if not specs:
            return
        sv = self._save
        if sv is None:
            ids: list[int] = []
            for spec in specs:
                n = len(spec.block_ids) // self.w.ratio
                ids.extend(spec.block_ids[: n * self.w.ratio])
            nb = len(ids) // self.w.ratio
            sv = self._save = _Save(list(specs), ids, [[None] * len(self.layout.layers) for _ in range(nb)])
        li = self.index.get(layer_name, -1)
        if li < 0 or li in sv.queued or not sv.parts:
            return
        sv.queued.add(li)
        self.w.c["layer_saves"] += 1
        self._jobs.put(("save", (sv, li)))

    def finish_save(self, specs: Sequence[SaveSpec]) -> None:
        """Complete this step's saves: wait for the layer copies, copy what no hook saved, queue the
        blocks to the saver (the same payloads and keys as whole-step mode)."""
        sv, self._save = self._save, None
        if not specs:
            return
        t0 = time.perf_counter()
        if sv is None:  # no hook ran this step: every layer now, as whole-step
            self.save_layer("", specs)
            sv, self._save = self._save, None
            assert sv is not None
        else:
            self._sync()
        missing = [li for li in range(len(self.layout.layers)) if li not in sv.queued]
        if missing and sv.parts:
            self.w.c["layer_fallbacks"] += len(missing)
            for li in missing:
                try:
                    self._save_layer(sv, li)
                except Exception as exc:  # those blocks are not stored (below), the engine goes on
                    log.warning("ctxcache save copy of layer %s failed (%s)", self.layout.names[li], exc)
        dt = time.perf_counter() - t0
        self.w.c["layer_save_wait_s"] += dt
        self.w.c["save_copy_s"] += dt
        self.w.c["save_copy_max_s"] = max(self.w.c["save_copy_max_s"], dt)
        b = 0
        for spec in specs:
            n = len(spec.block_ids) // self.w.ratio
            payloads = [list(p) for p in sv.parts[b : b + n]]
            b += n
            whole = next((i for i, p in enumerate(payloads) if any(x is None for x in p)), n)
            if whole < n:  # a layer could not be copied: store the complete blocks before it only
                self.w.c["saves_dropped"] += n - whole
                payloads = payloads[:whole]
            if payloads:
                end = (spec.first_block + whole) * self.w.cache.block_size
                self.w.queue_store(replace(spec, tokens=spec.tokens[:end]), cast("list[list[torch.Tensor]]", payloads))
        self.w._maybe_write_stats()

    def new_step(self) -> None:
        """vLLM bound a new step's metadata: nothing of the last step may be left over."""
        self.finish_load()
        self._save = None

    def close(self) -> None:
        self.finish_load()
        self._jobs.put(None)
        self._thread.join(timeout=10)
