"""vLLM's real OpenAI server as the e2e tests start and stop it: a process group per server, the
health wait, /v1/completions with token prompts, and the stop signals a deployment sends."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

SRC = Path(__file__).resolve().parents[3] / "src"


def model_dir() -> str:
    env = os.environ.get("CTXCACHE_VLLM_MODEL")
    if env:
        return env
    home = Path(os.environ.get("CTXCACHE_HOME", Path.home() / ".cache" / "ctxcache"))
    found = sorted(p.parent for p in (home / "models").glob("*/ctxcache-model.json"))
    if not found:
        pytest.fail("no prepared model: set CTXCACHE_VLLM_MODEL or run `make test-vllm` (it prepares it)")
    return str(found[0])


def tokens(seed: int, n: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(1000, 20000) for _ in range(n)]


def wait_for_memory(gib: float = 6.0, timeout: float = 900.0) -> None:
    """The machine is shared: start an engine (4.4-5.7 GB) only when it fits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open("/proc/meminfo") as f:
            avail = next(int(line.split()[1]) for line in f if line.startswith("MemAvailable")) / 2**20
        if avail >= gib:
            return
        time.sleep(5)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """One server, in its own session (process group): vLLM's engine core and worker are its
    children, so a group signal reaches all of them, as systemd's and Docker's kills do."""

    def __init__(self, argv: list[str], port: int, log: Path, env: dict[str, str]) -> None:
        self.port, self.log = port, log
        env = {**env, "PYTHONPATH": os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")])}
        wait_for_memory()
        with open(log, "w") as f:
            self.proc = subprocess.Popen(argv, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)

    def tail(self, n: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-n:]

    def wait_ready(self, timeout: float = 1500.0) -> float:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                pytest.fail(f"server exited with {self.proc.returncode} while starting:\n{self.tail()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5) as r:
                    if r.status == 200:
                        return time.monotonic() - t0
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(2)
        self.kill_group()
        pytest.fail(f"server not ready after {timeout:.0f} s:\n{self.tail()}")

    def complete(self, prompt: list[int], max_tokens: int = 12) -> dict[str, Any]:
        """Greedy completion of a token prompt: output token ids, cached prompt tokens, wall time."""
        body = {"model": model_dir(), "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0,
                "return_token_ids": True}  # fmt: skip
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/v1/completions", json.dumps(body).encode(),
            {"Content-Type": "application/json"},
        )  # fmt: skip
        t0 = time.monotonic()
        with urllib.request.urlopen(req, timeout=900) as r:
            out = json.loads(r.read())
        details = out["usage"].get("prompt_tokens_details") or {}  # None without --enable-prompt-tokens-details
        return {"output": out["choices"][0]["token_ids"], "cached": details.get("cached_tokens"),
                "prompt_tokens": out["usage"]["prompt_tokens"], "wall_s": time.monotonic() - t0}  # fmt: skip

    def stop(self, sig: signal.Signals, group: bool = False, timeout: float = 120.0) -> float:
        """Send ``sig`` (to the server, or to its whole group) and wait until every process of the
        group is gone. Returns the seconds that took."""
        t0 = time.monotonic()
        if group:
            os.killpg(self.proc.pid, sig)
        else:
            self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill_group()
            pytest.fail(f"server still running {timeout:.0f} s after {sig.name}:\n{self.tail()}")
        while time.monotonic() - t0 < timeout and _group_alive(self.proc.pid):
            time.sleep(0.2)
        if _group_alive(self.proc.pid):
            self.kill_group()
            pytest.fail(f"vLLM's engine or worker outlived the server by {timeout:.0f} s after {sig.name}")
        return time.monotonic() - t0

    def kill_group(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True
