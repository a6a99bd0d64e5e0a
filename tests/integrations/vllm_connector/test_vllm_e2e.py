"""End to end with vLLM (CPU build, fp32, eager): `make test-vllm` runs these in .venv-vllm.

Three engines, one at a time, each in its own process (python -m ctxcache.integrations.vllm.run):
A  no connector, no prefix caching: the reference outputs;
B  the connector on a fresh RAM + disk cache: stores P (2,000 tokens, prefilled in 512-token
   chunks), P under cache_salt "tenant-a", and Q;
C  a new engine on B's cache directory (a restart), after one of Q's blocks was corrupted on
   disk: P, P + suffix, P under "tenant-b", P under "tenant-a", Q.
In the main virtualenv (no vLLM) the module is skipped; the unit tests next to it cover the parts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vLLM lives in .venv-vllm: run `make test-vllm`")

from .server_util import SRC  # noqa: E402
from .server_util import model_dir as _model_dir  # noqa: E402
from .server_util import tokens as _tokens  # noqa: E402
from .server_util import wait_for_memory as _wait_for_memory  # noqa: E402

BLOCK = 128  # vLLM's block size, pinned (CPU's default; CUDA's is 16); the connector's default ctxcache block size
P = [2, *_tokens(1, 1999)]  # 15 whole blocks + 80 tokens
S = _tokens(2, 200)
Q = [2, *_tokens(3, 999)]  # 7 whole blocks + 104 tokens
CORRUPT_Q_BLOCK = 3


def run_engine(
    tmp: Path,
    name: str,
    requests: list[dict[str, Any]],
    connector: dict[str, Any] | None,
    connector_class: str = "CtxCacheConnector",
    **extra: Any,
) -> Any:
    """One engine in its own process; ``extra``: more job keys (run.py), e.g. tensor_parallel_size."""
    job: dict[str, Any] = {
        "model": _model_dir(), "dtype": "float32", "max_model_len": 4096, "max_num_batched_tokens": 512,
        "prefix_caching": connector is not None, "kv_space_gib": 1, "requests": requests, "block_size": BLOCK,
        **extra,
    }  # fmt: skip
    if connector is not None:
        stats = str(tmp / f"{name}-stats.json")
        job["stats_path"] = stats
        job["kv_transfer_config"] = {
            "kv_connector": connector_class,
            "kv_connector_module_path": "ctxcache.integrations.vllm",
            "kv_role": "kv_both",
            "kv_connector_extra_config": {**connector, "stats_path": stats},
        }
    (tmp / f"{name}.json").write_text(json.dumps(job))
    if os.environ.get("CTXCACHE_VLLM_DEVICE_KV_FRACTION"):  # scripts/gpu_vllm_e2e.sh: a shared GPU
        job["device_kv_fraction"] = float(os.environ["CTXCACHE_VLLM_DEVICE_KV_FRACTION"])
    env = {**os.environ, "VLLM_CACHE_ROOT": str(tmp / "vllm-cache"), "VLLM_CPU_KVCACHE_SPACE": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")])
    _wait_for_memory()
    out = tmp / f"{name}-out.json"
    with open(tmp / f"{name}.log", "w") as log:
        rc = subprocess.run(
            [sys.executable, "-m", "ctxcache.integrations.vllm.run", str(tmp / f"{name}.json"), str(out)],
            env=env, stdout=log, stderr=subprocess.STDOUT, timeout=2400,
        ).returncode  # fmt: skip
    if rc != 0:
        tail = (tmp / f"{name}.log").read_text()[-4000:]
        pytest.fail(f"engine {name} exited with {rc}:\n{tail}")
    return json.loads(out.read_text())


def corrupt_block(disk: Path, tokens: list[int], block: int) -> int:
    """Flip the last payload byte of the stored block holding ``tokens``' block ``block``."""
    import numpy as np

    needle = np.asarray(tokens[block * BLOCK : (block + 1) * BLOCK], dtype="<i4").tobytes()
    hits = 0
    for f in disk.rglob("*.blk"):
        data = bytearray(f.read_bytes())
        if needle in data:
            data[-1] ^= 0xFF
            f.write_bytes(bytes(data))
            hits += 1
    return hits


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("vllm-e2e")
    cfg = {"tiers": [{"kind": "memory", "capacity": "256MiB"}, {"kind": "disk", "capacity": "2GiB", "path": str(tmp / "disk")}]}  # fmt: skip
    conn = {"config": cfg}
    req = lambda toks, salt=None: {"tokens": toks, "salt": salt, "max_tokens": 12}  # noqa: E731
    out: dict[str, Any] = {}
    ref = os.environ.get("CTXCACHE_VLLM_E2E_REFERENCE")  # engine A's output from an earlier run (slow machines)
    out["A"] = json.loads(Path(ref).read_text()) if ref else run_engine(tmp, "A", [req(P), req(P + S), req(Q)], None)
    out["B"] = run_engine(tmp, "B", [req(P), req(P, "tenant-a"), req(Q)], conn)
    out["corrupted"] = corrupt_block(tmp / "disk", Q, CORRUPT_Q_BLOCK)
    out["C"] = run_engine(
        tmp, "C", [req(P), req(P + S), req(P, "tenant-b"), req(P, "tenant-a"), req(Q)], conn
    )  # fmt: skip
    return out


def test_new_engine_reuses_the_prefix_with_identical_tokens_and_faster_prefill(runs: dict[str, Any]) -> None:
    a_p, a_ps = runs["A"]["requests"][0], runs["A"]["requests"][1]
    b_p = runs["B"]["requests"][0]
    c_p, c_ps = runs["C"]["requests"][0], runs["C"]["requests"][1]
    whole = len(P) // BLOCK * BLOCK
    assert b_p["cached"] == 0
    assert c_p["cached"] >= whole and c_ps["cached"] >= whole
    assert c_p["output"] == a_p["output"] == b_p["output"]
    assert c_ps["output"] == a_ps["output"]
    assert c_p["ttft_s"] < 0.7 * b_p["ttft_s"], (c_p["ttft_s"], b_p["ttft_s"])
    assert runs["C"]["stats"]["connector"]["loaded_blocks"] >= whole // BLOCK


def test_chunked_prefill_is_stored_completely(runs: dict[str, Any]) -> None:
    b = runs["B"]["stats"]
    # 512-token chunks: P was prefilled in 4 steps; all its 15 whole blocks (twice: two namespaces) and Q's 7.
    assert b["connector"]["stored_blocks"] == 2 * (len(P) // BLOCK) + len(Q) // BLOCK
    assert b["connector"]["save_requests"] >= 4
    assert runs["C"]["requests"][0]["cached"] == len(P) // BLOCK * BLOCK


def test_cache_salt_isolates_tenants(runs: dict[str, Any]) -> None:
    c = runs["C"]["requests"]
    assert c[2]["cached"] == 0  # tenant-b: never stored under its salt
    assert c[3]["cached"] == len(P) // BLOCK * BLOCK  # tenant-a: from ctxcache (vLLM's cache is per salt too)
    assert c[2]["output"] == c[3]["output"] == runs["A"]["requests"][0]["output"]


def test_corrupt_block_is_recomputed_and_counted(runs: dict[str, Any]) -> None:
    assert runs["corrupted"] == 1
    q = runs["C"]["requests"][4]
    assert q["output"] == runs["A"]["requests"][2]["output"]
    assert q["cached"] == CORRUPT_Q_BLOCK * BLOCK  # the prefix before the bad block, no further
    stats = runs["C"]["stats"]["cache"]
    assert stats["corrupt"] >= 1
    assert stats["tiers"]["disk"]["corrupt"] >= 1
