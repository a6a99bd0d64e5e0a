from __future__ import annotations

import contextlib

import httpx
import pytest

from ctxcache.server import ServerConfig, create_app
from ctxcache.server.testing import LiveServer

from .fake import FakeLM

MODEL = "fake-model"


@contextlib.contextmanager
def serve(lm=None, **cfg):
    """A live server on loopback around ``lm`` (a FakeLM by default)."""
    lm = lm or FakeLM()
    app = create_app(lm, ServerConfig(**cfg), model_id=MODEL)
    with LiveServer(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        client.lm = lm
        client.app = app
        yield client


@pytest.fixture
def client():
    with serve() as c:
        yield c


def chat(text="Hi", system=None, **kw):
    msgs = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": text}]
    return {"model": MODEL, "messages": msgs, "max_tokens": 4, **kw}


def message(text="Hi", system=None, **kw):
    body = {"model": MODEL, "messages": [{"role": "user", "content": text}], "max_tokens": 4, **kw}
    if system is not None:
        body["system"] = system
    return body
