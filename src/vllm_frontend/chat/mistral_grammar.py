"""The Lark grammar vLLM 0.32's Mistral parsers put on a chat request when the model is served
with ``--tokenizer-mode mistral`` and a tekken tokenizer of version 11 or later
(``MistralParser.adjust_request``, the "grammar" branch).

The request's own ``json``/``json_object`` constraint or ``json_object``/``json_schema``
response format becomes the grammar's JSON schema (the response format is then dropped), the
tools and tool choice its tool-call part, and mistral_common renders it from its template for
the tokenizer (``GrammarFactory``). It is called exactly as vLLM calls it, so that the grammar,
or the error, is the one vLLM gets from the installed mistral_common (1.13 changed
``get_lark_from_jinja``'s signature: vLLM 0.32 then answers such requests with a 400 naming the
missing argument, and so does this frontend). Requests whose constraint mistral_common cannot
take (regex, choice, grammar, ``whitespace_pattern``, structural tags) keep vLLM's other branch
(the tool parser's JSON schema for forced choices, special tokens kept).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from vllm_frontend.chat.errors import ChatError
from vllm_frontend.text.tokenizer_mistral import MistralTokenizer

__all__ = ["grammar_applies", "mistral_grammar_constraint"]

_NOT_FOR_GRAMMARS = ("regex", "choice", "grammar", "whitespace_pattern", "structural_tag")
_ANY_JSON: dict[str, Any] = {"anyOf": [{"type": "object"}, {"type": "array"}]}


def grammar_applies(
    tokenizer: MistralTokenizer,
    structured_outputs: Mapping[str, Any] | None,
    response_format: Mapping[str, Any] | None,
) -> bool:
    """Whether vLLM takes the grammar branch for this request."""
    if not tokenizer.supports_grammar:
        return False
    if structured_outputs is not None and any(
        structured_outputs.get(k) is not None for k in _NOT_FOR_GRAMMARS
    ):
        return False
    return not (response_format is not None and response_format.get("type") == "structural_tag")


def _json_schema(
    structured_outputs: Mapping[str, Any] | None, response_format: Mapping[str, Any] | None
) -> tuple[dict[str, Any] | None, bool]:
    """The grammar's JSON schema, and whether the response format is used up."""
    if structured_outputs is not None:
        if structured_outputs.get("json_object") is not None:
            return _ANY_JSON, False
        schema = structured_outputs.get("json")
        if schema is not None:
            return (json.loads(schema) if isinstance(schema, str) else dict(schema)), False
        raise ChatError(
            "Unsupported request.structured_outputs for MistralParser. Only `json` and "
            "`json_object` are supported."
        )
    if response_format is None or response_format.get("type") in (None, "text"):
        return None, False
    kind = response_format.get("type")
    if kind == "json_object":
        return _ANY_JSON, True
    if kind == "json_schema":
        spec = response_format.get("json_schema") or {}
        schema = spec.get("schema") if isinstance(spec, Mapping) else None
        return (dict(schema) if schema is not None else _ANY_JSON), True
    raise ChatError(
        f"MistralParser only accepts `text`, `json_object` or `json_schema`, got "
        f"request.response_format={response_format!r}"
    )


def mistral_grammar_constraint(
    tokenizer: MistralTokenizer,
    *,
    tools: list[dict[str, Any]] | None,
    tool_choice: Any,
    parallel_tool_calls: bool | None,
    structured_outputs: Mapping[str, Any] | None,
    response_format: Mapping[str, Any] | None,
) -> tuple[str, bool]:
    """The Lark grammar, and whether the request's ``response_format`` is dropped; raises
    :class:`ChatError` (400) with the message vLLM answers with."""
    json_schema, drop_format = _json_schema(structured_outputs, response_format)
    try:
        return _render(tokenizer, tools, tool_choice, parallel_tool_calls, json_schema), (
            drop_format
        )
    except ChatError:
        raise
    except (ValueError, TypeError, AssertionError) as e:
        raise ChatError(str(e)) from None


def _render(
    tokenizer: MistralTokenizer,
    tools: list[dict[str, Any]] | None,
    tool_choice: Any,
    parallel_tool_calls: bool | None,
    json_schema: dict[str, Any] | None,
) -> str:
    from mistral_common.protocol.instruct.tool_calls import NamedToolChoice, Tool, ToolChoiceEnum

    factory = tokenizer.grammar_factory()
    template = factory.select_jinja_template()
    mistral_tools = [Tool.from_openai(t) for t in tools] if tools else None
    mode: Any
    if tool_choice in ("none", "auto", "required"):
        mode = ToolChoiceEnum(tool_choice)
    elif tool_choice is None:
        mode = ToolChoiceEnum.auto
    else:
        name = ((tool_choice or {}).get("function") or {}).get("name")
        mode = NamedToolChoice.model_validate({"type": "function", "function": {"name": name}})
    if mode == ToolChoiceEnum.none and json_schema is not None:
        return str(factory.get_lark_for_json_schema(template=template, json_schema=json_schema))
    return str(
        factory.get_lark_from_jinja(
            template=template,
            mode=mode,
            tools=mistral_tools,
            json_schema=json_schema,
            parallel_tool_calls=True if parallel_tool_calls is None else parallel_tool_calls,
            json_only=False,
        )
    )
