"""Two real `ctxcache serve` workers (the real model) behind a real `ctxcache route` process, driven
by the official openai and anthropic clients: prefix routing, streaming and not, a worker killed
mid-stream, its readmission, and SIGTERM draining the router."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from ..integrations.model_fixture import text

SRC = Path(__file__).resolve().parents[2] / "src"
MODEL = "gemma-3-270m"
SYSTEM = "You answer questions about a small town. Facts: " + text(10)  # ~200 tokens: several 32-token blocks


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Proc:
    def __init__(self, args: list[str], log: Path, env: dict[str, str], port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path, self.args, self.env = log, args, env
        self.start()

    def start(self) -> None:
        cmd = [sys.executable, "-c", "from ctxcache.cli import main; main()", *self.args, "--port", str(self.port)]
        self.log = self.log_path.open("ab")
        self.proc = subprocess.Popen(cmd, env=self.env, stdout=self.log, stderr=subprocess.STDOUT)

    def wait_ready(self, path: str = "/readyz", timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log_path.read_text()[-3000:]
            try:
                if httpx.get(self.url + path, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        pytest.fail(f"{self.args[0]} did not get ready: {self.log_path.read_text()[-3000:]}")

    def stop(self, sig: int = signal.SIGTERM) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=60)
        finally:
            self.log.close()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    from ctxcache.integrations.model_store import resolve_model

    model = str(resolve_model(None, quiet=True))
    tmp = tmp_path_factory.mktemp("fleet")
    base = {**os.environ, "PYTHONPATH": str(SRC), "OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": "1"}
    workers = []
    for i in range(2):
        env = {**base, "CTXCACHE_HOME": str(tmp / f"home{i}")}  # each its own disk tier
        workers.append(Proc(["serve", "--model", model], tmp / f"worker{i}.log", env))
    for w in workers:
        w.wait_ready()
    args = ["route", "--model", model, "--worker", workers[0].url, "--worker", workers[1].url, "--drain-s", "60"]
    router = Proc(args, tmp / "router.log", base)
    router.wait_ready()
    yield router, workers
    for p in [router, *workers]:
        p.stop(signal.SIGKILL)


def state(router: Proc) -> dict:
    return httpx.get(f"{router.url}/router/state", timeout=5).json()


def test_openai_client_through_the_router_reuses_the_prefix_on_one_worker(fleet):
    router, _ = fleet
    client = openai.OpenAI(base_url=f"{router.url}/v1", api_key="none", max_retries=0)
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Who got a parcel?"}]
    raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=msgs, max_tokens=3, temperature=0)
    first, where = raw.parse(), raw.headers["x-ctxcache-worker"]
    assert first.usage.prompt_tokens > 150 and first.usage.prompt_tokens_details.cached_tokens == 0
    msgs[1]["content"] = "When did the library open?"
    raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=msgs, max_tokens=3, temperature=0)
    assert raw.headers["x-ctxcache-worker"] == where
    assert raw.parse().usage.prompt_tokens_details.cached_tokens >= 150
    stream = client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=3, temperature=0, stream=True,
                                            stream_options={"include_usage": True})  # fmt: skip
    chunks = list(stream)
    assert (
        "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == raw.parse().choices[0].message.content
    )
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens >= 150
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-nope", messages=msgs, max_tokens=3)
    metrics = httpx.get(f"{router.url}/metrics").text
    assert f'ctxcache_router_requests_total{{api="openai",outcome="ok",worker="{where}"}} 3.0' in metrics


def test_anthropic_client_through_the_router_streaming_and_not(fleet):
    router, _ = fleet
    client = anthropic.Anthropic(base_url=router.url, api_key="none", max_retries=0)
    system = [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
    first = client.messages.create(model=MODEL, max_tokens=3, system=system, extra_body={"temperature": 0},
                                   messages=[{"role": "user", "content": "Why rain?"}])  # fmt: skip
    assert first.content[0].type == "text" and first.usage.input_tokens + first.usage.cache_read_input_tokens > 0
    with client.messages.stream(model=MODEL, max_tokens=3, system=system, extra_body={"temperature": 0},
                                messages=[{"role": "user", "content": "Any ships?"}]) as stream:  # fmt: skip
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert final.content[0].text == streamed and final.usage.cache_read_input_tokens >= 150
    with pytest.raises(anthropic.BadRequestError, match="max_tokens"):
        client.messages.create(model=MODEL, max_tokens=9000, messages=[{"role": "user", "content": "x"}])


def _stream_until_killed(router: Proc, workers: list[Proc]) -> tuple[str, Proc]:
    body = {"model": MODEL, "max_tokens": 400, "temperature": 0, "stream": True,
            "messages": [{"role": "user", "content": "Tell a very long story about the town. " + text(3)}]}  # fmt: skip
    with httpx.stream("POST", f"{router.url}/v1/chat/completions", json=body, timeout=300) as r:
        victim = next(w for w in workers if w.url == r.headers["x-ctxcache-worker"])
        out, killed = "", False
        for chunk in r.iter_text():
            out += chunk
            if not killed and '"content": "' in out and out.count("data: ") > 3:
                victim.proc.kill()  # mid-stream: the client already has text
                killed = True
    return out, victim


def test_a_worker_killed_mid_stream_ends_it_with_an_error_and_comes_back(fleet):
    router, workers = fleet
    out, victim = _stream_until_killed(router, workers)
    assert '"error"' in out and out.rstrip().endswith("data: [DONE]")  # an error event in OpenAI's shape
    victim.proc.wait(timeout=30)
    victim.log.close()
    client = openai.OpenAI(base_url=f"{router.url}/v1", api_key="none", max_retries=0)
    for i in range(3):  # requests not yet started go to the other worker
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=[{"role": "user", "content": f"Hello {i}"}], max_tokens=2
        )
        assert raw.headers["x-ctxcache-worker"] != victim.url
    dead = next(w for w in state(router)["workers"] if w["url"] == victim.url)
    assert not dead["healthy"] and dead["ejections"] >= 1
    victim.start()  # the same port: readmitted once its /readyz passes
    victim.wait_ready()
    deadline = time.monotonic() + 60
    while not next(w for w in state(router)["workers"] if w["url"] == victim.url)["healthy"]:
        assert time.monotonic() < deadline, "the restarted worker was not readmitted"
        time.sleep(0.5)


def test_sigterm_lets_an_in_flight_stream_finish(fleet):
    router, _ = fleet
    body = {"model": MODEL, "max_tokens": 40, "temperature": 0, "stream": True,
            "messages": [{"role": "user", "content": "Count slowly to forty."}]}  # fmt: skip
    got: dict[str, str] = {}

    def consume() -> None:
        with httpx.stream("POST", f"{router.url}/v1/chat/completions", json=body, timeout=300) as r:
            got["text"] = "".join(r.iter_text())

    t = threading.Thread(target=consume)
    t.start()
    time.sleep(1.5)  # the request is in flight
    assert router.stop(signal.SIGTERM) == 0
    t.join(timeout=120)
    assert got["text"].rstrip().endswith("data: [DONE]") and '"error"' not in got["text"]
