"""Tenancy options the other tests leave unchecked: a bad ``on_throttle`` is named in the error."""

from __future__ import annotations

import pytest

from ctxcache.engine.tenancy import load_tenancy
from ctxcache.errors import ConfigError


def test_an_unknown_throttle_mode_is_named_in_the_error():
    with pytest.raises(ConfigError, match=r"tenancy.on_throttle must be one of .*wait.*recompute.*got 'drop'"):
        load_tenancy({"a": {}}, {"on_throttle": "drop"}, env={})
