"""Two regions as a user runs them, real processes on loopback: per region a redis-server, a
`ctxcache serve` worker (the real model; RAM, disk and the region's Redis as tiers) and a
`ctxcache replicate` whose link to the other region goes through a proxy that can be cut.

Issue 28's first acceptance item: erase a tenant in region a while the link to b is down and b
keeps storing that tenant's prefixes; heal: 0 blocks and 0 index entries of the tenant in either
region, the erasure reported verified by every process of b; nothing resurrects after b restarts."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from ctxcache.replication import RedisLog
from ctxcache.tiers import RedisTier

from ..conftest import free_port
from ..integrations.model_fixture import text
from ..server.test_fleet_events import SRC, Worker
from .linkproxy import LinkProxy

ADMIN = {"Authorization": "Bearer admin-key-123"}
ACME, OTHER = "sk-acme-0001", "sk-other-001"


def _config(path: Path, region: str, redis_url: str, disk: Path) -> Path:
    path.write_text(
        f"""[cache]
block_size = 32
tenants = {{ acme = {{ api_keys = ["{ACME}"] }}, other = {{ api_keys = ["{OTHER}"] }} }}
[cache.tenancy]
admin_keys = ["admin-key-123"]
[[cache.tiers]]
kind = "memory"
capacity = "64MiB"
[[cache.tiers]]
kind = "disk"
capacity = "512MiB"
path = "{disk}"
[[cache.tiers]]
kind = "redis"
capacity = "1GiB"
url = "{redis_url}"
prefix = "kv:"
timeout = "1s"
[events]
enabled = false
[replication]
region = "{region}"
poll_ms = 20
"""
    )
    return path


class Replicate:
    def __init__(self, region: str, redis: str, peer: str, config: Path, log: Path) -> None:
        self.metrics_port = free_port()
        env = {**os.environ, "PYTHONPATH": str(SRC)}
        cmd = [sys.executable, "-c", "from ctxcache.cli import main; main()", "replicate", "--region", region]
        cmd += ["--redis", redis, "--peer", peer, "--config", str(config), "--metrics-port", str(self.metrics_port)]
        cmd += ["--status-every", "1"]
        self.logf = log.open("ab")
        self.proc = subprocess.Popen(cmd, env=env, stdout=self.logf, stderr=subprocess.STDOUT)
        self.log = log

    def metric(self, name: str, **labels: str) -> float | None:
        want = ",".join(f'{k}="{v}"' for k, v in labels.items())
        try:
            body = httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=2).text
        except httpx.HTTPError:
            return None
        for line in body.splitlines():
            if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
        assert want is not None
        return None

    def stop(self) -> int:
        self.proc.terminate()
        try:
            rc = self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = -9
        self.logf.close()
        return rc


def chat(w: Worker, key: str, system: str, question: str) -> int:
    model = httpx.get(f"{w.url}/v1/models", headers={"Authorization": f"Bearer {key}"}).json()["data"][0]["id"]
    msgs = [{"role": "system", "content": system}, {"role": "user", "content": question}]
    body = {"model": model, "max_tokens": 1, "temperature": 0, "messages": msgs}
    r = httpx.post(f"{w.url}/v1/chat/completions", json=body, timeout=300, headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 200, r.text
    return int(r.json()["usage"]["prompt_tokens_details"]["cached_tokens"])


def usage(w: Worker, tenant: str) -> dict[str, Any]:
    r = httpx.get(f"{w.url}/v1/admin/tenants/{tenant}/usage", headers=ADMIN, timeout=30)
    assert r.status_code == 200, r.text
    return dict(r.json())


def in_redis(url: str, tenant: str) -> int:
    tier = RedisTier(1 << 30, url=url, prefix="kv:", timeout=2.0)
    try:
        keys = tier.stored_keys_of(tenant.encode())
        assert keys is not None
        return len(keys)
    finally:
        tier.close()


def wait(cond: Any, what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def model_dir() -> Path:
    from ctxcache.integrations.model_store import resolve_model

    return resolve_model(None, quiet=True)


def test_an_erasure_during_a_partition_reaches_the_other_region_and_nothing_resurrects(
    tmp_path, model_dir, redis_factory
):
    ra, rb = redis_factory(), redis_factory()
    to_b, to_a = LinkProxy(rb.port), LinkProxy(ra.port)
    cfg = {r: _config(tmp_path / f"{r}.toml", r, s.url, tmp_path / f"disk-{r}") for r, s in (("a", ra), ("b", rb))}
    workers = {r: Worker(tmp_path / f"home-{r}", model_dir, cfg[r], tmp_path / f"w-{r}.log") for r in "ab"}
    reps = {
        "a": Replicate("a", ra.url, f"b={to_b.url}", cfg["a"], tmp_path / "rep-a.log"),
        "b": Replicate("b", rb.url, f"a={to_a.url}", cfg["b"], tmp_path / "rep-b.log"),
    }
    system = {i: f"Archive {i}. Answer from the records below.\n" + text(12, seed=i) for i in range(6)}
    try:
        for w in workers.values():
            w.wait_ready()
        for r, w in workers.items():
            assert chat(w, ACME, system[0], f"question from {r}") == 0
            chat(w, OTHER, system[1], "other's question")
        wait(lambda: in_redis(ra.url, "acme") and in_redis(rb.url, "acme"), "write-through of acme's blocks")
        to_b.cut()
        to_a.cut()
        r = httpx.delete(f"{workers['a'].url}/v1/admin/tenants/acme/cache", headers=ADMIN, timeout=60)
        assert r.status_code == 200, r.text
        assert r.json()["verified"] and r.json()["replication"] == {"region": "a", "submitted": True}
        for i in (2, 3):  # b keeps serving and storing acme's prefixes, unaware
            chat(workers["b"], ACME, system[i], "during the partition")
        wait(lambda: (reps["a"].metric("ctxcache_replication_queued", peer="b") or 0) >= 1, "a's queue to b")
        assert reps["a"].metric("ctxcache_replication_link_up", peer="b") == 0.0
        assert usage(workers["b"], "acme")["blocks"] > 0 and in_redis(rb.url, "acme") > 0
        to_b.heal()
        to_a.heal()
        log_b = RedisLog(rb.url, "b")

        def erased_in_b() -> bool:
            res = {k.rsplit(" ", 1)[1]: v for k, v in log_b.results().items() if k.split(" ", 1)[0].endswith("/t:acme")}
            return len(res) >= 2 and all(v.get("verified") for v in res.values())

        wait(erased_in_b, "b's replicator and worker to report the erasure verified")
        wait(lambda: reps["a"].metric("ctxcache_replication_queued", peer="b") == 0, "a's queue to drain")
        for r in "ab":
            assert usage(workers[r], "acme")["blocks"] == 0, r
            assert in_redis((ra if r == "a" else rb).url, "acme") == 0, r
        assert usage(workers["b"], "other")["blocks"] > 0  # only that tenant's
        # Restart region b (its worker: RAM spilled to its disk at the SIGTERM, read back at the
        # start; and both replicators): nothing comes back from disk or Redis. Region a restarting
        # is the same code path; tests/replication/test_redis_regions.py restarts both.
        workers["b"].stop()
        for r in "ab":
            assert reps[r].stop() == 0
        workers["b"] = Worker(tmp_path / "home-b", model_dir, cfg["b"], tmp_path / "w-b.log")
        reps = {
            "a": Replicate("a", ra.url, f"b={to_b.url}", cfg["a"], tmp_path / "rep-a.log"),
            "b": Replicate("b", rb.url, f"a={to_a.url}", cfg["b"], tmp_path / "rep-b.log"),
        }
        workers["b"].wait_ready()
        for r, w in workers.items():
            assert usage(w, "acme")["blocks"] == 0
            assert chat(w, ACME, system[2], "after the restart") == 0, r  # b's partition-time prefix: gone
            assert chat(w, OTHER, system[1], "other's question") > 0, r  # the other tenant's: still cached
    finally:
        for w in workers.values():
            w.stop()
        for rep in reps.values():
            rep.stop()
        to_a.close()
        to_b.close()
