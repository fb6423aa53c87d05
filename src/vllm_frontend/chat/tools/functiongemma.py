"""FunctionGemma tool calls: ``<start_function_call>call:NAME{key:<escape>value<escape>,…}
<end_function_call>``, as vLLM 0.32's ``FunctionGemmaToolParser`` (values that read as JSON are
typed; streaming holds back a possible partial marker at the end of each delta)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from vllm_frontend.chat.parsed import OutputDelta, ToolCallDelta, new_tool_call_id
from vllm_frontend.chat.tools.base import ExtractedToolCalls, ToolParser

__all__ = ["FunctionGemmaToolParser"]

START = "<start_function_call>"
END = "<end_function_call>"
_CALL = re.compile(
    r"<start_function_call>call:(\w+)\{(.*?)\}<end_function_call>"
    r"|<start_function_call>call:(\w+)\{(.*)",
    re.DOTALL,
)
_ARG = re.compile(r"(\w+):<escape>(.*?)<escape>", re.DOTALL)


def _arguments(text: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in _ARG.findall(text):
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


class FunctionGemmaToolParser(ToolParser):
    """``functiongemma``."""

    name = "functiongemma"
    needs_special_tokens = True

    def __init__(self, vocab: Mapping[str, int], tools: Sequence[Mapping[str, Any]] = ()) -> None:
        """See :class:`ToolParser`."""
        super().__init__(vocab, tools)
        self._current = -1
        self._name_sent = False
        self._held = ""

    def extract(self, text: str) -> ExtractedToolCalls:
        """Every call (closed or cut off); content is the stripped text before the first."""
        if START not in text:
            return ExtractedToolCalls(False, content=text)
        calls = []
        for closed_name, closed_args, open_name, open_args in _CALL.findall(text):
            name = closed_name or open_name
            if name:
                arguments = _arguments(closed_args or open_args)
                calls.append((name, json.dumps(arguments, ensure_ascii=False)))
        if not calls:
            return ExtractedToolCalls(False, content=text)
        at = text.find(START)
        content = text[:at].strip() if at > 0 else None
        return ExtractedToolCalls(True, calls, content or None)

    def _release(self, delta_text: str) -> str:
        """The delta minus a held-back marker prefix at its end (vLLM's shortest-first check)."""
        text = self._held + delta_text
        if text.endswith((START, END)):
            self._held = ""
            return text
        for tag in (START, END):
            for i in range(1, len(tag)):
                if text.endswith(tag[:i]):
                    self._held = text[-i:]
                    return text[:-i]
        self._held = ""
        return text

    def stream(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> OutputDelta | None:
        """Content, then per call: a start, its name, its arguments as they grow."""
        delta_text = self._release(delta_text)
        current_text = previous_text + delta_text
        if START not in current_text:
            return OutputDelta(content=delta_text) if delta_text else None
        try:
            return self._step(previous_text, current_text, delta_text)
        except Exception:
            return None  # vLLM skips the chunk on any error

    def _step(self, previous_text: str, text: str, delta_text: str) -> OutputDelta | None:
        starts, ends = text.count(START), text.count(END)
        prev_starts, prev_ends = previous_text.count(START), previous_text.count(END)
        if starts > prev_starts and starts > ends:
            self._current += 1
            self._name_sent = False
            self.streamed_args.append("")
            self.prev_calls.append({})
            return None
        index = self._current
        if starts > ends:
            partial = text[text.rfind(START) + len(START) :]
            if partial.startswith("call:") and "{" in (body := partial[5:]):
                name, args_text = body.split("{", 1)
                if not self._name_sent and name:
                    self._name_sent = True
                    self.prev_calls[index] = {"name": name, "arguments": {}}
                    return OutputDelta(
                        tool_calls=[ToolCallDelta(index, id=new_tool_call_id(), name=name)]
                    )
                if self._name_sent and args_text and (arguments := _arguments(args_text)):
                    dumped = json.dumps(arguments, ensure_ascii=False)
                    sent = self.streamed_args[index]
                    if len(dumped) > len(sent):
                        self.streamed_args[index] = dumped
                        self.prev_calls[index]["arguments"] = arguments
                        return OutputDelta(
                            tool_calls=[ToolCallDelta(index, arguments=dumped[len(sent) :])]
                        )
            return None
        if ends > prev_ends:
            if 0 <= index < len(self.prev_calls):
                found = _CALL.findall(text)
                closed: dict[str, Any] = {}
                if index < len(found) and found[index][0]:
                    closed = _arguments(found[index][1])
                    self.prev_calls[index]["arguments"] = closed
                if closed:
                    dumped = json.dumps(closed, ensure_ascii=False)
                    sent = self.streamed_args[index]
                    if len(dumped) > len(sent):
                        self.streamed_args[index] = dumped
                        return OutputDelta(
                            tool_calls=[ToolCallDelta(index, arguments=dumped[len(sent) :])]
                        )
            return None
        return OutputDelta(content=delta_text) if delta_text else None
