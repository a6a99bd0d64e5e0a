"""`ctxcache route --redis` end to end: a real redis-server, two real `ctxcache serve` workers (the
real model; a RAM tier and a shared Redis tier, so KV events are on) and a real router following
their streams. A prefix prefilled on worker A *directly* (the router never saw that request, so
neither its history nor its speculative entries know it) draws the next request with that prefix,
from another session, to A: only A's KV events can say it is there. An unrelated prompt goes to
the other worker. A is the worker whose URL sorts last: with nothing known, ties go to the first,
so without the events every request here would go to B."""

from __future__ import annotations

import os
import signal
import time

import httpx
import pytest

from ..integrations.model_fixture import text
from .test_e2e import MODEL, SRC, Proc

SYSTEM = "You keep the harbour's logbook. Answer from the entries below.\n" + text(20)  # ~400 tokens
BLOCK = 32


def _config(path, redis_url: str):
    path.write_text(
        f"""[cache]
block_size = {BLOCK}
[[cache.tiers]]
kind = "memory"
capacity = "64MiB"
[[cache.tiers]]
kind = "redis"
capacity = "1GiB"
url = "{redis_url}"
prefix = "routerev:"
timeout = "1s"
"""
    )
    return path


def _state(router: Proc) -> dict:
    return httpx.get(f"{router.url}/router/state", timeout=5).json()


def _until(cond, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, redis_server):
    from ctxcache.integrations.model_store import resolve_model

    model = str(resolve_model(None, quiet=True))
    tmp = tmp_path_factory.mktemp("fleet_events")
    cfg = str(_config(tmp / "fleet.toml", redis_server.url))
    base = {**os.environ, "PYTHONPATH": str(SRC), "OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": "1"}
    workers = [
        Proc(
            ["serve", "--model", model, "--config", cfg],
            tmp / f"worker{i}.log",
            {**base, "CTXCACHE_HOME": str(tmp / f"home{i}")},
        )  # fmt: skip
        for i in range(2)
    ]
    router = None
    try:
        for w in workers:
            w.wait_ready()
        args = ["route", "--model", model, "--config", cfg, "--redis", redis_server.url]
        router = Proc([*args, "--worker", workers[0].url, "--worker", workers[1].url], tmp / "router.log", base)
        router.wait_ready()
        _until(lambda: len(_state(router)["events"]["mapped"]) == 2, "both workers' events to be mapped")
        yield router, sorted(workers, key=lambda w: w.url)
    finally:
        for p in [router, *workers]:
            if p is not None:
                p.stop(signal.SIGKILL)


def _chat(url: str, question: str, user: str, system: str = SYSTEM) -> httpx.Response:
    body = {"model": MODEL, "max_tokens": 1, "temperature": 0, "user": user,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}]}  # fmt: skip
    r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=300)
    assert r.status_code == 200, r.text
    return r


def _cached(r: httpx.Response) -> int:
    return int(r.json()["usage"]["prompt_tokens_details"]["cached_tokens"])


def test_the_router_follows_a_prefix_it_only_knows_from_kv_events(fleet):
    router, (b, a) = fleet
    ids = {w["url"]: w["events_worker"] for w in _state(router)["workers"]}  # what each /readyz reported
    for w in (a, b):
        assert httpx.get(f"{w.url}/readyz", timeout=5).json()["events_worker"] == ids[w.url]
        assert ids[w.url].endswith(f":{w.port}")  # serve's default id: host:port
    assert _state(router)["events"]["mapped"] == {ids[a.url]: a.url, ids[b.url]: b.url}
    first = _chat(a.url, "Which ship came in first?", "alice")  # straight to A: the router does not see it
    prompt = first.json()["usage"]["prompt_tokens"]
    assert prompt > 300 and _cached(first) == 0
    whole = (prompt - 1) // BLOCK  # the prefix blocks A stored in its RAM
    _until(lambda: _state(router)["index"]["blocks"] >= whole - 1, "A's stores to reach the router's index")

    second = _chat(router.url, "Who repaired the nets?", "bob")  # same prefix, new suffix, another session
    assert second.headers["x-ctxcache-worker"] == a.url, second.headers
    assert second.headers["x-ctxcache-route-reason"] == "cache"
    predicted = int(second.headers["x-ctxcache-predicted-cached-tokens"])
    assert predicted >= (whole - 2) * BLOCK, (predicted, prompt)
    assert _cached(second) >= predicted - BLOCK, (_cached(second), predicted)  # A really had it

    third = _chat(router.url, "Anything?", "carol", system="Unrelated: " + text(2, seed=7))
    assert third.headers["x-ctxcache-worker"] == b.url, third.headers  # nothing cached: not piled on A

    metrics = httpx.get(f"{router.url}/metrics", timeout=5).text
    assert "ctxcache_router_event_workers 2.0" in metrics
    assert "ctxcache_router_event_unmapped_workers 0.0" in metrics
    lag = next(float(x.split()[1]) for x in metrics.splitlines() if x.startswith("ctxcache_router_event_lag_seconds "))
    assert 0 <= lag < 30
    blocks = next(float(x.split()[1]) for x in metrics.splitlines() if x.startswith("ctxcache_router_index_blocks "))
    assert blocks >= whole - 1
