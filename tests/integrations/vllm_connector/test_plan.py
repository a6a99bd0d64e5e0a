"""The scheduler side's planning: what to look up, load and save, from vLLM-shaped inputs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from ctxcache.errors import ConfigError
from ctxcache.integrations.vllm.plan import Planner, block_ratio, tenant_for


@dataclass
class Req:
    request_id: str
    all_token_ids: list[int]
    prompt_token_ids: list[int] = field(default_factory=list)
    cache_salt: str | None = None
    lora_request: Any = None


class FakeLookup:
    def __init__(self, hit: int) -> None:
        self.hit, self.calls = hit, []  # type: ignore[var-annotated]

    def __call__(self, req_id: str, tenant: str, tokens: list[int]) -> int:
        self.calls.append((req_id, tenant, len(tokens)))
        return min(self.hit, len(tokens))


def test_block_ratio_accepts_multiples_and_refuses_the_rest() -> None:
    assert block_ratio(128, 128) == 1
    assert block_ratio(512, 128) == 4
    with pytest.raises(ConfigError, match="not a multiple of vLLM's block_size 128"):
        block_ratio(64, 128)
    with pytest.raises(ConfigError, match="not a multiple"):
        block_ratio(192, 128)
    with pytest.raises(ConfigError):
        block_ratio(0, 16)


def test_tenant_separates_salts_and_loras() -> None:
    names = {tenant_for(None), tenant_for("a"), tenant_for("b"), tenant_for("a", "lora1"), tenant_for(None, "lora1")}
    assert len(names) == 5


def test_lookup_never_covers_the_last_token_and_load_skips_vllm_hit() -> None:
    look = FakeLookup(hit=10_000)
    p = Planner(8, 4, look)  # a ctxcache block is 2 vLLM blocks
    req = Req("r", list(range(33)))
    # 33 tokens: the last must be computed, so at most 32 -> 4 ctxcache blocks; vLLM holds 1 vLLM block.
    assert p.matched(req, 4) == 28
    assert look.calls == [("r", "vllm", 32)]
    p.allocated(req, 28)
    plan = p.step([("r", [10, 11, 12, 13, 14, 15, 16, 17, 18], 32)], [], {"r": 1})
    (load,) = plan.loads
    # Loading starts inside ctxcache block 0, at vLLM block 1, and fills vLLM blocks 1..7.
    assert load.first_vblock == 1 and load.block_ids == [11, 12, 13, 14, 15, 16, 17]
    assert load.tokens == list(range(32))
    assert plan.saves == []  # everything it holds came from the cache


def test_no_load_when_vllm_holds_more_and_the_stash_is_dropped() -> None:
    p = Planner(4, 4, FakeLookup(hit=8))
    req = Req("r", list(range(20)))
    assert p.matched(req, 12) == 0
    p.allocated(req, 0)
    plan = p.step([("r", [1, 2, 3, 4, 5], 12)], [], {"r": 8})
    assert plan.loads == [] and plan.drop == ["r"]
    # Blocks 2..4 were vLLM's own hits or computed now: ctxcache stores them (it has 0..1).
    (save,) = plan.saves
    assert save.first_block == 2 and save.block_ids == [3, 4, 5] and save.tokens == list(range(20))


def test_chunked_prefill_is_saved_completely_and_in_order() -> None:
    p = Planner(8, 4, FakeLookup(hit=0))
    req = Req("r", list(range(50)))
    assert p.matched(req, 0) == 0
    p.allocated(req, 0)
    saves = []
    plan = p.step([("r", [0, 1, 2, 3], 0)], [], {"r": 16})  # chunk 1: tokens 0..15
    saves += plan.saves
    plan = p.step([], [("r", [4, 5, 6, 7], False, 16)], {"r": 16})  # chunk 2: 16..31
    saves += plan.saves
    plan = p.step([], [("r", [8, 9, 10, 11, 12], False, 32)], {"r": 18})  # chunk 3: 32..49
    saves += plan.saves
    assert [(s.first_block, len(s.block_ids)) for s in saves] == [(0, 4), (2, 4), (4, 4)]
    assert [b for s in saves for b in s.block_ids] == list(range(12))
    assert len(saves[-1].tokens) == 48


def test_decode_blocks_are_saved_unless_disabled() -> None:
    for save_decode, expected in ((True, 2), (False, 1)):
        p = Planner(4, 4, FakeLookup(hit=0), save_decode=save_decode)
        req = Req("r", list(range(6)), prompt_token_ids=list(range(6)))
        p.matched(req, 0)
        p.allocated(req, 0)
        p.step([("r", [0, 1], 0)], [], {"r": 6})
        req.all_token_ids += [100, 101, 102]  # generated tokens
        plan = p.step([], [("r", [2], False, 6)], {"r": 2})
        assert sum(len(s.block_ids) for s in plan.saves) == (expected - 1)


def test_failed_load_is_saved_again_and_finished_requests_are_dropped() -> None:
    p = Planner(4, 4, FakeLookup(hit=12))
    req = Req("r", list(range(14)))
    assert p.matched(req, 0) == 12
    p.allocated(req, 12)
    plan = p.step([("r", [7, 8, 9, 10], 12)], [], {"r": 2})
    assert plan.loads[0].block_ids == [7, 8, 9]
    p.load_failed({8})  # the second block did not load: vLLM recomputes from there
    plan = p.step([], [("r", None, False, 4)], {"r": 10})
    (save,) = plan.saves
    assert save.first_block == 1 and save.block_ids == [8, 9]
    p.finished("r")
    assert p.step([], [], {}).drop == ["r"] and "r" not in p.reqs


def test_resumed_request_replaces_its_block_ids() -> None:
    p = Planner(4, 4, FakeLookup(hit=0))
    req = Req("r", list(range(9)))
    p.matched(req, 0)
    p.allocated(req, 0)
    p.step([("r", [1, 2, 3], 0)], [], {"r": 4})
    plan = p.step([], [("r", [20, 21, 22], True, 4)], {"r": 5})
    assert plan.saves[0].block_ids == [21]
