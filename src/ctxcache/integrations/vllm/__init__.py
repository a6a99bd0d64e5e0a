"""ctxcache as a vLLM KV connector (see docs/vllm.md).

Load it with ``kv_transfer_config={"kv_connector": "CtxCacheConnector", "kv_connector_module_path":
"ctxcache.integrations.vllm", "kv_role": "kv_both", ...}``. The connector class imports vLLM, so it
is resolved lazily: the planning, lookup and KV-copy modules import without vLLM installed.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CtxCacheConnector", "CtxCacheHybridConnector"]


def __getattr__(name: str) -> Any:
    if name == "CtxCacheConnector":
        from .connector import CtxCacheConnector

        return CtxCacheConnector
    if name == "CtxCacheHybridConnector":  # SupportsHMA: vLLM keeps its hybrid KV manager on
        from .connector import CtxCacheHybridConnector

        return CtxCacheHybridConnector
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
