"""Trace readers. Records are streamed, never loaded whole."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import TraceError

MOONCAKE_BLOCK = 512


def default_trace(name: str = "mooncake_conversation_trace.jsonl") -> Path:
    """Traces live in ../shared/traces next to the repo; CTXCACHE_TRACES overrides."""
    env = os.environ.get("CTXCACHE_TRACES")
    if env:
        return Path(env) / name
    for base in (Path.cwd(), Path(__file__).resolve().parents[3]):  # src/ctxcache/sim -> the repo
        cand = base.parent / "shared" / "traces" / name
        if cand.exists():
            return cand
    return Path.cwd().parent / "shared" / "traces" / name


@dataclass(frozen=True)
class Request:
    """One request of a trace. ``blocks`` are ids of its prefix blocks (equal id = reusable KV)."""

    time: float  # seconds
    input_length: int
    output_length: int
    blocks: tuple[int, ...]
    tenant: str = "default"


def read_mooncake(path: str | Path, limit: int | None = None) -> Iterator[Request]:
    """Mooncake JSONL: ``timestamp`` (ms), ``input_length``, ``output_length``, ``hash_ids``."""
    p = Path(path)
    if not p.is_file():
        raise TraceError(f"trace file not found: {p}")
    with p.open("r", encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if limit is not None and lineno > limit:
                return
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                req = Request(
                    time=float(rec["timestamp"]) / 1000.0,
                    input_length=int(rec["input_length"]),
                    output_length=int(rec["output_length"]),
                    blocks=tuple(int(h) for h in rec["hash_ids"]),
                )
            except KeyError as exc:
                raise TraceError(f"{p}:{lineno}: Mooncake record lacks field {exc}") from None
            except (ValueError, TypeError) as exc:
                raise TraceError(f"{p}:{lineno}: malformed Mooncake record: {exc}") from None
            if req.input_length < 0 or any(b < 0 for b in req.blocks):
                raise TraceError(f"{p}:{lineno}: negative length or block id")
            yield req


def count_lines(path: str | Path) -> int:
    with Path(path).open("rb") as f:
        return sum(1 for _ in f)
