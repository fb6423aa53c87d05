"""The ``/v1/chat/completions/derender`` and ``/v1/completions/derender`` bodies (vLLM 0.32's
``DerenderChatRequest | DerenderChatStreamRequest`` and the completion pair, vllm/entrypoints/
scale_out/token_in_token_out/protocol.py) as msgspec Structs, decoded with pydantic's error
reports: each path takes both shapes, told apart by ``stream``; a body neither fits gets the
errors of both branches, each under its class name, as FastAPI reports a union body.

The nested ``chat_request`` / ``completion_request`` are the chat and completion bodies of
:mod:`.protocol` (their types checked; the top-level routes' body validators are not run).
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

import msgspec

from .messages_protocol import Checked
from .protocol import ChatCompletionRequest, CompletionRequest, nested_request_errors, schema_of
from .validation import (
    Int,
    LazyModel,
    ListOf,
    Model,
    Optional,
    Spec,
    _err,
    decode_json_object,
    validation_error,
)

__all__ = [
    "DerenderChatBody",
    "DerenderChatStreamBody",
    "DerenderCompletionBody",
    "DerenderCompletionStreamBody",
    "GenerateTokensChoice",
    "GenerateTokensResponse",
    "GenerateTokensStreamChoice",
    "GenerateTokensStreamResponse",
    "InLogProbs",
    "StreamState",
    "parse_derender_chat",
    "parse_derender_completion",
]

NonNegative = Annotated[int, msgspec.Meta(ge=0)]
_MAX_PREV_TOKENS = 1024


def random_uuid() -> str:
    """vLLM's ``random_uuid``: 16 hex digits (the default ``request_id`` of an answer)."""
    return f"{uuid.uuid4().int & 0xFFFFFFFFFFFFFFFF:016x}"


class InLogProb(msgspec.Struct, kw_only=True):
    """vLLM's ``GenerateLogProb``: a candidate by id."""

    token_id: int
    logprob: float
    rank: int | None = None


class InLogProbsContent(InLogProb, kw_only=True):
    """The sampled token of one position and its candidates."""

    top_logprobs: list[InLogProb] = msgspec.field(default_factory=list)


class InLogProbs(msgspec.Struct, kw_only=True):
    """A choice's integer-id ``logprobs``."""

    content: list[InLogProbsContent] | None = None


class InUsage(msgspec.Struct, kw_only=True):
    """vLLM's ``UsageInfo`` as a generate answer carries it."""

    prompt_tokens: int = 0
    total_tokens: int = 0
    completion_tokens: int | None = 0
    prompt_tokens_details: dict[str, Any] | None = None
    completion_tokens_details: dict[str, Any] | None = None


class PromptLogprobIn(msgspec.Struct, kw_only=True):
    """vLLM's ``Logprob`` dataclass."""

    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


class GenerateTokensChoice(msgspec.Struct, kw_only=True):
    """A choice of a full ``output_mode="tokens"`` generate answer."""

    index: int
    finish_reason: str | None = "stop"
    stop_reason: int | str | None = None
    token_ids: list[int] | None = None
    routed_experts: str | None = None
    sampling_mask: list[list[int]] | None = None
    weight_versions: list[dict[str, Any]] | None = None
    logprobs: InLogProbs | None = None


class GenerateTokensStreamChoice(msgspec.Struct, kw_only=True):
    """A choice of one generate stream chunk."""

    index: int
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    token_ids: list[int] | None = None
    routed_experts: str | None = None
    sampling_mask: list[list[int]] | None = None
    weight_versions: list[dict[str, Any]] | None = None
    logprobs: InLogProbs | None = None


class GenerateTokensResponse(msgspec.Struct, kw_only=True):
    """vLLM's ``GenerateTokensResponse`` (a full generate answer)."""

    request_id: str | None = None
    model: str | None = None
    created: int | None = None
    usage: InUsage | None = None
    prompt_logprobs: list[dict[int, PromptLogprobIn] | None] | None = None
    prompt_token_id_logprobs: str | None = None
    prompt_token_ids: list[NonNegative] | None = None
    mm_placeholders: dict[str, list[dict[str, Any]]] | None = None
    metrics: dict[str, Any] | None = None
    kv_transfer_params: dict[str, Any] | None = None
    ec_transfer_params: dict[str, Any] | None = None
    output_mode: Literal["tokens"] = "tokens"
    choices: list[GenerateTokensChoice]


class GenerateTokensStreamResponse(msgspec.Struct, kw_only=True):
    """vLLM's ``GenerateTokensStreamResponse`` (one generate SSE chunk)."""

    request_id: str | None = None
    usage: InUsage | None = None
    prompt_token_ids: list[NonNegative] | None = None
    mm_placeholders: dict[str, list[dict[str, Any]]] | None = None
    metrics: dict[str, Any] | None = None
    output_mode: Literal["tokens"] = "tokens"
    choices: list[GenerateTokensStreamChoice]


class StreamState(msgspec.Struct, kw_only=True):
    """vLLM's ``DerenderStreamState``: what a streaming derender client carries (every
    field, in its order)."""

    prev_tokens: list[str] = msgspec.field(default_factory=list)
    prefix_offset: NonNegative = 0
    read_offset: NonNegative = 0
    role_sent: bool = False
    logprob_context_token_ids: Annotated[list[int], msgspec.Meta(max_length=4)] = msgspec.field(
        default_factory=list
    )
    logprob_text_offset: NonNegative = 0
    output_token_ids: list[int] = msgspec.field(default_factory=list)
    output_chunk_lens: list[Annotated[int, msgspec.Meta(gt=0)]] = msgspec.field(
        default_factory=list
    )
    tools_streamed: bool = False
    last_tool_call_ids: list[str] = msgspec.field(default_factory=list)


class DerenderChatBody(msgspec.Struct, kw_only=True):
    """``DerenderChatRequest`` (``chat_request`` decoded separately)."""

    stream: bool = False
    model: str | None = None
    generate_response: GenerateTokensResponse
    prompt_tokens: int | None = None
    prompt_token_ids: list[NonNegative] | None = None
    chat_request: Any = None


class DerenderChatStreamBody(msgspec.Struct, kw_only=True):
    """``DerenderChatStreamRequest``: one generate chunk and the carried state."""

    stream: bool
    model: str | None = None
    generate_chunk: GenerateTokensStreamResponse
    stream_state: StreamState | None = None
    prompt_tokens: int | None = None
    prompt_token_ids: list[NonNegative] | None = None
    chat_request: Any = None


class DerenderCompletionBody(msgspec.Struct, kw_only=True):
    """``DerenderCompletionRequest``: one generate answer per prompt."""

    stream: bool = False
    model: str | None = None
    generate_responses: list[GenerateTokensResponse]
    prompt_tokens: list[int] | None = None
    prompt_token_ids: list[list[NonNegative] | None] | None = None
    completion_request: Any = None


class DerenderCompletionStreamBody(msgspec.Struct, kw_only=True):
    """``DerenderCompletionStreamRequest``."""

    stream: bool
    model: str | None = None
    generate_chunk: GenerateTokensStreamResponse
    stream_state: StreamState | None = None
    prompt_tokens: int | None = None
    prompt_token_ids: list[NonNegative] | None = None
    completion_request: Any = None


class _BoolLiteral(Spec):
    """``Literal[True]`` / ``Literal[False]``."""

    def __init__(self, value: bool) -> None:
        self.value = value

    def errors(self, value: Any, loc: tuple[Any, ...]) -> list[dict[str, Any]]:
        if value is self.value:
            return []
        msg = f"Input should be {self.value}"
        return [_err("literal_error", loc, msg, value, {"expected": str(self.value)})]


def _prev_tokens_bound(value: Any) -> str | None:
    if len(value) > _MAX_PREV_TOKENS:
        return f"prev_tokens length ({len(value)}) exceeds maximum ({_MAX_PREV_TOKENS})"
    return None


def _state_spec() -> Spec:
    base = schema_of(StreamState)
    base.fields["prev_tokens"] = Checked(base.fields["prev_tokens"], _prev_tokens_bound)
    return Checked(base, _chunk_lens_sum)


def _chunk_lens_sum(value: Any) -> str | None:
    total = sum(value.get("output_chunk_lens") or ())
    count = len(value.get("output_token_ids") or ())
    if total != count:
        return (
            "output_chunk_lens must sum to len(output_token_ids) "
            f"(got sum={total}, len(output_token_ids)={count})"
        )
    return None


def _optional_state() -> Spec:
    return Optional(_state_spec())


def _negative(value: Any) -> str | None:
    if any(int(t) < 0 for t in value):
        return "token_ids must not contain negative values"
    return None


def _answer(struct: type, choice: type) -> Model:
    # a generate answer or chunk whose choices' token_ids have vLLM's non-negative check
    choice_spec = schema_of(choice, {"token_ids": Optional(Checked(ListOf(Int()), _negative))})
    return schema_of(struct, {"choices": ListOf(choice_spec)})


def _full_answer() -> Model:
    return _answer(GenerateTokensResponse, GenerateTokensChoice)


def _chunk() -> Model:
    return _answer(GenerateTokensStreamResponse, GenerateTokensStreamChoice)


_SCHEMAS: dict[type, LazyModel] = {
    DerenderChatBody: LazyModel(
        lambda: schema_of(
            DerenderChatBody,
            {"stream": _BoolLiteral(False), "generate_response": _full_answer()},
        )
    ),
    DerenderChatStreamBody: LazyModel(
        lambda: schema_of(
            DerenderChatStreamBody,
            {
                "stream": _BoolLiteral(True),
                "generate_chunk": _chunk(),
                "stream_state": _optional_state(),
            },
        )
    ),
    DerenderCompletionBody: LazyModel(
        lambda: schema_of(
            DerenderCompletionBody,
            {"stream": _BoolLiteral(False), "generate_responses": ListOf(_full_answer())},
        )
    ),
    DerenderCompletionStreamBody: LazyModel(
        lambda: schema_of(
            DerenderCompletionStreamBody,
            {
                "stream": _BoolLiteral(True),
                "generate_chunk": _chunk(),
                "stream_state": _optional_state(),
            },
        )
    ),
}

_BRANCH_NAMES: dict[type, str] = {
    DerenderChatBody: "DerenderChatRequest",
    DerenderChatStreamBody: "DerenderChatStreamRequest",
    # a model with an "after" validator: pydantic's branch label is the validator's wrapper,
    # which vLLM's error report leaves out of the location
    DerenderCompletionBody: (
        "function-after[_validate_prompt_tokens_length(), DerenderCompletionRequest]"
    ),
    DerenderCompletionStreamBody: "DerenderCompletionStreamRequest",
}

_NESTED: dict[type, str] = {
    DerenderChatBody: "chat_request",
    DerenderChatStreamBody: "chat_request",
    DerenderCompletionBody: "completion_request",
    DerenderCompletionStreamBody: "completion_request",
}


def _completion_lengths(data: dict[str, Any], loc: tuple[Any, ...]) -> list[dict[str, Any]]:
    # DerenderCompletionRequest._validate_prompt_tokens_length
    count = len(data["generate_responses"])
    for name in ("prompt_tokens", "prompt_token_ids"):
        value = data.get(name)
        if value is not None and len(value) != count:
            message = f"{name} length ({len(value)}) must equal generate_responses length ({count})"
            error = {"error": ValueError(message)}
            return [_err("value_error", loc, f"Value error, {message}", data, error)]
    return []


def _branch(data: Any, struct: type) -> tuple[Any, list[dict[str, Any]]]:
    """``data`` as ``struct``, or pydantic's errors for that union branch."""
    loc: tuple[Any, ...] = ("body", _BRANCH_NAMES[struct])
    errors = _SCHEMAS[struct].errors(data, loc)
    nested_name = _NESTED[struct]
    nested = None
    if isinstance(data, dict) and data.get(nested_name) is not None:
        nested, nested_errors = nested_request_errors(
            data[nested_name], nested_name == "chat_request", (*loc, nested_name)
        )
        errors += nested_errors
    if errors:
        return None, errors
    if struct is DerenderCompletionBody:
        errors = _completion_lengths(data, loc)
        if errors:
            return None, errors
    try:
        body: Any = msgspec.convert(data, struct, strict=False)
    except msgspec.ValidationError as exc:
        return None, [_err("value_error", loc, f"Value error, {exc}", data)]
    setattr(body, nested_name, nested)
    if isinstance(body, DerenderCompletionBody):
        answers: list[Any] = list(body.generate_responses)
    elif isinstance(body, DerenderChatBody):
        answers = [body.generate_response]
    else:
        answers = [body.generate_chunk]
    for answer in answers:
        if answer.request_id is None:
            answer.request_id = random_uuid()
    return body, []


def _parse(body: bytes, full: type, stream: type) -> Any:
    data = decode_json_object(body)
    first, second = (
        (stream, full)
        if isinstance(data, dict) and data.get("stream")
        else (
            full,
            stream,
        )
    )
    parsed, errors = _branch(data, first)
    if parsed is not None:
        return parsed
    other, other_errors = _branch(data, second)
    if other is not None:
        return other
    ordered = errors + other_errors if first is full else other_errors + errors
    raise validation_error(ordered)


def parse_derender_chat(body: bytes) -> DerenderChatBody | DerenderChatStreamBody:
    """A ``/v1/chat/completions/derender`` body: the full or the streaming shape."""
    parsed = _parse(body, DerenderChatBody, DerenderChatStreamBody)
    chat = parsed.chat_request
    assert chat is None or isinstance(chat, ChatCompletionRequest)
    return parsed


def parse_derender_completion(
    body: bytes,
) -> DerenderCompletionBody | DerenderCompletionStreamBody:
    """A ``/v1/completions/derender`` body: the full or the streaming shape."""
    parsed = _parse(body, DerenderCompletionBody, DerenderCompletionStreamBody)
    request = parsed.completion_request
    assert request is None or isinstance(request, CompletionRequest)
    return parsed
