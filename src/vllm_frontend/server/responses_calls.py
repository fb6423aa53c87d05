"""The model's tool calls as Responses output items, as vLLM 0.32 names them
(vllm/entrypoints/openai/responses/utils.py, ``build_response_output_items``, and the tool-call
states of its streaming event processor).

The model calls the functions it was shown (responses_input.chat_tools): a call of a ``custom``
tool's function shim becomes a ``custom_tool_call`` item whose ``input`` is the shim's string
argument, and a call of a namespace's flattened ``<namespace>__<name>`` function a
``function_call`` item with its own ``name`` and ``namespace``.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from vllm_frontend.chat.partial_json import partial_json_loads

from .responses_input import CUSTOM_INPUT_KEY, flat_tool_name

__all__ = [
    "CallName",
    "CallNames",
    "custom_input",
    "custom_input_prefix",
    "custom_tool_call_item",
]


class CallName(NamedTuple):
    """A called function's name in its output item, and its namespace (None outside one)."""

    name: str
    namespace: str | None


class CallNames:
    """How the function names the model calls read in the output items of a request's tools."""

    __slots__ = ("custom", "flat")

    def __init__(self, tools: list[dict[str, Any]] | None) -> None:
        self.custom = frozenset(
            tool.get("name") for tool in tools or () if tool.get("type") == "custom"
        )
        self.flat: dict[str, CallName] = {}
        for tool in tools or ():
            if tool.get("type") != "namespace":
                continue
            for function in tool.get("tools") or ():
                if function.get("type") == "function":
                    flat = flat_tool_name(tool["name"], function["name"])
                    self.flat[flat] = CallName(function["name"], tool["name"])

    def resolve(self, name: str) -> CallName:
        """A called name as its item names it (a namespace's function by its own name)."""
        return self.flat.get(name) or CallName(name, None)


def custom_tool_call_item(item_id: str, call_id: str, name: str, payload: str) -> dict[str, Any]:
    """A ``custom_tool_call`` output item (the SDK's fields, unset ones null)."""
    return {
        "call_id": call_id,
        "input": payload,
        "name": name,
        "type": "custom_tool_call",
        "id": item_id,
        "async": None,
        "caller": None,
        "namespace": None,
    }


def _payload(value: Any) -> str | None:
    if not isinstance(value, dict):
        return None
    payload = value.get(CUSTOM_INPUT_KEY)
    return payload if isinstance(payload, str) else None


def custom_input(arguments: str) -> str:
    """The input of a finished shim call: its ``input`` string, or the arguments as they are
    when they are not an object holding one."""
    try:
        payload = _payload(json.loads(arguments))
    except ValueError:
        return arguments
    return arguments if payload is None else payload


def custom_input_prefix(arguments: str) -> str:
    """The input a shim call's arguments so far hold (a prefix of its final input; a trailing
    half of a surrogate pair held back)."""
    try:
        value, end = partial_json_loads(arguments, True)
    except (ValueError, IndexError):
        return ""
    if arguments[end:].strip(" \t\n\r"):
        return ""  # more than one value
    payload = _payload(value) or ""
    if payload and "\ud800" <= payload[-1] <= "\udbff":
        payload = payload[:-1]
    return payload
