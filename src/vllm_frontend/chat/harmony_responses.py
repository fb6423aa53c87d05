"""A Responses API request's conversation as Harmony messages, for gpt-oss models, as vLLM 0.32
builds it (``OnlineRenderer._render_responses_with_harmony`` and
``entrypoints/openai/responses/harmony.py``).

- Without a previous response, the preamble: the system message (``reasoning.effort``; the
  built-in tools' descriptions are never added, as in vLLM without ``--tool-server``) and a
  developer message with the instructions (``instructions``, else a leading ``system`` or
  ``developer`` input message) and the function tools (only when some tool is not a built-in
  one: ``web_search_preview``, ``code_interpreter``, ``container``); then
  ``previous_input_messages`` (chat or Harmony shaped; their system and developer messages
  dropped).
- With a previous response, its whole Harmony conversation (prompt and output messages) instead;
  the new request's instructions are then not used, as in vLLM.
- Then the input: a string is a user message; items become messages (an assistant message on
  ``final``, ``reasoning`` content on ``analysis``, a ``function_call`` on ``commentary`` to
  ``functions.NAME`` with content type ``json``, a ``function_call_output`` from
  ``functions.NAME``, the name found among the previous response's and the input's calls).

Harmony messages are ``openai_harmony.Message`` objects; :class:`HarmonyRenderer` renders them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from vllm_frontend.chat.harmony_encoding import harmony
from vllm_frontend.chat.harmony_renderer import HarmonyRenderer, flatten_text
from vllm_frontend.text.errors import InvalidInput

__all__ = [
    "HarmonyContentError",
    "HarmonyInputError",
    "function_tool_names",
    "message_dicts",
    "responses_conversation",
]

_EFFORTS = ("high", "medium", "low")
_BUILTIN_TYPES = frozenset({"code_interpreter", "web_search_preview", "container"})
_NAMESPACE_SEPARATOR = "__"


class HarmonyInputError(ValueError):
    """An input item Harmony cannot take (vLLM: 400 ``invalid_request_error`` on ``input``,
    its message as ``str(error)``)."""


class HarmonyContentError(HarmonyInputError):
    """A ``function_call_output`` whose ``output`` is a list of parts: vLLM hands the list to
    Harmony's ``Message`` as one content, and pydantic refuses it (vLLM answers its report for
    ``Message`` as a 400 on ``input``). ``value`` is the list."""

    def __init__(self, value: list[Any]) -> None:
        super().__init__("content.0: Input should be a valid dictionary or instance of Content")
        self.value = value


def function_tool_names(tools: Sequence[Mapping[str, Any]]) -> frozenset[str]:
    """The request's function tool names (a namespace's functions as ``NS__NAME``)."""
    names: list[str] = []
    for tool in tools:
        if tool.get("type") == "function":
            names.append(tool.get("name") or "")
        elif tool.get("type") == "namespace":
            names.extend(
                f"{tool.get('name')}{_NAMESPACE_SEPARATOR}{inner.get('name')}"
                for inner in tool.get("tools") or ()
                if isinstance(inner, Mapping) and inner.get("type") == "function"
            )
    return frozenset(names)


def _tool_types(tools: Sequence[Mapping[str, Any]]) -> set[str]:
    labels = {
        label.strip()
        for label in os.environ.get("VLLM_GPT_OSS_SYSTEM_TOOL_MCP_LABELS", "").split(",")
        if label.strip()
    }
    types: set[str] = set()
    for tool in tools:
        if tool.get("type") == "mcp":
            if tool.get("server_label") in labels:
                types.add(str(tool.get("server_label")))
        else:
            types.add(str(tool.get("type")))
    return types


def responses_conversation(
    renderer: HarmonyRenderer,
    *,
    instructions: str | None,
    request_input: str | list[Any],
    tools: Sequence[Mapping[str, Any]],
    reasoning_effort: str | None,
    previous_messages: list[Any] | None,
    previous_calls: Sequence[tuple[str, str]] = (),
    previous_input_messages: list[Any] | None = None,
) -> list[Any]:
    """The Harmony messages of a Responses request (see the module doc).

    ``previous_messages``: the previous response's Harmony conversation (None without one);
    ``previous_calls``: its ``function_call`` output items as ``(call_id, name)``, in order.
    Raises :class:`HarmonyInputError` for input items, ``InvalidInput`` for the preamble."""
    messages: list[Any] = []
    if previous_messages is None:
        kinds = _tool_types(tools)
        with_custom_tools = not kinds.issubset(_BUILTIN_TYPES)
        if instructions is None and isinstance(request_input, list):
            instructions, request_input = _leading_instructions(request_input)
        messages.extend(
            _preamble(renderer, instructions, tools if with_custom_tools else None,
                      reasoning_effort)
        )  # fmt: skip
        messages.extend(_previous_input(renderer, previous_input_messages))
    else:
        messages.extend(previous_messages)
    calls = list(previous_calls)
    if isinstance(request_input, str):
        if request_input or not previous_input_messages:
            h = harmony()
            messages.append(h.Message.from_role_and_content(h.Role.USER, request_input))
        return messages
    for item in request_input:
        try:
            message = _input_message(renderer, item, calls)
        except HarmonyInputError:
            raise
        except (ValueError, TypeError, AttributeError, KeyError) as e:
            raise HarmonyInputError(str(e)) from None
        if message is not None:
            messages.append(message)
        if isinstance(item, Mapping) and item.get("type") == "function_call":
            calls.append((item.get("call_id"), item.get("name")))  # type: ignore[arg-type]
    return messages


def message_dicts(messages: Sequence[Any]) -> list[dict[str, Any]] | None:
    """Harmony messages as vLLM's ``input_messages`` / ``output_messages`` show them."""
    return [m.to_dict() for m in messages] if messages else None


# -- the preamble ---------------------------------------------------------------------------


def _preamble(
    renderer: HarmonyRenderer,
    instructions: str | None,
    tools: Sequence[Mapping[str, Any]] | None,
    reasoning_effort: str | None,
) -> list[Any]:
    if reasoning_effort is not None and reasoning_effort not in _EFFORTS:
        raise InvalidInput(
            f"reasoning_effort={reasoning_effort!r} is not supported by Harmony. "
            f"Supported values are: {', '.join(_EFFORTS)}.",
            parameter="reasoning_effort",
        )
    return renderer.preamble(instructions, _chat_tools(tools), reasoning_effort)


def _chat_tools(tools: Sequence[Mapping[str, Any]] | None) -> list[dict[str, Any]] | None:
    # Responses tools in the chat shape the developer message reads (the others by type only).
    if tools is None:
        return None
    out: list[dict[str, Any]] = []
    for tool in tools:
        if tool.get("type") == "function":
            function = {k: tool.get(k) for k in ("name", "description", "parameters")}
            out.append({"type": "function", "function": function})
        else:
            out.append({"type": tool.get("type")})
    return out


def _leading_instructions(items: list[Any]) -> tuple[str | None, list[Any]]:
    # vLLM's extract_instructions_from_messages (the first item only).
    if not items:
        return None, items
    first = items[0]
    if not isinstance(first, Mapping) or first.get("role") not in ("system", "developer"):
        return None, items
    return flatten_text(first.get("content")), items[1:]


def _previous_input(renderer: HarmonyRenderer, messages: list[Any] | None) -> list[Any]:
    out: list[Any] = []
    for message in messages or ():
        if not isinstance(message, Mapping):
            continue
        for converted in _previous_message(renderer, message):
            if converted.author.role not in ("system", "developer"):
                out.append(converted)
    return out


def _previous_message(renderer: HarmonyRenderer, message: Mapping[str, Any]) -> list[Any]:
    # vLLM's response_previous_input_to_harmony: Harmony-shaped (``author``) or chat-shaped.
    h = harmony()
    author = message.get("author")
    if isinstance(author, Mapping):
        raw = message.get("content", "")
        if isinstance(raw, list):
            contents = [h.TextContent(text=c.get("text", "")) for c in raw]
        elif isinstance(raw, str):
            contents = [h.TextContent(text=raw)]
        else:
            contents = [h.TextContent(text="")]
        role, name = h.Role(author.get("role")), author.get("name")
        if name:
            msg = h.Message(author=h.Author.new(role, name), content=contents)
        else:
            msg = h.Message.from_role_and_contents(role, contents)
        for key, method in (("channel", "with_channel"), ("recipient", "with_recipient"),
                            ("content_type", "with_content_type")):  # fmt: skip
            if message.get(key):
                msg = getattr(msg, method)(message[key])
        return [msg]
    role = message.get("role")
    if role is None:
        raise InvalidInput(f"Message has no 'role' key: {dict(message)}", parameter="input")
    calls = message.get("tool_calls")
    if role == "assistant" and calls:
        out = []
        for call in calls:
            function = call.get("function", {})
            out.append(
                h.Message.from_role_and_content(h.Role.ASSISTANT, function.get("arguments") or "")
                .with_channel("commentary")
                .with_recipient(f"functions.{function.get('name', '')}")
                .with_content_type("json")
            )
        return out
    if role == "tool":
        name = message.get("name", "")
        if name and not name.startswith("functions."):
            name = f"functions.{name}"
        text = flatten_text(message.get("content")) or ""
        return [
            h.Message.from_author_and_content(h.Author.new(h.Role.TOOL, name), text)
            .with_channel("commentary")
            .with_recipient("assistant")
        ]
    if role in ("system", "developer"):
        return []  # (dropped by the caller in any case)
    content = message.get("content", "")
    if isinstance(content, str):
        return [h.Message.from_role_and_contents(role, [h.TextContent(text=content)])]
    texts = [h.TextContent(text=c.get("text", "")) for c in content]
    return [h.Message.from_role_and_contents(role, texts)]


# -- input items ----------------------------------------------------------------------------


def _input_message(
    renderer: HarmonyRenderer, item: Any, calls: Sequence[tuple[str, str]]
) -> Any | None:
    # vLLM's response_input_to_harmony.
    h = harmony()
    if not isinstance(item, Mapping):
        raise HarmonyInputError(f"Unknown input type: {type(item).__name__}")
    kind = item.get("type")
    if kind is None or kind == "message":
        role, content = item.get("role"), item.get("content")
        if role in ("system", "developer"):
            text = flatten_text(content)
            return renderer.instructions_message(role, text) if text else None
        if isinstance(content, str):
            msg = h.Message.from_role_and_content(role, content)
        else:
            texts = [h.TextContent(text=c.get("text", "")) for c in content or ()]
            msg = h.Message.from_role_and_contents(role, texts)
        return msg.with_channel("final") if role == "assistant" else msg
    if kind == "function_call_output":
        call_id = item.get("call_id")
        name = next((n for cid, n in reversed(calls) if cid == call_id), None)
        if name is None:
            raise HarmonyInputError(f"No call message found for {call_id} (parameter=input)")
        output = item.get("output")
        if isinstance(output, list):
            raise HarmonyContentError(output)
        return (
            h.Message.from_author_and_content(h.Author.new(h.Role.TOOL, f"functions.{name}"),
                                              output if isinstance(output, str) else "")
            .with_channel("commentary")
            .with_recipient("assistant")
        )  # fmt: skip
    if kind == "reasoning":
        content = item.get("content")
        if not content:
            return None
        text = "\n".join(part.get("text", "") for part in content)
        return h.Message.from_role_and_content(h.Role.ASSISTANT, text).with_channel("analysis")
    if kind == "function_call":
        return (
            h.Message.from_role_and_content(h.Role.ASSISTANT, item.get("arguments") or "")
            .with_channel("commentary")
            .with_recipient(f"functions.{item.get('name')}")
            .with_content_type("json")
        )
    raise HarmonyInputError(f"Unknown input type: {kind} (parameter=input)")
