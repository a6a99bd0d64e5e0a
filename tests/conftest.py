from __future__ import annotations

import hashlib

import pytest


class FakeClock:
    """An injectable clock: time moves only when a test says so."""

    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, dt: float) -> None:
        self.t += dt


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def payload_for(namespace: str, tokens: list[int] | tuple[int, ...], block: int, block_size: int) -> bytes:
    """A payload that names exactly which prefix it belongs to, so a wrong hit is detectable."""
    h = hashlib.sha256(namespace.encode() + b"|" + repr(tuple(tokens[: (block + 1) * block_size])).encode())
    return h.digest()
