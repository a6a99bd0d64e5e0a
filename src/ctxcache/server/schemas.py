"""Request and response bodies: the subset of the OpenAI and Anthropic APIs this server implements.

Unknown request fields are ignored (the official clients send optional fields we do not use);
known fields are validated strictly against the published schema, and a bad value is a 400 that
names the field.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from ..engine.tenancy import SALT_PATTERN

StopText = Annotated[str, Field(min_length=1)]


def _integral(v: Any) -> Any:
    # JSON Schema's "integer" includes 2.0; strict mode alone would refuse it (and rightly "2" and true).
    return int(v) if isinstance(v, float) and v.is_integer() else v


# The bounds go before the validator: after it, pydantic publishes them as unknown keywords ("ge").
PosInt = Annotated[int, Field(ge=1), BeforeValidator(_integral)]
# Any integer: the sampler reduces it modulo 2**64 (a bound past 2**53 cannot be published exactly).
Seed = Annotated[int, Field(description="any integer; used modulo 2**64"), BeforeValidator(_integral)]
One = Annotated[int, Field(ge=1, le=1), BeforeValidator(_integral)]


# Fields a client may send that this server does not implement: published, and refused with a 400
# naming the field unless they hold the value that means "off" (nothing is accepted and ignored).
UNSUPPORTED = "not supported by this server: leave it out"
NotSupported = Annotated[None, Field(description=UNSUPPORTED)]


def neutral(value: float) -> Any:
    return Annotated[float, Field(ge=value, le=value, description=f"not supported: only {value} (off) is accepted")]


def _bool_only(v: Any) -> Any:
    if v is not None and not isinstance(v, bool):  # Literal[False] alone would take 0 (0 == False)
        raise ValueError("Input should be a valid boolean")
    return v


OnlyFalse = Annotated[Literal[False], BeforeValidator(_bool_only), Field(description="not supported: only false")]

UNSUPPORTED_FIELDS = frozenset(
    [
        "tools",
        "tool_choice",
        "response_format",
        "functions",
        "function_call",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "top_k",
        "min_p",
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
        "thinking",
    ]
)


class _Req(BaseModel):
    # strict: what /openapi.json says is what is accepted ("4" is not an integer, 1 is not a bool).
    model_config = ConfigDict(extra="ignore", strict=True)


def _find_surrogate(value: Any, where: str) -> str | None:
    """The path of the first string holding a lone surrogate (valid JSON, but not Unicode text)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return where or "body"
        return None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for k, v in items:
        hit = _find_surrogate(k, where) if isinstance(k, str) else None
        hit = hit or _find_surrogate(v, f"{where}.{k}" if where else str(k))
        if hit:
            return hit
    return None


class _TopReq(_Req):
    @model_validator(mode="before")
    @classmethod
    def _unicode_only(cls, data: Any) -> Any:
        where = _find_surrogate(data, "")
        if where is not None:
            raise ValueError(
                f"{where} holds a lone UTF-16 surrogate (such as \\ud800), which is not valid Unicode text"
            )
        return data


class _Unsupported(_Req):
    """Sampling and tool fields this server does not implement: refused unless 'off'."""

    tools: NotSupported = None
    tool_choice: NotSupported = None
    response_format: NotSupported = None
    logit_bias: NotSupported = None
    top_logprobs: NotSupported = None
    presence_penalty: neutral(0.0) | None = None  # type: ignore[valid-type]
    frequency_penalty: neutral(0.0) | None = None  # type: ignore[valid-type]
    top_k: NotSupported = None
    min_p: neutral(0.0) | None = None  # type: ignore[valid-type]
    repetition_penalty: neutral(1.0) | None = None  # type: ignore[valid-type]


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


CacheSalt = Annotated[
    str,
    Field(
        pattern=SALT_PATTERN,
        description="vLLM-style per-request salt: only requests with the same salt (and tenant) share cache",
    ),
]


class ChatCompletionRequest(_TopReq, _Unsupported):
    model: str = Field(min_length=1)
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: PosInt | None = None
    max_completion_tokens: PosInt | None = None
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    stop: StopText | Annotated[list[StopText], Field(max_length=4)] | None = Field(
        None, description="up to 4 stop strings"
    )
    seed: Seed | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: One = Field(1, description="only 1 is supported")
    user: str | None = None
    functions: NotSupported = None
    function_call: NotSupported = None
    logprobs: OnlyFalse | None = None
    cache_salt: CacheSalt | None = None


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
    content: Annotated[str, Field(min_length=1)] | Annotated[list[TextBlock], Field(min_length=1)]


class MessagesRequest(_TopReq):
    """A request may carry at most 4 cache_control breakpoints in all (system, messages, top level)."""

    model: str = Field(min_length=1)
    max_tokens: PosInt
    messages: list[AnthropicMessage] = Field(min_length=1)
    system: str | list[TextBlock] | None = None
    stop_sequences: list[StopText] | None = None
    temperature: float = Field(1.0, ge=0.0, le=1.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: NotSupported = None
    tools: NotSupported = None
    tool_choice: NotSupported = None
    thinking: NotSupported = None
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


# --- OpenAI: POST /v1/completions (legacy text API) --------------------------------------------------
TokenId = Annotated[int, Field(ge=0, le=2**31 - 1), BeforeValidator(_integral)]


class CompletionRequest(_TopReq, _Unsupported):
    model: str = Field(min_length=1)
    prompt: Annotated[str, Field(min_length=1)] | Annotated[list[TokenId], Field(min_length=1)] = Field(
        description="text, or a list of token ids"
    )
    max_tokens: PosInt | None = Field(None, description="default 16 (OpenAI's), clamped to the context")
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    stop: StopText | Annotated[list[StopText], Field(max_length=4)] | None = None
    seed: Seed | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: One = Field(1, description="only 1 is supported")
    best_of: One | None = None
    echo: OnlyFalse | None = None
    suffix: NotSupported = None
    logprobs: NotSupported = None
    user: str | None = None
    cache_salt: CacheSalt | None = None


class CompletionChoice(BaseModel):
    index: int = 0
    text: str
    finish_reason: str
    logprobs: None = None


class Completion(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: ChatUsage
    ctxcache: dict[str, Any] = Field(description="ctxcache extension: usage by tier and per-phase timings")


# --- Anthropic count_tokens, vLLM-style /tokenize and /detokenize ---------------------------------------
class CountTokensRequest(_TopReq):
    model: str = Field(min_length=1)
    messages: list[AnthropicMessage] = Field(min_length=1)
    system: str | list[TextBlock] | None = None
    cache_control: CacheControl | None = None
    tools: NotSupported = None
    thinking: NotSupported = None


class TokenizePrompt(_TopReq):
    model: str | None = None
    prompt: str
    add_special_tokens: bool = True


class TokenizeChat(_TopReq):
    model: str | None = None
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    add_generation_prompt: bool = True


class DetokenizeRequest(_TopReq):
    model: str | None = None
    tokens: list[TokenId]


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
