"""vLLM's paged KV tensors, seen from ctxcache: copy whole vLLM blocks out and back in.

vLLM hands the worker one tensor per attention layer. The block axis differs by backend: the CPU
backend's layout is ``[num_blocks, kv_heads, block_size, 2*head_dim]`` (block axis 0), CUDA flash
attention's is ``[2, num_blocks, block_size, kv_heads, head_dim]`` (axis 1). We find the axis whose
length is vLLM's block count and copy along it, so the rest of the layout does not matter as long
as every layer keeps it. A ctxcache block's payload is one tensor per layer holding its ``ratio``
vLLM blocks along that axis, in host memory.

Device tensors (CUDA) go through pinned host staging buffers: device -> pinned (asynchronous),
one synchronize, pinned -> pageable copy that the cache keeps; loads go the other way. That path
has not been run on a GPU (none was available): see docs/vllm.md.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ...errors import ConfigError


class KVLayout:
    def __init__(self, kv_caches: dict[str, torch.Tensor], num_blocks: int, vllm_block: int) -> None:
        if not kv_caches:
            raise ConfigError("vLLM registered no KV cache tensors with the ctxcache connector")
        seen: set[int] = set()
        self.names: list[str] = []
        self.layers: list[torch.Tensor] = []
        for name, t in kv_caches.items():
            if t.data_ptr() in seen:  # layers sharing one KV tensor are copied once
                continue
            seen.add(t.data_ptr())
            self.names.append(name)
            self.layers.append(t)
        self.axes = [self._block_axis(n, t, num_blocks) for n, t in zip(self.names, self.layers)]
        self.device = self.layers[0].device
        self.vllm_block = vllm_block
        self._stage: dict[tuple[int, int], torch.Tensor] = {}

    @staticmethod
    def _block_axis(name: str, t: torch.Tensor, num_blocks: int) -> int:
        for axis in (0, 1):
            if t.dim() > axis and t.shape[axis] == num_blocks:
                return axis
        raise ConfigError(
            f"KV tensor of layer {name} has shape {tuple(t.shape)}: no leading axis of length {num_blocks} "
            "(vLLM's block count); this attention backend's layout is not supported by the ctxcache connector"
        )

    def fingerprint(self) -> str:
        """Layout facts that must match for stored blocks to be reusable."""
        shapes = ",".join(
            f"{tuple(s for i, s in enumerate(t.shape) if i != a)}@{a}" for t, a in zip(self.layers, self.axes)
        )
        return f"{len(self.layers)}L:{self.layers[0].dtype}:{shapes}"

    def block_shape(self, layer: int, n: int) -> tuple[int, ...]:
        shape = list(self.layers[layer].shape)
        shape[self.axes[layer]] = n
        return tuple(shape)

    # --- out of vLLM ----------------------------------------------------------------------------
    def gather(self, block_ids: Sequence[int], ratio: int) -> list[list[torch.Tensor]]:
        """Host copies of whole ctxcache blocks: ``[block][layer]``, ``ratio`` vLLM blocks each."""
        n = len(block_ids) // ratio
        idx = torch.tensor(list(block_ids[: n * ratio]), dtype=torch.long, device=self.device)
        if self.device.type != "cpu":  # pragma: no cover - needs a GPU
            return self._gather_device(idx, n, ratio)
        out: list[list[torch.Tensor]] = [[] for _ in range(n)]
        for t, axis in zip(self.layers, self.axes):
            for b in range(n):  # one copy per block and layer: each block owns its storage, and is freed alone
                out[b].append(t.index_select(axis, idx[b * ratio : (b + 1) * ratio]))
        return out

    def _gather_device(self, idx: torch.Tensor, n: int, ratio: int) -> list[list[torch.Tensor]]:  # pragma: no cover
        # Every layer's gather goes device -> pinned asynchronously, then one synchronize for the step;
        # the pinned buffers are reused, so each block gets its own pageable copy.
        staged = []
        for li, (t, axis) in enumerate(zip(self.layers, self.axes)):
            src = t.index_select(axis, idx)
            buf = self._staging(li, src)
            buf.copy_(src, non_blocking=True)
            staged.append((buf, axis))
        torch.cuda.current_stream(self.device).synchronize()
        return [[buf.narrow(axis, b * ratio, ratio).clone() for buf, axis in staged] for b in range(n)]

    def _staging(self, li: int, t: torch.Tensor) -> torch.Tensor:  # pragma: no cover - needs a GPU
        key = (li, t.numel())
        buf = self._stage.get(key)
        if buf is None or buf.shape != t.shape:
            buf = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
            self._stage[key] = buf
        return buf

    # --- into vLLM ------------------------------------------------------------------------------
    def check(self, payload: Any, ratio: int) -> list[torch.Tensor] | None:
        """The payload's per-layer tensors if it fits this layout, else None (a load error)."""
        if not isinstance(payload, (list, tuple)) or len(payload) != len(self.layers):
            return None
        out = []
        for li, part in enumerate(payload):
            if isinstance(part, np.ndarray):
                with warnings.catch_warnings():  # read-only views of a stored blob; only read here
                    warnings.simplefilter("ignore", UserWarning)
                    part = torch.from_numpy(part)
            if not isinstance(part, torch.Tensor) or tuple(part.shape) != self.block_shape(li, ratio):
                return None
            out.append(part)
        return out

    def scatter(self, block_ids: Sequence[int], parts: Sequence[tuple[list[torch.Tensor], int]]) -> None:
        """Write vLLM blocks: ``parts[i]`` is (a checked payload, the vLLM block inside it) for block_ids[i]."""
        if not block_ids:
            return
        idx = torch.tensor(list(block_ids), dtype=torch.long, device=self.device)
        for li, (t, axis) in enumerate(zip(self.layers, self.axes)):
            src = torch.cat([p[li].narrow(axis, sub, 1) for p, sub in parts], dim=axis)
            if src.dtype != t.dtype:  # bfloat16 blocks come back from a serializing tier as float32
                src = src.to(t.dtype)
            if t.device.type != "cpu":  # pragma: no cover - needs a GPU
                src = src.pin_memory().to(t.device, non_blocking=True)
            t.index_copy_(axis, idx, src)
        if self.device.type != "cpu":  # pragma: no cover - needs a GPU
            torch.cuda.current_stream(self.device).synchronize()
