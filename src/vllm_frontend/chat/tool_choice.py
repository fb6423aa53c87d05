"""Forced tool calls: ``tool_choice: "required"`` or a named function, as vLLM 0.32 does them
with JSON structured outputs (``get_json_schema_from_tools`` in vllm/tool_parsers/utils.py,
``ToolParser.adjust_request``, the JSON branches of ``Parser._extract_tool_calls`` and
vllm/tool_parsers/streaming.py).

The request's tools become a JSON schema the engine constrains the output with
(:func:`forced_tool_schema`):

- ``required``: an array (at least one item; at most one with ``parallel_tool_calls: false``)
  of ``{"name": <one tool's name>, "parameters": <that tool's parameters>}`` objects;
- a named function: that function's parameters object itself.

The constrained text is then read back as tool calls: whole (:func:`parse_required_tool_calls`;
for a named function the text is the arguments) or streamed (:class:`ForcedToolCallStream`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from vllm_frontend.chat.errors import ChatError
from vllm_frontend.chat.parsed import OutputDelta, ToolCallDelta, new_tool_call_id

__all__ = [
    "ForcedToolCallStream",
    "ForcedToolChoice",
    "forced_tool_choice",
    "forced_tool_schema",
    "parse_required_tool_calls",
]


class ForcedToolChoice(msgspec.Struct, frozen=True, gc=False):
    """A ``tool_choice`` that forces a call: ``"required"`` or one named function."""

    name: str | None
    """The named function; ``None`` for ``"required"``."""

    @property
    def required(self) -> bool:
        """Whether any of the tools may be called (one or more times)."""
        return self.name is None


def forced_tool_choice(tool_choice: Any) -> ForcedToolChoice | None:
    """The forced choice of a (schema-valid, plain JSON) ``tool_choice``; ``None`` for
    ``"none"``, ``"auto"`` or a missing one."""
    if tool_choice == "required":
        return ForcedToolChoice(None)
    if isinstance(tool_choice, Mapping):
        function = tool_choice.get("function")
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            return ForcedToolChoice(function["name"])
    return None


def _empty_object() -> dict[str, Any]:
    # A tool without (or with empty) parameters still takes a JSON object.
    return {"type": "object", "properties": {}}


def _function(tool: Mapping[str, Any]) -> Mapping[str, Any]:
    function = tool.get("function")
    return function if isinstance(function, Mapping) else {}


def forced_tool_schema(
    tools: Sequence[Mapping[str, Any]],
    choice: ForcedToolChoice,
    parallel_tool_calls: bool | None = None,
) -> dict[str, Any]:
    """The JSON schema the output must follow (``tools`` as plain JSON chat tools).

    Raises :class:`ChatError` (HTTP 400) with vLLM's messages for a named function that is not
    among ``tools`` and for ``$defs`` of the tools' parameters that cannot be merged.
    """
    if choice.name is not None:
        # Like vLLM, the last tool of that name wins.
        found: Mapping[str, Any] | None = None
        for tool in tools:
            if _function(tool).get("name") == choice.name:
                found = _function(tool)
        if found is None:
            raise ChatError(f"Tool '{choice.name}' has not been passed in `tools`.")
        return found.get("parameters") or _empty_object()
    items: list[dict[str, Any]] = []
    defs: dict[str, Any] = {}
    for tool in tools:
        function = _function(tool)
        name = function.get("name")
        params = function.get("parameters")
        if params:
            # Shared definitions move to the top of the schema, out of each tool's parameters.
            params = dict(params)
            tool_defs = params.pop("$defs", {})
        else:
            tool_defs, params = {}, _empty_object()
        items.append(
            {
                "properties": {"name": {"type": "string", "enum": [name]}, "parameters": params},
                "required": ["name", "parameters"],
            }
        )
        if not isinstance(tool_defs, dict):
            raise ChatError(
                f"`$defs` in the parameters of tool '{name}' must be an object, got "
                f"{type(tool_defs).__name__}.",
                param="tools",
            )
        for def_name, def_schema in tool_defs.items():
            if def_name in defs and defs[def_name] != def_schema:
                raise ChatError(
                    f"Tool definition '{def_name}' has multiple schemas, which is not supported.",
                    param="tools",
                )
            defs[def_name] = def_schema
    schema: dict[str, Any] = {
        "type": "array",
        "minItems": 1,
        "items": {"type": "object", "anyOf": items},
    }
    if parallel_tool_calls is False:  # only an explicit false limits the calls
        schema["maxItems"] = 1
    if defs:
        schema["$defs"] = defs
    return schema


# -- reading the output back ---------------------------------------------------------------------


def parse_required_tool_calls(text: str) -> list[tuple[str, str]]:
    """``(name, arguments JSON)`` of each call in a ``required`` output, or no calls when the
    text is not an array of function definitions (vLLM validates it as
    ``list[FunctionDefinition]`` and then serializes each ``parameters`` with
    ``json.dumps(..., ensure_ascii=False)``)."""
    try:
        items = json.loads(text)  # NaN and Infinity included, as pydantic's parser
    except (ValueError, RecursionError):
        return []
    if not isinstance(items, list):
        return []
    calls: list[tuple[str, str]] = []
    for item in items:
        if not isinstance(item, dict) or not _is_function_definition(item):
            return []
        calls.append((item["name"], json.dumps(item.get("parameters"), ensure_ascii=False)))
    return calls


_LAX_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_LAX_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})


def _is_lax_bool(value: Any) -> bool:
    # What pydantic's lax mode accepts for a ``bool | None`` field.
    if value is None or isinstance(value, bool):
        return True
    if isinstance(value, int | float):
        return value in (0, 1)
    if isinstance(value, str):
        return value.lower() in _LAX_TRUE or value.lower() in _LAX_FALSE
    return False


def _is_function_definition(item: dict[str, Any]) -> bool:
    # vLLM's FunctionDefinition: name (string), and the optional description, parameters,
    # strict and defer_loading; other keys are allowed.
    return (
        isinstance(item.get("name"), str)
        and isinstance(item.get("description", ""), str | type(None))
        and isinstance(item.get("parameters"), dict | type(None))
        and _is_lax_bool(item.get("strict"))
        and _is_lax_bool(item.get("defer_loading"))
    )


class _CallSpan(msgspec.Struct, gc=False):
    """Where one element of the ``required`` array sits in the text (character offsets).

    Offsets never move once set, so the spans of a prefix of the text are the spans of the whole
    text cut to that prefix: what an earlier feed revealed can be read off the current spans.
    """

    name: str | None = None
    name_end: int | None = None
    """Just past the closing quote of the (decodable) name string."""
    args_start: int | None = None
    args_end: int | None = None
    """Just past the ``parameters`` value; ``None`` while it is being generated."""

    def ready(self, length: int | None = None) -> bool:
        """Whether the call could be announced once the first ``length`` characters were out
        (its name complete, its arguments started); ``None`` means the whole text."""
        if self.name is None or self.name_end is None or self.args_start is None:
            return False
        return length is None or (self.name_end <= length and self.args_start < length)


# What the scanner expects next inside one element object of the array.
_KEY, _COLON, _VALUE, _STRING_VALUE, _NESTED_VALUE, _BARE_VALUE, _DONE = range(7)


class _RequiredArrayScanner:
    """Finds the calls of a (growing) ``required`` output in one pass over its characters.

    Only the element level of ``[{...}, ...]`` is interpreted: strings and nesting are tracked
    so that quotes and brackets inside values cannot confuse it. Anything after the array ends,
    or a text that is not an array of objects, stops the scan.
    """

    def __init__(self) -> None:
        self.spans: list[_CallSpan] = []
        self.scanned = 0
        self._text = ""
        self._stopped = False
        self._depth = 0  # element objects sit at depth 2
        self._in_string = False
        self._escaped = False
        self._string_start = 0
        self._call: _CallSpan | None = None
        self._expect = _KEY
        self._key: str | None = None
        self._value_start = 0

    def scan(self, text: str) -> None:
        """Read ``text`` (the previous text plus what is new)."""
        start = self.scanned
        self._text = text
        self.scanned = len(text)
        if self._stopped:
            return
        for pos in range(start, len(text)):
            if not self._step(pos, text[pos]):
                self._stopped = True
                return

    def _value_started(self, pos: int, state: int) -> None:
        assert self._call is not None
        self._value_start = pos
        if self._key == "parameters":
            self._call.args_start = pos
        self._expect = state

    def _value_ended(self, end: int) -> None:
        call = self._call
        assert call is not None
        if self._key == "parameters":
            call.args_end = end
        elif self._key == "name" and self._expect == _STRING_VALUE:
            try:
                name = json.loads(self._text[self._value_start : end])
            except ValueError:
                name = None  # an undecodable name: the call never becomes ready
            call.name = name if isinstance(name, str) else None
            call.name_end = end if call.name is not None else call.name_end
        self._expect = _DONE

    def _step(self, pos: int, ch: str) -> bool:
        at_element = self._depth == 2 and self._call is not None
        if self._in_string:
            if self._escaped:
                self._escaped = False
            elif ch == "\\":
                self._escaped = True
            elif ch == '"':
                self._in_string = False
                if at_element:
                    if self._expect == _KEY:
                        self._key = self._text[self._string_start + 1 : pos]
                        self._expect = _COLON
                    elif self._expect == _STRING_VALUE:
                        self._value_ended(pos + 1)
            return True
        if ch == '"':
            self._in_string = True
            self._string_start = pos
            if at_element and self._expect == _VALUE:
                self._value_started(pos, _STRING_VALUE)
            return True
        if ch in "{[":
            if self._depth == 0 and ch != "[":
                return False
            if self._depth == 1:
                if ch != "{":
                    return False
                self._call = _CallSpan()
                self.spans.append(self._call)
                self._expect, self._key = _KEY, None
            elif at_element and self._expect == _VALUE:
                self._value_started(pos, _NESTED_VALUE)
            self._depth += 1
            return True
        if ch in "}]":
            if at_element and self._expect == _BARE_VALUE:
                self._value_ended(pos)
            self._depth -= 1
            if self._depth == 2 and self._call is not None and self._expect == _NESTED_VALUE:
                self._value_ended(pos + 1)
            elif self._depth == 1:
                self._call = None
            elif self._depth <= 0:
                return False
            return True
        if not at_element:
            return True
        if ch == ":":
            if self._expect == _COLON:
                self._expect = _VALUE
        elif ch == ",":
            if self._expect == _BARE_VALUE:
                self._value_ended(pos)
            self._expect, self._key = _KEY, None
        elif ch.isspace():
            if self._expect == _BARE_VALUE:
                self._value_ended(pos)
        elif self._expect == _VALUE:
            self._value_started(pos, _BARE_VALUE)
        return True


class ForcedToolCallStream:
    """Streams the tool calls of one choice under a forced ``tool_choice``.

    A named function's output is its arguments: every text delta becomes an arguments piece of
    call 0, the first one also carrying the id and name. A ``required`` output is a JSON array:
    each call is announced (id, name and the arguments so far) once its name is complete and its
    ``parameters`` value has started, then streamed as new argument text; one delta may carry
    pieces of several calls.
    """

    def __init__(self, choice: ForcedToolChoice) -> None:
        """A stream for one choice."""
        self.choice = choice
        self._name_sent = False
        self._scanner = _RequiredArrayScanner() if choice.required else None

    def feed(self, previous_text: str, current_text: str, delta_text: str) -> OutputDelta | None:
        """The tool-call pieces of one update (``current_text`` = ``previous_text`` + delta)."""
        if self._scanner is None:
            return self._named(delta_text)
        return self._required(previous_text, current_text)

    def _named(self, delta_text: str) -> OutputDelta:
        piece = ToolCallDelta(index=0, arguments=delta_text)
        if not self._name_sent:
            piece.id, piece.name = new_tool_call_id(), self.choice.name
            self._name_sent = True
        return OutputDelta(tool_calls=[piece])

    def _required(self, previous_text: str, current_text: str) -> OutputDelta | None:
        scanner = self._scanner
        assert scanner is not None
        if not current_text:
            return None
        if len(current_text) < scanner.scanned:  # the text restarted: scan it afresh
            scanner = self._scanner = _RequiredArrayScanner()
        scanner.scan(current_text)
        sent = len(previous_text)
        pieces: list[ToolCallDelta] = []
        for index, span in enumerate(scanner.spans):
            if not span.ready():
                break  # calls come in order: no later one can be ready
            assert span.args_start is not None
            end = span.args_end if span.args_end is not None else len(current_text)
            if span.ready(sent):
                new = current_text[min(end, sent) : end]
                if new:
                    pieces.append(ToolCallDelta(index=index, arguments=new))
            else:
                pieces.append(
                    ToolCallDelta(
                        index=index,
                        id=new_tool_call_id(),
                        name=span.name,
                        arguments=current_text[span.args_start : end],
                    )
                )
        return OutputDelta(tool_calls=pieces) if pieces else None
