"""Anthropic Messages request bodies as msgspec Structs, with vLLM 0.32's fields, defaults and
validators (vllm/entrypoints/anthropic/protocol.py), and vLLM's reports of bad bodies.

A body that does not validate gets the report FastAPI's ``RequestValidationError`` handler
writes (OpenAI-shaped, ``type`` "Bad Request"; vLLM only answers handler errors in Anthropic's
shape): the schema below lists the errors pydantic would, value errors of vLLM's field and model
validators included. Use :func:`parse_messages_request` and :func:`parse_count_tokens_request`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

import msgspec

from .protocol import MAX_STOP_STRINGS
from .validation import (
    AnyValue,
    Bool,
    DictOf,
    Float,
    Int,
    ListOf,
    Model,
    Optional,
    Spec,
    Str,
    Union,
    decode_json_object,
    lax_int,
    validation_error,
)
from .validation import Literal as LiteralSpec

__all__ = [
    "BLOCK_TYPES",
    "ContentBlock",
    "CountTokensRequest",
    "Message",
    "MessagesRequest",
    "OutputConfig",
    "ThinkingAdaptive",
    "ThinkingDisabled",
    "ThinkingEnabled",
    "Tool",
    "ToolChoice",
    "ToolDefinitionChange",
    "ToolReferenceChange",
    "parse_count_tokens_request",
    "parse_messages_request",
]

BLOCK_TYPES = (
    "text",
    "image",
    "tool_use",
    "tool_result",
    "tool_reference",
    "thinking",
    "redacted_thinking",
    "tool_addition",
    "tool_removal",
)
"""The content block types vLLM accepts, in its order."""

BlockType = Literal[
    "text",
    "image",
    "tool_use",
    "tool_result",
    "tool_reference",
    "thinking",
    "redacted_thinking",
    "tool_addition",
    "tool_removal",
]
Effort = Literal["low", "medium", "high", "xhigh", "max"]
Display = Literal["summarized", "omitted", "updates"]


class Tool(msgspec.Struct, kw_only=True):
    """A tool definition (``input_schema`` gets ``"type": "object"`` when it names no type)."""

    name: str
    description: str | None = None
    input_schema: dict[str, Any]
    strict: bool | None = None
    defer_loading: bool | None = None


class ToolReferenceChange(msgspec.Struct, tag_field="type", tag="tool_reference"):
    """A tool named by a ``tool_addition`` / ``tool_removal`` block."""

    name: str


class ToolDefinitionChange(msgspec.Struct, tag_field="type", tag="tool_definition"):
    """A tool defined by value in a ``tool_addition`` block."""

    definition: Tool


class ContentBlock(msgspec.Struct, kw_only=True):
    """A content block (every block type's fields in one struct, as vLLM's model has them)."""

    type: BlockType
    text: str | None = None
    source: dict[str, Any] | None = None
    id: str | None = None
    tool_use_id: str | None = None
    name: str | None = None
    input: dict[str, Any] | None = None
    content: str | list[dict[str, Any]] | None = None
    is_error: bool | None = None
    tool_name: str | None = None
    thinking: str | None = None
    signature: str | None = None
    data: str | None = None
    tool: ToolReferenceChange | ToolDefinitionChange | None = None


class Message(msgspec.Struct, kw_only=True):
    """A conversation message."""

    role: Literal["user", "assistant", "system"]
    content: str | list[ContentBlock]


class ToolChoice(msgspec.Struct, kw_only=True):
    """``tool_choice``."""

    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class JsonOutputFormat(msgspec.Struct, kw_only=True):
    """``output_config.format`` (``schema`` on the wire)."""

    json_schema: dict[str, Any] | None = msgspec.field(default=None, name="schema")
    type: Literal["json_schema"] = "json_schema"


class OutputConfig(msgspec.Struct, kw_only=True):
    """``output_config``."""

    effort: Effort | None = None
    format: JsonOutputFormat | None = None


class ThinkingEnabled(msgspec.Struct, tag_field="type", tag="enabled", kw_only=True):
    """``thinking: {"type": "enabled", "budget_tokens": N}`` (``display`` is ignored)."""

    budget_tokens: Annotated[int, msgspec.Meta(ge=1024)]
    display: Display | None = None


class ThinkingDisabled(msgspec.Struct, tag_field="type", tag="disabled"):
    """``thinking: {"type": "disabled"}``."""


class ThinkingAdaptive(msgspec.Struct, tag_field="type", tag="adaptive", kw_only=True):
    """``thinking: {"type": "adaptive"}`` (``display`` is ignored)."""

    display: Display | None = None


Thinking = ThinkingEnabled | ThinkingDisabled | ThinkingAdaptive
StopSequences = Annotated[list[str], msgspec.Meta(max_length=MAX_STOP_STRINGS)]


class MessagesRequest(msgspec.Struct, kw_only=True):
    """``POST /v1/messages`` body (vLLM's ``AnthropicMessagesRequest``)."""

    model: str
    messages: list[Message]
    max_tokens: int
    metadata: dict[str, Any] | None = None
    output_config: OutputConfig | None = None
    thinking: Thinking | None = None
    stop_sequences: StopSequences | None = None
    stream: bool | None = False
    system: str | list[ContentBlock] | None = None
    temperature: float | None = None
    tool_choice: ToolChoice | None = None
    tools: list[Tool] | None = None
    top_k: int | None = None
    top_p: float | None = None
    mm_payload: Literal["tensors", "none"] = "tensors"
    return_mm_kwargs: bool | None = None
    cache_salt: Annotated[str, msgspec.Meta(min_length=1, max_length=1024)] | None = None
    watermarking: bool | None = None
    kv_transfer_params: dict[str, Any] | None = None
    ec_transfer_params: dict[str, Any] | None = None
    vllm_xargs: dict[str, str | int | float | list[str | int | float]] | None = None
    chat_template_kwargs: dict[str, Any] | None = None


class CountTokensRequest(msgspec.Struct, kw_only=True):
    """``POST /v1/messages/count_tokens`` body (vLLM's ``AnthropicCountTokensRequest``)."""

    model: str
    messages: list[Message]
    output_config: OutputConfig | None = None
    system: str | list[ContentBlock] | None = None
    thinking: Thinking | None = None
    tool_choice: ToolChoice | None = None
    tools: list[Tool] | None = None
    chat_template_kwargs: dict[str, Any] | None = None


# ---------------------------------------------------------------------------------------------
# vLLM's validators, as messages of the value errors pydantic reports


def _tool_change_error(block: dict[str, Any]) -> str | None:
    # AnthropicContentBlock.validate_tool_change
    kind = block.get("type")
    if kind not in ("tool_addition", "tool_removal"):
        return None
    tool = block.get("tool")
    if tool is None:
        return f"tool is required for {kind} blocks"
    if kind == "tool_removal" and tool.get("type") != "tool_reference":
        return "tool_removal only accepts a tool_reference"
    return None


def _misplaced_tool_change(content: Any) -> str | None:
    # _reject_tool_changes: tool changes only in system messages (and not in ``system``)
    if not isinstance(content, list):
        return None
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind in ("tool_addition", "tool_removal"):
            return f'{kind} blocks are only allowed in messages with role "system"'
    return None


def _message_error(message: dict[str, Any]) -> str | None:
    if message.get("role") == "system":
        return None
    return _misplaced_tool_change(message.get("content"))


def _tool_choice_error(choice: dict[str, Any]) -> str | None:
    if choice.get("type") == "tool" and not choice.get("name"):
        return "tool_choice.name is required when type is 'tool'"
    return None


def _model_name_error(value: Any) -> str | None:
    return None if value else "Model is required"


def _max_tokens_error(value: Any) -> str | None:
    number = lax_int(value)
    return "max_tokens must be positive" if number is not None and number <= 0 else None


def _thinking_budget_error(data: dict[str, Any]) -> str | None:
    # AnthropicMessagesRequest.validate_thinking_budget (P/D prefill legs are exempt)
    kv = data.get("kv_transfer_params")
    if kv and kv.get("do_remote_decode"):
        return None
    thinking = data.get("thinking")
    if not isinstance(thinking, dict) or thinking.get("type") != "enabled":
        return None
    budget, limit = lax_int(thinking.get("budget_tokens")), lax_int(data.get("max_tokens"))
    if budget is not None and limit is not None and budget >= limit:
        return "thinking.budget_tokens must be less than max_tokens"
    return None


# ---------------------------------------------------------------------------------------------
# schemas for error reports


def _value_error(loc: tuple[Any, ...], message: str, value: Any) -> dict[str, Any]:
    return {
        "type": "value_error",
        "loc": loc,
        "msg": f"Value error, {message}",
        "input": value,
        "ctx": {"error": ValueError(message)},
    }


class Checked(Spec):
    """A type with an "after" validator: its value error once the type is right."""

    def __init__(self, inner: Spec, check: Callable[[Any], str | None]) -> None:
        self.inner, self.check = inner, check

    def errors(self, value: Any, loc: tuple[Any, ...]) -> list[dict[str, Any]]:
        errs = self.inner.errors(value, loc)
        if errs:
            return errs
        message = self.check(value)
        return [] if message is None else [_value_error(loc, message, value)]

    def coerce(self, value: Any) -> Any:
        return self.inner.coerce(value)


class Tagged(Spec):
    """A union discriminated by its ``type`` field (pydantic's tagged union)."""

    def __init__(self, branches: dict[str, Spec]) -> None:
        self.branches = branches
        self.expected = ", ".join(repr(t) for t in branches)

    def errors(self, value: Any, loc: tuple[Any, ...]) -> list[dict[str, Any]]:
        if not isinstance(value, dict):
            msg = "Input should be a valid dictionary or object to extract fields from"
            return [{"type": "model_attributes_type", "loc": loc, "msg": msg, "input": value}]
        if "type" not in value:
            return [
                {
                    "type": "union_tag_not_found",
                    "loc": loc,
                    "msg": "Unable to extract tag using discriminator 'type'",
                    "input": value,
                    "ctx": {"discriminator": "'type'"},
                }
            ]
        tag = value["type"]
        branch = self.branches.get(tag) if isinstance(tag, str) else None
        if branch is None:
            return [
                {
                    "type": "union_tag_invalid",
                    "loc": loc,
                    "msg": f"Input tag '{tag}' found using 'type' does not match any of the "
                    f"expected tags: {self.expected}",
                    "input": value,
                    "ctx": {
                        "discriminator": "'type'",
                        "tag": str(tag),
                        "expected_tags": self.expected,
                    },
                }
            ]
        return branch.errors(value, (*loc, tag))

    def coerce(self, value: Any) -> Any:
        return self.branches[value["type"]].coerce(value)


_ANY_DICT = DictOf(AnyValue())
_TOOL = Model(
    "AnthropicTool",
    {
        "name": Str(),
        "description": Optional(Str()),
        "input_schema": _ANY_DICT,
        "strict": Optional(Bool()),
        "defer_loading": Optional(Bool()),
    },
    ["name", "input_schema"],
)
_TOOL_CHANGE = Tagged(
    {
        "tool_reference": Model(
            "AnthropicToolChangeReference",
            {"type": LiteralSpec("tool_reference"), "name": Str()},
            ["type", "name"],
        ),
        "tool_definition": Model(
            "AnthropicToolChangeDefinition",
            {"type": LiteralSpec("tool_definition"), "definition": _TOOL},
            ["type", "definition"],
        ),
    }
)
_BLOCK = Checked(
    Model(
        "AnthropicContentBlock",
        {
            "type": LiteralSpec(*BLOCK_TYPES),
            "text": Optional(Str()),
            "source": Optional(_ANY_DICT),
            "id": Optional(Str()),
            "tool_use_id": Optional(Str()),
            "name": Optional(Str()),
            "input": Optional(_ANY_DICT),
            "content": Optional(Union(Str(), ListOf(_ANY_DICT))),
            "is_error": Optional(Bool()),
            "tool_name": Optional(Str()),
            "thinking": Optional(Str()),
            "signature": Optional(Str()),
            "data": Optional(Str()),
            "tool": Optional(_TOOL_CHANGE),
        },
        ["type"],
    ),
    _tool_change_error,
)
_CONTENT = Union(Str(), ListOf(_BLOCK))
_MESSAGE = Checked(
    Model(
        "AnthropicMessage",
        {"role": LiteralSpec("user", "assistant", "system"), "content": _CONTENT},
        ["role", "content"],
    ),
    _message_error,
)
_TOOL_CHOICE = Checked(
    Model(
        "AnthropicToolChoice",
        {
            "type": LiteralSpec("auto", "any", "tool", "none"),
            "name": Optional(Str()),
            "disable_parallel_tool_use": Optional(Bool()),
        },
        ["type"],
    ),
    _tool_choice_error,
)
_OUTPUT_CONFIG = Model(
    "AnthropicOutputConfig",
    {
        "effort": Optional(LiteralSpec("low", "medium", "high", "xhigh", "max")),
        "format": Optional(
            Model(
                "AnthropicJsonOutputFormat",
                {"schema": Optional(_ANY_DICT), "type": LiteralSpec("json_schema")},
            )
        ),
    },
)
_DISPLAY = Optional(LiteralSpec("summarized", "omitted", "updates"))
_THINKING = Tagged(
    {
        "enabled": Model(
            "AnthropicThinkingConfigEnabled",
            {"type": LiteralSpec("enabled"), "budget_tokens": Int(ge=1024), "display": _DISPLAY},
            ["type", "budget_tokens"],
        ),
        "disabled": Model(
            "AnthropicThinkingConfigDisabled", {"type": LiteralSpec("disabled")}, ["type"]
        ),
        "adaptive": Model(
            "AnthropicThinkingConfigAdaptive",
            {"type": LiteralSpec("adaptive"), "display": _DISPLAY},
            ["type"],
        ),
    }
)
_SYSTEM = Optional(Checked(_CONTENT, _misplaced_tool_change))
_XARG = Union(Str(), Int(), Float(), ListOf(Union(Str(), Int(), Float())))

_SHARED_FIELDS: dict[str, Spec] = {
    "model": Checked(Str(), _model_name_error),
    "messages": ListOf(_MESSAGE),
}


class _RequestModel(Model):
    """The request model: its fields, then (when they are all valid) the model validator."""

    def __init__(
        self,
        name: str,
        fields: dict[str, Spec],
        required: list[str],
        after: Callable[[dict[str, Any]], str | None] | None = None,
    ) -> None:
        super().__init__(name, fields, required)
        self.after = after

    def errors(self, value: Any, loc: tuple[Any, ...]) -> list[dict[str, Any]]:
        errs = super().errors(value, loc)
        if errs or self.after is None:
            return errs
        message = self.after(value)
        return [] if message is None else [_value_error(loc, message, value)]


_MESSAGES_SCHEMA = _RequestModel(
    "AnthropicMessagesRequest",
    {
        **_SHARED_FIELDS,
        "max_tokens": Checked(Int(), _max_tokens_error),
        "metadata": Optional(_ANY_DICT),
        "output_config": Optional(_OUTPUT_CONFIG),
        "thinking": Optional(_THINKING),
        "stop_sequences": Optional(ListOf(Str(), MAX_STOP_STRINGS)),
        "stream": Optional(Bool()),
        "system": _SYSTEM,
        "temperature": Optional(Float()),
        "tool_choice": Optional(_TOOL_CHOICE),
        "tools": Optional(ListOf(_TOOL)),
        "top_k": Optional(Int()),
        "top_p": Optional(Float()),
        "mm_payload": LiteralSpec("tensors", "none"),
        "return_mm_kwargs": Optional(Bool()),
        "cache_salt": Optional(Str(1, 1024)),
        "watermarking": Optional(Bool()),
        "kv_transfer_params": Optional(_ANY_DICT),
        "ec_transfer_params": Optional(_ANY_DICT),
        "vllm_xargs": Optional(DictOf(_XARG)),
        "chat_template_kwargs": Optional(_ANY_DICT),
    },
    ["model", "messages", "max_tokens"],
    _thinking_budget_error,
)
_COUNT_TOKENS_SCHEMA = _RequestModel(
    "AnthropicCountTokensRequest",
    {
        **_SHARED_FIELDS,
        "output_config": Optional(_OUTPUT_CONFIG),
        "system": _SYSTEM,
        "thinking": Optional(_THINKING),
        "tool_choice": Optional(_TOOL_CHOICE),
        "tools": Optional(ListOf(_TOOL)),
        "chat_template_kwargs": Optional(_ANY_DICT),
    },
    ["model", "messages"],
)


# ---------------------------------------------------------------------------------------------
# decoding


def _validators_pass(data: dict[str, Any], messages_request: bool) -> bool:
    """Whether vLLM's value validators accept a body that converted (the common case: a
    quick look at the few fields they read)."""
    if not data.get("model"):
        return False
    if messages_request and (
        lax_int(data["max_tokens"]) is None  # msgspec took a string pydantic refuses ("5e0")
        or _max_tokens_error(data["max_tokens"])
        or _thinking_budget_error(data)
    ):
        return False
    for message in data["messages"]:
        if _message_error(message):
            return False
        content = message["content"]
        if isinstance(content, list) and any(_tool_change_error(b) for b in content):
            return False
    system = data.get("system")
    if _misplaced_tool_change(system):
        return False
    choice = data.get("tool_choice")
    return not (choice is not None and _tool_choice_error(choice))


def _default_schema_types(request: MessagesRequest | CountTokensRequest) -> None:
    # AnthropicTool.validate_input_schema: a schema without a type is an object's
    for tool in request.tools or ():
        tool.input_schema.setdefault("type", "object")
    for message in request.messages:
        if isinstance(message.content, list):
            for block in message.content:
                if isinstance(block.tool, ToolDefinitionChange):
                    block.tool.definition.input_schema.setdefault("type", "object")


def _parse(body: bytes, struct: type[Any], spec: _RequestModel, messages_request: bool) -> Any:
    data = decode_json_object(body)
    if isinstance(data, dict):
        # vLLM's before validator: return_mm_kwargs=false is mm_payload "none"
        if messages_request and data.get("return_mm_kwargs") is False and "mm_payload" not in data:
            data["mm_payload"] = "none"
        try:
            request = msgspec.convert(data, struct, strict=False)
        except msgspec.ValidationError:
            pass
        else:
            if _validators_pass(data, messages_request):
                _default_schema_types(request)
                return request
    errors = spec.errors(data, ("body",))
    if not errors and isinstance(data, dict):
        # what pydantic's lax mode takes and msgspec's refuses ("yes" for a bool, "5.0" for an
        # int): convert it as pydantic does and parse again
        coerced = msgspec.json.encode(spec.coerce(data))
        if coerced != msgspec.json.encode(data):
            return _parse(coerced, struct, spec, messages_request)
    if not errors:  # msgspec refused what pydantic accepts: report it rather than guess
        errors = [
            {"type": "value_error", "loc": ("body",), "msg": "Invalid request", "input": data}
        ]
    raise validation_error(errors)


def parse_messages_request(body: bytes) -> MessagesRequest:
    """Decode and validate a ``/v1/messages`` body like vLLM."""
    request: MessagesRequest = _parse(body, MessagesRequest, _MESSAGES_SCHEMA, True)
    return request


def parse_count_tokens_request(body: bytes) -> CountTokensRequest:
    """Decode and validate a ``/v1/messages/count_tokens`` body like vLLM."""
    request: CountTokensRequest = _parse(body, CountTokensRequest, _COUNT_TOKENS_SCHEMA, False)
    return request
