"""A Responses request's conversation as chat messages, and its tools as chat tools, as vLLM
0.32 builds them (vllm/entrypoints/openai/responses/utils.py, ``construct_input_messages``,
``construct_tool_dicts``).

Input items: messages, ``function_call``, ``custom_tool_call`` (a call of the custom tool's
function shim, its input as the shim's one ``input`` argument), ``function_call_output`` and
``custom_tool_call_output`` items, and ``reasoning`` items; a call or reasoning item joins the
assistant message before it, as in vLLM. Items of other shapes are refused with a 400 on
``body.input``.

Tools: the model is shown functions only; a namespace's functions flattened to
``<namespace>__<name>``, a ``custom`` tool as a function of one string (vLLM's
``get_function_tools``).

A message's content parts are the Responses ones vLLM's request model (the OpenAI SDK's
``ResponseInputContentParam``) admits: ``input_text``, ``input_image`` (``detail`` defaulted
to ``"auto"`` as vLLM's ``_default_input_image_details`` does) and ``input_file``. They go to
the chat layer as they are, as in vLLM: an ``input_image`` is an image (its ``image_url``, a
URL or data URL; without one, only its ``uuid`` names it), an ``input_file`` is refused there
as an unsupported content part type. Chat-style parts (``text``, ``image_url``,
``input_audio``...) are refused here, as vLLM's validation refuses them; the body lists the
one rule broken, not pydantic's errors for every branch of the item union.
"""

from __future__ import annotations

import json
from typing import Any

from .errors import InvalidParameter
from .responses_items import item_errors
from .validation import validation_error

__all__ = [
    "CUSTOM_INPUT_KEY",
    "chat_tool_choice",
    "chat_tools",
    "check_content_parts",
    "flat_tool_name",
    "function_output_parts",
    "input_messages",
    "output_messages",
]

_ROLES = ("user", "system", "developer", "assistant")


CUSTOM_INPUT_KEY = "input"
"""The one argument of the function shim a ``custom`` tool is shown to the model as."""

_CUSTOM_PARAMETERS = {
    "type": "object",
    "properties": {
        CUSTOM_INPUT_KEY: {
            "type": "string",
            "description": "The freeform text payload for this tool.",
        }
    },
    "required": [CUSTOM_INPUT_KEY],
    "additionalProperties": False,
}


def flat_tool_name(namespace: Any, name: Any) -> str:
    """The name a namespace's function is shown to the model under (``<namespace>__<name>``)."""
    return f"{namespace}__{name}"


def chat_tools(tools: list[dict[str, Any]], tool_choice: Any) -> list[dict[str, Any]] | None:
    """The functions the model is shown, in the chat ``tools`` shape (None without tools), as
    vLLM's ``get_function_tools``: function tools as they are, a namespace's function tools
    flattened to ``<namespace>__<name>`` (its custom tools dropped), a ``custom`` tool as a
    function taking one string ``input``; other tools are not shown."""
    if not tools:
        return None
    out = []
    for tool in tools:
        kind = tool.get("type")
        if kind == "function":
            out.append(_chat_function(tool, tool.get("name")))
        elif kind == "namespace":
            out.extend(
                _chat_function(sub, flat_tool_name(tool["name"], sub.get("name")))
                for sub in tool.get("tools") or ()
                if isinstance(sub, dict) and sub.get("type") == "function"
            )
        elif kind == "custom":
            function = {
                "name": tool.get("name"),
                "description": tool.get("description"),
                "parameters": _CUSTOM_PARAMETERS,
            }
            out.append({"type": "function", "function": function})
    return out


def _chat_function(tool: dict[str, Any], name: Any) -> dict[str, Any]:
    function = {
        "name": name,
        "description": tool.get("description"),
        "parameters": tool.get("parameters"),
        "strict": tool.get("strict"),
    }
    if tool.get("defer_loading") is not None:
        function["defer_loading"] = tool["defer_loading"]
    return {"type": "function", "function": function}


def chat_tool_choice(tool_choice: Any) -> Any:
    """A Responses ``tool_choice`` in the chat shape (a named function or custom tool nests its
    name: the model calls a custom tool's function shim)."""
    if isinstance(tool_choice, dict) and tool_choice.get("type") in ("function", "custom"):
        return {"type": "function", "function": {"name": tool_choice.get("name")}}
    return tool_choice


def input_messages(
    instructions: str | None,
    request_input: str | list[Any],
    previous_messages: list[dict[str, Any]] | None = None,
    previous_output: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """The chat messages of a request: its instructions as the system message, the previous
    response's conversation (without its system messages) and output text, then the input."""
    messages: list[dict[str, Any]] = []
    if instructions:
        messages.append({"role": "system", "content": instructions})
    if previous_messages is not None:
        messages.extend(m for m in previous_messages if m.get("role") != "system")
    for item in previous_output or ():
        if item.get("type") == "message":  # reasoning and calls of the previous output: skipped
            for part in item.get("content") or ():
                messages.append({"role": "assistant", "content": part.get("text")})
    if isinstance(request_input, str):
        messages.append({"role": "user", "content": request_input})
        return messages
    for index, item in enumerate(request_input):
        try:
            message = _message(item, index, messages[-1] if messages else None)
        except _BadItem as bad:
            raise _input_error(request_input, bad) from None
        if message is not None:
            messages.append(message)
    return messages


def check_content_parts(request_input: str | list[Any]) -> None:
    """Refuse, as vLLM's request validation does, a message item (other than an assistant's)
    whose content parts are not Responses input parts (the Harmony path, which converts the
    items itself, reads their text only)."""
    if isinstance(request_input, str):
        return
    for index, item in enumerate(request_input):
        if (
            isinstance(item, dict)
            and item.get("type", "message") == "message"
            and item.get("role") in _ROLES
            and item.get("role") != "assistant"
        ):
            try:
                _check_content(_with_image_details(item).get("content"), index, item)
            except _BadItem as bad:
                raise _input_error(request_input, bad) from None


# The fields of the SDK's function-call output parts (ResponseInput{Text,Image,File}ContentParam),
# in their order: pydantic's TypedDict validation returns a part with these keys first, in this
# order, then any others as sent.
_OUTPUT_PART_FIELDS = {
    "input_text": ("text", "type", "prompt_cache_breakpoint"),
    "input_image": ("type", "detail", "file_id", "image_url", "prompt_cache_breakpoint"),
    "input_file": ("type", "detail", "file_data", "file_id", "file_url", "filename",
                   "prompt_cache_breakpoint"),
}  # fmt: skip


def function_output_parts(parts: list[Any]) -> list[Any]:
    """A ``function_call_output``'s list ``output`` as vLLM's request model holds it once
    validated (each part's keys in its SDK type's field order)."""
    out: list[Any] = []
    for part in parts:
        kind = part.get("type") if isinstance(part, dict) else None
        fields = _OUTPUT_PART_FIELDS.get(kind) if isinstance(kind, str) else None
        if fields is None:
            out.append(part)
            continue
        ordered = {k: part[k] for k in fields if k in part}
        ordered.update((k, v) for k, v in part.items() if k not in ordered)
        out.append(ordered)
    return out


def output_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Copies of ``messages`` as the store keeps them (later requests extend their own)."""
    return [dict(m) for m in messages]


class _BadItem(Exception):
    def __init__(self, index: int, item: Any, message: str) -> None:
        super().__init__(message)
        self.error = {
            "type": "value_error",
            "loc": ("body", "input", index),
            "msg": message,
            "input": item,
        }


def _bad_item(index: int, item: Any, message: str) -> Exception:
    return _BadItem(index, item, message)


def _input_error(request_input: list[Any], bad: _BadItem) -> Exception:
    # pydantic reports the string branch of ``input`` first (vLLM's param: body.input), then
    # every member of the item union; ours names the one rule the item breaks where the union's
    # schema, which leaves nested parts out, finds nothing (a bad content part)
    string_error = {
        "type": "string_type",
        "loc": ("body", "input"),
        "msg": "Input should be a valid string",
        "input": request_input,
    }
    index = bad.error["loc"][-1]
    return validation_error(
        [string_error, *(item_errors(bad.error["input"], index) or [bad.error])]
    )


def _message(item: Any, index: int, prev: dict[str, Any] | None) -> dict[str, Any] | None:
    if not isinstance(item, dict):
        raise _bad_item(index, item, "Input should be a valid dictionary or object")
    prev_assistant = prev if prev is not None and prev.get("role") == "assistant" else None
    kind = item.get("type")
    if kind == "function_call":
        call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments")
        if not all(isinstance(v, str) for v in (call_id, name, arguments)):
            raise _bad_item(index, item, "function_call needs call_id, name and arguments")
        namespace = item.get("namespace")
        if namespace:
            name = flat_tool_name(namespace, name)
        return _with_call(prev_assistant, call_id, name, arguments)
    if kind == "reasoning":
        if item.get("encrypted_content"):
            raise InvalidParameter("Encrypted content is not supported.", parameter="input")
        summary, content = item.get("summary"), item.get("content")
        if not isinstance(summary, list):
            raise _bad_item(index, item, "reasoning needs a summary list")
        reasoning = ""
        if content:
            reasoning = _text(content[0], index, item)
        elif summary:
            reasoning = _text(summary[0], index, item)
        if prev_assistant is not None and prev_assistant.get("reasoning") is None:
            prev_assistant["reasoning"] = reasoning
            return None
        return {"role": "assistant", "reasoning": reasoning}
    if kind == "custom_tool_call":
        call_id, name, payload = item.get("call_id"), item.get("name"), item.get("input")
        if not all(isinstance(v, str) for v in (call_id, name, payload)):
            raise _bad_item(index, item, "custom_tool_call needs call_id, name and input")
        arguments = json.dumps({CUSTOM_INPUT_KEY: payload}, ensure_ascii=False)
        return _with_call(prev_assistant, call_id, name, arguments)
    if kind in ("function_call_output", "custom_tool_call_output"):
        if not isinstance(item.get("call_id"), str) or "output" not in item:
            raise _bad_item(index, item, f"{kind} needs call_id and output")
        return {"role": "tool", "content": item.get("output"), "tool_call_id": item["call_id"]}
    if kind == "additional_tools" and not item_errors(item, index):
        # vLLM passes any item with a role on as a chat message: here a developer message
        # without content (which a template may fail on: Llama 3's, when it comes first)
        return {k: v for k, v in item.items() if k != "tools"}
    if kind not in (None, "message") or item.get("role") not in _ROLES or "content" not in item:
        required = _UNCONVERTED_ITEMS.get(kind)
        if kind is None and "role" not in item and isinstance(item.get("id"), str):
            required = ()  # an item_reference may leave out its type
        if (
            required is not None
            and all(key in item for key in required)
            and not item_errors(item, index)
        ):
            # the SDK's item union takes it; vLLM's construct_input_messages does not
            raise InvalidParameter(f"Unsupported input item type: {kind}", parameter="input")
        raise _bad_item(index, item, "Unsupported input item")
    item = _with_image_details(item)
    if item["role"] != "assistant":
        _check_content(item["content"], index, item)
        # pydantic keeps only the message TypedDict's own keys (vLLM renders what it kept)
        return {k: v for k, v in item.items() if k in _MESSAGE_KEYS}
    else:
        content = item["content"]
        if not isinstance(content, str | list):  # no message type of the SDK's takes it
            raise _bad_item(index, item, "content should be a string or a list of parts")
        text: Any = None
        if isinstance(content, str):
            text = content
        elif isinstance(content, list) and content:
            first = content[0]
            if isinstance(first, dict) and first.get("type") == "input_image":
                text = None  # vLLM: no text, the message goes on as it is
            else:
                text = _text(first, index, item)
        if text is not None:
            if prev_assistant is not None and prev_assistant.get("content") is None:
                prev_assistant["content"] = text
                return None
            return {"role": "assistant", "content": text}
    return item


def _with_call(
    prev_assistant: dict[str, Any] | None, call_id: Any, name: Any, arguments: Any
) -> dict[str, Any] | None:
    # a call joins the assistant message before it (None), or starts one
    call = {"id": call_id, "function": {"name": name, "arguments": arguments}, "type": "function"}
    if prev_assistant is not None:
        calls = prev_assistant.get("tool_calls")
        if calls is None:
            prev_assistant["tool_calls"] = [call]
            return None
        calls.append(call)
        return None
    return {"role": "assistant", "tool_calls": [call]}


_UNCONVERTED_ITEMS: dict[str | None, tuple[str, ...]] = {
    "file_search_call": ("id", "queries", "status"),
    "computer_call": ("call_id", "id", "pending_safety_checks", "status"),
    "computer_call_output": ("call_id", "output"),
    "web_search_call": ("action", "id", "status"),
    "tool_search_call": ("arguments",),
    "tool_search_output": ("tools",),
    "additional_tools": ("role", "tools"),
    "configuration_update": (),
    "compaction": ("encrypted_content",),
    "image_generation_call": ("id", "result", "status"),
    "code_interpreter_call": ("code", "container_id", "id", "outputs", "status"),
    "local_shell_call": ("action", "call_id", "id", "status"),
    "local_shell_call_output": ("id", "output"),
    "shell_call": ("action", "call_id"),
    "shell_call_output": ("call_id", "output"),
    "apply_patch_call": ("call_id", "operation", "status"),
    "apply_patch_call_output": ("call_id", "status"),
    "mcp_list_tools": ("id", "server_label", "tools"),
    "mcp_approval_request": ("arguments", "id", "name", "server_label"),
    "mcp_approval_response": ("approval_request_id", "approve"),
    "mcp_call": ("arguments", "id", "name", "server_label"),
    "compaction_trigger": (),
    "item_reference": ("id",),
    "program": ("call_id", "code", "fingerprint", "id"),
    "program_output": ("call_id", "id", "result", "status"),
}
"""The item types of the SDK's ``ResponseInputItemParam`` union that vLLM's conversion refuses
once validated ("Unsupported input item type"), with the keys each TypedDict requires (their
values are not checked here: a malformed one gets that message too, where vLLM lists
pydantic's errors for every branch of the union)."""

_MESSAGE_KEYS = frozenset({"role", "content", "type", "status", "phase"})
"""The keys of the SDK's input message TypedDicts (EasyInputMessageParam, Message)."""


def _text(part: Any, index: int, item: Any) -> str:
    if not isinstance(part, dict) or not isinstance(part.get("text"), str):
        raise _bad_item(index, item, "a content part needs its text")
    return str(part["text"])


_IMAGE_DETAILS = ("low", "high", "auto", "original")
_FILE_DETAILS = ("auto", "low", "high")
_PART_TYPES = "'input_text', 'input_image', 'input_file'"


def _with_image_details(item: dict[str, Any]) -> dict[str, Any]:
    # vLLM's _default_input_image_details: an input_image without ``detail`` gets "auto" (the
    # chat template sees it among the part's extra fields).
    content = item.get("content")
    if not isinstance(content, list) or not any(
        isinstance(p, dict) and p.get("type") == "input_image" and "detail" not in p
        for p in content
    ):
        return item
    parts = [
        {**p, "detail": "auto"}
        if isinstance(p, dict) and p.get("type") == "input_image" and "detail" not in p
        else p
        for p in content
    ]
    return {**item, "content": parts}


def _check_content(content: Any, index: int, item: Any) -> None:
    # The input content parts the OpenAI SDK's TypedDicts admit (vLLM validates with them).
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise _bad_item(index, item, "content should be a string or a list of content parts")
    for part in content:
        problem = _part_problem(part)
        if problem is not None:
            raise _bad_item(index, item, problem)


def _part_problem(part: Any) -> str | None:
    if not isinstance(part, dict):
        return "a content part should be a valid dictionary"
    kind = part.get("type")
    if kind == "input_text":
        return None if isinstance(part.get("text"), str) else "input_text needs its text"
    if kind == "input_image":
        if part.get("detail") not in _IMAGE_DETAILS:
            return "input_image detail should be 'low', 'high', 'auto' or 'original'"
        for key in ("image_url", "file_id"):
            if part.get(key) is not None and not isinstance(part[key], str):
                return f"input_image {key} should be a string"
        return None
    if kind == "input_file":
        if "detail" in part and part["detail"] not in _FILE_DETAILS:
            return "input_file detail should be 'auto', 'low' or 'high'"
        for key in ("file_data", "file_url", "filename"):
            if key in part and not isinstance(part[key], str):
                return f"input_file {key} should be a string"
        if part.get("file_id") is not None and not isinstance(part["file_id"], str):
            return "input_file file_id should be a string"
        return None
    return (
        f"Input tag {kind!r} found using 'type' does not match any of the expected tags: "
        f"{_PART_TYPES}"
    )
