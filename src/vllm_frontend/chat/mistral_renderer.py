"""Chat requests rendered to token ids by ``mistral_common``, as vLLM 0.32 renders them with
``--tokenizer-mode mistral`` (no chat template).

vLLM's order (``OnlineRenderer.render_chat`` → ``MistralRenderer.render_messages`` →
``safe_apply_chat_template`` → ``MistralTokenizer.apply_chat_template`` → transformers'
``MistralCommonBackend.apply_chat_template``): tool-call ids longer than 9 characters keep
their last 9; a request ``chat_template`` or ``chat_template_kwargs`` is refused, as is a
``reasoning_effort`` mistral_common does not know; the messages are checked as vLLM checks them
for any model (content parts, media refused for a text-only model); then
``add_generation_prompt`` / ``continue_final_message`` against the last message's role; then
mistral_common builds its request (``ChatCompletionRequest.from_openai``) and encodes it. Its
refusals answer 400 with its message, as vLLM's do.
"""

from __future__ import annotations

import copy
import json
import logging
from typing import Any

import msgspec

from vllm_frontend.chat.errors import ChatError, MediaUnsupported
from vllm_frontend.chat.messages import normalize_messages, normalize_tools
from vllm_frontend.chat.sources import UNTRUSTED_TEMPLATE_MESSAGE
from vllm_frontend.multimodal.parts import MediaParts
from vllm_frontend.text.tokenizer_mistral import MistralTokenizer

__all__ = ["MistralChatRenderer", "RenderedMistral"]

_log = logging.getLogger(__name__)

_ID_LENGTH = 9
"""Mistral tool-call ids are 9 characters; vLLM keeps the last 9 of longer ones."""


class RenderedMistral(msgspec.Struct, frozen=True):
    """A chat request rendered by mistral_common."""

    prompt: list[int]
    """The prompt's token ids (sent to the engine as they are)."""
    conversation: list[dict[str, Any]]
    """The messages as vLLM's chat parser sees them (for ``echo``)."""


class MistralChatRenderer:
    """Renders chat requests for a model served with ``--tokenizer-mode mistral``."""

    def __init__(
        self,
        tokenizer: MistralTokenizer,
        *,
        model_name: str = "",
        exclude_tools_when_none: bool = False,
        trust_request_chat_template: bool = False,
    ) -> None:
        """``model_name``: the first served model name (vLLM's refusal of media for a text-only
        model names it); ``exclude_tools_when_none``: ``--exclude-tools-when-tool-choice-none``;
        ``trust_request_chat_template``: ``--trust-request-chat-template`` (``/tokenize``)."""
        self.tokenizer = tokenizer
        self._model_name = model_name
        self._trust_request_chat_template = trust_request_chat_template
        self._exclude_tools_when_none = exclude_tools_when_none

    def render(
        self,
        messages: Any,
        *,
        tools: Any = None,
        tool_choice: Any = None,
        add_generation_prompt: bool | None = None,
        continue_final_message: bool = False,
        chat_template: str | None = None,
        chat_template_kwargs: Any = None,
        reasoning_effort: str | None = None,
        media: MediaParts | None = None,
        **_: Any,
    ) -> RenderedMistral:
        """The prompt ids of a chat request (its fields as plain JSON values); raises
        :class:`ChatError` (400) with vLLM's message for what vLLM refuses."""
        if continue_final_message and add_generation_prompt:
            raise ChatError(
                "Cannot set both `continue_final_message` and `add_generation_prompt` to True."
            )
        messages = _truncated_tool_call_ids(messages)
        if chat_template is not None or chat_template_kwargs is not None:
            raise ChatError(
                "chat_template is not supported for Mistral tokenizers.", param="chat_template"
            )
        _check_reasoning_effort(reasoning_effort)
        return self._render(
            messages, tools, tool_choice, add_generation_prompt, continue_final_message,
            reasoning_effort, media,
        )  # fmt: skip

    def render_for_tokenize(
        self,
        messages: Any,
        *,
        tools: Any = None,
        add_generation_prompt: bool | None = None,
        continue_final_message: bool = False,
        chat_template: str | None = None,
        chat_template_kwargs: Any = None,
    ) -> RenderedMistral:
        """``/tokenize``'s messages form: vLLM checks only the request template's trust there,
        and neither shortens tool-call ids nor refuses template options."""
        if not self._trust_request_chat_template and (
            chat_template is not None
            or (
                isinstance(chat_template_kwargs, dict)
                and chat_template_kwargs.get("chat_template") is not None
            )
        ):
            raise ChatError(UNTRUSTED_TEMPLATE_MESSAGE)
        if continue_final_message and add_generation_prompt:
            raise ChatError(
                "Cannot set both `continue_final_message` and `add_generation_prompt` to True."
            )
        return self._render(
            copy.deepcopy(messages), tools, None, add_generation_prompt, continue_final_message,
            None, None,
        )  # fmt: skip

    def _render(
        self,
        messages: Any,
        tools: Any,
        tool_choice: Any,
        add_generation_prompt: bool | None,
        continue_final_message: bool,
        reasoning_effort: str | None,
        media: MediaParts | None,
    ) -> RenderedMistral:
        tool_dicts = None
        if tools is not None and not (tool_choice == "none" and self._exclude_tools_when_none):
            tool_dicts = normalize_tools(tools)
        try:
            conversation = normalize_messages(messages, "string", media)
        except MediaUnsupported:
            raise MediaUnsupported.naming(self._model_name) from None
        for message in messages:
            if isinstance(message, dict) and message.get("role") == "assistant":
                _parse_arguments(message.get("tool_calls"))
        add_prompt = True if add_generation_prompt is None else bool(add_generation_prompt)
        _check_last_message(messages, add_prompt, continue_final_message)
        ids = self._encode(messages, tool_dicts, continue_final_message, reasoning_effort)
        return RenderedMistral(prompt=ids, conversation=conversation)

    def _encode(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        continue_final_message: bool,
        reasoning_effort: str | None,
    ) -> list[int]:
        from mistral_common.exceptions import MistralCommonException
        from mistral_common.protocol.instruct.request import ChatCompletionRequest

        tokenizer = self.tokenizer
        extra: dict[str, Any] = {}
        if tokenizer.version >= 15:
            extra["reasoning_effort"] = reasoning_effort
        try:
            request = ChatCompletionRequest.from_openai(
                messages=[_adapted(m) for m in messages],
                tools=tools,
                continue_final_message=continue_final_message,
                **extra,
            )
            return list(tokenizer.mistral.encode_chat_completion(request).tokens)
        except (AssertionError, MistralCommonException) as e:
            raise ChatError(str(e)) from None
        except Exception as e:  # vLLM turns any other library error into a 400 too
            _log.debug("mistral_common failed to render a chat request", exc_info=True)
            raise ChatError(str(e)) from None


def _check_reasoning_effort(effort: str | None) -> None:
    if not effort:
        return
    from mistral_common.protocol.instruct.request import ReasoningEffort

    values = [e.value for e in ReasoningEffort]
    if effort not in values:
        raise ChatError(
            f"reasoning_effort={effort} is not supported by Mistral models. Supported values "
            f"are: {values}.",
            param="reasoning_effort",
        )


def _check_last_message(
    messages: list[dict[str, Any]], add_generation_prompt: bool, continue_final_message: bool
) -> None:
    if not messages:
        raise ChatError("list index out of range")
    role = messages[-1].get("role") if isinstance(messages[-1], dict) else None
    if add_generation_prompt and role == "assistant":
        raise ChatError(
            "Cannot set `add_generation_prompt` to True when the last message is from the "
            "assistant. Consider using `continue_final_message` instead."
        )
    if continue_final_message and role != "assistant":
        raise ChatError(
            "Cannot set `continue_final_message` to True when the last message is not from "
            "the assistant."
        )


def _truncated_tool_call_ids(messages: Any) -> Any:
    # vLLM's truncate_tool_call_ids (and maybe_serialize_tool_calls: assistant messages get a
    # tool_calls list), on a copy.
    if not isinstance(messages, list):
        return messages
    out = copy.deepcopy(messages)
    for message in out:
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if role == "assistant":
            calls = message.get("tool_calls")
            calls = [] if calls is None else calls
            for call in calls if isinstance(calls, list) else ():
                call_id = call.get("id") if isinstance(call, dict) else None
                if isinstance(call_id, str) and len(call_id) > _ID_LENGTH:
                    call["id"] = call_id[-_ID_LENGTH:]
            message["tool_calls"] = calls
        elif role in ("tool", "tool_results"):
            call_id = message.get("tool_call_id")
            if isinstance(call_id, str) and len(call_id) > _ID_LENGTH:
                message["tool_call_id"] = call_id[-_ID_LENGTH:]
    return out


def _parse_arguments(calls: Any) -> None:
    # vLLM's chat parser turns the request's tool-call arguments into objects in place (a
    # string that is not a JSON object becomes {}), before mistral_common sees them.
    if not isinstance(calls, list):
        return
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            continue
        raw = function.get("arguments")
        parsed: Any = None
        if isinstance(raw, dict):
            parsed = raw
        elif raw and isinstance(raw, str):
            try:
                parsed = json.loads(raw)
            except ValueError:
                parsed = None
        elif raw:
            parsed = raw
        function["arguments"] = parsed if isinstance(parsed, dict) else {}


def _adapted(message: Any) -> Any:
    # transformers' _maybe_adapt_message: list content keeps its typed parts.
    if not isinstance(message, dict):
        return message
    content = message.get("content")
    if not content or isinstance(content, str):
        return message
    return {**message, "content": [part for part in content if part.get("type")]}
