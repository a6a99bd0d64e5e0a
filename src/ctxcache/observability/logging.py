"""Logging setup for the ``ctxcache.*`` loggers: level and format from arguments or environment.

``configure(level=None, json=None)``; unset arguments come from ``CTXCACHE_LOG_LEVEL`` (default
INFO) and ``CTXCACHE_LOG_JSON`` (1/true: one JSON object per line, else human-readable text).
Records carry structured fields in ``extra={"fields": {...}}``; both formats print them, so a
request line is greppable as text and parseable as JSON. No prompt text is ever passed in.
"""

from __future__ import annotations

import json as _json
import logging
import os
import sys
import time
from typing import IO, Any

LOGGER = "ctxcache"
_HANDLER_MARK = "_ctxcache_handler"
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": round(record.created, 3),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            out.update(fields)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return _json.dumps(out, default=str, separators=(",", ":"))


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict) and fields:
            line += " " + " ".join(
                f"{k}={_json.dumps(v, default=str, separators=(',', ':'))}" for k, v in fields.items()
            )
        return line


def _env_bool(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def configure(
    level: str | int | None = None, json: bool | None = None, stream: IO[str] | None = None
) -> logging.Logger:
    """Install one handler on the ``ctxcache`` logger (replacing ours from an earlier call).

    Raises ValueError for an unknown level name, so a typo in a flag or env var is not silent."""
    if level is None:
        level = os.environ.get("CTXCACHE_LOG_LEVEL", "INFO")
    if isinstance(level, str):
        name = level.strip().upper()
        if name not in LEVELS:
            raise ValueError(f"unknown log level {level!r}; use one of {', '.join(LEVELS)}")
        level = getattr(logging, name)
    if json is None:
        json = _env_bool("CTXCACHE_LOG_JSON")
    log = logging.getLogger(LOGGER)
    for h in list(log.handlers):
        if getattr(h, _HANDLER_MARK, False):
            log.removeHandler(h)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if json else TextFormatter())
    setattr(handler, _HANDLER_MARK, True)
    log.addHandler(handler)
    log.setLevel(level)
    log.propagate = False  # one line per record, not a second copy through the root logger
    return log


def emit(logger: logging.Logger, level: int, msg: str, **fields: Any) -> None:
    logger.log(level, msg, extra={"fields": fields})
