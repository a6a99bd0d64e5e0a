"""Model resolution and preparation helpers (no model load)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctxcache.integrations import model_store as ms


def test_home_defaults_to_user_cache_and_env_overrides(monkeypatch, tmp_path):
    monkeypatch.delenv("CTXCACHE_HOME", raising=False)
    assert ms.ctxcache_home().parts[-2:] == (".cache", "ctxcache")
    monkeypatch.setenv("CTXCACHE_HOME", str(tmp_path))
    assert ms.ctxcache_home() == tmp_path
    assert ms.default_model_dir().parent == tmp_path / "models"


def test_resolve_model_rejects_bad_paths(tmp_path):
    with pytest.raises(ms.ModelError, match="does not exist"):
        ms.resolve_model(tmp_path / "nope")
    with pytest.raises(ms.ModelError, match="no config.json"):
        ms.resolve_model(tmp_path)
    (tmp_path / "config.json").write_text("{}")
    assert ms.resolve_model(tmp_path) == tmp_path


def test_model_id_and_fingerprint(tmp_path):
    d = tmp_path / "my-model"
    d.mkdir()
    (d / "config.json").write_text('{"a": 1}')
    (d / "model.safetensors").write_bytes(b"x" * 10)
    assert ms.model_id_for(d) == "my-model"
    fp = ms.fingerprint(d)
    assert fp.startswith("my-model@")
    (d / "config.json").write_text('{"a": 2}')
    assert ms.fingerprint(d) != fp
    (d / "ctxcache-model.json").write_text(json.dumps({"model_id": "gemma-3-270m"}))
    assert ms.model_id_for(d) == "gemma-3-270m"


def test_prepared_default_model_is_complete():
    """The shared fixture prepared it (converting once if needed); check what it left behind."""
    from .model_fixture import _load

    _load()
    d = ms.prepare_default_model(quiet=True)  # already there: returns at once
    for name in ("config.json", "model.safetensors", "tokenizer.json", "ctxcache-model.json"):
        assert (d / name).is_file(), name
    assert "start_of_turn" in (d / "chat_template.jinja").read_text()
    assert not list(d.parent.glob("*.tmp-*")), "an interrupted conversion was left behind"


_PREPARE = """
import os, sys, time
from pathlib import Path
import ctxcache.integrations.model_store as ms

class Pkg:
    EXPECTED_SHA256 = "ab" * 32

def convert(target, *, quiet):  # the real one's protocol: build in a tmp dir, mark it ready, rename
    with open(sys.argv[1], "a") as log:
        log.write(f"{os.getpid()}\\n")
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    tmp.mkdir(parents=True)
    time.sleep(0.5)  # long enough for the other process to arrive while this one converts
    (tmp / "config.json").write_text("{}")
    (tmp / ms._READY).write_text("{}")
    os.replace(tmp, target)

ms._gguf_package = lambda: Pkg
ms._convert_default = convert
print(ms.prepare_default_model(quiet=True))
"""


def test_two_processes_preparing_at_once_convert_once(tmp_path):
    """Two xdist workers (or a test run and a starting server) asking for the model together: one
    converts under the lock file, the other waits and takes its result."""
    import os
    import subprocess
    import sys

    log = tmp_path / "conversions.log"
    env = {**os.environ, "CTXCACHE_HOME": str(tmp_path / "home")}
    procs = [
        subprocess.Popen([sys.executable, "-c", _PREPARE, str(log)], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=60)[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert len(log.read_text().split()) == 1, "converted twice"
    assert outs[0] == outs[1] and (Path(outs[0]) / "config.json").is_file()
    assert not list(Path(outs[0]).parent.glob("*.tmp-*"))
