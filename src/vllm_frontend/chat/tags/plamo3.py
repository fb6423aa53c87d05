"""PLaMo 3's structural tag (vLLM 0.32's ``plamo3`` builder in
vllm/tool_parsers/structural_tag_registry.py): each call's header names the tool, its arguments
follow the tool's schema, the requests block ends with or without the end of turn."""

from __future__ import annotations

from typing import Any

from vllm_frontend.chat.tags.formats import (
    Format,
    arguments_schema,
    json_schema,
    tag,
    tags_with_separator,
    triggered,
)
from vllm_frontend.chat.tools.plamo3 import (
    BEGIN_TOOL_ARGUMENTS,
    BEGIN_TOOL_NAME,
    BEGIN_TOOL_REQUEST,
    BEGIN_TOOL_REQUESTS,
    END_TOOL_ARGUMENTS,
    END_TOOL_NAME,
    END_TOOL_REQUEST,
    END_TOOL_REQUESTS,
    EOT,
)

__all__ = ["plamo3"]


def plamo3(tools: list[dict[str, Any]], choice: str) -> Format:
    """vLLM's ``plamo3`` builder."""
    calls = [
        tag(
            BEGIN_TOOL_REQUEST + BEGIN_TOOL_NAME + f["name"] + END_TOOL_NAME + BEGIN_TOOL_ARGUMENTS,
            json_schema(arguments_schema(f)),
            END_TOOL_ARGUMENTS + END_TOOL_REQUEST,
        )
        for f in tools
    ]
    block = tag(
        BEGIN_TOOL_REQUESTS,
        tags_with_separator(calls, "", at_least_one=True, stop_after_first=choice == "forced"),
        [END_TOOL_REQUESTS, END_TOOL_REQUESTS + EOT],
    )
    if choice == "auto":
        return triggered([BEGIN_TOOL_REQUESTS], [block])
    return block
