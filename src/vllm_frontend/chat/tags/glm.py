"""The GLM-4.7 tool-call structural tag (``<tool_call>NAME<arg_key>K</arg_key><arg_value>V
</arg_value></tool_call>``): vLLM 0.32's ``glm_4_7`` builder (vllm/tool_parsers/
structural_tag_registry.py), which pins a non-strict tool's argument keys and basic value types,
and hands requests whose tools are all strict to xgrammar's ``glm_4_7``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from vllm_frontend.chat.tags.formats import (
    Format,
    alternatives,
    any_text,
    arguments_schema,
    const,
    json_schema,
    sequence,
    star,
    tag,
    tags_with_separator,
    triggered,
)

__all__ = ["glm_4_7"]

Tools = list[dict[str, Any]]

_VALUE_EXCLUDES = ("<think>", "</think>", "<tool_call>", "</tool_call>",
                   "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>")  # fmt: skip
_TEXT_EXCLUDES = tuple(e for e in _VALUE_EXCLUDES if e != "<tool_call>")
_SCHEMA_COMBINATORS = ("$ref", "allOf", "anyOf", "oneOf", "patternProperties")


def _value(prop: Any) -> Format:
    # One <arg_value>: an enum's values (non-strings as JSON), free text for strings, else JSON
    # of the declared type.
    if "enum" in prop:
        return alternatives(
            [const(v if isinstance(v, str) else json.dumps(v)) for v in prop["enum"]]
        )
    kind = prop.get("type")
    if isinstance(kind, list):
        formats = [_value({"type": t}) for t in kind if t != "string"]
        if "string" in kind:
            formats.append(any_text(_VALUE_EXCLUDES))
        return alternatives(formats)
    if kind in (None, "string"):
        return any_text(_VALUE_EXCLUDES)
    return json_schema({"type": kind})


def _plain_properties(params: Mapping[str, Any]) -> Mapping[str, Any] | None:
    properties = params.get("properties")
    if (
        not isinstance(properties, dict)
        or not properties
        or params.get("additionalProperties") is True
        or any(key in params for key in _SCHEMA_COMBINATORS)
    ):
        return None
    return properties


def _call(f: Mapping[str, Any]) -> Format:
    begin, end = "<tool_call>" + f["name"], "</tool_call>"
    if f.get("strict"):
        return tag(begin, json_schema(arguments_schema(f), "glm_xml"), end)
    properties = _plain_properties(f.get("parameters") or {})
    if properties is None:
        return tag(begin, json_schema(True, "glm_xml"), end)
    pairs = [
        sequence([const(f"<arg_key>{key}</arg_key><arg_value>"), _value(prop),
                  const("</arg_value>")])
        for key, prop in properties.items()
    ]  # fmt: skip
    return tag(begin, star(alternatives(pairs)), end)


def glm_4_7(tools: Tools, choice: str) -> Format:
    """vLLM's ``glm_4_7`` (``glm45``, ``glm47`` and ``ling3``)."""
    tags = [_call(f) for f in tools]
    if tools and all(f.get("strict") for f in tools):
        # xgrammar's glm_4_7, all tools strict.
        if choice == "forced":
            return tags[0]
        return triggered(
            ["<tool_call>"], tags, at_least_one=choice == "required", excludes=_TEXT_EXCLUDES
        )
    if choice == "auto":
        return triggered(["<tool_call>"], tags, excludes=_TEXT_EXCLUDES)
    return tags_with_separator(tags, "", at_least_one=True, stop_after_first=choice == "forced")
