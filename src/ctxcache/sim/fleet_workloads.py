"""The fleet simulator's workloads: requests as 512-token block ids, with arrival times at a QPS.

* ``shared_prefix``: llm-d's shared-prefix benchmark: G groups, each a long system prompt shared
  by its requests, each request a question of its own; arrivals Poisson, groups drawn uniformly.
* ``chat``: multi-round chat: sessions over a few shared system prompts, each round the whole
  history so far (earlier questions and answers) plus a new question; a round comes the time to
  stream the previous answer plus a think time after it (open loop: a round's time does not wait
  for the previous answer itself, so every arm sees the same arrivals).
* ``mooncake``: a Mooncake trace (``hash_ids`` are 512-token blocks), timestamps scaled to the
  QPS asked for (the trace's burstiness kept).

Block ids equal where the KV is the same; a request's last block may be partial (it is never a hit:
only full blocks are cached). Everything is drawn from a seeded ``random.Random``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from .traces import MOONCAKE_BLOCK, read_mooncake

BLOCK = MOONCAKE_BLOCK  # tokens per block id


@dataclass(frozen=True)
class FleetRequest:
    time: float
    blocks: tuple[int, ...]  # one id per 512 tokens of the prompt (the last may be partial)
    input_length: int
    output_length: int
    session: str | None = None


def _blocks(n_tokens: int) -> int:
    return -(-n_tokens // BLOCK)


def _poisson(rng: random.Random, n: int, qps: float) -> list[float]:
    t, out = 0.0, []
    for _ in range(n):
        t += rng.expovariate(qps)
        out.append(t)
    return out


def shared_prefix(
    n: int, qps: float, *, groups: int = 150, system_tokens: int = 6144, question_tokens: int = 1200,
    output_tokens: int = 1000, seed: int = 0,
) -> list[FleetRequest]:  # fmt: skip
    """llm-d's shape (150 groups, 6k-token system prompts, 1.2k-token questions, 1k output)."""
    rng = random.Random(seed)
    shared = system_tokens // BLOCK  # the blocks wholly inside the system prompt
    length = system_tokens + question_tokens
    nxt = groups * shared
    out = []
    for i, t in enumerate(_poisson(rng, n, qps)):
        g = rng.randrange(groups)
        own = _blocks(length) - shared
        blocks = tuple(range(g * shared, (g + 1) * shared)) + tuple(range(nxt, nxt + own))
        nxt += own
        out.append(FleetRequest(t, blocks, length, output_tokens, f"g{g}-{i}"))
    return out


def chat(
    n: int, qps: float, *, systems: int = 8, system_tokens: int = 2048, rounds: int = 6,
    question_tokens: int = 300, answer_tokens: int = 400, think_s: float = 5.0, read_s_per_token: float = 0.024,
    seed: int = 0,
) -> list[FleetRequest]:  # fmt: skip
    """Sessions of ``rounds`` turns; round k's prompt is the session's history: system prompt,
    then k (question, answer) pairs, then the new question; sessions start at qps / rounds. The
    next round comes after the answer has streamed (``read_s_per_token`` a token, the decode
    rate) and the user has thought (exponential, mean ``think_s``)."""
    rng = random.Random(seed)
    sys_blocks = system_tokens // BLOCK
    nxt = systems * sys_blocks
    out: list[FleetRequest] = []
    n_sessions = -(-n // rounds)
    for s, start in enumerate(_poisson(rng, n_sessions, qps / rounds)):
        sp = rng.randrange(systems)
        stream = list(range(sp * sys_blocks, (sp + 1) * sys_blocks))  # the session's token stream, by block
        length, t = sys_blocks * BLOCK, start
        for _ in range(rounds):
            q = max(1, int(rng.gauss(question_tokens, question_tokens / 4)))
            a = max(1, int(rng.gauss(answer_tokens, answer_tokens / 4)))
            length += q
            need = _blocks(length) - len(stream)
            stream += range(nxt, nxt + need)
            nxt += need
            out.append(FleetRequest(t, tuple(stream[: _blocks(length)]), length, a, f"s{s}"))
            length += a  # the answer joins the history the next round sends
            t += a * read_s_per_token + rng.expovariate(1.0 / think_s)
    out.sort(key=lambda r: r.time)
    return out[:n]


def mooncake(path: str | Path, n: int, qps: float) -> list[FleetRequest]:
    """The first ``n`` requests of a Mooncake trace, its timestamps scaled to ``qps`` on average."""
    reqs = list(read_mooncake(path, n))
    if not reqs:
        return []
    t0 = reqs[0].time
    span = reqs[-1].time - t0
    scale = (len(reqs) / qps) / span if span > 0 else 0.0
    return [
        FleetRequest((r.time - t0) * scale, r.blocks, max(r.input_length, 1), max(r.output_length, 1)) for r in reqs
    ]


SHAPES = ("shared-prefix", "chat", "mooncake-conversation", "mooncake-synthetic")


def make_workload(
    shape: str, n: int, qps: float, *, workers: int = 8, seed: int = 0, traces: Path | None = None
) -> list[FleetRequest]:
    """``n`` requests of ``shape`` at ``qps``. The synthetic shapes scale with the fleet, so each
    worker's share stays the same at 4, 8 or 32 workers: llm-d's 150 groups per 8 workers, one
    chat system prompt per worker. A trace is what it is."""
    from .traces import default_trace

    if shape == "shared-prefix":
        return shared_prefix(n, qps, groups=max(1, round(150 * workers / 8)), seed=seed)
    if shape == "chat":
        return chat(n, qps, systems=workers, seed=seed)
    if shape.startswith("mooncake-"):
        name = f"mooncake_{shape.removeprefix('mooncake-')}_trace.jsonl"
        return mooncake(traces / name if traces is not None else default_trace(name), n, qps)
    raise ValueError(f"unknown shape {shape!r}; known: {', '.join(SHAPES)}")


def warmed(reqs: Sequence[FleetRequest], fraction: float, slowdown: float) -> list[FleetRequest]:
    """The first ``fraction`` of ``reqs`` arriving ``slowdown`` times slower, the rest after them at
    their own rate: caches warm up as in a ladder that climbs from low load on the same
    servers, not in a storm of cold prefixes at full rate."""
    k = int(len(reqs) * fraction)
    if k == 0 or slowdown == 1.0:
        return list(reqs)
    t0, tk = reqs[0].time, reqs[k - 1].time
    shift = (tk - t0) * (slowdown - 1.0)
    return [
        replace(r, time=t0 + (r.time - t0) * slowdown) if i < k else replace(r, time=r.time + shift)
        for i, r in enumerate(reqs)
    ]


def total_tokens(reqs: Sequence[FleetRequest]) -> int:
    return sum(r.input_length for r in reqs)
