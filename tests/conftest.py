from __future__ import annotations

import hashlib
import logging
import os
import random
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest


class FakeClock:
    """An injectable clock: time moves only when a test says so."""

    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, dt: float) -> None:
        self.t += dt


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def payload_for(namespace: str, tokens: list[int] | tuple[int, ...], block: int, block_size: int) -> bytes:
    """A payload that names exactly which prefix it belongs to, so a wrong hit is detectable."""
    h = hashlib.sha256(namespace.encode() + b"|" + repr(tuple(tokens[: (block + 1) * block_size])).encode())
    return h.digest()


# --- throwaway Redis servers ----------------------------------------------------------------------
# Tier tests run against real redis-server processes on free loopback ports (no fakeredis). A
# missing redis-server fails these tests: `make test` installs it.


# Ports for servers a test starts: bind(0) and close leaves a window in which the kernel can hand
# the same port to another process's bind(0), and under pytest-xdist every worker asks at once. So
# each worker draws from its own block below the kernel's ephemeral range (32768-60999 on Linux,
# where clients' outgoing ports come from), never twice in a row the same, and checks by binding.
_PORT_BASE, _PORT_BLOCK = 20000, 1500


def _worker_index() -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")  # "gw3"; unset without xdist
    return int(worker[2:]) if worker[2:].isdigit() else 0


_port_rng = random.Random(os.getpid())
_ports_given: set[int] = set()


def free_port() -> int:
    lo = _PORT_BASE + (_worker_index() % 8) * _PORT_BLOCK
    for _ in range(200):
        port = lo + _port_rng.randrange(_PORT_BLOCK)
        if port in _ports_given:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _ports_given.add(port)
        if len(_ports_given) > _PORT_BLOCK // 2:  # a long run: forget the oldest hand-outs
            _ports_given.clear()
        return port
    raise RuntimeError(f"no free port in {lo}-{lo + _PORT_BLOCK - 1}")


class RedisServer:
    """One redis-server process: no persistence, loopback only, stopped by the fixture."""

    def __init__(self, workdir: Path, port: int | None = None, cluster: bool = False) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            pytest.fail("redis-server is not installed: `make test` installs it (apt-get install redis-server)")
        self.exe, self.workdir, self.cluster = exe, workdir, cluster
        self.port = port or free_port()
        self.bus_port = free_port()  # set explicitly: the default (port + 10000) may be taken or invalid
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        args = [self.exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        args += ["--dir", str(self.workdir), "--daemonize", "no", "--protected-mode", "no", "--loglevel", "warning"]
        if self.cluster:
            args += ["--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{self.port}.conf"]
            args += ["--cluster-node-timeout", "1000", "--cluster-port", str(self.bus_port)]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        import redis

        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if redis.Redis(port=self.port, socket_timeout=0.5).ping():
                    return self
            except redis.exceptions.ConnectionError:
                time.sleep(0.02)
        raise RuntimeError(f"redis-server on port {self.port} did not start")

    def client(self) -> Any:
        import redis

        return redis.Redis(port=self.port, socket_timeout=2)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """The shared server's URL, emptied for this test."""
    redis_server.client().flushall()
    return redis_server.url


@pytest.fixture
def redis_factory(tmp_path: Path) -> Iterator[Callable[..., RedisServer]]:
    """Private servers a test may kill and restart (on the same port)."""
    made: list[RedisServer] = []

    def make(port: int | None = None) -> RedisServer:
        server = RedisServer(tmp_path / f"redis-{len(made)}", port).start()
        made.append(server)
        return server

    yield make
    for server in made:
        server.stop()


def wait_cluster_ok(nodes: list[RedisServer], timeout: float = 10.0) -> None:
    """Until every node reports ``cluster_state:ok`` (after a master was paused past the node timeout)."""
    deadline = time.monotonic() + timeout
    while not all(b"cluster_state:ok" in n.client().execute_command("CLUSTER", "INFO") for n in nodes):
        if time.monotonic() > deadline:
            raise RuntimeError("redis cluster did not converge")
        time.sleep(0.05)


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[RedisServer]]:
    """A 3-master Redis Cluster (no replicas), slots split evenly."""
    base = tmp_path_factory.mktemp("cluster")
    nodes = [RedisServer(base / str(i), cluster=True).start() for i in range(3)]
    try:
        per = 16384 // 3
        for i, node in enumerate(nodes):
            hi = 16383 if i == 2 else (i + 1) * per - 1
            node.client().execute_command("CLUSTER", "ADDSLOTSRANGE", i * per, hi)
        for node in nodes[1:]:
            nodes[0].client().execute_command("CLUSTER", "MEET", "127.0.0.1", node.port, node.bus_port)
        deadline = time.monotonic() + 15
        while not all(b"cluster_state:ok" in n.client().execute_command("CLUSTER", "INFO") for n in nodes):
            if time.monotonic() > deadline:
                raise RuntimeError("redis cluster did not converge")
            time.sleep(0.05)
        yield nodes
    finally:
        for node in nodes:
            node.stop()


@pytest.fixture
def cluster_partial(redis_cluster: list[RedisServer]) -> Iterator[list[RedisServer]]:
    """The shared cluster with ``cluster-require-full-coverage no``: the healthy masters keep serving
    their slots while one master is paused past the node timeout (Redis' default: every master then
    answers CLUSTERDOWN, see docs/storage.md). Restored afterwards."""
    for node in redis_cluster:
        node.client().config_set("cluster-require-full-coverage", "no")
    try:
        yield redis_cluster
    finally:
        for node in redis_cluster:
            node.client().config_set("cluster-require-full-coverage", "yes")


@pytest.fixture(scope="session", autouse=True)
def _ctxcache_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Each test process its own $CTXCACHE_HOME, so what servers save there (kv/, semantic/) is
    neither the user's nor another xdist worker's; its models/ and gguf/ are the user's (linked):
    the model is converted once for every worker and later run, the conversion serialized by
    model_store's lock file and published by an atomic rename."""
    from ctxcache.integrations.model_store import ctxcache_home

    shared = ctxcache_home()
    home = tmp_path_factory.mktemp("ctxcache-home")
    for name in ("models", "gguf"):
        (shared / name).mkdir(parents=True, exist_ok=True)
        (home / name).symlink_to(shared / name, target_is_directory=True)
    before = os.environ.get("CTXCACHE_HOME")
    os.environ["CTXCACHE_HOME"] = str(home)
    yield home
    if before is None:
        os.environ.pop("CTXCACHE_HOME", None)
    else:
        os.environ["CTXCACHE_HOME"] = before


@pytest.fixture(autouse=True)
def _restore_ctxcache_logger() -> Iterator[None]:
    """The ``ctxcache`` loggers as they were before each test:
    - `ctxcache serve` and other CLI commands install their handler on the ``ctxcache`` logger,
      with ``propagate = False``, on the CLI runner's stream (closed afterwards);
    - import-linter (tests/test_imports.py) configures logging with ``disable_existing_loggers``:
      every ``ctxcache.*`` logger was disabled for the rest of the run, and caplog saw nothing in
      tests/tiers' log tests (they passed alone, failed in the full suite)."""
    log = logging.getLogger("ctxcache")
    saved = (list(log.handlers), log.level, log.propagate)
    loggers = logging.root.manager.loggerDict
    enabled = [n for n, lg in loggers.items() if n.startswith("ctxcache") and not getattr(lg, "disabled", True)]
    yield
    log.handlers[:] = saved[0]
    log.level, log.propagate = saved[1], saved[2]
    for name in enabled:
        logging.getLogger(name).disabled = False


# --- leaked threads -------------------------------------------------------------------------------
# A thread a test leaves running outlives the servers its fixtures stop: it logs into later tests'
# output (CI's log, once), holds sockets and files, and one blocked in a pool's task would keep its
# process from exiting. CTXCACHE_THREAD_LEAKS=<file> appends each test's leftover threads there (a
# survey); the threads themselves are left alone.
@pytest.fixture(autouse=True)
def _report_leaked_threads(request: pytest.FixtureRequest) -> Iterator[None]:
    out = os.environ.get("CTXCACHE_THREAD_LEAKS")
    if not out:
        yield
        return
    import threading

    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + 1.0
    while True:
        left = [t for t in threading.enumerate() if t not in before and t.is_alive()]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    if left:
        names = ", ".join(sorted(f"{t.name}{'' if t.daemon else ' (non-daemon)'}" for t in left))
        with open(out, "a") as f:
            f.write(f"{request.node.nodeid}\t{len(left)}\t{names}\n")


def pytest_unconfigure(config: pytest.Config) -> None:
    """A process that has reported every result but does not exit (a pool's thread joined at exit,
    a C call that never returns) would hold CI until its limit: after 120 s, print every thread's
    stack and exit with status 1. A process that exits normally never reaches the timer. Only in
    an xdist run (`make test`): mutmut and other tools call pytest in a process that goes on."""
    import faulthandler
    import sys

    if not (os.environ.get("PYTEST_XDIST_WORKER") or getattr(config.option, "numprocesses", None)):
        return
    faulthandler.dump_traceback_later(120, exit=True, file=sys.__stderr__)


@pytest.fixture(params=["native", "python"])
def key_walk(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test twice: hashers made in it use the compiled key walk, then the pure-Python one
    (``pytestmark = pytest.mark.usefixtures("key_walk")``). Native is skipped where it is not built."""
    from ctxcache import accel

    if request.param == "python":
        monkeypatch.setattr(accel, "native", None)
    elif accel.native is None:
        pytest.skip(f"ctxcache._native: {accel.reason}")
    return str(request.param)
