"""Tensor parallelism with a two-rank harness: each rank is the worker side the connector builds
(``open_worker``: its own cache, namespace, lookup socket and disk directory) holding its shard of
the heads; the scheduler's Planner asks every rank through ``AllRanksLookup`` (the connector's
scheduler client), and each step's plan goes to every rank, as vLLM sends the connector metadata
to every worker. The restart runs each rank in a process of its own (tp_rank.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch

from ctxcache.config import load_config
from ctxcache.errors import ConfigError
from ctxcache.integrations.vllm.plan import LoadSpec, Planner, SaveSpec, StepPlan
from ctxcache.integrations.vllm.ranks import AllRanksLookup, check_world, rank_config, rank_model, rank_path
from ctxcache.integrations.vllm.worker import open_worker

from .tp_rank import CC, FP, NB, VB, config, digest, full_kv, shard, stage_shard

SRC = Path(__file__).resolve().parents[3]
WORLD = 2
TOKENS = list(range(1000, 1033))  # 33 tokens: 4 whole ctxcache blocks (8 vLLM blocks) + the last token
SRC_IDS, DST_IDS = list(range(9)), list(range(12, 21))


@dataclass
class Req:
    request_id: str
    all_token_ids: list[int]
    prompt_token_ids: list[int] = field(default_factory=list)


class Ranks:
    """``world`` worker ranks in this process and the scheduler's planner over their sockets."""

    def __init__(
        self, tmp: Path, kv: dict[str, torch.Tensor] | None, world: int = WORLD, cfg: Any = None, pp: int = 1
    ) -> None:
        """``kv``: the full KV tensors, split over in-process ranks; None: ranks in processes (set ``workers``).
        ``pp``: pipeline stages (each holds its slice of the layers; the TP ranks of a stage its heads)."""
        cfg, sock = cfg or config(tmp), tmp / "s.sock"
        self.kv = [stage_shard(kv, r, world, pp) for r in range(world)] if kv is not None else []
        self.workers: list[Any] = [
            open_worker(cfg, FP, self.kv[r], NB, VB, sock, tmp / "stats.json", r, world, pp)
            for r in range(len(self.kv))
        ]
        self.lookup = AllRanksLookup([rank_path(sock, r, world) for r in range(world)])
        self.planner = Planner(CC, VB, self.lookup.lookup)

    def request(self, req_id: str, block_ids: list[int], chunk: int = len(TOKENS)) -> tuple[int, StepPlan]:
        """One request's prefill on every rank (the hit loaded, the rest computed ``chunk`` tokens a
        step and stored): the hit and the first step's plan."""
        req = Req(req_id, TOKENS, TOKENS)
        hit = self.planner.matched(req, 0)
        self.planner.allocated(req, hit)
        plans, done = [], hit
        while done < len(TOKENS):
            n = min(chunk, len(TOKENS) - done)
            if not plans:
                plan = self.planner.step([(req_id, block_ids, done)], [], {req_id: n})
            else:
                plan = self.planner.step([], [(req_id, None, False, done)], {req_id: n})
            for w in self.workers:  # start_load_kv, the forward pass, wait_for_save
                w.load(plan.loads, plan.drop)
                w.save(plan.saves)
            for w in self.workers:
                w.flush()
            plans.append(plan)
            done += n
        return hit, plans[0]

    def blocks(self, rank: int, ids: list[int]) -> list[torch.Tensor]:
        return [t[ids] for t in self.kv[rank].values()]

    def close(self) -> None:
        self.lookup.close()
        for w in self.workers:
            w.close()


def test_each_rank_loads_its_own_shard_bytes(tmp_path: Path) -> None:
    ranks = Ranks(tmp_path, full_kv(0))
    try:
        assert ranks.request("a", SRC_IDS)[0] == 0
        hit, plan = ranks.request("b", DST_IDS)
        assert hit == 32 and [ld.block_ids for ld in plan.loads] == [DST_IDS[:8]]
        for r in range(WORLD):
            assert ranks.workers[r].take_errors() == set()
            loaded, stored = ranks.blocks(r, DST_IDS[:8]), ranks.blocks(r, SRC_IDS[:8])
            assert all(torch.equal(a, b) for a, b in zip(loaded, stored))
        assert not torch.equal(ranks.blocks(0, SRC_IDS)[0], ranks.blocks(1, SRC_IDS)[0])  # the shards differ
        models = [w.cache.model for w in ranks.workers]
        assert models[0].endswith("|tp0/2") and models[1].endswith("|tp1/2")
        for r in range(WORLD):  # each rank's blocks in a disk directory of its own
            ranks.workers[r].cache.flush()  # the write-through copies
            assert len(list((tmp_path / "disk" / f"r{r}of2").rglob("*.blk"))) == 4
    finally:
        ranks.close()


def test_ranks_sharing_a_redis_tier_keep_their_shards_apart(tmp_path: Path, redis_url: str) -> None:
    """One Redis for both ranks, as configured: the same tokens, two shards, two keys each."""
    cfg = load_config({"block_size": CC, "tiers": [{"kind": "redis", "capacity": "32MiB", "url": redis_url}]})
    ranks = Ranks(tmp_path, full_kv(0), cfg=cfg)
    try:
        ranks.request("a", SRC_IDS)
        for w in ranks.workers:
            w.cache.flush()
        hit, _ = ranks.request("b", DST_IDS)
        assert hit == 32
        for r in range(WORLD):
            assert ranks.workers[r].take_errors() == set()
            loaded, stored = ranks.blocks(r, DST_IDS[:8]), ranks.blocks(r, SRC_IDS[:8])
            assert all(torch.equal(a, b) for a, b in zip(loaded, stored))
    finally:
        ranks.close()


def test_one_ranks_failed_write_is_a_miss_for_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ranks = Ranks(tmp_path, full_kv(0))
    try:

        def disk_full(*a: Any, **k: Any) -> Any:
            raise OSError("no space left on device")

        monkeypatch.setattr(ranks.workers[1].cache, "store", disk_full)
        ranks.request("a", SRC_IDS)
        assert ranks.workers[1].c["store_errors"] == 1
        rank0 = ranks.lookup.clients[0]
        assert rank0.lookup("probe", "vllm", TOKENS[:32]) == 32  # rank 0 holds all four blocks
        before = ranks.blocks(0, DST_IDS)
        hit, plan = ranks.request("b", DST_IDS)
        assert hit == 0 and plan.loads == [] and "b" in plan.drop
        after = ranks.blocks(0, DST_IDS)
        assert all(torch.equal(a, b) for a, b in zip(before, after))  # rank 0 loaded nothing
        assert ranks.workers[0].c["loaded_blocks"] == 0 and len(ranks.workers[0].stash) <= 1  # "probe"
    finally:
        ranks.close()


def test_a_rank_short_of_blocks_limits_the_hit_to_what_all_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ranks = Ranks(tmp_path, full_kv(0))
    try:
        w1 = ranks.workers[1]
        store = w1.cache.store

        def second_chunk_fails(tokens: Any, payloads: Any, ns: Any = "default", first_block: int = 0) -> Any:
            if first_block >= 2:
                raise OSError("no space left on device")
            return store(tokens, payloads, ns, first_block)

        monkeypatch.setattr(w1.cache, "store", second_chunk_fails)
        ranks.request("a", SRC_IDS, chunk=16)  # two chunks: blocks 0-1, then 2-3 (fails on rank 1)
        assert w1.c["store_errors"] == 1 and ranks.workers[0].c["store_errors"] == 0
        hit, plan = ranks.request("b", DST_IDS)
        assert hit == 16 and [ld.block_ids for ld in plan.loads] == [DST_IDS[:4]]
        assert ranks.lookup.partial == 1  # rank 1 held less than rank 0
        for r in range(WORLD):
            assert ranks.workers[r].take_errors() == set()
            loaded, stored = ranks.blocks(r, DST_IDS[:4]), ranks.blocks(r, SRC_IDS[:4])
            assert all(torch.equal(a, b) for a, b in zip(loaded, stored))
        # Rank 0 loaded from the Match its lookup pinned (longer than the common prefix): no second lookup.
        assert ranks.workers[0].cache.stats()["lookups"] == 2
    finally:
        ranks.close()


def test_one_worker_keeps_its_names_and_other_worlds_are_checked(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    one = open_worker(cfg, FP, shard(full_kv(0), 0, 1), NB, VB, tmp_path / "one.sock", tmp_path / "st.json")
    try:  # the namespace, socket, stats file and disk directory of one worker, as before ranks
        assert one.layout is not None and one.cache.model == f"{cfg.model}|{FP}|{one.layout.fingerprint()}"
        assert one.server.path == tmp_path / "one.sock" and one.stats_path == tmp_path / "st.json"
        assert (tmp_path / "disk" / "blocks").is_dir() and not list((tmp_path / "disk").glob("r*of*"))
    finally:
        one.close()
    assert rank_model("m|fp", 0, 1) == "m|fp" and rank_config(cfg, 0, 1) is cfg
    assert rank_path(tmp_path / "s.sock", 0, 1) == tmp_path / "s.sock"
    assert rank_path(tmp_path / "s.sock", 1, 2) == tmp_path / "s-r1of2.sock"
    assert rank_model("m", 1, 2) != rank_model("m", 1, 4) != rank_model("m", 0, 4)
    two = rank_config(cfg, 1, 2)
    assert two.tiers[1].options["path"] == str(tmp_path / "disk" / "r1of2") and two.tiers[0] == cfg.tiers[0]
    with pytest.raises(ConfigError, match="rank 2 is not in a world of 2"):
        rank_model("m", 2, 2)
    assert check_world(4, 1) == 4 and check_world(2, 2) == 4


class RankProcess:
    """A rank's worker side in its own process (tp_rank.py), with WorkerSide's load/save/flush."""

    def __init__(self, tmp: Path, rank: int, seed: int) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC / "src"), os.environ.get("PYTHONPATH", "")])}
        script = Path(__file__).with_name("tp_rank.py")
        args = [sys.executable, str(script), str(tmp), str(rank), str(WORLD), str(seed)]
        self.p = subprocess.Popen(args, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self._line() == "ready"
        self.blocks: list[str] = []

    def _line(self) -> str:
        assert self.p.stdout is not None
        return self.p.stdout.readline().strip()

    def _call(self, cmd: dict[str, Any]) -> Any:
        assert self.p.stdin is not None
        self.p.stdin.write(json.dumps(cmd) + "\n")
        self.p.stdin.flush()
        return json.loads(self._line())

    def save(self, specs: list[SaveSpec]) -> None:
        self._call({"op": "save", "specs": [vars(s) for s in specs]})

    def load(self, specs: list[LoadSpec], drop: list[str]) -> None:
        reply = self._call({"op": "load", "specs": [vars(s) for s in specs], "drop": drop})
        assert reply["errors"] == []
        self.blocks += reply["blocks"]

    def flush(self) -> None:
        return  # "save" answers once the saver stored the blocks

    def stop(self, kill: bool) -> None:
        if kill:
            self.p.send_signal(signal.SIGKILL)
        else:
            self._call({"op": "close"})
        self.p.wait(60)


def test_new_rank_processes_reuse_every_ranks_shard(tmp_path: Path) -> None:
    """Engine 1: two rank processes store the prompt; rank 0 closes, rank 1 is SIGKILLed 1 s after
    its store (write-through). Engine 2: two new processes over the same disk tier load it."""
    first = Ranks(tmp_path, None)
    first.workers = [RankProcess(tmp_path, r, seed=0) for r in range(WORLD)]
    try:
        assert first.request("a", SRC_IDS, chunk=16)[0] == 0
        time.sleep(1.0)
    finally:
        first.lookup.close()
        for r, w in enumerate(first.workers):
            w.stop(kill=r == 1)
    again = Ranks(tmp_path, None)
    again.workers = [RankProcess(tmp_path, r, seed=1) for r in range(WORLD)]  # other bytes in vLLM's blocks
    try:
        hit, plan = again.request("b", DST_IDS)
        assert hit == 32 and [ld.block_ids for ld in plan.loads] == [DST_IDS[:8]]
    finally:
        again.lookup.close()
        for w in again.workers:
            w.stop(kill=False)
    kv = full_kv(0)
    want = [digest(shard(kv, r, WORLD), SRC_IDS[:8]) for r in range(WORLD)]
    assert [w.blocks for w in again.workers] == want and want[0] != want[1]
