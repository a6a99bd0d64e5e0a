"""The real model, loaded once per test process and shared by tests/integrations and tests/server.

Model tests never skip: without torch/transformers they fail with how to install them (make test
installs everything). The first run converts the default model once (~1-2 min) into
$CTXCACHE_HOME (default ~/.cache/ctxcache), which later runs reuse.
"""

from __future__ import annotations

import functools
import os
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # must precede the first torch import

import pytest

BLOCK = 64


@functools.cache
def _load() -> tuple[Any, Any]:
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        pytest.fail(
            f"model tests need torch and transformers ({exc}): run `make test`, or "
            "pip install torch==2.13.0 && pip install -e '.[model,server,dev]'",
            pytrace=False,
        )
    from ctxcache import ContextCache
    from ctxcache.integrations.model_store import resolve_model
    from ctxcache.integrations.transformers import CachedLM

    lm = CachedLM.from_pretrained(resolve_model(None), ContextCache.from_config({"block_size": BLOCK}))
    return lm.model, lm.tokenizer


def new_lm(block_size: int = BLOCK, capacity: str = "1GiB", **kw: Any) -> Any:
    """A CachedLM on the shared model with a fresh, empty cache."""
    from ctxcache import ContextCache
    from ctxcache.integrations.transformers import CachedLM

    model, tok = _load()
    cache = ContextCache.from_config({"block_size": block_size, "tiers": [{"kind": "memory", "capacity": capacity}]})
    return CachedLM(model, tok, cache, **kw)


_SENTENCES = [
    "The library in the old town opened its doors at nine in the morning.",
    "A courier brought three parcels, one of which was addressed to the mayor.",
    "Rain had fallen all night, and the river was higher than anyone remembered.",
    "The baker on Elm Street sold out of rye bread before noon.",
    "Children from the school walked to the museum to see the new exhibition on ships.",
    "At the station, the 10:42 train to the coast was delayed by twenty minutes.",
    "The council debated whether to build a second bridge across the river.",
    "An engineer explained that the old bridge could carry only light traffic.",
]


def text(n_sentences: int, seed: int = 0) -> str:
    """Deterministic filler prose, roughly 17 tokens per sentence."""
    return " ".join(f"({i + 1}) {_SENTENCES[(i * 5 + seed * 3) % len(_SENTENCES)]}" for i in range(n_sentences))


def prompt_ids(lm: Any, n_tokens: int, seed: int = 0) -> list[int]:
    """Exactly ``n_tokens`` ids: BOS then filler text."""
    ids = lm.tokenizer(text(n_tokens // 8 + 4, seed)).input_ids
    assert len(ids) >= n_tokens
    return list(ids[:n_tokens])
