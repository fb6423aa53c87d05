"""The HY V4 tool-call structural tag: vLLM 0.32's ``hy_v4`` builder
(vllm/tool_parsers/structural_tag_registry.py), built for "required" and named choices only (the
parser builds none for "auto"). Only the skeleton is pinned: the block, each call's name, its
argument keys (the required ones in order, then the optional ones in any order, any number of
times) and their tags; every value is free text. The markers carry the checkpoint's suffix."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vllm_frontend.chat.tags.formats import (
    Format,
    alternatives,
    any_text,
    const,
    sequence,
    star,
    tag,
    tags_with_separator,
    triggered,
)

__all__ = ["hy_v4"]


def _keys(parameters: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """``(required, optional)`` argument keys in declaration order (required keys the
    properties lack come after the declared ones)."""
    properties = parameters.get("properties") or {}
    required = parameters.get("required") or []
    wanted = set(required)
    first = [k for k in properties if k in wanted]
    return first + [k for k in required if k not in properties], [
        k for k in properties if k not in wanted
    ]


def hy_v4(tools: list[dict[str, Any]], choice: str, suffix: str = "") -> Format:
    """vLLM's ``hy_v4`` builder (reasoning not covered, as vLLM calls it)."""
    s = suffix

    def pair(key: str) -> Format:
        return sequence(
            [const(f"<arg_key{s}>"), const(key), const(f"</arg_key{s}>"),
             const(f"<arg_value{s}>"), any_text(), const(f"</arg_value{s}>")]
        )  # fmt: skip

    def call(function: Mapping[str, Any]) -> Format:
        parameters = function.get("parameters")
        required, optional = _keys(parameters if isinstance(parameters, dict) else {})
        elements = [pair(k) for k in required]
        if optional:
            elements.append(star(alternatives([pair(k) for k in optional])))
        content = sequence(elements) if elements else any_text()
        return tag(f"<tool_call{s}>" + function["name"], content, f"</tool_call{s}>")

    calls = [call(f) for f in tools]
    begin, end = f"<tool_calls{s}>", f"</tool_calls{s}>"
    if choice == "auto":
        return triggered(
            [begin], [tag(begin, tags_with_separator(calls, "", at_least_one=True), end)]
        )
    body = tags_with_separator(calls, "", at_least_one=True, stop_after_first=choice == "forced")
    return sequence([const(begin), body, const(end)])
