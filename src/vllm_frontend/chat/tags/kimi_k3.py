"""The Kimi K3 tool-call structural tag: vLLM 0.32's ``kimi_k3`` builder
(vllm/tool_parsers/structural_tag_registry.py). The ``response`` channel (its open marker
optional: the generation prefix may hold it) comes first, then the ``tools`` channel (optional
for ``auto``), each ``call`` tag with an ``index`` and its ``argument`` tags, then an optional
``message`` close. A strict tool's typed arguments are pinned (strings raw: an enum, a length
bound or any text; other types as JSON of their schema); untyped ones take any argument tag."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vllm_frontend.chat.tags.formats import (
    Format,
    alternatives,
    any_text,
    arguments_schema,
    const,
    json_schema,
    optional,
    plus,
    regex,
    sequence,
    star,
    tag,
    tags_with_separator,
)

__all__ = ["kimi_k3"]

Tools = list[dict[str, Any]]

_OPEN, _CLOSE, _SEP = "<|open|>", "<|close|>", "<|sep|>"
_ARG_CLOSE = f"{_CLOSE}argument{_SEP}"
_TYPES = {"string": "string", "integer": "number", "number": "number", "boolean": "boolean",
          "null": "null", "object": "object", "array": "array"}  # fmt: skip
_STRING_ATOM = r"(?:[^<]|<[^|])"


def _escape(value: str) -> str:
    return str(value).replace("&", "&amp;").replace('"', "&quot;")


def _bounded(prop: Mapping[str, Any]) -> str | None:
    longest, shortest = prop.get("maxLength"), prop.get("minLength", 0)
    if not isinstance(longest, int) or longest < 0 or longest > 4096:
        return None
    if not isinstance(shortest, int) or shortest < 0 or shortest > longest:
        shortest = 0
    return f"{_STRING_ATOM}{{{shortest},{longest}}}"


def _any_argument() -> Format:
    return tag(
        _OPEN + "argument ",
        sequence([regex(r"[^<]*<\|sep\|>"), any_text([_CLOSE])]),
        _ARG_CLOSE,
    )


def _argument(key: str, prop: Any, defs: Mapping[str, Any]) -> Format | None:
    prop = prop if isinstance(prop, dict) else {}
    kind = prop.get("type")
    xtml = _TYPES.get(kind) if isinstance(kind, str) else None
    if xtml is None:
        return None
    begin = f'{_OPEN}argument key="{_escape(key)}" type="{xtml}"{_SEP}'
    if xtml != "string":
        embedded = dict(prop) if defs else prop
        for name, table in defs.items():
            embedded.setdefault(name, table)
        return tag(begin, json_schema(embedded), _ARG_CLOSE)
    values = prop.get("enum")
    if values is None and isinstance(prop.get("const"), str):
        values = [prop["const"]]
    if (
        isinstance(values, list)
        and values
        and len(values) <= 256
        and all(isinstance(v, str) for v in values)
        and not any("<|" in v for v in values)
    ):
        content = alternatives([const(v) for v in values])
    elif (bounded := _bounded(prop)) is not None:
        content = regex(bounded)
    else:
        content = any_text([_CLOSE])
    return tag(begin, content, _ARG_CLOSE)


def _arguments(parameters: Any) -> Format:
    if not isinstance(parameters, dict):
        return star(_any_argument())
    props = parameters.get("properties")
    if not isinstance(props, dict) or not props:
        return star(_any_argument())
    defs = {
        k: parameters[k] for k in ("$defs", "definitions") if isinstance(parameters.get(k), dict)
    }
    tags = [_argument(key, prop, defs) or _any_argument() for key, prop in props.items()]
    inner = alternatives(tags)
    required = parameters.get("required")
    return plus(inner) if isinstance(required, list) and required else star(inner)


def _call(f: Mapping[str, Any]) -> Format:
    begin = f'{_OPEN}call tool="{_escape(f["name"])}" index="'
    content = sequence([regex("[0-9]+"), const(f'"{_SEP}'), _arguments(arguments_schema(f))])
    return tag(begin, content, f"{_CLOSE}call{_SEP}")


def kimi_k3(tools: Tools, choice: str) -> Format:
    """vLLM's ``kimi_k3``."""
    response = [
        optional(const(f"{_OPEN}response{_SEP}")),
        tag("", any_text([_OPEN, _CLOSE, "<|end_of_msg|>"]), f"{_CLOSE}response{_SEP}"),
    ]
    trailer = optional(const(f"{_CLOSE}message{_SEP}"))
    if not tools:
        return sequence([*response, trailer])
    calls = tools[:1] if choice == "forced" else tools
    channel = tag(
        f"{_OPEN}tools{_SEP}",
        tags_with_separator([_call(f) for f in calls], "", at_least_one=True),
        f"{_CLOSE}tools{_SEP}",
    )
    return sequence([*response, optional(channel) if choice == "auto" else channel, trailer])
