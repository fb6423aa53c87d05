"""The chat message union vLLM 0.32 validates each entry of ``messages`` against, described for
error reports (``ChatCompletionMessageParam`` in vllm/renderers/chat_utils.py: OpenAI's six
message TypedDicts, vLLM's custom-role one, then openai_harmony's ``Message`` model).

A message no branch takes gets pydantic's report of every branch's errors, in branch order and
each branch's field order. Content parts are checked only as far as a part that is neither
an object nor a string: OpenAI's branches read their ``Iterable`` content lazily (vLLM reports a
bad part when it reads it), and the objects in a custom role's list are left to the chat layer.
"""

from __future__ import annotations

from typing import Any

from .validation import (
    AnyValue,
    Iterable,
    ListOf,
    Model,
    Optional,
    Spec,
    Str,
    TaggedUnion,
    TypedDict,
    Union,
)
from .validation import Literal as LiteralSpec

__all__ = ["CHAT_MESSAGE"]

_TEXT_OR_PARTS = Union(Str(), Iterable())
"""``str | Iterable[part]`` (the union's tags, ``str`` and ``generator[...]``, are among the
location segments vLLM drops)."""


_PART_MEMBERS = (
    "ChatCompletionContentPartTextParam", "ChatCompletionContentPartImageParam",
    "ChatCompletionContentPartInputAudioParam", "File", "ChatCompletionContentPartAudioParam",
    "ChatCompletionContentPartVideoParam", "ChatCompletionContentPartRefusalParam",
    "CustomChatCompletionContentPILImageParam", "CustomChatCompletionContentSimpleImageParam",
    "ChatCompletionContentPartImageEmbedsParam", "ChatCompletionContentPartAudioEmbedsParam",
    "ChatCompletionContentPartVideoEmbedsParam", "ChatCompletionContentPartPromptEmbedsParam",
    "CustomChatCompletionContentSimpleAudioParam", "CustomChatCompletionContentSimpleVideoParam",
    "CustomChatCompletionContentToolReferenceParam", "str", "CustomThinkCompletionContentParam",
)  # fmt: skip
"""vLLM's ``ChatCompletionContentPartParam`` members, in order: TypedDicts and ``str``."""


class _ContentPart(Spec):
    """A custom role's content part: an object or a string passes (the chat layer judges it);
    anything else fails every member of vLLM's part union."""

    def errors(self, value: Any, loc: tuple[Any, ...]) -> list[dict[str, Any]]:
        if isinstance(value, dict | str):
            return []
        out: list[dict[str, Any]] = []
        for name in _PART_MEMBERS:
            spec = Str() if name == "str" else TypedDict(name, {})
            out.extend(spec.errors(value, (*loc, name)))
        return out


class _HarmonyContent(Spec):
    """An item of openai_harmony's ``Message.content``: an object passes (not checked
    further); anything else is not a ``Content``."""

    def errors(self, value: Any, loc: tuple[Any, ...]) -> list[dict[str, Any]]:
        if isinstance(value, dict):
            return []
        msg = "Input should be a valid dictionary or instance of Content"
        return [{"type": "model_type", "loc": loc, "msg": msg, "input": value,
                 "ctx": {"class_name": "Content"}}]  # fmt: skip


def _openai(role: str, content: Spec, *more: tuple[str, Spec], required: tuple[str, ...]) -> Model:
    fields: dict[str, Spec] = {"content": content, "role": LiteralSpec(role), **dict(more)}
    name = f"ChatCompletion{role.capitalize()}MessageParam"
    return TypedDict(name, fields, ("content", "role", *required))


_FUNCTION_CALL = TypedDict(
    "FunctionCall", {"arguments": Str(), "name": Str()}, ["arguments", "name"]
)
_TOOL_CALL = TypedDict(
    "ChatCompletionMessageFunctionToolCallParam",
    {
        "id": Str(),
        "function": TypedDict(
            "Function", {"arguments": Str(), "name": Str()}, ["arguments", "name"]
        ),
        "type": LiteralSpec("function"),
    },
    ["id", "function", "type"],
)

CHAT_MESSAGE = TaggedUnion(
    _openai("developer", _TEXT_OR_PARTS, ("name", Str()), required=()),
    _openai("system", _TEXT_OR_PARTS, ("name", Str()), required=()),
    _openai("user", _TEXT_OR_PARTS, ("name", Str()), required=()),
    TypedDict(
        "ChatCompletionAssistantMessageParam",
        {
            "role": LiteralSpec("assistant"),
            "audio": Optional(TypedDict("Audio", {"id": Str()}, ["id"])),
            "content": Optional(_TEXT_OR_PARTS),
            "function_call": Optional(_FUNCTION_CALL),
            "name": Str(),
            "refusal": Optional(Str()),
            "tool_calls": Iterable(),
        },
        ["role"],
    ),
    _openai("tool", _TEXT_OR_PARTS, ("tool_call_id", Str()), required=("tool_call_id",)),
    TypedDict(
        "ChatCompletionFunctionMessageParam",
        {"content": Optional(Str()), "name": Str(), "role": LiteralSpec("function")},
        ["content", "name", "role"],
    ),
    TypedDict(
        "CustomChatCompletionMessageParam",
        {
            "role": Str(),
            "content": Union(Str(), ListOf(_ContentPart())),
            "name": Str(),
            "tool_call_id": Optional(Str()),
            "tool_calls": Optional(ListOf(_TOOL_CALL)),
            "reasoning": Optional(Str()),
            "tools": Optional(ListOf(AnyValue())),
            "task": Optional(Str()),
        },
        ["role"],
    ),
    Model(
        "Message",
        {
            "author": AnyValue(),
            "content": ListOf(_HarmonyContent()),
            "channel": Optional(Str()),
            "recipient": Optional(Str()),
            "content_type": Optional(Str()),
        },
        ["author"],
    ),
)
"""vLLM's ``ChatCompletionMessageParam``, described for error reports."""
