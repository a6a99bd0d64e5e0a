from __future__ import annotations

from collections.abc import Iterator

import pytest

from ..conftest import RedisServer


@pytest.fixture
def cluster(cluster_partial: list[RedisServer], request: pytest.FixtureRequest) -> Iterator[list[RedisServer]]:
    """The 3-master cluster that serves with a master down; the test module's ``PREFIX`` keys are
    deleted from every master afterwards."""
    yield cluster_partial
    prefix: bytes = request.module.PREFIX
    for node in cluster_partial:
        for name in node.client().keys(prefix + b"*"):
            node.client().delete(name)
