"""Model resolution and preparation helpers (no model load)."""

from __future__ import annotations

import json

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
