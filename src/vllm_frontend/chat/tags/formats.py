"""xgrammar's structural-tag format models as plain dicts: each the ``model_dump`` of its model
(every field, in declaration order, defaults included), so that ``json.dumps`` of a tag built
here is byte for byte the string vLLM sends."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "Format",
    "alternatives",
    "any_text",
    "arguments_schema",
    "const",
    "json_schema",
    "optional",
    "regex",
    "sequence",
    "star",
    "tag",
    "tags_with_separator",
    "triggered",
]

Format = dict[str, Any]
"""One format model's dump."""


def json_schema(schema: Any, style: str = "json") -> Format:
    """``JSONSchemaFormat`` (``style``: json, qwen_xml, minimax_xml, deepseek_xml, glm_xml, …)."""
    return {"type": "json_schema", "json_schema": schema, "style": style, "any_order": False,
            "max_whitespace_cnt": None, "excludes": []}  # fmt: skip


def tag(begin: str, content: Format, end: str | list[str]) -> Format:
    """``TagFormat``."""
    return {"type": "tag", "begin": begin, "content": content, "end": end}


def triggered(
    triggers: list[str], tags: list[Format], *, at_least_one: bool = False,
    excludes: Sequence[str] = (),
) -> Format:  # fmt: skip
    """``TriggeredTagsFormat``."""
    return {"type": "triggered_tags", "triggers": triggers, "tags": tags,
            "at_least_one": at_least_one, "stop_after_first": False,
            "excludes": list(excludes)}  # fmt: skip


def tags_with_separator(
    tags: list[Format], separator: str, *, at_least_one: bool, stop_after_first: bool = False
) -> Format:
    """``TagsWithSeparatorFormat``."""
    return {"type": "tags_with_separator", "tags": tags, "separator": separator,
            "at_least_one": at_least_one, "stop_after_first": stop_after_first}  # fmt: skip


def any_text(excludes: Sequence[str] = ()) -> Format:
    """``AnyTextFormat``."""
    return {"type": "any_text", "excludes": list(excludes), "max_tokens": None, "max_chars": None}


def const(value: str) -> Format:
    """``ConstStringFormat``."""
    return {"type": "const_string", "value": value}


def regex(pattern: str) -> Format:
    """``RegexFormat``."""
    return {"type": "regex", "pattern": pattern}


def sequence(elements: list[Format]) -> Format:
    """``SequenceFormat``."""
    return {"type": "sequence", "elements": elements}


def alternatives(elements: list[Format]) -> Format:
    """The only element, else ``OrFormat`` of them all."""
    return elements[0] if len(elements) == 1 else {"type": "or", "elements": elements}


def optional(content: Format) -> Format:
    """``OptionalFormat``."""
    return {"type": "optional", "content": content}


def star(content: Format) -> Format:
    """``StarFormat``."""
    return {"type": "star", "content": content}


def arguments_schema(function: Mapping[str, Any]) -> Any:
    """The JSON schema a tool's arguments follow (vLLM's ``get_function_parameters``, xgrammar's
    ``_get_function_parameters``): any JSON for a non-strict tool or one without parameters."""
    if function.get("strict") is False:
        return True
    params = function.get("parameters")
    return True if params is None else params
