"""gpt-oss chat prompts rendered with the Harmony encoding, as vLLM 0.32 renders them.

vLLM does not use a Jinja template for ``model_type`` ``gpt_oss`` chat completions
(``OnlineRenderer._make_request_with_harmony`` and ``entrypoints/openai/parser/harmony_utils.py``).
The prompt is a list of Harmony messages rendered straight to token ids:

- a system message: the library's default model identity, ``Reasoning:`` from the request's
  ``reasoning_effort`` (``low``/``medium``/``high``; ``none`` and the others are refused) and
  the conversation start date (``VLLM_SYSTEM_START_DATE``, else today's local date);
- a developer message when there are instructions or tools: a leading ``system`` or
  ``developer`` message's text becomes its ``# Instructions`` (the system message's model
  identity instead with ``VLLM_GPT_OSS_HARMONY_SYSTEM_INSTRUCTIONS=1``), and the request's
  function tools its ``functions`` namespace;
- the remaining messages: user text; assistant ``content`` on the ``final`` channel (on
  ``commentary`` beside tool calls), ``reasoning`` on ``analysis``, each tool call a
  ``commentary`` message to ``functions.NAME`` with content type ``json``; tool results from
  ``functions.NAME`` (the name found through ``tool_call_id``) to the assistant; later system and
  developer messages as developer instructions;
- then ``<|start|>assistant``. Analysis messages before the last ``final`` answer are dropped,
  and earlier tool calls' headers are written in the older ``assistant to=…`` form vLLM keeps.

``add_generation_prompt``, ``continue_final_message``, ``chat_template`` and
``chat_template_kwargs`` play no part, as in vLLM.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from vllm_frontend.chat.errors import ChatError
from vllm_frontend.chat.harmony_encoding import harmony, harmony_encoding
from vllm_frontend.text.errors import InvalidInput

__all__ = ["HarmonyRenderer", "RenderedHarmony", "flatten_text"]

_EFFORTS = ("high", "medium", "low")
_BUILTIN_TOOL_TYPES = ("web_search_preview", "code_interpreter", "container")


class RenderedHarmony(msgspec.Struct, frozen=True):
    """A gpt-oss chat request rendered to prompt token ids."""

    prompt: list[int]
    """The prompt's token ids (sent to the engine as they are)."""
    conversation: list[dict[str, Any]]
    """Empty: vLLM's conversation here is Harmony messages, which ``echo`` never reads."""


class HarmonyRenderer:
    """Renders gpt-oss chat requests through Harmony; build once at startup."""

    def __init__(
        self,
        *,
        system_instructions: bool | None = None,
        start_date: str | None = None,
        exclude_tools_when_tool_choice_none: bool = False,
    ) -> None:
        """``system_instructions`` and ``start_date`` default to vLLM's environment variables
        ``VLLM_GPT_OSS_HARMONY_SYSTEM_INSTRUCTIONS`` and ``VLLM_SYSTEM_START_DATE``."""
        if system_instructions is None:
            system_instructions = bool(
                int(os.environ.get("VLLM_GPT_OSS_HARMONY_SYSTEM_INSTRUCTIONS", "0"))
            )
        if start_date is None:
            start_date = os.environ.get("VLLM_SYSTEM_START_DATE") or None
        self.system_instructions = system_instructions
        self.start_date = start_date
        self.exclude_tools_when_tool_choice_none = exclude_tools_when_tool_choice_none
        self._encoding = harmony_encoding()
        self._h = harmony()
        special = self._encoding.encode
        self._start = special("<|start|>", allowed_special="all")[0]
        self._channel = special("<|channel|>", allowed_special="all")[0]
        self._constrain = special("<|constrain|>", allowed_special="all")[0]
        self._message = special("<|message|>", allowed_special="all")[0]

    def render(
        self,
        messages: Any,
        *,
        tools: Any = None,
        tool_choice: Any = None,
        reasoning_effort: str | None = None,
    ) -> RenderedHarmony:
        """The prompt token ids of a chat request (its fields as plain JSON values).

        Raises :class:`ChatError` (HTTP 400) with vLLM's messages."""
        if reasoning_effort == "none":
            raise InvalidInput(
                f"Harmony does not support reasoning_effort={reasoning_effort!r}",
                parameter="reasoning_effort",
            )
        if reasoning_effort is not None and reasoning_effort not in _EFFORTS:
            raise InvalidInput(
                f"reasoning_effort={reasoning_effort!r} is not supported by Harmony. "
                f"Supported values are: {', '.join(_EFFORTS)}.",
                parameter="reasoning_effort",
            )
        include_tools = tools is not None and not (
            tool_choice == "none" and self.exclude_tools_when_tool_choice_none
        )
        chat = list(messages)
        instructions: str | None = None
        if chat and isinstance(chat[0], Mapping) and chat[0].get("role") in ("system", "developer"):
            instructions = flatten_text(chat[0].get("content"))
            chat = chat[1:]
        try:
            prompt = self._preamble(
                instructions, tools if include_tools else None, reasoning_effort
            )
            prompt.extend(self._history(chat))
            ids = self._render_ids(prompt)
        except InvalidInput:
            raise
        except (ValueError, TypeError, AttributeError, KeyError) as e:
            raise ChatError(str(e)) from None
        return RenderedHarmony(prompt=ids, conversation=[])

    def render_messages(self, messages: list[Any]) -> RenderedHarmony:
        """The prompt token ids of Harmony messages built elsewhere (the Responses API's)."""
        return RenderedHarmony(prompt=self._render_ids(messages), conversation=[])

    def preamble(
        self, instructions: str | None, tools: Any, reasoning_effort: str | None
    ) -> list[Any]:
        """vLLM's ``build_harmony_preamble``: the system message, and the developer message
        when there are instructions or tools (chat-shaped; built-in tool types skipped)."""
        return self._preamble(instructions, tools, reasoning_effort)

    def instructions_message(self, role: str, text: str) -> Any:
        """vLLM's ``get_system_or_developer_message``: a later system or developer message."""
        if role == "system" and self.system_instructions:
            return self._system_message(text, None)
        return self._developer_message(text, None)

    # -- the preamble ------------------------------------------------------------------------

    def _preamble(
        self, instructions: str | None, tools: Any, reasoning_effort: str | None
    ) -> list[Any]:
        system_text = instructions if self.system_instructions else None
        developer_text = None if self.system_instructions else instructions
        out = [self._system_message(system_text, reasoning_effort)]
        if developer_text or tools:
            out.append(self._developer_message(developer_text, tools))
        return out

    def _system_message(self, instructions: str | None, reasoning_effort: str | None) -> Any:
        h = self._h
        content = h.SystemContent.new()
        if instructions is not None and self.system_instructions:
            identity = content.model_identity
            content = content.with_model_identity(
                f"{identity}\n{instructions}" if identity else instructions
            )
        if reasoning_effort is not None:
            content = content.with_reasoning_effort(h.ReasoningEffort(reasoning_effort.title()))
        date = self.start_date or datetime.datetime.now().strftime("%Y-%m-%d")
        content = content.with_conversation_start_date(date)
        return h.Message.from_role_and_content(h.Role.SYSTEM, content)

    def _developer_message(self, instructions: str | None, tools: Any) -> Any:
        h = self._h
        content = h.DeveloperContent.new()
        if instructions is not None and not self.system_instructions:
            content = content.with_instructions(instructions)
        if tools is not None:
            functions = []
            for tool in tools:
                kind = tool.get("type") if isinstance(tool, Mapping) else None
                if kind in _BUILTIN_TOOL_TYPES:
                    continue
                if kind != "function":
                    raise InvalidInput(f"tool type {kind!r} is not supported.", parameter="tools")
                function = tool.get("function") or {}
                functions.append(
                    h.ToolDescription.new(
                        name=function.get("name"),
                        description=function.get("description") or "",
                        parameters=function.get("parameters"),
                    )
                )
            if functions:
                content = content.with_function_tools(functions)
        return h.Message.from_role_and_content(h.Role.DEVELOPER, content)

    # -- the conversation --------------------------------------------------------------------

    def _history(self, chat: Sequence[Any]) -> list[Any]:
        names: dict[Any, Any] = {}
        for message in chat:
            calls = message.get("tool_calls", [])
            if calls is None and message.get("role") == "assistant":
                calls = []  # (vLLM's maybe_serialize_tool_calls; other roles' null fails below)
            for call in calls:
                names[call.get("id")] = (call.get("function") or {}).get("name")
        out: list[Any] = []
        for message in chat:
            out.extend(self._message_of(message, names))
        return out

    def _message_of(self, message: Mapping[str, Any], names: Mapping[Any, Any]) -> list[Any]:
        h = self._h
        role = message.get("role")
        calls = message.get("tool_calls", []) or []
        out: list[Any] = []
        if role == "assistant" and calls:
            text = flatten_text(message.get("content"))
            if text:
                out.append(
                    h.Message.from_role_and_content(h.Role.ASSISTANT, text).with_channel(
                        "commentary"
                    )
                )
            if reasoning := message.get("reasoning"):
                out.append(
                    h.Message.from_role_and_content(h.Role.ASSISTANT, reasoning).with_channel(
                        "analysis"
                    )
                )
            for call in calls:
                function = call.get("function", {})
                out.append(
                    h.Message.from_role_and_content(
                        h.Role.ASSISTANT, function.get("arguments", "") or ""
                    )
                    .with_channel("commentary")
                    .with_recipient(f"functions.{function.get('name', '')}")
                    .with_content_type("json")
                )
            return out
        if role == "tool":
            name = names.get(message.get("tool_call_id", ""), "")
            text = flatten_text(message.get("content")) or ""
            author = h.Author.new(h.Role.TOOL, f"functions.{name}")
            return [
                h.Message.from_author_and_content(author, text)
                .with_channel("commentary")
                .with_recipient("assistant")
            ]
        if role == "assistant" and (reasoning := message.get("reasoning")):
            out.append(
                h.Message.from_role_and_content(h.Role.ASSISTANT, reasoning).with_channel(
                    "analysis"
                )
            )
        content = message.get("content") or ""
        if isinstance(content, str):
            contents = [h.TextContent(text=content)]
        else:
            contents = [h.TextContent(text=part.get("text", "")) for part in content]
        if role == "assistant":
            if contents and contents[0].text:
                out.append(h.Message.from_role_and_contents(role, contents).with_channel("final"))
        elif role in ("system", "developer"):
            text = flatten_text(message.get("content"))
            if text is not None:
                if role == "system" and self.system_instructions:
                    out.append(self._system_message(text, None))
                else:
                    out.append(self._developer_message(text, None))
        else:
            out.append(h.Message.from_role_and_contents(role, contents))
        return out

    # -- token ids ---------------------------------------------------------------------------

    def _render_ids(self, messages: list[Any]) -> list[int]:
        h = self._h
        last_final = -1
        for i in range(len(messages) - 1, -1, -1):
            if messages[i].author.role == "assistant" and messages[i].channel == "final":
                last_final = i
                break
        kept = [
            m for i, m in enumerate(messages) if not (i < last_final and m.channel == "analysis")
        ]
        ids = self._encoding.render_conversation_for_completion(
            h.Conversation.from_messages(kept),
            h.Role.ASSISTANT,
            config=h.RenderConversationConfig(auto_drop_analysis=False),
        )
        return self._legacy_tool_call_headers(list(ids))

    def _legacy_tool_call_headers(self, ids: list[int]) -> list[int]:
        # vLLM rewrites oss-harmony 0.0.10+'s assistant tool-call headers
        # ``<|start|>assistant<|channel|>CH to=R <|constrain|>TYPE<|message|>`` back to the form
        # gpt-oss was trained on: ``<|start|>assistant to=R<|channel|>CH TYPE<|message|>``.
        enc = self._encoding
        start, channel, constrain, message = (
            self._start,
            self._channel,
            self._constrain,
            self._message,
        )
        i = 0
        while i < len(ids):
            if ids[i] != start:
                i += 1
                continue
            try:
                end = ids.index(message, i + 1)
                at_channel = ids.index(channel, i + 1, end)
                at_constrain = ids.index(constrain, at_channel + 1, end)
            except ValueError:
                i += 1
                continue
            author = enc.decode(ids[i + 1 : at_channel])
            middle = enc.decode(ids[at_channel + 1 : at_constrain])
            content_type = enc.decode(ids[at_constrain + 1 : end])
            if author != "assistant" or " to=" not in middle or not middle.endswith(" "):
                i = end + 1
                continue
            channel_name, recipient = middle[:-1].split(" to=", 1)
            if not channel_name or not recipient or not content_type:
                i = end + 1
                continue
            header = [
                start,
                *enc.encode(f"assistant to={recipient}"),
                channel,
                *enc.encode(f"{channel_name} {content_type}"),
                message,
            ]
            ids[i : end + 1] = header
            i += len(header)
        return ids


def flatten_text(content: Any) -> str | None:
    """vLLM's ``flatten_input_text_content``: a string as it is; a list's text parts joined."""
    if content is None or isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    texts: list[str] = []
    for item in content:
        if isinstance(item, str):
            texts.append(item)
        elif isinstance(item, dict) and item.get("text") is not None:
            texts.append(item["text"])
    return "".join(texts) if texts else None
