"""Restarts of vLLM's real OpenAI server with the connector (RAM + disk): `make test-vllm`.

Stopped the way deployments stop it: SIGTERM to the server (Docker, Kubernetes), and SIGKILL of
the whole process group (the OOM killer's or `docker kill`'s worst case: the worker holding the
RAM tier dies with no chance to spill it) once a second has passed since the answer. Then a new
server on the same disk directory answers the same prompt: `cached_tokens` covers the prompt's
whole blocks and the greedy output is the one the first server computed from scratch. The
prompts (2,000 tokens) are longer than `--max-num-batched-tokens 512`: prefilled in four chunks,
each chunk's blocks stored as it completes.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from .server_util import Server, free_port, model_dir, tokens

pytest.importorskip("vllm", reason="vLLM lives in .venv-vllm: run `make test-vllm`")

BLOCK = 128
P = [2, *tokens(11, 1999)]  # 15 whole 128-token blocks + 80 tokens
R = [2, *tokens(12, 1999)]
WHOLE = len(P) // BLOCK * BLOCK  # 1,920
# What the tests add to the documented command line: fp32 (no AVX-512 bf16 here), a small KV space,
# chunked prefill, and cached_tokens in the usage.
VLLM_ARGS = ["--dtype", "float32", "--max-model-len", "4096", "--max-num-batched-tokens", "512",
             "--block-size", str(BLOCK), "--enable-prompt-tokens-details", "--seed", "0"]  # fmt: skip


@pytest.fixture
def cache_toml(tmp_path: Path) -> Path:
    toml = tmp_path / "cache.toml"
    toml.write_text(
        '[[tiers]]\nkind = "memory"\ncapacity = "256MiB"\n\n'
        f'[[tiers]]\nkind = "disk"\ncapacity = "2GiB"\npath = "{tmp_path / "disk"}"\n'
    )
    return toml


def _env(tmp: Path) -> dict[str, str]:
    env = {**os.environ, "VLLM_CACHE_ROOT": str(tmp / "vllm-cache"), "VLLM_NO_USAGE_STATS": "1"}
    env.update(VLLM_CPU_KVCACHE_SPACE="1", VLLM_CPU_NUM_OF_RESERVED_CPU="1")
    return env


def _module_server(tmp: Path, toml: Path, name: str) -> Server:
    """docs/vllm.md's module command line (its --shutdown-timeout gives the worker time to close)."""
    port = free_port()
    ktc = {"kv_connector": "CtxCacheConnector", "kv_connector_module_path": "ctxcache.integrations.vllm",
           "kv_role": "kv_both", "kv_load_failure_policy": "recompute",
           "kv_connector_extra_config": {"config": str(toml), "stats_path": str(tmp / f"{name}-stats.json")}}  # fmt: skip
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model_dir(), "--enforce-eager",
            "--port", str(port), "--shutdown-timeout", "8", "--kv-transfer-config", json.dumps(ktc), *VLLM_ARGS]  # fmt: skip
    return Server(argv, port, tmp / f"{name}.log", _env(tmp))


def _ctxcache_server(tmp: Path, toml: Path, name: str) -> Server:
    """`ctxcache serve --engine vllm ... -- <vLLM args>` (the console script next to this Python)."""
    port = free_port()
    exe = str(Path(sys.executable).with_name("ctxcache"))
    argv = [exe, "serve", "--engine", "vllm", "--model", model_dir(), "--port", str(port), "--cache-config",
            str(toml), "--vllm-python", sys.executable, "--", *VLLM_ARGS]  # fmt: skip
    return Server(argv, port, tmp / f"{name}.log", _env(tmp))


def _serve(server: Server, prompts: list[list[int]]) -> list[dict[str, Any]]:
    try:
        server.wait_ready()
        return [server.complete(p) for p in prompts]
    except BaseException:
        server.kill_group()
        raise


def _record(tmp: Path, **runs: Any) -> None:
    """The requests' figures (cached tokens, wall times, outputs) next to the servers' logs."""
    (tmp / "results.json").write_text(json.dumps(runs, indent=1))


def _check_reuse(after: dict[str, Any], before: dict[str, Any], what: str, server: Server) -> None:
    lines = server.log.read_text(errors="replace").splitlines()
    shutdown = "\n".join(line[:200] for line in lines if "[shutdown]" in line or "ctxcache" in line)
    assert after["cached"] >= WHOLE, f"{what}: {after['cached']} cached tokens, want >= {WHOLE}\n{shutdown}"
    assert after["output"] == before["output"], what


def test_module_server_survives_sigterm_and_sigkill(tmp_path: Path, cache_toml: Path) -> None:
    s1 = _module_server(tmp_path, cache_toml, "s1")
    (p1,) = _serve(s1, [P])
    assert p1["cached"] == 0 and p1["prompt_tokens"] == len(P)
    stop_s = s1.stop(signal.SIGTERM)  # right after the answer: the clean shutdown must flush

    s2 = _module_server(tmp_path, cache_toml, "s2")
    p2, r2 = _serve(s2, [P, R])
    _check_reuse(p2, p1, f"after SIGTERM (server stopped in {stop_s:.1f} s)", s1)
    assert r2["cached"] == 0
    time.sleep(1.0)  # a second since the answer: write-through has put R's blocks on disk
    s2.stop(signal.SIGKILL, group=True)

    s3 = _module_server(tmp_path, cache_toml, "s3")
    r3, p3 = _serve(s3, [R, P])
    s3.stop(signal.SIGTERM)
    _record(tmp_path, p1=p1, p2=p2, r2=r2, r3=r3, p3=p3, sigterm_stop_s=stop_s)
    _check_reuse(r3, r2, "after SIGKILL of the process group", s2)
    _check_reuse(p3, p1, "P after two restarts", s3)


def test_ctxcache_serve_passes_vllm_args_and_survives_sigkill(tmp_path: Path, cache_toml: Path) -> None:
    s1 = _ctxcache_server(tmp_path, cache_toml, "c1")
    (p1,) = _serve(s1, [P])
    assert p1["cached"] == 0
    time.sleep(1.0)
    s1.stop(signal.SIGKILL, group=True)

    s2 = _ctxcache_server(tmp_path, cache_toml, "c2")
    (p2,) = _serve(s2, [P])
    s2.stop(signal.SIGTERM)
    _record(tmp_path, p1=p1, p2=p2)
    # cached_tokens is in the usage only with --enable-prompt-tokens-details, passed after `--`.
    _check_reuse(p2, p1, "ctxcache serve after SIGKILL", s1)
