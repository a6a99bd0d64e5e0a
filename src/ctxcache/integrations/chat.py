"""Chat prompts to token ids: the one rendering that workers and the router share.

A worker (CachedLM) and the router (router/requests.py) must turn a conversation into exactly
the same ids, or the router's block keys name blocks no worker has. Both call ``encode_chat``
with the template ``chat_template_for`` picks. Needs only a tokenizer, never the model.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
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


def text_encoder(tokenizer: Any) -> Callable[[str], list[int]]:
    """``text -> ids`` as ``tokenizer(text, add_special_tokens=False).input_ids`` gives them.

    For a transformers tokenizer over a Hugging Face ``tokenizers`` backend, the backend's
    ``encode_batch_fast`` on a one-text batch: the same ids (the same backend encodes them; only
    the character offsets, which nothing here reads, are not computed) for ~half the CPU of the
    transformers call on a 4k-token prompt (docs/routing.md, "Router overhead"). The router calls
    this; workers keep the plain call, and tests/router/test_requests.py checks both agree."""
    backend = getattr(tokenizer, "_tokenizer", None)
    fast = getattr(backend, "encode_batch_fast", None)
    if fast is None or not callable(getattr(tokenizer, "apply_chat_template", None)):
        return lambda text: list(tokenizer(text, add_special_tokens=False).input_ids)
    return lambda text: fast([text], add_special_tokens=False)[0].ids  # type: ignore[no-any-return]


def encode_chat(
    tokenizer: Any,
    template: str,
    messages: Sequence[Mapping[str, Any]],
    *,
    add_generation_prompt: bool = True,
    encode: Callable[[str], list[int]] | None = None,
) -> list[int]:
    """Token ids of a conversation rendered with the chat template (BOS included once);
    ``encode`` (text -> ids, e.g. ``text_encoder(tokenizer)``) replaces the tokenizer call."""
    text = render_chat(tokenizer, template, messages, add_generation_prompt=add_generation_prompt)
    if encode is not None:
        return encode(text)
    return list(tokenizer(text, add_special_tokens=False).input_ids)


def render_chat(
    tokenizer: Any, template: str, messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool = True
) -> str:
    """A conversation as the chat template renders it (the text ``encode_chat`` tokenizes)."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence) or not messages:
        raise ValueError("messages must be a non-empty list of {'role': ..., 'content': ...} dicts")
    msgs = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            raise ValueError(f"messages[{i}] must be {{'role': one of {ROLES}, 'content': str}}, got {m!r}")
        msgs.append({"role": m["role"], "content": m["content"]})
    text: str = tokenizer.apply_chat_template(
        msgs, chat_template=template, tokenize=False, add_generation_prompt=add_generation_prompt
    )
    return text
