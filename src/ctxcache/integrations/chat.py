"""Chat prompts to token ids: the one rendering that workers and the router share.

A worker (CachedLM) and the router (router/requests.py) must turn a conversation into exactly
the same ids, or the router's block keys name blocks no worker has. Both call ``encode_chat``
with the template ``chat_template_for`` picks. Needs only a tokenizer, never the model.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .model_store import GEMMA_CHAT_TEMPLATE

ROLES = ("system", "user", "assistant")
FALLBACK_TEMPLATE = (
    "{{ bos_token or '' }}{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


def model_type(path: Path) -> str:
    try:
        return str(json.loads((path / "config.json").read_text()).get("model_type", ""))
    except (OSError, ValueError):
        return ""


def chat_template_for(tokenizer: Any, model_type: str, override: str | None = None) -> str:
    """The template a model directory is served with: an explicit one, the tokenizer's own, the
    separate-system-turn Gemma one for a Gemma without one (model_store.py says why), a fallback."""
    if override:
        return override
    own = getattr(tokenizer, "chat_template", None)
    if own:
        return str(own)
    return GEMMA_CHAT_TEMPLATE if model_type.startswith("gemma") else FALLBACK_TEMPLATE


def encode_chat(
    tokenizer: Any, template: str, messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool = True
) -> list[int]:
    """Token ids of a conversation rendered with the chat template (BOS included once)."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence) or not messages:
        raise ValueError("messages must be a non-empty list of {'role': ..., 'content': ...} dicts")
    msgs = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            raise ValueError(f"messages[{i}] must be {{'role': one of {ROLES}, 'content': str}}, got {m!r}")
        msgs.append({"role": m["role"], "content": m["content"]})
    text = tokenizer.apply_chat_template(
        msgs, chat_template=template, tokenize=False, add_generation_prompt=add_generation_prompt
    )
    return list(tokenizer(text, add_special_tokens=False).input_ids)
