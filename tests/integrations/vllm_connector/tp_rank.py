"""The two-rank harness's pieces, and one rank in a process of its own (the restart test).

``python tests/integrations/vllm_connector/tp_rank.py TMP RANK WORLD SEED`` builds the worker side
the connector builds in a vLLM worker (``open_worker``) over rank RANK's shard of a seeded KV
tensor set, prints "ready", then runs one JSON command per stdin line and answers one JSON line:
``{"op": "save", "specs": [...]}`` (saves, waits for the saver), ``{"op": "load", "specs": [...],
"drop": [...]}`` (loads; answers the load errors and a digest of each loaded vLLM block),
``{"op": "close"}``.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import torch

from ctxcache.config import CacheConfig, load_config

NB, H, VB, D, L = 24, 4, 4, 6, 2  # vLLM blocks, kv heads (split over the ranks), vLLM block size, 2*head_dim, layers
CC = 8  # ctxcache block = 2 vLLM blocks
FP = "vllm:test-model@None:torch.float32"


def full_kv(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {f"layers.{i}.attn": torch.randn(NB, H, VB, D, generator=g) for i in range(L)}


def shard(kv: dict[str, torch.Tensor], rank: int, world: int) -> dict[str, torch.Tensor]:
    """Rank ``rank``'s heads, as tensor parallelism splits them (the CPU layout's head axis is 1)."""
    n = H // world
    return {k: t[:, rank * n : (rank + 1) * n].clone() for k, t in kv.items()}


def stage_shard(kv: dict[str, torch.Tensor], rank: int, world: int, pp: int = 1) -> dict[str, torch.Tensor]:
    """Flat rank ``rank``'s part with ``pp`` pipeline stages (vLLM's numbering: stage * TP + TP rank):
    its stage's consecutive slice of the layers, its TP rank's heads of each."""
    tp = world // pp
    stage, t = divmod(rank, tp)
    names = list(kv)
    per = len(names) // pp
    return shard({k: kv[k] for k in names[stage * per : (stage + 1) * per]}, t, tp)


def config(tmp: Path) -> CacheConfig:
    disk = {"kind": "disk", "capacity": "32MiB", "path": str(tmp / "disk")}
    return load_config({"block_size": CC, "tiers": [{"kind": "memory", "capacity": "8MiB"}, disk]})


def digest(kv: dict[str, torch.Tensor], ids: list[int]) -> list[str]:
    """One sha256 per vLLM block over every layer's bytes."""
    return [hashlib.sha256(b"".join(t[i].contiguous().numpy().tobytes() for t in kv.values())).hexdigest() for i in ids]


def main(tmp: Path, rank: int, world: int, seed: int) -> None:
    from ctxcache.integrations.vllm.plan import LoadSpec, SaveSpec
    from ctxcache.integrations.vllm.worker import open_worker

    kv = shard(full_kv(seed), rank, world)
    w = open_worker(config(tmp), FP, kv, NB, VB, tmp / "s.sock", None, rank, world)
    print("ready", flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        reply: dict[str, Any] = {"ok": True}
        if cmd["op"] == "save":
            w.save([SaveSpec(**s) for s in cmd["specs"]])
            w.flush()
        elif cmd["op"] == "load":
            specs = [LoadSpec(**s) for s in cmd["specs"]]
            w.load(specs, cmd["drop"])
            reply["errors"] = sorted(w.take_errors())
            reply["blocks"] = digest(kv, [b for s in specs for b in s.block_ids])
        elif cmd["op"] == "close":
            w.close()
        print(json.dumps(reply), flush=True)
        if cmd["op"] == "close":
            return


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
