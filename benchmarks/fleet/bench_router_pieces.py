"""The router's piece cache (router/pieces.py) on multi-turn chat: CPU per request of computing a
request's block keys (parse, template, tokenize, hash: RequestKeys.compute) with the cache and
with the whole prompt tokenized, the real Gemma tokenizer and chat template, in one process.

    python benchmarks/fleet/bench_router_pieces.py [--chats 60] [--turns 4] [--turn-tokens 1000]

Each chat: a ~1k-token system prompt, then ``--turns`` user turns of ~``--turn-tokens`` tokens
(fresh words) with a short assistant reply between them; request t sends the whole conversation
so far, as a client does. Both arms compute every request of every chat, the arm that goes first
alternating per chat; the cache starts empty and is bounded as `ctxcache route` bounds it. The
keys are checked equal. Prints one JSON line; writes benchmarks/results/router_pieces.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def words(rng: np.random.Generator, n_tokens: int) -> str:
    return " ".join(f"w{x}" for x in rng.integers(0, 100_000, n_tokens // 6))  # " w12345": ~6 tokens


def chat(i: int, turns: int, turn_tokens: int) -> list[dict[str, Any]]:
    """The requests of one chat: the conversation after each user turn."""
    rng = np.random.default_rng(i + 7000)
    msgs: list[dict[str, str]] = [{"role": "system", "content": words(rng, 1000)}]
    out = []
    for t in range(turns):
        msgs.append({"role": "user", "content": words(rng, turn_tokens)})
        out.append({"model": "m", "messages": list(msgs)})
        msgs.append({"role": "assistant", "content": f"reply {t}: " + words(rng, 120)})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chats", type=int, default=60)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--turn-tokens", type=int, default=1000)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "router_pieces.json")
    args = ap.parse_args()
    from ctxcache.integrations.chat import text_encoder
    from ctxcache.router.cli import build_router
    from ctxcache.router.pieces import PieceCache

    keys = build_router(["http://127.0.0.1:9"], None, None, None, None).keys
    assert keys is not None and isinstance(keys._encode, PieceCache), "the piece cache is not on for this model"
    arms = {"pieces": keys._encode, "whole": text_encoder(keys.tokenizer)}
    cpu = {a: [[] for _ in range(args.turns)] for a in arms}  # per arm, per turn: seconds per request
    tokens = [0] * args.turns
    load0 = os.getloadavg()[0]
    for i in range(-2, args.chats):  # 2 warm-up chats
        reqs = chat(i, args.turns, args.turn_tokens)
        order = list(arms) if i % 2 == 0 else list(arms)[::-1]
        got: dict[str, list[Any]] = {}
        for arm in order:
            keys._encode = arms[arm]
            got[arm] = []
            for t, body in enumerate(reqs):
                c0 = time.process_time()
                k = keys.compute("openai", body, {})
                dt = time.process_time() - c0
                assert k is not None
                got[arm].append(k.keys)
                if i >= 0:
                    cpu[arm][t].append(dt)
                    tokens[t] = k.tokens
        assert got["pieces"] == got["whole"], "the piece cache changed a request's keys"
    keys._encode = arms["pieces"]

    def ms(xs: list[float]) -> float:
        return round(float(np.mean(xs)) * 1e3, 3)

    per_turn = [{"turn": t + 1, "prompt_tokens": tokens[t], "pieces_ms": ms(cpu["pieces"][t]),
                 "whole_ms": ms(cpu["whole"][t])} for t in range(args.turns)]  # fmt: skip
    out = {
        "bench": "router_pieces",
        "chats": args.chats,
        "per_turn_cpu_ms": per_turn,
        "chat_cpu_ms": {a: round(sum(ms(cpu[a][t]) for t in range(args.turns)), 3) for a in arms},
        "loadavg_start": round(load0, 2),
        "loadavg": round(os.getloadavg()[0], 2),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out))
    sys.exit(0)


if __name__ == "__main__":
    main()
