"""`ctxcache serve --engine vllm`: the command line it execs, and its refusals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ctxcache.cli import app
from ctxcache.errors import ConfigError
from ctxcache.integrations.vllm.serve import find_vllm_python, kv_transfer_config, vllm_command, vllm_env


def test_command_configures_the_connector(tmp_path: Path) -> None:
    cfg = tmp_path / "cache.toml"
    cfg.write_text('[[tiers]]\nkind = "memory"\ncapacity = "1GiB"\n')
    argv = vllm_command("/py", tmp_path, "127.0.0.1", 8001, cfg)
    assert argv[:3] == ["/py", "-m", "vllm.entrypoints.openai.api_server"]
    ktc = json.loads(argv[argv.index("--kv-transfer-config") + 1])
    assert ktc["kv_connector"] == "CtxCacheConnector"
    assert ktc["kv_connector_module_path"] == "ctxcache.integrations.vllm"
    assert ktc["kv_connector_extra_config"]["config"] == str(cfg.resolve())
    assert "--enforce-eager" in argv and argv[argv.index("--port") + 1] == "8001"


def test_refusals(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="cache config not found"):
        kv_transfer_config(tmp_path / "missing.toml")
    monkeypatch.delenv("CTXCACHE_VLLM_PYTHON", raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="make test-vllm"):
        find_vllm_python(str(tmp_path / "nope"))
    result = CliRunner().invoke(app, ["serve", "--engine", "sglang"])
    assert result.exit_code == 2 and "transformers or vllm" in result.output


def test_cli_without_vllm_says_how_to_get_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CTXCACHE_VLLM_PYTHON", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.json").write_text("{}")
    result = CliRunner().invoke(app, ["serve", "--engine", "vllm", "--model", str(tmp_path)])
    assert result.exit_code == 2 and "make test-vllm" in result.output


def test_env_keeps_vllm_from_reserving_a_core_for_the_connector() -> None:
    # With any KV connector, vLLM's CPU backend reserves a second core (NIXL); on 2 cores its
    # OpenMP threads then took every core and prefill ran ~2x slower: we ask for vLLM's usual one.
    env = vllm_env({"PATH": "/bin"})
    assert env["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "1" and env["VLLM_CPU_KVCACHE_SPACE"] == "4"
    assert env["PATH"] == "/bin"
    mine = vllm_env({"VLLM_CPU_NUM_OF_RESERVED_CPU": "3"}, VLLM_CPU_KVCACHE_SPACE="1")
    assert mine["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "3" and mine["VLLM_CPU_KVCACHE_SPACE"] == "1"


def _invoke_vllm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]) -> tuple[Any, list[list[str]]]:
    import ctxcache.integrations.vllm.serve as serve_mod

    (tmp_path / "config.json").write_text("{}")
    py = tmp_path / "python"
    py.write_text("")
    execs: list[list[str]] = []
    monkeypatch.setattr(serve_mod, "exec_vllm", execs.append)
    base = ["serve", "--engine", "vllm", "--model", str(tmp_path), "--vllm-python", str(py), "--port", "8123"]
    return CliRunner().invoke(app, [*base, *args]), execs


def test_arguments_after_double_dash_go_to_vllm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    extra = ["--max-num-batched-tokens", "512", "--enable-prompt-tokens-details", "--dtype", "float32"]
    result, execs = _invoke_vllm(tmp_path, monkeypatch, ["--", *extra])
    assert result.exit_code == 0, result.output
    (argv,) = execs
    assert argv[-len(extra) :] == extra  # after ctxcache's own, in order
    assert argv[argv.index("--port") + 1] == "8123" and "--kv-transfer-config" in argv


@pytest.mark.parametrize("flag", ["--kv-transfer-config", "--port=9000", "--model", "--kv_transfer_config", "--host"])
def test_passthrough_refuses_what_ctxcache_sets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flag: str) -> None:
    result, execs = _invoke_vllm(tmp_path, monkeypatch, ["--", "--dtype", "float32", flag, "x"])
    assert result.exit_code == 2 and not execs
    assert "would override ctxcache's own setting" in result.output and flag.split("=")[0] in result.output


def test_passthrough_needs_the_vllm_engine() -> None:
    result = CliRunner().invoke(app, ["serve", "--", "--max-num-batched-tokens", "512"])
    assert result.exit_code == 2 and "need --engine vllm" in result.output


def test_a_shutdown_timeout_gives_the_worker_time_to_flush(tmp_path: Path) -> None:
    # vLLM's default 0 kills the worker milliseconds after SIGTERM: the connector's close never runs.
    argv = vllm_command("/py", tmp_path, "127.0.0.1", 8001)
    assert argv[argv.index("--shutdown-timeout") + 1] == "8"
    mine = vllm_command("/py", tmp_path, "127.0.0.1", 8001, extra=["--shutdown_timeout=30"])
    assert "--shutdown-timeout" not in mine and mine[-1] == "--shutdown_timeout=30"
