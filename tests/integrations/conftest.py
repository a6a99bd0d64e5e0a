from __future__ import annotations

import pytest

from .model_fixture import new_lm


@pytest.fixture
def lm():  # a fresh cache per test on the shared model (loaded once per session)
    return new_lm()
