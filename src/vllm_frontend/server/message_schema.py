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

from .part_union import fields_set, parser_error
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
    pydantic_report,
)
from .validation import Literal as LiteralSpec

__all__ = ["CHAT_MESSAGE", "converted_parts_error", "tool_call_errors", "unread_parts_error"]

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

_TOOL_CALL_UNION = TaggedUnion(
    _TOOL_CALL,
    TypedDict(
        "ChatCompletionMessageCustomToolCallParam",
        {
            "id": Str(),
            "custom": TypedDict("Custom", {"input": Str(), "name": Str()}, ["input", "name"]),
            "type": LiteralSpec("custom"),
        },
        ["id", "custom", "type"],
    ),
)
"""``ChatCompletionMessageToolCallParam``: the type of an assistant message's ``tool_calls``
items, which OpenAI's assistant branch reads lazily (an ``Iterable``)."""

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


# ---------------------------------------------------------------------------------------------
# content parts OpenAI's message branches read lazily
#
# pydantic's smart union keeps, of the branches that take a message, the one with the most
# fields set, nested ones counted, the first on a tie. OpenAI's branches read a list of parts
# lazily (nothing nested counted), the custom-role branch eagerly (each part's fields counted):
# with parts none of whose fields any of vLLM's part types takes, the two tie and OpenAI's
# branch is kept; with a part neither an object nor a string, the custom-role branch fails.
# vLLM then reads the parts while rendering, and pydantic reports the first one OpenAI's part
# types refuse ("N validation errors for ValidatorIterator"). Only messages whose branch is
# certain are judged here: a role of OpenAI's with no field but role, content, name (and a
# tool's call id), and parts each certain to be read by no part type of vLLM's (part_union's
# count of the fields set is 0), or one part that no part type takes at all. In a message the
# custom-role branch takes, vLLM's chat parser then validates the typed URL parts it reads
# (part_union.parser_error).

_PARTLY_MODELLED = frozenset({"prompt_cache_breakpoint"})
"""Part fields of OpenAI's part types not described here (a part with one is not judged)."""

_TEXT_PART = TypedDict(
    "ChatCompletionContentPartTextParam",
    {"text": Str(), "type": LiteralSpec("text")},
    ["text", "type"],
)
_OPENAI_PARTS: dict[str, list[Model]] = {
    "user": [
        _TEXT_PART,
        TypedDict(
            "ChatCompletionContentPartImageParam",
            {
                "image_url": TypedDict(
                    "ImageURL",
                    {"url": Str(), "detail": LiteralSpec("auto", "low", "high", "original")},
                    ["url"],
                ),
                "type": LiteralSpec("image_url"),
            },
            ["image_url", "type"],
        ),
        TypedDict(
            "ChatCompletionContentPartInputAudioParam",
            {
                "input_audio": TypedDict(
                    "InputAudio",
                    {"data": Str(), "format": LiteralSpec("wav", "mp3")},
                    ["data", "format"],
                ),
                "type": LiteralSpec("input_audio"),
            },
            ["input_audio", "type"],
        ),
        TypedDict(
            "File",
            {
                "file": TypedDict(
                    "FileFile", {"file_data": Str(), "file_id": Str(), "filename": Str()}
                ),
                "type": LiteralSpec("file"),
            },
            ["file", "type"],
        ),
    ],
    "assistant": [
        _TEXT_PART,
        TypedDict(
            "ChatCompletionContentPartRefusalParam",
            {"refusal": Str(), "type": LiteralSpec("refusal")},
            ["refusal", "type"],
        ),
    ],
    "system": [_TEXT_PART],
    "developer": [_TEXT_PART],
    "tool": [_TEXT_PART],
}
"""Each OpenAI role's content-part types, in order (one: no union)."""


def _unread_part(part: Any) -> bool:
    # certain to set no field of any of vLLM's part types
    if not isinstance(part, dict):
        return True  # a string sets none; anything else is taken by none
    if not part.keys().isdisjoint(_PARTLY_MODELLED):
        return False
    return fields_set(part) == 0


def _openai_branch_parts(message: Any) -> list[Any] | None:
    # the parts of a message certain to be kept by an OpenAI branch whose part types refuse
    # its first part, else None
    if not isinstance(message, dict):
        return None
    role, parts = message.get("role"), message.get("content")
    if not isinstance(parts, list) or not parts or role not in _OPENAI_PARTS:
        return None
    fields = {"role", "content", "name"} | ({"tool_call_id"} if role == "tool" else set())
    if not message.keys() <= fields or not isinstance(message.get("name", ""), str):
        return None
    if role == "tool" and not isinstance(message.get("tool_call_id"), str):
        return None
    if all(_unread_part(p) for p in parts) or any(not isinstance(p, dict | str) for p in parts):
        return parts
    return None


def unread_parts_error(messages: Any) -> str | None:
    """pydantic's report of the first content part vLLM refuses as it reads ``messages``: one
    an OpenAI message branch refuses, or, in a message the custom-role branch takes, a typed
    URL part its chat parser refuses (``None``: none, or not certain)."""
    if not isinstance(messages, list):
        return None
    for message in messages:
        parts = _openai_branch_parts(message)
        if parts is None:
            if report := _parser_error(message):
                return report
            continue
        members = _OPENAI_PARTS[message["role"]]
        spec = members[0] if len(members) == 1 else TaggedUnion(*members)
        for i, part in enumerate(parts):
            if errors := spec.errors(part, (i,)):
                return pydantic_report("ValidatorIterator", errors)
    return None


def _parser_error(message: Any) -> str | None:
    # The first part of a message whose parts the custom-role branch takes (each an object
    # some member of its part union takes, or a string) that vLLM's chat parser refuses.
    parts = message.get("content") if isinstance(message, dict) else None
    if not isinstance(parts, list):
        return None
    if not all(isinstance(p, str) or (isinstance(p, dict) and fields_set(p) is not None)
               for p in parts):  # fmt: skip
        return None
    for part in parts:
        if report := parser_error(part):
            return report
    return None


def converted_parts_error(parts: list[Any]) -> str | None:
    """pydantic's report of the first of ``parts`` vLLM's chat parser refuses, for parts of a
    message vLLM made itself and another request model kept (a Responses
    ``function_call_output``'s list ``output``: an ``input_image`` without ``detail``), or
    None."""
    for part in parts:
        if report := parser_error(part, kept=False):
            return report
    return None


def tool_call_errors(messages: Any) -> list[dict[str, Any]] | None:
    """pydantic's errors for the first assistant ``tool_calls`` item vLLM's chat parser refuses
    as it reads the calls (``list(message["tool_calls"])`` over pydantic's lazy iterator: each
    item is checked against the function and custom tool-call types, located under the item's
    index), or ``None``. Only messages the request validation let through with tool calls are
    judged (OpenAI's assistant branch is the one that reads them lazily). The chat route
    answers them as a request validation error under ``body``, /tokenize with pydantic's text
    for ``ValidatorIterator``."""
    if not isinstance(messages, list):
        return None
    for message in messages:
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        calls = message.get("tool_calls")
        if not isinstance(calls, list | dict | str):
            continue  # None: no calls; anything else failed the request validation
        for i, call in enumerate(calls):
            if errors := _TOOL_CALL_UNION.errors(call, (i,)):
                return errors
    return None
