"""DeepSeek V3 / V3.1 tool calls between ``<｜tool▁calls▁begin｜>`` … ``<｜tool▁calls▁end｜>``.

``deepseek_v3`` (``<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME`` + a fenced json block) and
``deepseek_v31`` (``<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS``) follow vLLM 0.32's
``DeepSeekV3ToolParser`` / ``DeepSeekV31ToolParser``, streaming quirks included: the stream is
steered by counts of the call marker *token ids*, arguments are the model's raw text (sent as it
grows on the first line), and the delta that closes a call sends the text up to its last ``"}``.
Marker counts are kept incrementally, so a token costs O(delta).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from vllm_frontend.chat.parsed import OutputDelta, ToolCallDelta, new_tool_call_id
from vllm_frontend.chat.tools.base import ExtractedToolCalls, ToolParser

__all__ = ["DeepSeekV3ToolParser", "DeepSeekV31ToolParser"]

CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
CALLS_END = "<｜tool▁calls▁end｜>"
CALL_BEGIN = "<｜tool▁call▁begin｜>"
CALL_END = "<｜tool▁call▁end｜>"
SEP = "<｜tool▁sep｜>"


class DeepSeekV3ToolParser(ToolParser):
    """``deepseek_v3``: ``TYPE<｜tool▁sep｜>NAME\\n```json\\nARGS\\n```<｜tool▁call▁end｜>``."""

    name = "deepseek_v3"
    required_tokens = (CALLS_BEGIN, CALLS_END)
    optional_tokens = (CALL_BEGIN, CALL_END)
    # Whole output: (type, name, arguments) per call ('.' stops at newlines, as in vLLM).
    _CALL: ClassVar[re.Pattern[str]] = re.compile(
        r"<｜tool▁call▁begin｜>(.*)<｜tool▁sep｜>(.*)\n```json\n(.*)\n```<｜tool▁call▁end｜>"
    )
    # Streaming: the open call so far, with arguments, or only its name.
    _PORTION: ClassVar[re.Pattern[str]] = re.compile(
        r"(?:.*)<｜tool▁sep｜>(.*)\n```json\n(.*[^\n`])"
    )
    _NAME_ONLY: ClassVar[re.Pattern[str]] = re.compile(r"(?:.*)<｜tool▁sep｜>(.*)\n")

    def __init__(self, vocab: Mapping[str, int], tools: Sequence[Mapping[str, Any]] = ()) -> None:
        """See :class:`ToolParser`."""
        super().__init__(vocab, tools)
        self._calls_begin_id = vocab.get(CALLS_BEGIN)
        self._call_begin_id = vocab.get(CALL_BEGIN)
        self._call_end_id = vocab.get(CALL_END)
        self._current = -1
        self._name_sent = False
        self._seen_calls_begin = False
        self._starts = 0
        self._ends = 0

    def _whole_calls(self, text: str) -> list[tuple[str, str]] | None:
        calls = []
        for kind, name, arguments in self._CALL.findall(text):
            if kind != "function":
                return None  # vLLM's ToolCall only admits type "function"
            calls.append((name, arguments))
        return calls

    def extract(self, text: str) -> ExtractedToolCalls:
        """Every well-formed call; content is the text before the calls section."""
        if CALLS_BEGIN not in text:
            return ExtractedToolCalls(False, content=text)
        calls = self._whole_calls(text)
        if calls is None:
            return ExtractedToolCalls(False, content=text)
        return ExtractedToolCalls(True, calls, text[: text.find(CALLS_BEGIN)] or None)

    def _read_portion(self, portion: str) -> dict[str, Any] | None:
        if m := self._PORTION.match(portion):
            return {"name": m.group(1), "arguments": m.group(2)}
        if m := self._NAME_ONLY.match(portion):
            return {"name": m.group(1), "arguments": ""}
        return None

    def stream(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> OutputDelta | None:
        """One step of vLLM's marker-counting state machine."""
        prev_starts, prev_ends = self._starts, self._ends
        self._starts += delta_ids.count(self._call_begin_id)
        self._ends += delta_ids.count(self._call_end_id)
        if not self._seen_calls_begin:
            self._seen_calls_begin = self._calls_begin_id in delta_ids
            if not self._seen_calls_begin:
                return OutputDelta(content=delta_text)
        delta_text = delta_text.replace(CALLS_BEGIN, "").replace(CALLS_END, "")
        try:
            return self._step(current_text, delta_text, delta_ids, prev_starts, prev_ends)
        except Exception:
            return None  # vLLM skips the chunk on any error

    def _step(
        self,
        current_text: str,
        delta_text: str,
        delta_ids: Sequence[int],
        prev_starts: int,
        prev_ends: int,
    ) -> OutputDelta | None:
        starts, ends = self._starts, self._ends
        if starts == ends and prev_ends == ends and CALL_END not in delta_text:
            return OutputDelta(content=delta_text)
        portion: str | None = None
        text_portion: str | None = None
        if CALL_END in delta_text:
            # (vLLM appends the delta to the text that already ends with it)
            portion = (current_text + delta_text).split(CALL_BEGIN)[-1].split(CALL_END)[0]
            portion = portion.rstrip()
            delta_text = delta_text.split(CALL_END)[0].rstrip()
            text_portion = delta_text.split(CALL_END)[-1].lstrip()
        if starts > ends and starts > prev_starts:
            portion = current_text.split(CALL_BEGIN)[-1] if len(delta_ids) > 1 else None
            text_portion = None
            self._current += 1
            self._name_sent = False
            self.streamed_args.append("")
        elif starts > ends and starts == prev_starts:
            portion = current_text.split(CALL_BEGIN)[-1]
            text_portion = None
        elif starts == ends and ends >= prev_ends:
            if not self.prev_calls:
                return None
            if self.prev_calls[self._current].get("arguments"):
                if '"}' not in delta_text:
                    return None
                rest = delta_text[: delta_text.rindex('"}')] + '"}'
                self.streamed_args[self._current] += rest
                return OutputDelta(tool_calls=[ToolCallDelta(self._current, arguments=rest)])
        else:
            return OutputDelta(content=delta_text.replace(CALL_BEGIN, "").replace(CALL_END, ""))

        call: dict[str, Any] = {}
        if portion:
            read = self._read_portion(portion)
            if read is None:
                return None
            call = read
        if not self._name_sent:
            if name := call.get("name"):
                self._name_sent = True
                return OutputDelta(
                    tool_calls=[ToolCallDelta(self._current, id=new_tool_call_id(), name=name)]
                )
            return None
        if portion is None:
            return OutputDelta(content=delta_text) if text_portion is not None else None

        if len(self.prev_calls) <= self._current:
            self.prev_calls.append({})
        prev_args = self.prev_calls[self._current].get("arguments")
        cur_args = call.get("arguments")
        delta: OutputDelta | None = None
        if cur_args and not prev_args:
            delta = OutputDelta(tool_calls=[ToolCallDelta(self._current, arguments=cur_args)])
            self.streamed_args[self._current] = cur_args
        elif (
            cur_args
            and prev_args
            and len(cur_args) > len(prev_args)
            and cur_args.startswith(prev_args)
        ):
            new = cur_args[len(prev_args) :]
            delta = OutputDelta(tool_calls=[ToolCallDelta(self._current, arguments=new)])
            self.streamed_args[self._current] = cur_args
        if self._current == len(self.prev_calls) - 1:
            self.prev_calls[self._current] = call
        else:
            self.prev_calls.append(call)
        return delta


class DeepSeekV31ToolParser(DeepSeekV3ToolParser):
    """``deepseek_v31``: ``NAME<｜tool▁sep｜>ARGS<｜tool▁call▁end｜>``."""

    name = "deepseek_v31"
    _CALL = re.compile(r"<｜tool▁call▁begin｜>(.*?)<｜tool▁sep｜>(.*?)<｜tool▁call▁end｜>")
    _PORTION = re.compile(r"(.*)<｜tool▁sep｜>(.*)")

    def _whole_calls(self, text: str) -> list[tuple[str, str]] | None:
        return [(name, arguments) for name, arguments in self._CALL.findall(text)]

    def _read_portion(self, portion: str) -> dict[str, Any] | None:
        # (vLLM's name-only fallback can never match where this does not.)
        if m := self._PORTION.match(portion):
            return {"name": m.group(1), "arguments": m.group(2)}
        return None
