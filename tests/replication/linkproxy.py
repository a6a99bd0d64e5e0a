"""A loopback TCP proxy whose link can be cut and healed: a partition between two regions, as the
replicator sees it (connections reset, new ones refused at once)."""

from __future__ import annotations

import contextlib
import socket
import threading


class LinkProxy:
    def __init__(self, target_port: int, host: str = "127.0.0.1") -> None:
        self.target = (host, target_port)
        self.lsock = socket.create_server((host, 0))
        self.port = self.lsock.getsockname()[1]
        self.up = True
        self.conns: set[socket.socket] = set()
        self.lock = threading.Lock()
        self.closed = False
        threading.Thread(target=self._accept, name="linkproxy-accept", daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.lsock.accept()
            except OSError:
                return
            if not self.up:
                client.close()
                continue
            try:
                server = socket.create_connection(self.target, timeout=2)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.conns |= {client, server}
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), name="linkproxy-pipe", daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data or not self.up:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            self._drop(src, dst)

    def _drop(self, *socks: socket.socket) -> None:
        with self.lock:
            for s in socks:
                self.conns.discard(s)
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()

    def cut(self) -> None:
        self.up = False
        with self.lock:
            live = list(self.conns)
        self._drop(*live)

    def heal(self) -> None:
        self.up = True

    def close(self) -> None:
        self.closed = True
        self.cut()
        self.lsock.close()
