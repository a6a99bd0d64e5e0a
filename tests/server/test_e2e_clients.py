"""The official openai and anthropic clients against a live server running the real model."""

from __future__ import annotations

import anthropic
import openai
import pytest

from ctxcache.server import ServerConfig, create_app
from ctxcache.server.testing import LiveServer

from ..integrations.model_fixture import new_lm, text

MODEL = "gemma-3-270m"
SYSTEM = "You answer questions about a small town. Facts: " + text(8)  # ~150 tokens: several 32-token blocks


@pytest.fixture(scope="module")
def url():
    lm = new_lm(block_size=32)
    app = create_app(lm, ServerConfig(api_keys={"sk-test": "tenant-test", "sk-other": "tenant-other"}), model_id=MODEL)
    with LiveServer(app) as u:
        yield u


def test_openai_client_reports_cached_tokens_on_the_second_request(url):
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0)
    assert [m.id for m in client.models.list()] == [MODEL]
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Who got a parcel?"}]
    first = client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=3, temperature=0)
    assert first.usage.prompt_tokens > 96 and first.usage.prompt_tokens_details.cached_tokens == 0
    assert first.choices[0].message.content
    msgs[1]["content"] = "When did the library open?"
    second = client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=3, temperature=0)
    assert second.usage.prompt_tokens_details.cached_tokens >= 96

    stream = client.chat.completions.create(
        model=MODEL, messages=msgs, max_tokens=3, temperature=0, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == second.choices[0].message.content  # greedy, same prompt: same text
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens >= 96

    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{url}/v1", api_key="wrong", max_retries=0).models.list()
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-nope", messages=msgs, max_tokens=3)


def test_anthropic_client_reads_what_a_breakpoint_cached(url):
    # Another tenant: the OpenAI test already cached this system prompt for "tenant-test".
    client = anthropic.Anthropic(base_url=url, api_key="sk-other", max_retries=0)
    system = [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral", "ttl": "5m"}}]
    first = client.messages.create(
        model=MODEL,
        max_tokens=3,
        extra_body={"temperature": 0},
        system=system,
        messages=[{"role": "user", "content": "Why rain?"}],
    )
    u1 = first.usage
    assert u1.cache_creation_input_tokens >= 96 and u1.cache_read_input_tokens == 0
    assert u1.cache_creation.ephemeral_5m_input_tokens == u1.cache_creation_input_tokens
    assert first.content[0].type == "text" and first.stop_reason in ("max_tokens", "end_turn")

    with client.messages.stream(
        model=MODEL,
        max_tokens=3,
        extra_body={"temperature": 0},
        system=system,
        messages=[{"role": "user", "content": "Any ships?"}],
    ) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert final.usage.cache_read_input_tokens == u1.cache_creation_input_tokens
    assert final.content[0].text == streamed and final.usage.output_tokens >= 1

    with pytest.raises(anthropic.BadRequestError, match="max_tokens"):
        client.messages.create(model=MODEL, max_tokens=9000, messages=[{"role": "user", "content": "x"}])
