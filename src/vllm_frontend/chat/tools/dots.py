"""dots tool calls, as vLLM 0.32's ``dots`` parser reads them: ``<dots_function_call>`` blocks
holding ``<invoke name=…><parameter name=…>value</parameter></invoke>`` elements (values typed by
the tool's schema) or one JSON ``{"name", "arguments"|"parameters"}`` object. Only calls of the
request's tools count. Streaming sends each block's calls whole once it closes (a JSON body as
soon as it is complete), and the text outside blocks as content."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from vllm_frontend.chat.parsed import OutputDelta, ToolCallDelta, new_tool_call_id
from vllm_frontend.chat.tools.base import ExtractedToolCalls, ToolParser, is_complete_json
from vllm_frontend.chat.tools.base import tag_overlap as _tag_overlap

__all__ = ["DotsToolParser"]

START = "<dots_function_call>"
END = "</dots_function_call>"
_BLOCK = re.compile(rf"{re.escape(START)}\s*(.*?)\s*{re.escape(END)}", re.DOTALL)
_INVOKE = re.compile(r"<invoke\s+name\s*=\s*(?P<name>[^>]+)>(?P<body>.*?)</invoke>", re.DOTALL)
_PARAMETER = re.compile(
    r"<parameter\s+name\s*=\s*(?P<name>[^>]+)>(?P<value>.*?)</parameter>", re.DOTALL
)
_BAD_BLOCK = (TypeError, ValueError)  # json.JSONDecodeError is a ValueError


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def _typed(value: str, kind: Any) -> Any:
    """A parameter's text as its schema type says (``null`` is always None)."""
    if value.lower() == "null":
        return None
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    kind = str(kind).lower()
    if kind in ("string", "str", "text"):
        return value
    if kind in ("integer", "int"):
        try:
            return int(value)
        except ValueError:
            return value
    if kind in ("number", "float"):
        try:
            number = float(value)
        except ValueError:
            return value
        return int(number) if number.is_integer() else number
    if kind in ("boolean", "bool"):
        return value.lower() in ("true", "1")
    try:
        return json.loads(value)
    except ValueError:
        return value


def _schema_type(schema: Any, defs: Mapping[str, Any], depth: int = 0) -> Any:
    """A property's ``type``, through ``$defs`` references and the first non-null
    alternative of ``anyOf``/``oneOf``/``allOf``."""
    if not isinstance(schema, dict) or depth > 10:
        return None
    if "type" in schema:
        return schema["type"]
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return _schema_type(defs.get(ref.rsplit("/", 1)[-1]), defs, depth + 1)
    for keyword in ("anyOf", "oneOf", "allOf"):
        options = schema.get(keyword)
        if not isinstance(options, list):
            continue
        for option in options:
            if isinstance(option, dict) and option.get("type") == "null":
                continue
            if (found := _schema_type(option, defs, depth + 1)) is not None:
                return found
    return None


class DotsToolParser(ToolParser):
    """``dots``."""

    name = "dots"
    supports_required_and_named = False

    def __init__(self, vocab: Mapping[str, int], tools: Sequence[Mapping[str, Any]] = ()) -> None:
        """See :class:`ToolParser`."""
        super().__init__(vocab, tools)
        self._names = {(t.get("function") or {}).get("name") for t in tools}
        self._buffer = ""
        self._current = -1
        self._name_sent = False

    def _schema(self, name: str) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
        for tool in self.tools:
            function = tool.get("function") or {}
            if function.get("name") != name:
                continue
            schema = function.get("parameters")
            if not isinstance(schema, dict):
                break
            properties, defs = schema.get("properties", {}), schema.get("$defs", {})
            return (
                properties if isinstance(properties, dict) else {},
                defs if isinstance(defs, dict) else {},
            )
        return {}, {}

    def _invoke(self, m: re.Match[str]) -> dict[str, Any]:
        name = _unquote(m.group("name"))
        properties, defs = self._schema(name)
        arguments: dict[str, Any] = {}
        for p in _PARAMETER.finditer(m.group("body")):
            key = _unquote(p.group("name"))
            kind: Any = "string"
            if key in properties:
                kind = _schema_type(properties[key], defs) or "string"
            arguments[key] = _typed(p.group("value").strip(), kind)
        return {"name": name, "arguments": arguments}

    def _block(self, body: str) -> list[dict[str, Any]]:
        body = body.strip()
        if body.startswith("<invoke"):
            return [self._invoke(m) for m in _INVOKE.finditer(body)]
        parsed = json.loads(body)
        if not isinstance(parsed, dict):
            raise TypeError("a dots JSON tool call must be an object")
        return [parsed]

    def _valid(self, parsed: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
        """(name, arguments) of a call to one of the request's tools."""
        name = parsed.get("name")
        if not isinstance(name, str) or name not in self._names:
            return None
        arguments = parsed.get("arguments", parsed.get("parameters", {})) or {}
        if not isinstance(arguments, dict):
            return None
        return name, arguments

    def extract(self, text: str) -> ExtractedToolCalls:
        """Every valid call of every readable block; content is the text before the first."""
        at = text.find(START)
        if at == -1:
            return ExtractedToolCalls(False, content=text)
        calls: list[tuple[str, str]] = []
        for m in _BLOCK.finditer(text):
            try:
                for parsed in self._block(m.group(1)):
                    if (valid := self._valid(parsed)) is not None:
                        calls.append((valid[0], json.dumps(valid[1], ensure_ascii=False)))
            except _BAD_BLOCK:
                pass
        if not calls:
            return ExtractedToolCalls(False, content=text)
        return ExtractedToolCalls(True, calls, text[:at].strip() or None)

    # -- streaming ---------------------------------------------------------------------------

    def _whole_call(self, name: str, arguments: dict[str, Any], out: list[ToolCallDelta]) -> None:
        self._current += 1
        dumped = json.dumps(arguments, ensure_ascii=False)
        self.prev_calls.append({"name": name, "arguments": arguments})
        self.streamed_args.append(dumped)
        out.append(ToolCallDelta(self._current, id=new_tool_call_id(), name=name, arguments=dumped))

    def _open_json_body(self, out: list[ToolCallDelta]) -> None:
        """An open block whose body is already a whole JSON call: send it."""
        body = self._buffer[len(START) :].strip()
        if not body or not is_complete_json(body):
            return
        parsed = json.loads(body)
        if not isinstance(parsed, dict) or (valid := self._valid(parsed)) is None:
            return
        name, arguments = valid
        dumped = json.dumps(arguments, ensure_ascii=False)
        if not self._name_sent:
            self._current += 1
            out.append(ToolCallDelta(self._current, id=new_tool_call_id(), name=name, arguments=""))
            self.prev_calls.append({"name": name, "arguments": arguments})
            self.streamed_args.append("")
            self._name_sent = True
        sent = self.streamed_args[self._current]
        if dumped.startswith(sent) and (diff := dumped[len(sent) :]):
            out.append(ToolCallDelta(self._current, arguments=diff))
            self.streamed_args[self._current] += diff

    def _closed_block(self, body: str, out: list[ToolCallDelta], text: list[str]) -> None:
        try:
            parsed = self._block(body)
            if not parsed:
                raise ValueError("a dots tool-call block without an invoke")
            streamed_one = self._name_sent
            valid = [v for p in parsed if (v := self._valid(p)) is not None]
            if self._name_sent and valid:
                # The block's first call was streamed from its open JSON body: finish it.
                name, arguments = valid.pop(0)
                dumped = json.dumps(arguments, ensure_ascii=False)
                sent = self.streamed_args[self._current]
                if dumped.startswith(sent) and (rest := dumped[len(sent) :]):
                    out.append(ToolCallDelta(self._current, arguments=rest))
                self.prev_calls[self._current] = {"name": name, "arguments": arguments}
                self.streamed_args[self._current] = dumped
            for name, arguments in valid:
                self._whole_call(name, arguments, out)
            if not valid and not streamed_one:
                text.append(body.strip())
        except _BAD_BLOCK:
            text.append(body.strip())

    def stream(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> OutputDelta | None:
        """Buffer the delta; send the text outside blocks and every block that closed."""
        if not previous_text:
            self._buffer, self._current, self._name_sent = "", -1, False
            self.prev_calls, self.streamed_args = [], []
        self._buffer += delta_text
        text: list[str] = []
        calls: list[ToolCallDelta] = []
        while self._buffer:
            at = self._buffer.find(START)
            if at == -1:
                held = _tag_overlap(self._buffer, START)
                text.append(self._buffer[: len(self._buffer) - held])
                self._buffer = self._buffer[len(self._buffer) - held :]
                text = [part.replace(END, "") for part in text]
                break
            if at > 0:
                text.append(self._buffer[:at])
                self._buffer = self._buffer[at:]
            end = self._buffer.find(END, len(START))
            if end == -1:
                self._open_json_body(calls)
                break
            body = self._buffer[len(START) : end]
            self._buffer = self._buffer[end + len(END) :]
            self._closed_block(body, calls, text)
            self._name_sent = False
        content = "".join(text)
        if not content and not calls:
            return None
        return OutputDelta(content=content or None, tool_calls=calls, content_set=True)
