"""The reasoning fields of a chat request's engine requests, as vLLM 0.32's chat route sets them
(``OpenAIServingChat._engine_reasoning_kwargs`` and ``ChatCompletionRequest
.resolve_reasoning_ended``).

- ``reasoning_ended``: ``True`` when ``include_reasoning`` is off, else the reasoning parser's
  verdict on the rendered prompt (``is_reasoning_end``), else ``None`` (the engine checks the
  prompt with its own reasoning parser). The engine holds structured-output constraints back
  until reasoning has ended.
- ``reasoning_parser_kwargs``: ``{"chat_template_kwargs": <the effective kwargs>}`` with a
  reasoning parser, else ``None``; the engine builds its reasoning parser with them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from vllm_frontend.chat.reasoning.base import ReasoningParser

__all__ = ["effective_chat_template_kwargs", "engine_reasoning_fields"]

_UNSET = (None, "auto")


def _merge(
    defaults: Mapping[str, Any] | None, overrides: Mapping[str, Any] | None
) -> dict[str, Any]:
    # vLLM's renderers.params.merge_kwargs: overrides win unless they are None or "auto".
    out = dict(defaults or {})
    out.update({k: v for k, v in (overrides or {}).items() if v not in _UNSET})
    return out


def effective_chat_template_kwargs(
    *,
    request_kwargs: Mapping[str, Any] | None,
    server_defaults: Mapping[str, Any] | None,
    add_generation_prompt: bool,
    continue_final_message: bool,
    documents: Any,
    reasoning_effort: str | None,
) -> dict[str, Any]:
    """The chat template kwargs vLLM's chat route builds a request's parsers with (and sends
    to the engine): the request's own kwargs under its rendering options, over the server's
    ``--default-chat-template-kwargs``."""
    extra: dict[str, Any] = {
        "add_generation_prompt": add_generation_prompt,
        "continue_final_message": continue_final_message,
        "documents": documents,
        "reasoning_effort": reasoning_effort,
    }
    user = request_kwargs or {}
    if reasoning_effort is not None and "enable_thinking" not in user:
        extra["enable_thinking"] = reasoning_effort != "none"
    kwargs = _merge(user, extra)
    if not server_defaults:  # vLLM's with_defaults keeps the request's kwargs as they are
        return kwargs
    return _merge(server_defaults, kwargs)


def engine_reasoning_fields(
    *,
    include_reasoning: bool,
    has_parser: bool,
    reasoning_cls: type[ReasoningParser] | None,
    vocab: Mapping[str, int],
    chat_template_kwargs: dict[str, Any],
    prompt_token_ids: Sequence[int],
    encode: Callable[[str], list[int]] | None = None,
    decode: Callable[[Sequence[int]], str] | None = None,
) -> tuple[bool | None, dict[str, Any] | None]:
    """``(reasoning_ended, reasoning_parser_kwargs)`` of one chat prompt's engine requests.

    ``has_parser``: vLLM builds a parser for the request (a tool or reasoning parser is
    configured); ``reasoning_cls`` the configured reasoning parser; ``encode`` / ``decode``:
    the tokenizer's, for parsers that tokenize text themselves."""
    kwargs = None
    if has_parser and reasoning_cls is not None:
        kwargs = {"chat_template_kwargs": chat_template_kwargs}
    if not include_reasoning:
        return True, kwargs
    if has_parser and reasoning_cls is not None:
        parser = reasoning_cls(vocab, chat_template_kwargs)
        if parser.uses_codec:
            parser.encode, parser.decode = encode, decode
        return parser.prompt_ends_reasoning(prompt_token_ids), kwargs
    return None, kwargs
