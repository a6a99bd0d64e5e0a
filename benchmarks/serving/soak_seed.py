"""Seed the disk tier of `ctxcache serve`'s default cache with documents, for benchmarks/serving/soak.py.

On a shared 2-core machine the model prefills ~25-100 tokens/s, so real prefills alone fill a
2 GiB RAM tier (58k tokens of Gemma 3 270M's KV) in 10-40 minutes. Seeded documents make the RAM
tier fill and churn within the run through the server's own paths instead: a request for a seeded
document hits its blocks on disk, which are loaded and promoted into RAM (evicting and demoting
others), and only the rest of the prompt is prefilled. The seeded payloads have the real shapes
and dtype (every layer's K and V for 32 tokens, float32) but zero values, so replies to seeded
documents are not meaningful text; memory is what is measured.

The blocks are written with the server's exact cache configuration (its default tiers under the
soak's CTXCACHE_HOME, the model fingerprint in the namespace, tenant "default") and the token ids
its chat template gives, so the server finds them at startup like blocks a previous run saved.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def seed(home: Path, model_dir: Path, conversations: Sequence[list[dict[str, str]]]) -> dict[str, int]:
    """Store every full block of each conversation's prompt into the default disk tier."""
    os.environ["CTXCACHE_HOME"] = str(home)  # embedded_tiers() puts the disk tier under it
    import numpy as np
    from transformers import AutoConfig, AutoTokenizer

    from ctxcache import ContextCache
    from ctxcache.integrations.model_store import GEMMA_CHAT_TEMPLATE, fingerprint
    from ctxcache.server.cli import embedded_tiers
    from ctxcache.server.config import ServerConfig

    fp = fingerprint(model_dir)
    cc = ServerConfig().cache_dict(fp)
    cc["tiers"] = [t for t in embedded_tiers(fp) if t["kind"] == "disk"]
    tok = AutoTokenizer.from_pretrained(model_dir)
    template = tok.chat_template or GEMMA_CHAT_TEMPLATE
    mc: Any = AutoConfig.from_pretrained(model_dir)
    mc = getattr(mc, "text_config", mc)
    head_dim = getattr(mc, "head_dim", None) or mc.hidden_size // mc.num_attention_heads
    shape = (1, mc.num_key_value_heads, int(cc["block_size"]), head_dim)
    zeros = np.zeros(shape, np.float32)
    payload = [(zeros, zeros)] * mc.num_hidden_layers
    blocks = stored = 0
    cache = ContextCache.from_config(cc)
    try:
        for msgs in conversations:
            text = tok.apply_chat_template(msgs, chat_template=template, tokenize=False, add_generation_prompt=True)
            ids = list(tok(text, add_special_tokens=False).input_ids)
            n = len(ids) // cache.block_size
            usage = cache.store(ids[: n * cache.block_size], [payload] * n, "default")
            blocks += n
            stored += usage.cache_creation_tokens
    finally:
        cache.close()
    return {
        "seeded_blocks": blocks,
        "seeded_tokens": stored,
        "bytes_per_block": 2 * zeros.nbytes * mc.num_hidden_layers,
    }
