"""Where the master key comes from, and what an operator reads when it is wrong: the refusal of a
malformed key names the environment variable to fix (mutation testing found its name unchecked)."""

from __future__ import annotations

import pytest

from ctxcache.engine.sealing import load_master_key
from ctxcache.errors import ConfigError


def test_a_malformed_master_key_names_the_variable_to_fix():
    with pytest.raises(ConfigError) as exc:
        load_master_key(None, "not a key: neither hex nor base64!")
    assert "CTXCACHE_MASTER_KEY" in str(exc.value)


def test_hex_text_around_whitespace_and_a_key_file_are_read_as_is(tmp_path):
    assert load_master_key(None, "  " + "0f" * 32 + "\n") == b"\x0f" * 32
    key_file = tmp_path / "master.key"
    key_file.write_bytes(bytes(range(40)))
    assert load_master_key(str(key_file), "0f" * 32) == bytes(range(40))  # the file wins, raw bytes
    with pytest.raises(ConfigError, match="cannot be read"):
        load_master_key(str(tmp_path / "missing.key"), None)
