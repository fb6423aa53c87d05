"""ERNIE 4.5's tool calls (vLLM 0.32's ``vllm/tool_parsers/ernie45_tool_parser.py``)::

    text</think>\n\n<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call>

Streaming sends each call whole once its ``</tool_call>`` arrives; ``<response>`` /
``</response>`` wrappers and the newlines after markers are taken out of the content.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from vllm_frontend.chat.parsed import OutputDelta, ToolCallDelta, new_tool_call_id
from vllm_frontend.chat.tools.base import ExtractedToolCalls, ToolParser

__all__ = ["Ernie45ToolParser"]

_CALL = re.compile(r"<tool_call>\s*(?P<json>\{.*?\})\s*</tool_call>", re.DOTALL)
START, END = "<tool_call>", "</tool_call>"
RESPONSE_START, RESPONSE_END = "<response>", "</response>"


class Ernie45ToolParser(ToolParser):
    """``ernie45``."""

    name = "ernie45"
    optional_tokens = ("</think>", RESPONSE_START, RESPONSE_END, START, END, "<0x0A>")

    def __init__(self, vocab: Mapping[str, int], tools: Sequence[Mapping[str, Any]] = ()) -> None:
        """See :class:`ToolParser`."""
        super().__init__(vocab, tools)
        self._current = -1
        self._buffer = ""
        self._newline = vocab.get("<0x0A>")
        self._response_start = vocab.get(RESPONSE_START)
        self._response_end = vocab.get(RESPONSE_END)
        self._marker_ids = [vocab.get("</think>"), self._response_start, self._response_end]

    def extract(self, text: str) -> ExtractedToolCalls:
        """Every ``<tool_call>{…}</tool_call>``; any unreadable one makes it all content."""
        if START not in text:
            return ExtractedToolCalls(False, content=text)
        try:
            calls = []
            for body in _CALL.findall(text):
                obj = json.loads(body)
                name = obj.get("name", "")
                if not isinstance(name, str):
                    raise TypeError("tool name is not a string")
                calls.append((name, json.dumps(obj.get("arguments", {}), ensure_ascii=False)))
        except Exception:
            return ExtractedToolCalls(False, content=text)
        content = text[: text.find(START)].rstrip("\n")
        return ExtractedToolCalls(True, calls, content or None)

    def stream(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> OutputDelta | None:
        """Content until a call opens; then each call whole when it closes."""
        self._buffer += delta_text
        text = self._buffer
        start = text.find(START)
        if start == -1:
            self._buffer = ""
            if self._current > 0:
                text = ""
            if self._current == -1 and all(t == self._newline for t in previous_ids):
                text = text.strip("\n")
            content = text
            if self._response_start in delta_ids:
                content = content.lstrip("\n")
                at = content.find(RESPONSE_START)
                content = content[at + len(RESPONSE_START) :]
                end = content.rfind(RESPONSE_END)
                if end != -1:
                    content = content[:end]
            elif self._response_end in delta_ids:
                content = content[: content.rfind(RESPONSE_END)]
            if (
                previous_ids
                and previous_ids[-1] in self._marker_ids
                and delta_ids
                and delta_ids[0] == self._newline
            ):
                content = content.lstrip("\n")
            return OutputDelta(content=content or None, content_set=True)
        end = text.find(END)
        if end != -1:
            if self._current == -1:
                self._current = 0
                self.prev_calls = []
                self.streamed_args = []
            while len(self.prev_calls) <= self._current:
                self.prev_calls.append({})
            while len(self.streamed_args) <= self._current:
                self.streamed_args.append("")
            found = self.extract(text[: end + len(END)])
            if not found.calls:
                return None
            name, args = found.calls[0]
            self.prev_calls[self._current] = {"name": name, "arguments": json.loads(args)}
            self.streamed_args[self._current] = args
            delta = OutputDelta(
                content=found.content,
                content_set=True,
                tool_calls=[
                    ToolCallDelta(self._current, id=new_tool_call_id(), name=name, arguments=args)
                ],
            )
            self._current += 1
            self._buffer = text[end + len(END) :]
            return delta
        self._buffer = text[start:]
        return OutputDelta(content=text[:start].rstrip("\n") or None, content_set=True)
