"""Structural tags in requests: ``response_format: {"type": "structural_tag", ...}`` and
``structured_outputs.structural_tag``, checked and serialized as vLLM 0.32 does
(``validate_structural_tag_response_format``, ``structured_outputs_from_response_format`` in
vllm/entrypoints/generate/base/protocol.py).

vLLM checks a tag by building xgrammar's grammar from it. Here the tag's shape is checked first:
the request form (vLLM's ``StructuralTagResponseFormat`` / ``LegacyStructuralTagResponseFormat``),
its nesting, and every format node against xgrammar's format models (known ``type``, required
fields and their types, bounds, a tag for each trigger); then, where xgrammar's native library
is installed (text/xgrammar_native.py), the grammar is built as vLLM builds it. Without the
library, what only building finds (a regex, EBNF grammar or JSON schema inside the tag that
xgrammar cannot compile) reaches the engine, whose compiler fails that request alone.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from vllm_frontend.engine.validate import InvalidRequestError
from vllm_frontend.text.xgrammar_native import XgrammarUnavailable, compile_structural_tag

__all__ = [
    "InvalidStructuralTag",
    "check_structural_tag",
    "structural_tag_payload",
]

MAX_JSON_NESTING = 64  # vLLM's MAX_STRUCTURED_OUTPUT_JSON_NESTING
STRUCTURAL_TAG_WRAPPER_NESTING = 16
_INT32_MAX = 2_147_483_647


class InvalidStructuralTag(InvalidRequestError):
    """A structural tag vLLM refuses: ``Invalid <parameter> structural_tag specification.``"""

    def __init__(self, parameter: str) -> None:
        """The error for the request field ``parameter``."""
        super().__init__(f"Invalid {parameter} structural_tag specification.", parameter)


class _Bad(Exception):
    pass


def structural_tag_payload(response_format: Mapping[str, Any]) -> str:
    """The ``structured_outputs.structural_tag`` string vLLM makes of a structural-tag
    ``response_format`` (its pydantic dump, by alias, extra keys kept).

    Raises :class:`InvalidStructuralTag` when vLLM's request models refuse its shape."""
    legacy = _legacy_dump(response_format)
    if legacy is not None:
        return json.dumps(legacy)
    if "format" in response_format:
        dumped = {"type": "structural_tag", "format": response_format["format"]}
        dumped.update({k: v for k, v in response_format.items() if k not in dumped})
        return json.dumps(dumped)
    raise InvalidStructuralTag("response_format")


def _legacy_dump(rf: Mapping[str, Any]) -> dict[str, Any] | None:
    structures, triggers = rf.get("structures"), rf.get("triggers")
    if not isinstance(structures, list) or not isinstance(triggers, list):
        return None
    if not all(isinstance(t, str) for t in triggers):
        return None
    items = []
    for s in structures:
        if not isinstance(s, dict):
            return None
        begin, end, schema = s.get("begin"), s.get("end"), s.get("schema")
        if not isinstance(begin, str) or not isinstance(end, str):
            return None
        if schema is not None and not isinstance(schema, dict):
            return None
        item = {"begin": begin, "schema": schema, "end": end}
        item.update({k: v for k, v in s.items() if k not in item})
        items.append(item)
    out: dict[str, Any] = {"type": "structural_tag", "structures": items, "triggers": triggers}
    out.update({k: v for k, v in rf.items() if k not in out})
    return out


def check_structural_tag(payload: Any, parameter: str) -> None:
    """vLLM's ``validate_structural_tag_payload`` without xgrammar (see the module docstring).

    Raises :class:`InvalidStructuralTag` for ``parameter`` (``response_format`` or
    ``structured_outputs``), or vLLM's nesting error."""
    if not isinstance(payload, str) or not payload:
        raise InvalidStructuralTag(parameter)
    if not payload.strip():
        raise InvalidStructuralTag(parameter)
    try:
        tag = json.loads(payload)
    except RecursionError:
        _too_deep()
    except ValueError:
        raise InvalidStructuralTag(parameter) from None
    if _exceeds_nesting(tag, MAX_JSON_NESTING + STRUCTURAL_TAG_WRAPPER_NESTING):
        _too_deep()
    try:
        if not isinstance(tag, dict):
            raise _Bad
        if "structures" in tag:
            _check_legacy(tag)
        else:
            _format(tag.get("format", _MISSING))
    except (_Bad, KeyError, TypeError):
        raise InvalidStructuralTag(parameter) from None
    try:
        compile_structural_tag(json.dumps(_as_format(tag)) if "structures" in tag else payload)
    except XgrammarUnavailable:
        return  # the shape checks only
    except RuntimeError:
        raise InvalidStructuralTag(parameter) from None


def _as_format(legacy: dict[str, Any]) -> dict[str, Any]:
    # The current form xgrammar builds a legacy tag from: a triggered JSON-schema tag for each
    # structure (the fields xgrammar's models default left out).
    tags = [
        {"type": "tag", "begin": s["begin"], "end": s["end"],
         "content": {"type": "json_schema", "json_schema": s["schema"]}}
        for s in legacy["structures"]
    ]  # fmt: skip
    return {
        "type": "structural_tag",
        "format": {"type": "triggered_tags", "triggers": legacy["triggers"], "tags": tags},
    }


def _too_deep() -> None:
    raise InvalidRequestError(
        "The JSON schema is nested too deeply: objects and arrays may nest at "
        f"most {MAX_JSON_NESTING} levels"
    )


def _exceeds_nesting(spec: Any, limit: int) -> bool:
    level = [spec]
    for _ in range(limit):
        level = [
            child
            for node in level
            if isinstance(node, dict | list)
            for child in (node.values() if isinstance(node, dict) else node)
            if isinstance(child, dict | list)
        ]
        if not level:
            return False
    return True


def _check_legacy(tag: dict[str, Any]) -> None:
    # vLLM turns each structure into xgrammar's StructuralTagItem(begin, json.dumps(schema),
    # end): a JSON-schema tag per structure, dispatched by the triggers.
    triggers = tag["triggers"]
    structures = tag["structures"]
    _require(isinstance(triggers, list) and isinstance(structures, list))
    tags = []
    for s in structures:
        _require(isinstance(s, dict))
        _require(_schema_ok(s["schema"]))
        tags.append({"begin": s["begin"], "content": {"type": "json_schema"}, "end": s["end"]})
        _require(isinstance(s["begin"], str) and isinstance(s["end"], str))
    _check_triggers(triggers, tags)


_MISSING = object()


def _require(ok: bool) -> None:
    if not ok:
        raise _Bad


def _is_str(v: Any) -> bool:
    return isinstance(v, str)


def _is_int(v: Any) -> bool:
    # A JSON number with an integral value (xgrammar reads 2.0 as 2); never a boolean.
    if isinstance(v, float):
        return v.is_integer()
    return isinstance(v, int) and not isinstance(v, bool)


def _is_token(v: Any) -> bool:
    # Token strings need the model's vocabulary, which vLLM's check compiles without: only
    # token ids pass it.
    return _is_int(v)


def _str_list(v: Any) -> None:
    _require(isinstance(v, list) and all(_is_str(x) for x in v))


def _token_list(v: Any) -> None:
    _require(isinstance(v, list) and all(_is_token(x) for x in v))


def _opt_bound(node: dict[str, Any], key: str) -> None:
    v = node.get(key)
    _require(v is None or (_is_int(v) and 0 <= v <= _INT32_MAX))


def _opt_bool(node: dict[str, Any], key: str) -> None:
    _require(isinstance(node.get(key, False), bool))


_JSON_STYLES = frozenset(
    {"json", "qwen_xml", "minimax_xml", "minimax_m3_xml", "deepseek_xml", "glm_xml",
     "cohere_xml", "kimi_k3_xml", "deepseek_v4_1_xml"}
)  # fmt: skip


# The format a node without "type" is read as, by the first of these keys it has.
_INFERRED = (("value", "const_string"), ("json_schema", "json_schema"), ("begin", "tag"),
             ("elements", "sequence"), ("triggers", "triggered_tags"),
             ("separator", "tags_with_separator"))  # fmt: skip


def _format(node: Any) -> None:
    # One node of xgrammar's ``Format`` union (xgrammar/structural_tag.py), by its "type".
    _require(isinstance(node, dict))
    kind = node.get("type")
    if kind is None:
        kind = next((k for key, k in _INFERRED if key in node), None)
    check = _FORMATS.get(kind) if isinstance(kind, str) else None
    _require(check is not None)
    assert check is not None
    check(node)


def _tag(node: Any) -> None:
    _require(isinstance(node, dict) and node.get("type", "tag") == "tag")
    begin, end = node["begin"], node["end"]
    _require(_is_str(begin) or _token_format(begin))
    ends = end if isinstance(end, list) else [end]
    _require(bool(ends) and all(_is_str(e) or _token_format(e) for e in ends))
    content = node["content"]
    _format(content)
    if isinstance(content, dict) and content.get("type") == "any_text":
        _require("" not in ends)  # free text needs an end to stop at


def _token_format(v: Any) -> bool:
    return isinstance(v, dict) and v.get("type", "token") == "token" and _is_token(v.get("token"))


def _check_triggers(triggers: list[Any], tags: list[dict[str, Any]]) -> None:
    # Every tag's begin must start with one of the triggers.
    _str_list(triggers)
    _require(bool(triggers) and all(triggers) and bool(tags))
    for t in tags:
        begin = t["begin"]
        # exactly one trigger must start the tag
        _require(_is_str(begin) and sum(begin.startswith(trig) for trig in triggers) == 1)


def _triggered_tags(node: dict[str, Any]) -> None:
    tags = node["tags"]
    _require(isinstance(tags, list))
    for t in tags:
        _tag(t)
    _check_triggers(node["triggers"], tags)
    _opt_bool(node, "at_least_one")
    _opt_bool(node, "stop_after_first")
    _str_list(node.get("excludes", []))


def _token_triggered_tags(node: dict[str, Any]) -> None:
    _token_list(node["trigger_tokens"])
    tags = node["tags"]
    _require(isinstance(tags, list) and bool(tags))
    for t in tags:
        _tag(t)
    _token_list(node.get("exclude_tokens", []))
    _opt_bool(node, "at_least_one")
    _opt_bool(node, "stop_after_first")


def _tags_with_separator(node: dict[str, Any]) -> None:
    tags = node["tags"]
    _require(isinstance(tags, list) and bool(tags))
    for t in tags:
        _tag(t)
    _require(_is_str(node["separator"]))
    _opt_bool(node, "at_least_one")
    _opt_bool(node, "stop_after_first")


def _elements(node: dict[str, Any]) -> None:
    elements = node["elements"]
    _require(isinstance(elements, list) and bool(elements))
    for e in elements:
        _format(e)


def _json_schema(node: dict[str, Any]) -> None:
    _require(_schema_ok(node["json_schema"]))
    style = node.get("style")
    _require(style is None or style in _JSON_STYLES)
    _opt_bool(node, "any_order")
    ws = node.get("max_whitespace_cnt")
    _require(ws is None or (_is_int(ws) and ws > 0))
    _str_list(node.get("excludes", []))


def _any_text(node: dict[str, Any]) -> None:
    _str_list(node.get("excludes", []))
    _opt_bound(node, "max_tokens")
    _opt_bound(node, "max_chars")


def _any_tokens(node: dict[str, Any]) -> None:
    _token_list(node.get("exclude_tokens", []))
    _opt_bound(node, "max_tokens")


def _schema_ok(schema: Any) -> bool:
    return schema is True or isinstance(schema, dict)


def _repeat(node: dict[str, Any]) -> None:
    low, high = node["min"], node["max"]
    _require(_is_int(low) and _is_int(high) and low >= 0 and (high == -1 or high >= low))
    _format(node["content"])


def _dispatch(node: dict[str, Any], token: bool) -> None:
    rules = node["rules"]
    _require(isinstance(rules, list) and bool(rules))
    for rule in rules:
        _require(isinstance(rule, list) and len(rule) == 2)
        _require(_is_token(rule[0]) if token else _is_str(rule[0]))
        _format(rule[1])
    _opt_bool(node, "loop")
    if token:
        _token_list(node.get("exclude_tokens", []))
    else:
        _str_list(node.get("excludes", []))


_FORMATS: dict[str, Any] = {
    "const_string": lambda n: _require(_is_str(n["value"])),
    "json_schema": _json_schema,
    "qwen_xml_parameter": lambda n: _require(_schema_ok(n["json_schema"])),
    "any_text": _any_text,
    "token": lambda n: _require(_is_token(n["token"])),
    "exclude_token": lambda n: _token_list(n.get("exclude_tokens", [])),
    "any_tokens": _any_tokens,
    "grammar": lambda n: _require(_is_str(n["grammar"])),
    "regex": lambda n: _require(_is_str(n["pattern"])),
    "sequence": _elements,
    "or": _elements,
    "tag": _tag,
    "triggered_tags": _triggered_tags,
    "token_triggered_tags": _token_triggered_tags,
    "tags_with_separator": _tags_with_separator,
    "optional": lambda n: _format(n["content"]),
    "plus": lambda n: _format(n["content"]),
    "star": lambda n: _format(n["content"]),
    "repeat": _repeat,
    "dispatch": lambda n: _dispatch(n, token=False),
    "token_dispatch": lambda n: _dispatch(n, token=True),
}
