"""Write-through as an outsider sees it: real `ctxcache serve` processes (the real model) with the
RAM + disk and RAM + Redis layouts docs/configuration.md shows, killed with SIGKILL (no clean
close: nothing is spilled) or sharing one redis-server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from ..conftest import free_port
from ..integrations.model_fixture import text

SRC = Path(__file__).resolve().parents[2] / "src"
PROMPT = "Summarize the town's news. " + text(60)  # ~1.1k tokens
BLOCK = 32


class Worker:
    """One `ctxcache serve --config` process on loopback."""

    def __init__(self, home: Path, model: Path, config: Path, log: Path) -> None:
        self.port = free_port()
        env = {**os.environ, "CTXCACHE_HOME": str(home), "PYTHONPATH": str(SRC), "OMP_WAIT_POLICY": "PASSIVE"}
        cmd = [sys.executable, "-c", "from ctxcache.cli import main; main()", "serve", "--model", str(model)]
        self.logfile, self.log = log, log.open("ab")
        self.proc = subprocess.Popen(
            [*cmd, "--config", str(config), "--port", str(self.port)], env=env, stdout=self.log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.url = f"http://127.0.0.1:{self.port}"

    def ready(self, timeout: float = 300) -> Worker:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.logfile.read_text()[-3000:]
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.kill()
        pytest.fail(f"the server did not start: {self.logfile.read_text()[-3000:]}")

    def ask(self) -> tuple[int, int]:
        """(prompt tokens, cached tokens) of one chat request."""
        model = httpx.get(f"{self.url}/v1/models").json()["data"][0]["id"]
        body = {"model": model, "max_tokens": 1, "temperature": 0, "messages": [{"role": "user", "content": PROMPT}]}
        u = httpx.post(f"{self.url}/v1/chat/completions", json=body, timeout=300).json()["usage"]
        return u["prompt_tokens"], u["prompt_tokens_details"]["cached_tokens"]

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        self.log.close()


def whole_blocks(prompt_tokens: int) -> int:
    """Tokens in the prompt's whole blocks a lookup can serve (its last token is always computed)."""
    return (prompt_tokens - 1) // BLOCK * BLOCK


@pytest.fixture(scope="module")
def model_dir() -> Path:
    from ctxcache.integrations.model_store import resolve_model

    return resolve_model(None, quiet=True)


def config(path: Path, slow: str) -> Path:
    """The server config: a RAM tier large enough that nothing is demoted (whatever reaches the
    slow tier was written through), over ``slow`` (a [[cache.tiers]] table's body)."""
    path.write_text(
        f'[cache]\nblock_size = {BLOCK}\n\n[[cache.tiers]]\nkind = "memory"\ncapacity = "512MiB"\n\n'
        f"[[cache.tiers]]\n{slow}\n"
    )
    return path


def test_a_sigkilled_server_restarts_with_the_blocks_it_stored_a_second_before(tmp_path, model_dir):
    disk = tmp_path / "kv"
    cfg = config(tmp_path / "serve.toml", f'kind = "disk"\npath = "{disk}"\ncapacity = "4GiB"')
    log = tmp_path / "serve.log"
    first = Worker(tmp_path, model_dir, cfg, log).ready()
    prompt_tokens, cached = first.ask()
    assert prompt_tokens > 1000 and cached == 0
    time.sleep(1.5)  # the write-through copies' window
    first.kill()  # no close, no spill: only what was written through survives
    assert any(disk.rglob("*.blk")), "no block reached the disk before the SIGKILL"
    second = Worker(tmp_path, model_dir, cfg, log).ready()
    _, cached = second.ask()
    assert cached >= whole_blocks(prompt_tokens), (cached, prompt_tokens)
    second.kill()


def test_a_second_worker_on_the_same_redis_reuses_the_first_ones_prompt(tmp_path, model_dir, redis_server):
    redis = f'kind = "redis"\nurl = "{redis_server.url}"\nprefix = "wt{free_port()}:"\ncapacity = "4GiB"\n'
    redis += "bloom = false  # the KV-event stream makes the filter case work (issue 26, item 3)\n"
    # A lookup reads the prompt's 36 blocks of 1.2 MB in one pipeline: 43 MB outlast the 50 ms
    # default on a busy 2-core host (docs/storage.md: large values need a larger timeout).
    redis += 'timeout = "2s"'

    cfg = config(tmp_path / "serve.toml", redis)
    a = Worker(tmp_path / "a", model_dir, cfg, tmp_path / "a.log")
    b = Worker(tmp_path / "b", model_dir, cfg, tmp_path / "b.log")
    try:
        a.ready(), b.ready()
        prompt_tokens, cached = a.ask()
        assert prompt_tokens > 1000 and cached == 0
        time.sleep(1.0)  # A's answer came back a second ago
        _, cached = b.ask()
        assert cached >= whole_blocks(prompt_tokens), (cached, prompt_tokens)
    finally:
        a.kill()
        b.kill()
