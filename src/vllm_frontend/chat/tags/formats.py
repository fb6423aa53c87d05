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
    "canonical",
    "const",
    "json_schema",
    "optional",
    "plus",
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


def plus(content: Format) -> Format:
    """``PlusFormat``."""
    return {"type": "plus", "content": content}


def arguments_schema(function: Mapping[str, Any]) -> Any:
    """The JSON schema a tool's arguments follow (vLLM's ``get_function_parameters``, xgrammar's
    ``_get_function_parameters``): any JSON for a non-strict tool or one without parameters."""
    if function.get("strict") is False:
        return True
    params = function.get("parameters")
    return True if params is None else params


_REQUIRED = object()
_FIELDS: dict[str, tuple[tuple[str, Any], ...]] = {
    "any_text": (("excludes", []), ("max_tokens", None), ("max_chars", None)),
    "any_tokens": (("exclude_tokens", []), ("max_tokens", None)),
    "const_string": (("value", _REQUIRED),),
    "dispatch": (("rules", _REQUIRED), ("loop", True), ("excludes", [])),
    "exclude_token": (("exclude_tokens", []),),
    "grammar": (("grammar", _REQUIRED),),
    "json_schema": (("json_schema", _REQUIRED), ("style", "json"), ("any_order", False),
                    ("max_whitespace_cnt", None), ("excludes", [])),
    "optional": (("content", _REQUIRED),),
    "or": (("elements", _REQUIRED),),
    "plus": (("content", _REQUIRED),),
    "qwen_xml_parameter": (("json_schema", _REQUIRED),),
    "regex": (("pattern", _REQUIRED),),
    "repeat": (("min", _REQUIRED), ("max", _REQUIRED), ("content", _REQUIRED)),
    "sequence": (("elements", _REQUIRED),),
    "star": (("content", _REQUIRED),),
    "tag": (("begin", _REQUIRED), ("content", _REQUIRED), ("end", _REQUIRED)),
    "tags_with_separator": (("tags", _REQUIRED), ("separator", _REQUIRED),
                            ("at_least_one", False), ("stop_after_first", False)),
    "token": (("token", _REQUIRED),),
    "token_dispatch": (("rules", _REQUIRED), ("loop", True), ("exclude_tokens", [])),
    "token_triggered_tags": (("trigger_tokens", _REQUIRED), ("tags", _REQUIRED),
                             ("exclude_tokens", []), ("at_least_one", False),
                             ("stop_after_first", False)),
    "triggered_tags": (("triggers", _REQUIRED), ("tags", _REQUIRED), ("at_least_one", False),
                       ("stop_after_first", False), ("excludes", [])),
}  # fmt: skip
"""Each xgrammar format model's fields after ``type``, in declaration order, with defaults."""


def canonical(node: Any, implied: str | None = None) -> Any:
    """A format (checked by text/structural_tags.py) as xgrammar's model dumps it: fields in
    declaration order, defaults filled in, unknown keys dropped (as vLLM's
    ``StructuralTag.model_validate(...).format`` then ``model_dump``). ``implied``: the model a
    field without a type union takes (a tag in a list of tags, a token as a tag's begin)."""
    if not isinstance(node, Mapping):
        return node
    kind = node.get("type", implied)
    if kind not in _FIELDS:
        return node
    out: Format = {"type": kind}
    for name, default in _FIELDS[kind]:
        if name not in node:
            if default is not _REQUIRED:
                out[name] = list(default) if isinstance(default, list) else default
            continue
        value = node[name]
        if name == "content":
            value = canonical(value)
        elif name in ("begin", "end"):
            value = canonical(value, "token")
        elif name == "elements":
            value = [canonical(v) for v in value]
        elif name == "tags":
            value = [canonical(v, "tag") for v in value]
        elif name == "rules":
            value = [[key, canonical(fmt)] for key, fmt in value]
        out[name] = value
    return out
