"""An Anthropic Messages request as the chat request vLLM 0.32 turns it into
(``AnthropicServingMessages.to_chat_completion_request`` in vllm/entrypoints/anthropic/
serving.py): OpenAI-style messages, tools, tool choice, reasoning options and sampling fields.

Image blocks become OpenAI ``image_url`` parts with the URL vLLM builds (a ``data:`` URI for
base64 sources): the chat layer decides what to do with them, as it does for a chat request
carrying the same parts (a text-only model refuses them; the multimodal layer serves them).
"""

from __future__ import annotations

import json
import time
from typing import Any

import msgspec

from .messages_protocol import (
    ContentBlock,
    CountTokensRequest,
    Message,
    MessagesRequest,
    Tool,
    ToolDefinitionChange,
)

__all__ = ["BILLING_HEADER", "ChatFields", "to_chat_fields"]

BILLING_HEADER = "x-anthropic-billing-header"
"""System text starting with this (Claude Code's per-request attribution) is dropped, as vLLM
drops it, so that it does not defeat prefix caching."""


class ChatFields(msgspec.Struct, kw_only=True):
    """The chat request fields an Anthropic request maps onto (vLLM's names)."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool = True
    reasoning_effort: str | None = None
    thinking_token_budget: int | None = None
    response_format: dict[str, Any] | None = None


def to_chat_fields(
    request: MessagesRequest | CountTokensRequest,
    *,
    merge_inline_system: bool,
    disabled_thinking_effort: str,
) -> ChatFields:
    """The chat fields of ``request``; ``merge_inline_system`` moves system messages into the
    leading system prompt (for templates that want it first); ``disabled_thinking_effort`` is
    the ``reasoning_effort`` that ``thinking: {"type": "disabled"}`` asks for."""
    messages: list[dict[str, Any]] = []
    _system_prompt(request, messages, merge_inline_system)
    for message in request.messages:
        _convert_message(message, messages, merge_inline_system)
    fields = ChatFields(messages=messages)
    config = request.output_config
    if config is not None:
        if config.format is not None and config.format.json_schema:
            fields.response_format = {
                "type": config.format.type,
                "json_schema": {"name": config.format.type, "schema": config.format.json_schema},
            }
        if config.effort is not None:
            fields.reasoning_effort = config.effort
    thinking = request.thinking
    if thinking is not None:
        kind = type(thinking).__struct_config__.tag
        if kind == "disabled":
            fields.reasoning_effort = disabled_thinking_effort
        elif kind == "enabled":
            fields.thinking_token_budget = thinking.budget_tokens  # type: ignore[union-attr]
    choice = request.tool_choice
    if choice is not None:
        fields.parallel_tool_calls = not choice.disable_parallel_tool_use
        if choice.type == "any":
            fields.tool_choice = "required"
        elif choice.type == "tool":
            fields.tool_choice = {"type": "function", "function": {"name": choice.name}}
        else:
            fields.tool_choice = choice.type
    tools = _resolve_tools(request)
    if tools is not None:
        fields.tools = [_tool_json(tool) for tool in tools]
        if fields.tool_choice is None:
            fields.tool_choice = "auto"
    return fields


def _is_billing_header(text: str) -> bool:
    return text.startswith(BILLING_HEADER)


def _system_prompt(
    request: MessagesRequest | CountTokensRequest,
    messages: list[dict[str, Any]],
    merge_inline_system: bool,
) -> None:
    parts: list[str] = []
    system = request.system
    if system:
        if isinstance(system, str):
            parts.append(system)
        else:
            parts.extend(
                block.text
                for block in system
                if block.type == "text" and block.text and not _is_billing_header(block.text)
            )
    if merge_inline_system:
        for message in request.messages:
            if message.role == "system" and (text := _system_text(message)):
                parts.append(text)
    if parts:
        messages.append({"role": "system", "content": "".join(parts)})


def _system_text(message: Message) -> str | None:
    content = message.content
    if isinstance(content, str):
        return None if _is_billing_header(content) else content
    parts = [
        block.text
        for block in content
        if block.type == "text" and block.text and not _is_billing_header(block.text)
    ]
    return "".join(parts) if parts else None


def _convert_message(
    message: Message, messages: list[dict[str, Any]], merge_inline_system: bool
) -> None:
    role = message.role
    if role == "system":
        if not merge_inline_system and (text := _system_text(message)):
            messages.append({"role": "system", "content": text})
        return
    out: dict[str, Any] = {"role": role}
    content = message.content
    if isinstance(content, str):
        out["content"] = content
    else:
        _convert_blocks(content, role, out, messages)
    if not (role == "user" and "content" not in out):
        messages.append(out)


def _convert_blocks(
    blocks: list[ContentBlock],
    role: str,
    out: dict[str, Any],
    messages: list[dict[str, Any]],
) -> None:
    parts: list[dict[str, Any]] = []
    tool_calls: list[dict[str, Any]] = []
    reasoning: list[str] = []
    for block in blocks:
        kind = block.type
        if kind == "text":
            if block.text:
                parts.append({"type": "text", "text": block.text})
        elif kind == "image":
            if block.source:
                parts.append({"type": "image_url", "image_url": {"url": image_url(block.source)}})
        elif kind == "thinking":
            if block.thinking is not None:
                reasoning.append(block.thinking)
        elif kind == "tool_use":
            tool_calls.append(
                {
                    "id": block.id or f"call_{int(time.time())}",
                    "type": "function",
                    "function": {
                        "name": block.name or "",
                        # json.dumps' spacing and ASCII escapes, as the template will see them
                        "arguments": json.dumps(block.input or {}),
                    },
                }
            )
        elif kind == "tool_result":
            if role == "user":
                _user_tool_result(block, messages)
            else:
                text = str(block.content) if block.content else ""
                parts.append({"type": "text", "text": f"Tool result: {text}"})
        # redacted_thinking (opaque), tool_reference and tool changes add nothing here
    if reasoning:
        out["reasoning"] = "".join(reasoning)
    if tool_calls:
        out["tool_calls"] = tool_calls
    if parts:
        if len(parts) == 1 and parts[0]["type"] == "text":
            out["content"] = parts[0]["text"]
        else:
            out["content"] = parts


def image_url(source: dict[str, Any]) -> str:
    """The OpenAI image URL of an Anthropic image source (a ``data:`` URI unless it is a
    ``url`` source)."""
    if source.get("type") == "url":
        return str(source.get("url", ""))
    return f"data:{source.get('media_type', 'image/jpeg')};base64,{source.get('data', '')}"


def _user_tool_result(block: ContentBlock, messages: list[dict[str, Any]]) -> None:
    text = ""
    images: list[str] = []
    references: list[dict[str, Any]] = []
    content = block.content
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        texts: list[str] = []
        for item in content:
            kind = item.get("type")
            if kind == "text":
                texts.append(item.get("text", ""))
            elif kind == "image":
                url = image_url(item.get("source", {}))
                if url:
                    images.append(url)
            elif kind == "tool_reference":
                name = item.get("tool_name") or item.get("name")
                if name:
                    references.append({"type": "tool_reference", "name": name})
        text = "\n".join(texts)
    call_id = block.tool_use_id or ""
    messages.append({"role": "tool", "tool_call_id": call_id, "content": text or ""})
    if images:
        messages.append(
            {
                "role": "user",
                "content": [{"type": "image_url", "image_url": {"url": url}} for url in images],
            }
        )
    if references:
        messages.append({"role": "tool", "tool_call_id": call_id, "content": references})


def _resolve_tools(request: MessagesRequest | CountTokensRequest) -> list[Tool] | None:
    """The tools in effect at the end of the conversation, after its ``tool_addition`` /
    ``tool_removal`` blocks (vLLM's ``_resolve_tools``)."""
    changes = [
        block
        for message in request.messages
        if not isinstance(message.content, str)
        for block in message.content
        if block.type in ("tool_addition", "tool_removal")
    ]
    if not changes:
        return request.tools
    tools = {tool.name: tool for tool in request.tools or ()}
    removed: set[str] = set()
    for block in changes:
        change = block.tool
        assert change is not None  # the protocol's validator
        if isinstance(change, ToolDefinitionChange):
            name = change.definition.name
            tools[name] = change.definition
        else:
            name = change.name
            if name not in tools:
                raise ValueError(
                    f"{block.type} references tool {name!r}, which is not declared in tools"
                )
            if block.type == "tool_addition":
                tools[name] = msgspec.structs.replace(tools[name], defer_loading=None)
        if block.type == "tool_removal":
            removed.add(name)
        else:
            removed.discard(name)
    return [tool for name, tool in tools.items() if name not in removed]


def _tool_json(tool: Tool) -> dict[str, Any]:
    function: dict[str, Any] = {
        "name": tool.name,
        "description": tool.description,
        "parameters": tool.input_schema,
    }
    if tool.strict is not None:
        function["strict"] = tool.strict
    if tool.defer_loading is not None:
        function["defer_loading"] = tool.defer_loading
    return {"type": "function", "function": function}
