"""A real `ctxcache serve` process (the real model, the embedded RAM + disk default) stopped the way
systemd, Docker and Kubernetes stop it (SIGTERM) and the way a terminal does (SIGINT): each stop
saves the cache, and the restarted server reports the prompt's blocks as cached."""

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
PROMPT = "Summarize the town's news. " + text(70)  # ~1.3k tokens


class Served:
    def __init__(self, home: Path, model: Path, log: Path) -> None:
        self.port = free_port()
        env = {**os.environ, "CTXCACHE_HOME": str(home), "PYTHONPATH": str(SRC), "OMP_WAIT_POLICY": "PASSIVE"}
        cmd = [sys.executable, "-c", "from ctxcache.cli import main; main()", "serve", "--model", str(model)]
        self.log = log.open("ab")
        self.proc = subprocess.Popen(
            [*cmd, "--port", str(self.port)], env=env, stdout=self.log, stderr=subprocess.STDOUT
        )
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, log.read_text()[-3000:]
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.proc.kill()
        pytest.fail(f"the server did not start: {log.read_text()[-3000:]}")

    def cached_tokens(self) -> tuple[int, int]:
        model = httpx.get(f"{self.url}/v1/models").json()["data"][0]["id"]
        body = {"model": model, "max_tokens": 1, "temperature": 0, "messages": [{"role": "user", "content": PROMPT}]}
        u = httpx.post(f"{self.url}/v1/chat/completions", json=body, timeout=300).json()["usage"]
        return u["prompt_tokens"], u["prompt_tokens_details"]["cached_tokens"]

    def stop(self, sig: int) -> int:
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=120)
        finally:
            self.log.close()


@pytest.fixture(scope="module")
def model_dir() -> Path:
    from ctxcache.integrations.model_store import resolve_model

    return resolve_model(None, quiet=True)


def test_sigterm_and_sigint_save_the_cache_for_the_restarted_server(tmp_path, model_dir):
    log = tmp_path / "serve.log"
    first = Served(tmp_path, model_dir, log)
    prompt_tokens, cached = first.cached_tokens()
    assert prompt_tokens > 1200 and cached == 0
    assert first.stop(signal.SIGTERM) == 0, log.read_text()[-3000:]
    blocks = list((tmp_path / "kv").rglob("*"))
    assert any(p.is_file() for p in blocks), "SIGTERM wrote no block files"

    second = Served(tmp_path, model_dir, log)
    _, cached = second.cached_tokens()
    assert cached >= prompt_tokens - 64, (cached, prompt_tokens)  # every full block but the last partial one
    second.stop(signal.SIGINT)

    third = Served(tmp_path, model_dir, log)
    _, cached = third.cached_tokens()
    assert cached >= prompt_tokens - 64
    third.stop(signal.SIGTERM)
