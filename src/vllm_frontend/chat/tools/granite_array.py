"""Granite 3.0/3.1's tool calls as vLLM 0.32's parser engine reads them (``--tool-call-parser
granite``, ``vllm/parser/granite.py``)::

    <|tool_call|>[{"name": "get_weather", "arguments": {"city": "SF"}}]
    <tool_call>[{"name": "get_weather", "arguments": {"city": "SF"}}]

One JSON array after the marker (the special token, or the text ``<tool_call>``), one call per
element, named by its ``"name"``; the ``arguments`` object is streamed as written. Text around
the array is content.
"""

from __future__ import annotations

from vllm_frontend.chat.engine.calls import EngineToolParser
from vllm_frontend.chat.engine.grammar import Grammar, State, Step

__all__ = ["GraniteEngineToolParser", "member_object"]

_WS = " \t\r\n"


def _object_end(raw: str, start: int) -> int | None:
    """End (exclusive) of the JSON object at ``raw[start]``, None while it is open."""
    depth = 0
    in_string = escape = False
    for i in range(start, len(raw)):
        ch = raw[i]
        if escape:
            escape = False
        elif in_string:
            if ch == "\\":
                escape = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    return None


def member_object(raw: str, key: str) -> str | None:
    """The verbatim text of the top-level member ``key``'s object value in a (possibly open)
    JSON object (possibly open itself); None before it starts; ValueError if not an object."""
    depth = 0
    in_string = escape = False
    start = -1
    last: str | None = None
    for i, ch in enumerate(raw):
        if escape:
            escape = False
            continue
        if in_string:
            if ch == "\\":
                escape = True
            elif ch == '"':
                in_string = False
                if depth == 1:
                    last = raw[start + 1 : i]
            continue
        if ch == '"':
            in_string = True
            start = i
        elif ch == ":" and depth == 1 and last == key:
            value = i + 1
            while value < len(raw) and raw[value] in _WS:
                value += 1
            if value >= len(raw):
                return None
            if raw[value] != "{":
                raise ValueError(f"member {key!r} must be a JSON object")
            end = _object_end(raw, value)
            return raw[value:] if end is None else raw[value:end]
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
    return None


def granite_arguments(raw: str, partial: bool) -> str:
    """The element's ``arguments`` object as written."""
    span = member_object(raw, "arguments")
    if span is None:
        return "" if partial else "{}"
    return span


GRANITE = Grammar(
    name="granite",
    terminals={"TOOL_TOKEN": "<|tool_call|>", "TOOL_STRING": "<tool_call>"},
    token_terminals={"TOOL_TOKEN": "<|tool_call|>"},
    steps={
        (State.CONTENT, "TOOL_TOKEN"): Step(State.TOOL_ARGS),
        (State.CONTENT, "TOOL_STRING"): Step(State.TOOL_ARGS),
    },
    arg_converter=granite_arguments,
    array_body=True,
)


class GraniteEngineToolParser(EngineToolParser):
    """``granite``."""

    name = "granite"
    GRAMMAR = GRANITE
