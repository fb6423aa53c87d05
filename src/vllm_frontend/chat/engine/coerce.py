"""Argument values typed by the tool's JSON schema, as vLLM 0.32's parser engine types them
(``coerce_to_schema_type`` and ``extract_types_from_schema`` in ``vllm/tool_parsers/utils.py``,
``ParserEngine._fix_arg_types``).

Formats that write arguments as text (XML-like parameters) give every value as a string; the
tool's schema says which ones are numbers, booleans, objects, ... .
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "coerce_value",
    "fix_arg_types",
    "has_tool",
    "schema_types",
    "tool_properties",
    "typed_arguments",
]

_ALIASES = {
    "str": "string",
    "text": "string",
    "varchar": "string",
    "char": "string",
    "enum": "string",
    "int": "integer",
    "int32": "integer",
    "int64": "integer",
    "uint": "integer",
    "uint32": "integer",
    "uint64": "integer",
    "long": "integer",
    "short": "integer",
    "unsigned": "integer",
    "float": "number",
    "float32": "number",
    "float64": "number",
    "double": "number",
    "bool": "boolean",
    "dict": "object",
    "arr": "array",
    "list": "array",
    "sequence": "array",
}
_PRIORITY = ("null", "integer", "number", "boolean", "object", "array", "string")


def tool_properties(tools: Sequence[Mapping[str, Any]], name: str) -> dict[str, Any]:
    """The ``properties`` of the parameters of function tool ``name`` (``{}`` if none)."""
    for tool in tools:
        if tool.get("type", "function") != "function":
            continue
        function = tool.get("function")
        if isinstance(function, Mapping) and function.get("name") == name:
            params = function.get("parameters") or {}
            props = params.get("properties", {}) if isinstance(params, Mapping) else {}
            return props if isinstance(props, dict) else {}
    return {}


def has_tool(tools: Sequence[Mapping[str, Any]], name: str) -> bool:
    """Whether a function tool is called ``name``."""
    for tool in tools:
        function = tool.get("function")
        if (
            tool.get("type", "function") == "function"
            and isinstance(function, Mapping)
            and function.get("name") == name
        ):
            return True
    return False


def schema_types(schema: Any) -> list[str]:
    """Every type a schema allows (``type``, enum values, ``anyOf``/``oneOf``/``allOf``);
    ``["string"]`` when it says none."""
    if not isinstance(schema, dict):
        return ["string"]
    types: set[str] = set()
    declared = schema.get("type")
    if isinstance(declared, str):
        types.add(declared)
    elif isinstance(declared, list):
        types.update(t for t in declared if isinstance(t, str))
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        for value in enum:
            types.add(_type_of(value))
    for key in ("anyOf", "oneOf", "allOf"):
        choices = schema.get(key)
        if isinstance(choices, list):
            for choice in choices:
                types.update(schema_types(choice))
    types.discard("")
    return list(types) if types else ["string"]


def _type_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return ""


def _finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    return True


def coerce_text(value: str, types: Sequence[str]) -> Any:
    """A string value as the first of ``types`` it reads as (null, integer, number, boolean,
    object, array, string, in that order), else as JSON if it is JSON, else itself."""
    wanted = {_ALIASES.get(k, k) for t in types for k in (t.strip().lower(),)}
    for candidate in _PRIORITY:
        if candidate not in wanted:
            continue
        if candidate == "null":
            if value.lower() == "null":
                return None
        elif candidate == "string":
            return value
        elif candidate == "integer":
            try:
                return int(value)
            except (ValueError, TypeError):
                pass
        elif candidate == "number":
            try:
                number = float(value)
            except (ValueError, TypeError):
                continue
            if math.isfinite(number):
                return number if number != int(number) else int(number)
        elif candidate == "boolean":
            lowered = value.lower().strip()
            if lowered in ("true", "1"):
                return True
            if lowered in ("false", "0"):
                return False
        else:
            try:
                parsed = json.loads(value)
            except (ValueError, TypeError):
                continue
            if _finite(parsed):
                return parsed
    try:
        parsed = json.loads(value)
    except ValueError:
        return value
    return parsed if _finite(parsed) else value


def coerce_value(value: Any, schema: Mapping[str, Any]) -> tuple[Any, bool]:
    """``value`` typed by ``schema``, and whether that changed it (nested objects and arrays
    are typed in place)."""
    if isinstance(value, str):
        coerced = coerce_text(value, schema_types(schema))
        return (coerced, True) if coerced is not value else (value, False)
    if isinstance(value, dict):
        nested = schema.get("properties")
        if isinstance(nested, dict):
            return value, coerce_dict(value, nested)
        return value, False
    if isinstance(value, list):
        items = schema.get("items")
        if not isinstance(items, dict):
            return value, False
        changed = False
        for i, item in enumerate(value):
            coerced, item_changed = coerce_value(item, items)
            if item_changed:
                value[i] = coerced
                changed = True
        return value, changed
    coerced = coerce_text(json.dumps(value, ensure_ascii=False), schema_types(schema))
    if type(coerced) is not type(value) or coerced != value:
        return coerced, True
    return value, False


def coerce_dict(args: dict[str, Any], properties: Mapping[str, Any]) -> bool:
    """Type ``args`` in place by ``properties``; whether anything changed."""
    changed = False
    for key, value in args.items():
        schema = properties.get(key)
        if not isinstance(schema, dict):
            continue
        coerced, value_changed = coerce_value(value, schema)
        if value_changed:
            args[key] = coerced
            changed = True
    return changed


def fix_arg_types(args_json: str, tools: Sequence[Mapping[str, Any]], name: str) -> str:
    """Arguments JSON with its values typed by tool ``name``'s schema (unchanged text when
    there is nothing to type)."""
    if not tools or not name:
        return args_json
    return typed_arguments(args_json, tool_properties(tools, name))


def typed_arguments(args_json: str, properties: Mapping[str, Any]) -> str:
    """Arguments JSON with its values typed by a tool's parameter ``properties``."""
    if not properties:
        return args_json
    try:
        args = json.loads(args_json)
    except ValueError:
        return args_json
    if not isinstance(args, dict):
        return args_json
    if coerce_dict(args, properties):
        return json.dumps(args, ensure_ascii=False)
    return args_json
