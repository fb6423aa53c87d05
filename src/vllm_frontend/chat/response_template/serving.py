"""The ``hf`` parsers' serving rules: which templates serve, the streaming form of a template,
what a request may ask, and whether a prompt leaves the model past its reasoning.

Follows ``vllm/parser/response_template.py`` (vLLM 0.32): only the ``thinking``, ``content``
and ``tool_calls`` fields are routed (``thinking`` and ``content`` as plain text); every field
is optional while streaming, and a template whose fields all have openers gets an implicit
``content`` field for the text between them.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from vllm_frontend.chat.response_template.scanner import RegionScanner
from vllm_frontend.chat.response_template.template import ResponseTemplate, load_response_template

__all__ = [
    "CONTENT",
    "THINKING",
    "TOOL_CALLS",
    "check_serving_template",
    "reasoning_has_ended",
    "request_refusal",
    "serving_template",
    "template_of",
]

THINKING, CONTENT, TOOL_CALLS = "thinking", "content", "tool_calls"
"""The fields vLLM's serving adapter routes: reasoning, content, tool calls."""
_ROUTED = frozenset({THINKING, CONTENT, TOOL_CALLS})


def template_of(tokenizer_config: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The ``response_template`` of a tokenizer's configuration (None when it has none)."""
    template = (tokenizer_config or {}).get("response_template")
    return template if isinstance(template, dict) else None


def _loaded_for_serving(spec: dict[str, Any]) -> ResponseTemplate:
    loaded = load_response_template(spec)
    unsupported = (set(loaded.fields) - _ROUTED) | (set(loaded.defaults) - {"role"})
    if unsupported:
        raise ValueError(
            f"response_template contains unsupported semantic fields: {sorted(unsupported)}. "
            f"Supported fields are: {sorted(_ROUTED)}"
        )
    for name in (THINKING, CONTENT):
        field = loaded.fields.get(name)
        if field is not None and (
            field.content != "text" or field.transform is not None or field.join is not None
        ):
            raise ValueError(
                f"response_template field {name!r} uses semantics that cannot be streamed by "
                "the OpenAI serving adapter"
            )
    return loaded


def check_serving_template(spec: dict[str, Any] | None, *, reasoning: bool, tools: bool) -> str:
    """``""`` when ``spec`` can serve the configured parsers, else why not (vLLM's startup
    messages). An :class:`ImportError` says the ``regex`` package is missing."""
    if spec is None:
        return "The hf parser requires `response_template` metadata in the tokenizer configuration"
    try:
        fields = _loaded_for_serving(spec).fields
    except (TypeError, ValueError) as e:
        return f"Invalid response_template metadata: {e}"
    if reasoning and THINKING not in fields:
        return "--reasoning-parser hf requires a response_template with a thinking field"
    if tools and TOOL_CALLS not in fields:
        return "--tool-call-parser hf requires a response_template with a tool_calls field"
    return ""


def serving_template(spec: dict[str, Any]) -> ResponseTemplate:
    """The template as the parsers stream with it: every field optional, and an implicit
    ``content`` field when there is none and every field has an opener."""
    _loaded_for_serving(spec)
    spec = copy.deepcopy(spec)
    fields = spec["fields"]
    if CONTENT not in fields and all("open" in f or "open_pattern" in f for f in fields.values()):
        fields[CONTENT] = {}
    for f in fields.values():
        f["optional"] = True
    return load_response_template(spec)


def reasoning_has_ended(template: ResponseTemplate, prefix: str, thinking_disabled: bool) -> bool:
    """Whether generation after the prompt ``prefix`` starts past the reasoning (vLLM's
    ``ResponseTemplateReasoningParser.is_reasoning_end``)."""
    thinking = template.fields.get(THINKING)
    if thinking is None:
        return True
    if thinking.repeats:
        return False
    try:
        scanner = RegionScanner(template, prefix)
    except Exception:
        return False
    active: str | None = None
    closed = False
    for event in scanner.initial_events:
        if event["type"] == "region_open":
            active = event["field"]
        elif event["type"] in ("region_close", "region_malformed"):
            closed |= event["field"] == THINKING
            active = None
    if closed or active in (CONTENT, TOOL_CALLS):
        return True
    # A NUL, which no model writes, resolves a delimiter the prompt's end may hold back.
    for event in scanner.feed("\0"):
        if (
            event["type"] == "region_open"
            and event["field"] in (CONTENT, TOOL_CALLS)
            and event["end"] > event["start"]
        ):
            return True
        if event["field"] == THINKING:
            if event["type"] == "region_open":
                return False
            if event["type"] in ("region_close", "region_malformed"):
                return True
    if active == THINKING:
        return False
    return thinking_disabled


def _strict(tool: Any) -> bool:
    if not isinstance(tool, Mapping):
        return False
    fn = tool.get("function")
    return bool(tool.get("strict") or (isinstance(fn, Mapping) and fn.get("strict")))


def request_refusal(
    tools: Sequence[Any], tool_choice: Any, parallel_tool_calls: bool | None
) -> tuple[str, str] | None:
    """``(message, parameter)`` for what a request with tools asks that a response template
    cannot guarantee (vLLM's ``adjust_request`` answers 400), else None."""
    if any(_strict(t) for t in tools):
        guarantee, param = "strict tools", "tools"
    elif tool_choice == "required":
        guarantee, param = "required tool choice", "tool_choice"
    elif isinstance(tool_choice, Mapping):
        guarantee, param = "named tool choice", "tool_choice"
    elif parallel_tool_calls is False:
        guarantee, param = "parallel_tool_calls=False", "parallel_tool_calls"
    else:
        return None
    return (
        f"response_template parsing cannot guarantee {guarantee} without a format-compatible "
        "structural grammar",
        param,
    )
