"""The [observability] table of the server config and `ctxcache serve`'s logging options (the
``ctxcache`` logger is restored after each test by conftest)."""

from __future__ import annotations

import logging

import pytest
from typer.testing import CliRunner

from ctxcache.cli import app
from ctxcache.errors import ConfigError
from ctxcache.server import load_server_config

runner = CliRunner()


def test_observability_table_reaches_the_config(tmp_path):
    p = tmp_path / "server.toml"
    p.write_text(
        '[observability]\nwindow_s = 120\nlog_every_s = 5\ntrace_exporter = "memory"\nadmin_key = "adm"\n'
        '[observability.ab]\nfraction = 0.25\nsalt = "exp-1"\n'
        'cache = { block_size = 32, tiers = [{ kind = "memory", capacity = "64MiB", policy = "s3fifo" }] }\n'
    )  # fmt: skip
    obs = load_server_config(p).observability
    assert (obs.window_s, obs.log_every_s, obs.trace_exporter, obs.admin_key) == (120, 5, "memory", "adm")
    assert obs.ab.fraction == 0.25 and obs.ab.salt == "exp-1" and obs.ab.cache["tiers"][0]["policy"] == "s3fifo"
    assert load_server_config(None).observability.ab.fraction == 0.0


@pytest.mark.parametrize(
    ("table", "needle"),
    [
        ({"windows": 3}, "unknown [observability] keys ['windows']"),
        ({"window_s": 0}, "window_s must be > 0"),
        ({"trace_exporter": "jaeger"}, "trace_exporter must be one of"),
        ({"cost_model": "gpt-9"}, "unknown cost model"),
        ({"ab": {"fraction": 2}}, "ab.fraction must be a number in [0, 1]"),
        ({"ab": {"fraction": 0.5}}, "needs ab.cache"),
        ({"ab": {"share": 0.5}}, "[observability.ab] takes"),
        ({"ab": {"fraction": 0.5, "cache": {"block_size": -1}}}, "block_size"),
        ("yes", "[observability] must be a table"),
    ],
)
def test_bad_observability_table_is_rejected_with_a_message(table, needle):
    with pytest.raises(ConfigError) as info:
        load_server_config({"observability": table})
    assert needle in str(info.value)


def test_serve_rejects_a_bad_log_level_before_loading_anything(tmp_path):
    res = runner.invoke(app, ["serve", "--log-level", "LOUD"])
    assert res.exit_code == 2 and "unknown log level 'LOUD'" in res.output
    res = runner.invoke(app, ["serve", "--log-level", "debug", "--config", str(tmp_path / "missing.toml")])
    assert res.exit_code == 2 and "config file not found" in res.output  # the level was accepted
    assert logging.getLogger("ctxcache").level == logging.DEBUG
