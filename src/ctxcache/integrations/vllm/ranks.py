"""Tensor and pipeline parallelism: one ContextCache per rank, keys per (rank, world size), the
all-ranks rule.

With ``--tensor-parallel-size N`` vLLM runs N worker processes; rank ``r`` holds its own shard of
the KV heads, so its blocks are different bytes from every other rank's for the same tokens. Each
rank keeps its own ContextCache (next to its tensors, like a single worker) whose model namespace
ends in ``|tp<r>/<N>``: a rank's blocks never answer another rank's lookup, nor another world
size's (the layout fingerprint alone would not tell rank 0 from rank 1: their shards have the same
shape). Each rank serves its own lookup socket, and its own disk directory under each disk tier's
path (a disk tier has one owner process, docs/storage.md). A Redis tier is shared as it is: the
namespaces keep the ranks' keys apart.

The scheduler asks every rank (:class:`AllRanksLookup`): a block is a hit only when every rank
holds its shard, so the answer is the shortest of the ranks' hits. A rank that lacks a block (its
store failed or was dropped, it evicted the block, it cannot be reached) makes that block and every
later one a miss for all ranks, never a load of some ranks' shards next to recomputed others.

Pipeline parallelism (``--pipeline-parallel-size P``): stage ``s`` holds its own slice of the
layers, so its blocks are another part of each block's KV. A rank is then (stage, TP rank), its flat
number ``s * T + t`` in a world of ``P * T`` (vLLM's own numbering) names its socket, stats file and
disk directory, and its namespace ends in ``|pp<s>/<P>`` (then ``|tp<t>/<T>`` when T > 1). The
all-ranks rule is the same: a block is a hit only when every stage's every shard holds it.

One worker (N = 1) keeps the namespace, socket, stats file and disk paths it always had, so caches
written before tensor parallelism stay valid; a TP-only world keeps the names it had before
pipeline parallelism.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from ...config import CacheConfig, TierConfig
from ...errors import ConfigError
from .lookup import LookupClient


def check_world(tp: int, pp: int) -> int:
    """The number of ranks (every rank is a worker side with a cache of its own): ``tp * pp``."""
    if tp < 1:
        raise ConfigError(f"tensor_parallel_size must be >= 1, got {tp}")
    if pp < 1:
        raise ConfigError(f"pipeline_parallel_size must be >= 1, got {pp}")
    return tp * pp


def _suffix(rank: int, world: int) -> str:
    if not 0 <= rank < world:
        raise ConfigError(f"rank {rank} is not in a world of {world}")
    return f"r{rank}of{world}"


def rank_model(model: str, rank: int, world: int, pp: int = 1) -> str:
    """The model namespace of one rank: unchanged for one worker, ``|tp<rank>/<world>`` appended with
    tensor parallelism alone; with ``pp`` stages ``|pp<stage>/<pp>``, then ``|tp<t>/<T>`` when T > 1."""
    _suffix(rank, world)
    if pp == 1:
        return model if world == 1 else f"{model}|tp{rank}/{world}"
    if world % pp:
        raise ConfigError(f"a world of {world} ranks is not {pp} pipeline stages of equal size")
    tp = world // pp
    stage, t = divmod(rank, tp)
    return f"{model}|pp{stage}/{pp}" + (f"|tp{t}/{tp}" if tp > 1 else "")


def rank_path(path: Path, rank: int, world: int) -> Path:
    """A per-rank file name (socket, stats): ``x.sock`` -> ``x-r0of2.sock``; unchanged for one worker."""
    s = _suffix(rank, world)
    return path if world == 1 else path.with_name(f"{path.stem}-{s}{path.suffix}")


def rank_config(cfg: CacheConfig, rank: int, world: int) -> CacheConfig:
    """The ContextCache config of one rank: each disk tier in a directory of its own,
    ``<path>/r<rank>of<world>`` (the erasure journal: ``<file>.r<rank>of<world>``); the rest as
    configured, per rank (a 4 GiB RAM tier is 4 GiB in every rank)."""
    s = _suffix(rank, world)
    if world == 1:
        return cfg
    tiers = [_rank_tier(t, s) for t in cfg.tiers]
    journal = f"{cfg.erasure_journal}.{s}" if cfg.erasure_journal else None
    return replace(cfg, tiers=tiers, erasure_journal=journal)


def _rank_tier(tier: TierConfig, suffix: str) -> TierConfig:
    if tier.kind != "disk" or "path" not in tier.options:
        return tier
    return replace(tier, options={**tier.options, "path": str(Path(tier.options["path"]) / suffix)})


class AllRanksLookup:
    """The scheduler's lookup over every rank's socket: the prefix every rank holds.

    Rank 0 is asked for the whole prompt, each next rank only for what the ranks before it hold
    (nothing more can be a hit), and a rank that holds nothing ends the round. Each asked rank
    keeps its Match pinned for the load (lookup.py's stash); a rank whose Match is longer than
    the common prefix loads only the common prefix from it.
    """

    def __init__(self, paths: list[Path], timeout: float = 5.0) -> None:
        if not paths:
            raise ConfigError("AllRanksLookup needs at least one rank's socket")
        self.clients = [LookupClient(p, timeout) for p in paths]
        self.partial = 0  # lookups where a rank held less than the ranks before it

    def lookup(self, req_id: str, tenant: str, tokens: list[int]) -> int:
        hit = len(tokens)
        for i, client in enumerate(self.clients):
            got = min(client.lookup(req_id, tenant, tokens[:hit]), hit)
            if i and got < hit:
                self.partial += 1
            hit = got
            if hit == 0:
                break
        return hit

    @property
    def errors(self) -> int:
        return sum(c.errors for c in self.clients)

    def stats(self) -> list[dict[str, Any]]:
        return [c.stats() for c in self.clients]

    def close(self) -> None:
        for c in self.clients:
            c.close()
