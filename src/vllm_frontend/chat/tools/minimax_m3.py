"""MiniMax M3's tool calls (vLLM 0.32's ``vllm/parser/minimax_m3.py``): every tag carries the
``]<]minimax[>[`` namespace marker::

    ]<]minimax[>[<tool_call>]<]minimax[>[<invoke name="get_weather">
    ]<]minimax[>[<city>Paris]<]minimax[>[</city>
    ]<]minimax[>[</invoke>]<]minimax[>[</tool_call>

Each ``<invoke>`` is a call; its parameters are elements named after them, which may nest (an
element of elements is an object, or a list where the schema wants one; repeated names gather
into a list). The arguments are sent whole when the invoke ends, typed by the tool's schema.
The markers are ordinary tokens: special tokens are not kept for it.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any, Union

from vllm_frontend.chat.engine.calls import EngineToolParser
from vllm_frontend.chat.engine.coerce import coerce_text, schema_types, tool_properties
from vllm_frontend.chat.engine.grammar import Grammar, Kind, State, Step

__all__ = ["MiniMaxM3ToolParser", "minimax_m3_arguments", "minimax_m3_grammar"]

NS = "]<]minimax[>["
_OPEN = NS + "<"
_CLOSE = NS + "</"
_TEXT_FIELD = "$text"
_MAX_DEPTH = 128

Element = Union[str, list[tuple[str, "Element"]]]  # noqa: UP007 - a recursive alias


def _element(text: str, pos: int, depth: int) -> tuple[str, Element, int] | None:
    """The element whose opening tag is at ``pos``: its name, its text or children, and the
    position after it; None when it is malformed or unfinished."""
    if depth > _MAX_DEPTH:
        return None
    name_start = pos + len(_OPEN)
    name_end = text.find(">", name_start)
    if name_end <= name_start:
        return None
    name = text[name_start:name_end]
    if name.startswith("/") or not name.strip():
        return None
    closer = f"{_CLOSE}{name}>"
    pos = name_end + 1
    texts: list[str] = []
    children: list[tuple[str, Element]] = []
    while True:
        mark = text.find(NS, pos)
        if mark < 0:
            return None
        texts.append(text[pos:mark])
        if text.startswith(closer, mark):
            pos = mark + len(closer)
            break
        if not text.startswith(_OPEN, mark):
            return None
        child = _element(text, mark, depth + 1)
        if child is None:
            return None
        children.append(child[:2])
        pos = child[2]
    body = "".join(texts)
    if not children:
        return name, body, pos
    if body.strip():
        field = _TEXT_FIELD
        while any(child_name == field for child_name, _ in children):
            field = "$" + field
        children.append((field, body))
    return name, children, pos


def _parameters(raw: str) -> list[tuple[str, Element]]:
    """The parameter elements of an invoke body, up to the first malformed one."""
    params: list[tuple[str, Element]] = []
    pos, n = 0, len(raw)
    while True:
        while pos < n and raw[pos].isspace():
            pos += 1
        if not raw.startswith(_OPEN, pos):
            return params
        found = _element(raw, pos, 1)
        if found is None:
            return params
        params.append(found[:2])
        pos = found[2]


def _container(schema: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]] | None:
    """The first list or object alternative of ``schema``."""
    types = schema.get("type")
    for kind in ("array", "object"):
        if types == kind or (isinstance(types, list) and kind in types):
            return kind, schema
    if types is None:
        if "items" in schema:
            return "array", schema
        if "properties" in schema or "additionalProperties" in schema:
            return "object", schema
    for field in ("anyOf", "oneOf"):
        for choice in schema.get(field) or ():
            if isinstance(choice, dict) and (found := _container(choice)):
                return found
    return None


def _value(element: Element, schema: Any) -> Any:
    if not isinstance(schema, dict):
        schema = None
    container = _container(schema) if schema is not None else None
    if isinstance(element, str):
        if schema is None:
            return element
        types = schema_types(schema)
        # An empty element stands for an empty list or object.
        if container is not None and "string" not in types and not element.strip():
            return [] if container[0] == "array" else {}
        return coerce_text(element, types)
    if container is not None and container[0] == "array":
        items = container[1].get("items")
        return [_value(child, items) for _, child in element]
    return _object(element, container[1] if container is not None else None)


def _object(elements: list[tuple[str, Element]], schema: Mapping[str, Any] | None) -> dict:
    """Named elements as an object; a repeated name gathers its values into a list."""
    properties = (schema or {}).get("properties") or {}
    additional = (schema or {}).get("additionalProperties")
    result: dict[str, Any] = {}
    repeated: set[str] = set()
    for name, element in elements:
        value = _value(element, properties.get(name, additional))
        if name not in result:
            result[name] = value
        elif name in repeated:
            result[name].append(value)
        else:
            result[name] = [result[name], value]
            repeated.add(name)
    return result


def minimax_m3_arguments(
    raw: str, partial: bool, properties: Mapping[str, Any] | None = None
) -> str:
    """An invoke body as arguments JSON, typed by the tool's ``properties``."""
    arguments = _object(_parameters(raw), {"properties": properties or {}})
    return json.dumps(arguments, ensure_ascii=False)


@functools.cache
def minimax_m3_grammar() -> Grammar:
    """The MiniMax M3 tool-call grammar."""
    C, P, N, A, B = (
        State.CONTENT,
        State.TOOL_PREAMBLE,
        State.TOOL_NAME,
        State.TOOL_ARGS,
        State.TOOL_BETWEEN,
    )
    invokes = {
        "INVOKE_PREFIX_DQ": f'{NS}<invoke name="',
        "INVOKE_PREFIX_SQ": f"{NS}<invoke name='",
        "INVOKE_PREFIX_UNQUOTED": f"{NS}<invoke name=",
    }
    name_ends = {"NAME_END_DQ": '">', "NAME_END_SQ": "'>", "NAME_END_UNQUOTED": ">"}
    steps: dict[tuple[State, str], Step] = {
        (C, "TOOL_START"): Step(P),
        # Nested parameter elements are argument text; only the invoke's closer ends it.
        (A, "INVOKE_END"): Step(B, (Kind.CALL_END,)),
        # The tool block ends the message: text after it is dropped.
        (P, "TOOL_END"): Step(B),
        (B, "TOOL_END"): Step(B),
    }
    for state in (P, B):
        for invoke in invokes:
            steps[(state, invoke)] = Step(N, (Kind.CALL_START,))
    for end in name_ends:
        steps[(N, end)] = Step(A)
    return Grammar(
        name="minimax_m3",
        terminals={
            "TOOL_START": f"{NS}<tool_call>",
            "TOOL_END": f"{NS}</tool_call>",
            **invokes,
            "INVOKE_END": f"{NS}</invoke>",
            **name_ends,
        },
        steps=steps,
        arg_converter=minimax_m3_arguments,
        stream_arg_deltas=False,
        json_args=False,
        strip_content_with_tools=False,
    )


class MiniMaxM3ToolParser(EngineToolParser):
    """``minimax_m3``."""

    name = "minimax_m3"
    GRAMMAR = minimax_m3_grammar()
    needs_special_tokens = False
    special_tokens_without_tools = False
    supports_required_and_named = False

    def __init__(
        self, vocab: Mapping[str, int], tools: Sequence[Mapping[str, Any]] = (), **kwargs: Any
    ) -> None:
        """See :class:`EngineToolParser`; arguments are typed by the called tool's schema."""
        super().__init__(vocab, tools, **kwargs)
        self._converter = self._arguments

    def _arguments(self, raw: str, partial: bool) -> str:
        name = next((s.name for s in self.slots if s.args == raw), "")
        return minimax_m3_arguments(raw, partial, tool_properties(self.tools, name.strip()))
