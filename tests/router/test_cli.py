"""`ctxcache route` refuses bad input before loading anything, with a clear message."""

from __future__ import annotations

from typer.testing import CliRunner

from ctxcache.cli import app


def test_worker_urls_must_be_http():
    r = CliRunner().invoke(app, ["route", "--worker", "127.0.0.1:8001"])
    assert r.exit_code == 2 and "must be an http(s):// URL" in r.output


def test_a_redis_url_that_is_not_one_is_refused_before_loading_anything():
    r = CliRunner().invoke(app, ["route", "--worker", "http://127.0.0.1:1", "--redis", "127.0.0.1:6379"])
    assert r.exit_code == 2 and "--redis must look like 'redis://host:port/db'" in r.output


def test_the_help_says_what_redis_does():
    r = CliRunner().invoke(app, ["route", "--help"], env={"COLUMNS": "250"})
    assert r.exit_code == 0 and "KV-event streams" in r.output and "/readyz" in r.output


def test_a_bad_config_file_is_an_error_not_a_traceback(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[cache]\nblock_size = -1\n")
    r = CliRunner().invoke(app, ["route", "--worker", "http://127.0.0.1:1", "--config", str(bad)])
    assert r.exit_code == 2 and "block_size" in r.output
