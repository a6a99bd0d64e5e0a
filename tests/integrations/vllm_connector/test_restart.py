"""The worker side killed without a chance to close (SIGKILL, or vLLM's kill right after SIGTERM):
what it stored a second earlier is on the disk tier for the next engine. Real processes, fake KV."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from ctxcache import ContextCache

SRC = Path(__file__).resolve().parents[3] / "src"
BLOCK, BLOCKS = 8, 6

CHILD = textwrap.dedent(
    """
    import sys, time, torch
    from pathlib import Path
    from ctxcache import ContextCache
    from ctxcache.integrations.vllm.plan import SaveSpec
    from ctxcache.integrations.vllm.worker import WorkerSide

    tmp = Path(sys.argv[1])
    cache = ContextCache.from_config({"block_size": 8, "tiers": [
        {"kind": "memory", "capacity": "64MiB"},
        {"kind": "disk", "capacity": "64MiB", "path": str(tmp / "disk")}]})
    w = WorkerSide(cache, 4, tmp / "w.sock")
    w.register({f"l{i}": torch.randn(16, 2, 4, 6) for i in range(3)}, 16)
    w.save([SaveSpec("a", "vllm", list(range(48)), 0, list(range(12)))])
    w.flush()  # the saver stored them (in RAM); nothing is closed or spilled
    print("stored", flush=True)
    time.sleep(600)
    """
)


def _disk_cache(tmp: Path) -> ContextCache:
    return ContextCache.from_config(
        {"block_size": BLOCK, "tiers": [{"kind": "disk", "capacity": "64MiB", "path": str(tmp / "disk")}]}
    )


def test_stores_reach_disk_within_a_second_without_close(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path)], env=env, stdout=subprocess.PIPE, text=True
    )  # fmt: skip
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "stored"
        time.sleep(1.0)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    with _disk_cache(tmp_path) as cache:
        match = cache.lookup(list(range(BLOCK * BLOCKS + 1)), "vllm")
        assert match.n_blocks == BLOCKS  # all six, stored by the killed process's write-through
        cache.release(match)
