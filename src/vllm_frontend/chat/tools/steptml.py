"""Step-3 tool calls: ``<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜>
<steptml:invoke name="…"><steptml:parameter name="…">…</steptml:parameter></steptml:invoke>
<｜tool_call_end｜><｜tool_calls_end｜>``, as vLLM 0.32's ``Step3ToolParser``.

Parameter values are text, typed by the request's tool schema (integer, number, boolean, null,
string). Streaming walks a cursor through the text and sends one thing per delta: content, a
call's name, or a finished call's whole arguments.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from vllm_frontend.chat.parsed import OutputDelta, ToolCallDelta, new_tool_call_id
from vllm_frontend.chat.tools.base import ExtractedToolCalls, ToolParser

__all__ = ["Step3ToolParser"]

CALLS_BEGIN = "<｜tool_calls_begin｜>"
CALLS_END = "<｜tool_calls_end｜>"
CALL_BEGIN = "<｜tool_call_begin｜>"
CALL_END = "<｜tool_call_end｜>"
SEP = "<｜tool_sep｜>"

_INVOKE = re.compile(r'<steptml:invoke name="([^"]+)">')
_PARAM = re.compile(r'<steptml:parameter name="([^"]+)">([^<]*)</steptml:parameter>')


def _invoke(text: str) -> tuple[str | None, dict[str, Any] | None]:
    m = _INVOKE.search(text)
    if m is None:
        return None, None
    return m.group(1), {name: value.strip() for name, value in _PARAM.findall(text)}


class Step3ToolParser(ToolParser):
    """``step3``: steptml invocations inside DeepSeek-style call markers."""

    name = "step3"
    needs_special_tokens = True

    def __init__(self, vocab: Mapping[str, int], tools: Sequence[Mapping[str, Any]] = ()) -> None:
        """See :class:`ToolParser`."""
        super().__init__(vocab, tools)
        self._position = 0
        self._block_started = False
        self._block_finished = False
        self._current = -1
        self._name_sent = False

    def _typed(self, name: str, params: dict[str, Any]) -> dict[str, Any]:
        """``params`` with string values converted as the first tool named ``name`` says."""
        for tool in self.tools:
            if tool.get("type", "function") != "function":
                continue
            function = tool["function"]
            if function["name"] != name:
                continue
            properties = (function.get("parameters") or {}).get("properties", {})
            for key, value in params.items():
                if not isinstance(value, str):
                    continue
                kind = properties.get(key, {}).get("type")
                if kind == "string":
                    params[key] = value.strip()
                elif kind == "integer":
                    with contextlib.suppress(ValueError):
                        params[key] = int(value)
                elif kind == "number":
                    with contextlib.suppress(ValueError):
                        params[key] = float(value)
                elif kind == "boolean":
                    lower = value.lower()
                    params[key] = lower == "true" if lower in ("true", "false") else value
                elif kind == "null":
                    params[key] = None if value.lower() == "null" else value
            break
        return params

    def extract(self, text: str) -> ExtractedToolCalls:
        """The calls of a closed block; content is the text around it, stripped."""
        if CALLS_BEGIN not in text:
            return ExtractedToolCalls(False, content=text)
        before, rest = text.split(CALLS_BEGIN, 1)
        if CALLS_END not in rest:
            return ExtractedToolCalls(False, content=text)
        block, after = rest.split(CALLS_END, 1)
        content = (before + after).strip()
        calls = []
        for part in block.split(CALL_BEGIN):
            if not part or CALL_END not in part:
                continue
            body = part.split(CALL_END, 1)[0]
            if SEP not in body:
                continue
            kind, invoke = body.split(SEP, 1)
            if kind.strip() != "function":
                continue
            name, params = _invoke(invoke)
            if name and params is not None:
                typed = self._typed(name, params)
                calls.append((name, json.dumps(typed, ensure_ascii=False)))
        if calls:
            return ExtractedToolCalls(True, calls, content or None)
        return ExtractedToolCalls(False, content=text)

    def stream(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> OutputDelta | None:
        """Advance the cursor to the next thing to send (at most one per delta)."""
        while True:
            if self._position >= len(current_text):
                return None
            rest = current_text[self._position :]
            if self._block_finished:
                self._position = len(current_text)
                return OutputDelta(content=rest)
            if not self._block_started:
                if rest.startswith(CALLS_BEGIN):
                    self._position += len(CALLS_BEGIN)
                    self._block_started = True
                    continue
                at = rest.find(CALLS_BEGIN)
                if at == -1:
                    if CALLS_BEGIN.startswith(rest.strip()):
                        return None  # maybe the start of the marker: wait
                    self._position = len(current_text)
                    return OutputDelta(content=rest)
                self._position += at
                return OutputDelta(content=rest[:at])
            stripped = rest.lstrip()
            self._position += len(rest) - len(stripped)
            rest = stripped
            if rest.startswith(CALLS_END):
                self._position += len(CALLS_END)
                self._block_finished = True
                self._current = -1
                continue
            index = self._current
            if index == -1 or self.prev_calls[index].get("finished"):
                if rest.startswith(CALL_BEGIN):
                    self._position += len(CALL_BEGIN)
                    self._current = index = index + 1
                    self._name_sent = False
                    while len(self.prev_calls) <= index:
                        self.prev_calls.append({})
                    self.prev_calls[index]["finished"] = False
                    continue
                if CALL_BEGIN.startswith(rest):
                    return None
            if index == -1 or self.prev_calls[index].get("finished", False):
                return None
            end = rest.find(CALL_END)
            body = rest if end == -1 else rest[:end]
            if end == -1 and CALL_END.startswith(body):
                return None
            name, params = _invoke(body)
            if not name:
                return None
            call: dict[str, Any] = {"name": name, "parameters": params or {}}
            self.prev_calls[index].update(call)
            if not self._name_sent:
                self._name_sent = True
                return OutputDelta(
                    tool_calls=[ToolCallDelta(index, id=new_tool_call_id(), name=name)]
                )
            if end != -1:
                self._position += end + len(CALL_END)
                self.prev_calls[index]["finished"] = True
                typed = self._typed(name, call["parameters"])
                if typed:
                    arguments = json.dumps(typed, ensure_ascii=False)
                    return OutputDelta(tool_calls=[ToolCallDelta(index, arguments=arguments)])
            return None
