"""Request and response bodies: the subset of the OpenAI and Anthropic APIs this server implements.

Unknown request fields are ignored (the official clients send optional fields we do not use);
known fields are validated, and a bad value is a 400 that names the field.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Req(BaseModel):
    model_config = ConfigDict(extra="ignore")


# --- OpenAI: POST /v1/chat/completions ---------------------------------------------------------------
class TextPart(_Req):
    type: Literal["text"]
    text: str


class ChatMessage(_Req):
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart]
    name: str | None = None


class StreamOptions(_Req):
    include_usage: bool = False


class ChatCompletionRequest(_Req):
    model: str = Field(min_length=1)
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    stop: str | list[str] | None = Field(None, description="up to 4 stop strings")
    seed: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(1, ge=1, le=1, description="only 1 is supported")
    user: str | None = None
    cache_salt: str | None = Field(
        None, description="vLLM-style per-request salt: only requests with the same salt (and tenant) share cache"
    )


class PromptTokensDetails(BaseModel):
    cached_tokens: int


class ChatUsage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class Choice(BaseModel):
    index: int = 0
    message: AssistantMessage
    finish_reason: str
    logprobs: None = None


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: ChatUsage
    ctxcache: dict[str, Any] = Field(description="ctxcache extension: usage by tier and per-phase timings")


# --- Anthropic: POST /v1/messages --------------------------------------------------------------------
class CacheControl(_Req):
    type: Literal["ephemeral"]
    ttl: Literal["5m", "1h"] = "5m"


class TextBlock(_Req):
    type: Literal["text"]
    text: str
    cache_control: CacheControl | None = None


class AnthropicMessage(_Req):
    role: Literal["user", "assistant"]
    content: str | list[TextBlock] = Field(min_length=1)


class MessagesRequest(_Req):
    model: str = Field(min_length=1)
    max_tokens: int = Field(ge=1)
    messages: list[AnthropicMessage] = Field(min_length=1)
    system: str | list[TextBlock] | None = None
    stop_sequences: list[str] | None = None
    temperature: float = Field(1.0, ge=0.0, le=1.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=1, description="accepted and ignored")
    stream: bool = False
    metadata: dict[str, Any] | None = None
    cache_control: CacheControl | None = Field(None, description="automatic caching: a breakpoint at the prompt's end")


class CacheCreation(BaseModel):
    ephemeral_5m_input_tokens: int = 0
    ephemeral_1h_input_tokens: int = 0


class AnthropicUsage(BaseModel):
    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int
    cache_creation: CacheCreation


class ResponseText(BaseModel):
    type: Literal["text"] = "text"
    text: str


class MessageResponse(BaseModel):
    id: str
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    model: str
    content: list[ResponseText]
    stop_reason: str | None
    stop_sequence: str | None
    usage: AnthropicUsage
    ctxcache: dict[str, Any] = Field(description="ctxcache extension: usage by tier and per-phase timings")


# --- shared ------------------------------------------------------------------------------------------
class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    type: Literal["model"] = "model"
    created: int
    created_at: str
    display_name: str
    owned_by: str = "ctxcache"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]
    has_more: bool = False
    first_id: str | None = None
    last_id: str | None = None
