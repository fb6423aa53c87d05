"""What a closed region's text becomes: the content parsers of a ``response_template`` field,
its ``transform``, and tool-call arguments typed by the tools' JSON schemas.

Follows ``vllm/parser/chat_parsing/content_parsers.py`` and the argument coercion of
``response_parser.py`` (transformers' ``utils/chat_parsing``): a parser failure is a
:class:`ValueError`, :class:`KeyError` or :class:`TypeError`, which makes the region malformed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from vllm_frontend.chat.response_template.fields import Field, regex_module

__all__ = [
    "CONTENT_PARSERS",
    "STREAMED_AS_TEXT",
    "check_transform",
    "coerce_tool_calls",
    "field_value",
    "tool_properties",
]

_OPEN_MARK, _CLOSE_MARK = "\x01", "\x02"
"""Placeholders for strings taken out before JSON parsing (control characters a model does not
write)."""


def _text(text: str, args: Mapping[str, Any]) -> str:
    return text.strip() if args.get("strip", True) else text


def _int(text: str, args: Mapping[str, Any]) -> int:
    return int(_text(text, args))


def _float(text: str, args: Mapping[str, Any]) -> float:
    return float(_text(text, args))


def _bool(text: str, args: Mapping[str, Any]) -> bool:
    return _text(text, args).lower() in ("true", "1")


def _json(text: str, args: Mapping[str, Any]) -> Any:
    # Dialects: strings between custom delimiters, bare keys, and a text fallback.
    rx = regex_module()
    delims = args.get("string_delims", [])
    if delims and (_OPEN_MARK in text or _CLOSE_MARK in text):
        raise ValueError("json: the text holds the reserved characters \\x01/\\x02")
    work = text
    strings: list[str] = []
    for opener, closer in delims:

        def stash(m: Any) -> str:
            strings.append(m.group(1))
            return f"{_OPEN_MARK}{len(strings) - 1}{_CLOSE_MARK}"

        pattern = rx.escape(opener) + r"(.*?)" + rx.escape(closer)
        work = rx.sub(pattern, stash, work, flags=rx.DOTALL)
    if args.get("unquoted_keys", False):
        work = rx.sub(r"(?<=[{,])(\w+):", r'"\1":', work)
    for i, s in enumerate(strings):
        work = work.replace(f"{_OPEN_MARK}{i}{_CLOSE_MARK}", json.dumps(s))
    try:
        return json.loads(work)
    except json.JSONDecodeError as e:
        if args.get("allow_non_json"):
            return _text(text, args)
        raise ValueError(f"json: the region is not JSON: {e}") from e


def _value(raw: str, parser: Mapping[str, Any] | None) -> Any:
    if parser is None:
        return raw
    return CONTENT_PARSERS[parser.get("name", "text")](raw, parser.get("args", {}))


def _xml_inline(text: str, args: Mapping[str, Any]) -> dict[str, Any]:
    rx = regex_module()
    pattern = args.get("tag_pattern")
    if pattern is None:
        raise ValueError("xml-inline: 'tag_pattern' content_arg is required")
    parser = args.get("value_parser")
    merge = args.get("merge_duplicates", False)
    out: dict[str, Any] = {}
    for m in rx.finditer(pattern, text, flags=rx.DOTALL):
        groups = m.groupdict()
        key = groups.get("key")
        if key is None:
            raise ValueError(f"xml-inline: tag_pattern has no named group 'key': {pattern}")
        value = _value(groups.get("value", ""), parser)
        if merge and key in out:
            if not isinstance(out[key], list):
                out[key] = [out[key]]
            out[key].append(value)
        else:
            out[key] = value
    return out


def _kv_lines(text: str, args: Mapping[str, Any]) -> dict[str, Any]:
    kv_sep = args.get("kv_sep", ":")
    parser = args.get("value_parser")
    out: dict[str, Any] = {}
    for line in text.split(args.get("line_sep", "\n")):
        line = _text(line, args)
        if not line or kv_sep not in line:
            continue
        key, value = line.split(kv_sep, 1)
        out[_text(key, args)] = _value(_text(value, args), parser)
    return out


CONTENT_PARSERS: dict[str, Callable[[str, Mapping[str, Any]], Any]] = {
    "text": _text,
    "int": _int,
    "float": _float,
    "bool": _bool,
    "json": _json,
    "xml-inline": _xml_inline,
    "kv-lines": _kv_lines,
}
"""Content parser name -> parser of a region's text."""

STREAMED_AS_TEXT = frozenset({"text", "int", "float", "bool"})
"""Parsers whose value is the region's text itself (their chunks are final text)."""


def _placeholder(value: str) -> str | None:
    # A whole-string "{name}" or "{a.b.c}" (word characters and dots), else None.
    rx = regex_module()
    m = rx.fullmatch(r"\{(\w+(?:\.\w+)*)\}", value)
    return m.group(1) if m else None


def check_transform(where: str, transform: Any) -> None:
    """Refuse a transform string that mixes a ``{placeholder}`` with other text."""
    rx = regex_module()
    if isinstance(transform, dict):
        for v in transform.values():
            check_transform(where, v)
    elif isinstance(transform, list):
        for v in transform:
            check_transform(where, v)
    elif (
        isinstance(transform, str)
        and rx.search(r"\{(\w+(?:\.\w+)*)\}", transform)
        and _placeholder(transform) is None
    ):
        raise ValueError(
            f"{where}: transform string {transform!r} mixes a {{placeholder}} with literal text"
        )


def _apply(transform: Any, scope: Mapping[str, Any]) -> Any:
    if isinstance(transform, dict):
        return {k: _apply(v, scope) for k, v in transform.items()}
    if isinstance(transform, list):
        return [_apply(v, scope) for v in transform]
    if not isinstance(transform, str) or (path := _placeholder(transform)) is None:
        return transform
    root, *keys = path.split(".")
    if root not in scope:
        raise KeyError(f"transform placeholder '{{{path}}}' is not defined")
    value = scope[root]
    for key in keys:
        if not isinstance(value, dict):
            raise ValueError(f"transform placeholder '{{{path}}}' cannot index into a value")
        if key not in value:
            raise ValueError(f"transform placeholder '{{{path}}}' is missing key '{key}'")
        value = value[key]
    return value


def field_value(body: str, field: Field, captures: Mapping[str, str]) -> Any:
    """A closed region's value: its text through the field's parser, then its transform
    (per element with ``transform_each``, the element's keys beside the opener's captures)."""
    value = CONTENT_PARSERS[field.content](body, field.content_args)
    if field.transform is None:
        return value
    if not field.transform_each:
        return _apply(field.transform, {**captures, "content": value})
    if not isinstance(value, list):
        raise ValueError(f"Field '{field.name}': transform_each needs a list")
    out = []
    for item in value:
        if not isinstance(item, dict):
            raise ValueError(f"Field '{field.name}': transform_each needs dict elements")
        out.append(_apply(field.transform, {**captures, **item}))
    return out


# -- arguments typed by the tools' schemas -----------------------------------------------------


def tool_properties(tools: Any) -> dict[str, dict[str, Any]]:
    """Tool name -> its parameters' ``properties`` (chat tools, or flat function tools)."""
    out: dict[str, dict[str, Any]] = {}
    for tool in tools or []:
        fn = tool.get("function", tool) if isinstance(tool, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            params = fn.get("parameters")
            props = params.get("properties") if isinstance(params, dict) else None
            out[fn["name"]] = props if isinstance(props, dict) else {}
    return out


def _types(schema: Any) -> tuple[str, ...]:
    if not isinstance(schema, dict):
        return ()
    declared = schema.get("type")
    types = [declared] if isinstance(declared, str) else []
    if isinstance(declared, list):
        types += [t for t in declared if isinstance(t, str)]
    for union in ("anyOf", "oneOf"):
        for choice in schema.get(union) or []:
            types += _types(choice)
    if schema.get("nullable") and "null" not in types:
        types.append("null")
    return tuple(types)


def _coerce(raw: str, types: tuple[str, ...]) -> Any:
    # The first declared type the text reads as; else the text itself.
    for kind in types:
        try:
            if kind == "integer":
                return int(raw)
            if kind == "number":
                number = float(raw)
                if number != number or number in (float("inf"), float("-inf")):
                    continue
                return int(number) if number.is_integer() and "." not in raw else number
            if kind == "boolean" and raw.strip().lower() in ("true", "1", "false", "0"):
                return raw.strip().lower() in ("true", "1")
            if kind == "null" and raw.strip() in ("null", "None"):
                return None
            if kind in ("object", "array"):
                decoded = json.loads(raw)
                if isinstance(decoded, dict if kind == "object" else list):
                    return decoded
        except ValueError:
            continue
    return raw


def coerce_tool_calls(value: Any, properties: Mapping[str, dict[str, Any]]) -> Any:
    """String arguments of ``{"function": {"name", "arguments": {...}}}`` calls (or a list of
    them) turned into their schema's types, in place."""
    if isinstance(value, list):
        return [coerce_tool_calls(item, properties) for item in value]
    fn = value.get("function") if isinstance(value, dict) else None
    if not isinstance(fn, dict):
        return value
    name, arguments = fn.get("name"), fn.get("arguments")
    if not isinstance(name, str) or not isinstance(arguments, dict):
        return value
    if props := properties.get(name):
        for key, argument in arguments.items():
            if key not in props or not (types := _types(props[key])):
                continue
            if isinstance(argument, str):
                arguments[key] = _coerce(argument, types)
            elif isinstance(argument, list) and "array" not in types:
                arguments[key] = [_coerce(a, types) if isinstance(a, str) else a for a in argument]
    return value
