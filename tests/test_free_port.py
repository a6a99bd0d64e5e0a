"""tests/conftest.py's free_port under pytest-xdist: each worker draws from its own block below the
kernel's ephemeral range, and one process never gets the same port twice."""

from __future__ import annotations

import pytest

from tests import conftest


@pytest.mark.parametrize("worker", ["gw0", "gw1", "gw5"])
def test_a_workers_ports_are_in_its_own_block(monkeypatch, worker):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
    lo = conftest._PORT_BASE + int(worker[2:]) * conftest._PORT_BLOCK
    ports = [conftest.free_port() for _ in range(50)]
    assert all(lo <= p < lo + conftest._PORT_BLOCK for p in ports)
    assert len(set(ports)) == len(ports)
    assert lo + conftest._PORT_BLOCK <= 32768  # below Linux's ephemeral range: no client socket takes one


def test_without_xdist_the_first_block_is_used(monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    assert conftest._PORT_BASE <= conftest.free_port() < conftest._PORT_BASE + conftest._PORT_BLOCK
