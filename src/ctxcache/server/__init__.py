"""An OpenAI- and Anthropic-compatible HTTP server around a CachedLM (needs the model and server extras)."""

from __future__ import annotations

from .config import DEFAULT_BLOCK_SIZE, ServerConfig, load_server_config

__all__ = ["DEFAULT_BLOCK_SIZE", "ServerConfig", "create_app", "load_server_config"]


def __getattr__(name: str) -> object:
    # create_app pulls in FastAPI and torch: import it only when asked for.
    if name == "create_app":
        from .app import create_app

        return create_app
    raise AttributeError(name)
