"""Run an app on loopback in a background thread: for tests, benchmarks and notebooks."""

from __future__ import annotations

import socket
import threading
import time
from types import TracebackType

import uvicorn
from fastapi import FastAPI


class LiveServer:
    """``with LiveServer(app) as url: ...``: serves ``app`` on 127.0.0.1 at a free port until exit."""

    def __init__(self, app: FastAPI, host: str = "127.0.0.1", start_timeout_s: float = 30.0) -> None:
        self.app, self.host, self.start_timeout_s = app, host, start_timeout_s
        self.server = uvicorn.Server(uvicorn.Config(app, host=host, port=0, log_level="warning", lifespan="on"))
        self._thread: threading.Thread | None = None
        self.url = ""

    def __enter__(self) -> str:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind((self.host, 0))  # port 0: the OS picks a free one, no race with other tests
        port = sock.getsockname()[1]
        self._thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + self.start_timeout_s
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the server did not start (see its log above)")
            time.sleep(0.01)
        self.url = f"http://{self.host}:{port}"
        return self.url

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=30)
