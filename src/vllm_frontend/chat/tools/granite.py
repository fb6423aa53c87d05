"""Granite tool calls: Granite 4's ``<tool_call>{"name": …, "arguments": …}</tool_call>`` blocks
among the content, as vLLM 0.32's ``Granite4ToolParser`` (streamed calls are sent whole once
their closing tag arrives; a possible partial opening tag is held back), and granite-20b-fc's
``<function_call>`` calls (``Granite20bFCToolParser``)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from vllm_frontend.chat.parsed import OutputDelta, ToolCallDelta, new_tool_call_id
from vllm_frontend.chat.partial_json import partial_json_loads
from vllm_frontend.chat.tools.base import (
    ExtractedToolCalls,
    ToolParser,
    is_complete_json,
    tag_overlap,
)
from vllm_frontend.chat.tools.json_calls import common_prefix

__all__ = ["Granite4ToolParser", "Granite20bFCToolParser"]

START = "<tool_call>"
END = "</tool_call>"
_TAGS = re.compile(r"(?P<start><tool_call>)|(?P<end></tool_call>)")


class _Malformed(ValueError):
    """The tags or a call body do not read as Granite 4 tool calls."""


def _dump(arguments: Any) -> str | None:
    if arguments is None or isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False)


class Granite4ToolParser(ToolParser):
    """``granite4``."""

    name = "granite4"
    needs_special_tokens = True

    def __init__(self, vocab: Mapping[str, int], tools: Sequence[Mapping[str, Any]] = ()) -> None:
        """See :class:`ToolParser`."""
        super().__init__(vocab, tools)
        self._current = -1
        self._look_ahead = ""
        self._in_call = False

    def _read_calls(self, bodies: list[str], whole: bool) -> list[tuple[Any, str | None]]:
        """(name, arguments) per call body; each parsed call is remembered first, as in vLLM."""
        objects = [json.loads(body) for body in bodies]
        out = []
        for obj in objects:
            if not isinstance(obj, dict):
                raise _Malformed("a tool call is not an object")
            self.prev_calls.append(obj)
            name, arguments = obj["name"], _dump(obj["arguments"])
            if not (isinstance(name, str) or (name is None and not whole)):
                raise _Malformed("tool name is not a string")
            if arguments is None and whole:
                raise _Malformed("tool arguments are missing")
            out.append((name, arguments))
        return out

    def extract(self, text: str) -> ExtractedToolCalls:
        """Content is the text outside the blocks; any malformed block: all of it is content."""
        try:
            texts: list[str] = []
            bodies: list[str] = []
            cut = 0
            for m in _TAGS.finditer(text):
                if m.lastgroup == "start":
                    if self._in_call:
                        raise _Malformed("two opening tags in a row")
                    if before := text[cut : m.start()]:
                        texts.append(before)
                    self._in_call = True
                else:
                    if not self._in_call:
                        raise _Malformed("closing tag without an opening one")
                    if not (body := text[cut : m.start()]):
                        raise _Malformed("empty tool call")
                    bodies.append(body)
                    self._in_call = False
                cut = m.end()
            if self._in_call:
                raise _Malformed("unterminated tool call")
            if rest := text[cut:]:
                texts.append(rest)
            calls = self._read_calls(bodies, whole=True)
        except Exception:
            return ExtractedToolCalls(False, content=text)
        return ExtractedToolCalls(bool(calls), calls, "".join(texts) or None)  # type: ignore[arg-type]

    def _step(self, text: str) -> tuple[bool, str, str]:
        """One cut of ``text``: (done, content, call body); the rest waits in the look-ahead."""
        start = text.find(START)
        start_end = start + len(START)
        partial = -1
        if start == -1 and (overlap := tag_overlap(text, START)):
            partial = len(text) - overlap
        end = text.find(END)
        end_end = end + len(END)
        if start < 0:
            if partial >= 0:
                self._look_ahead = text[partial:]
                return True, text[:partial], ""
            return True, text, ""
        if not self._in_call:
            self._in_call = True
            if end > 0:
                self._look_ahead = text[end_end:]
                return False, text[:start], text[start_end:end]
            self._look_ahead = text[start:]
            return True, text[:start], ""
        if end < 0:
            self._look_ahead = text
            return True, "", ""
        self._in_call = False
        self._look_ahead = text[end_end:]
        return False, "", text[start_end:end]

    def stream(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> OutputDelta | None:
        """Content as it comes, each call whole once closed."""
        try:
            texts: list[str] = []
            bodies: list[str] = []
            done = False
            while not done:
                text, self._look_ahead = self._look_ahead + delta_text, ""
                done, content, body = self._step(text)
                if content:
                    texts.append(content)
                if body:
                    bodies.append(body)
                delta_text = ""
            calls = self._read_calls(bodies, whole=False)
            deltas = []
            for name, arguments in calls:
                self._current += 1
                deltas.append(ToolCallDelta(self._current, new_tool_call_id(), name, arguments))
                self.streamed_args.append(arguments or "")
            if not self._current + 1 == len(self.prev_calls) == len(self.streamed_args):
                raise _Malformed("calls out of step (an earlier chunk failed)")
            content = "".join(texts)
            if content or deltas:
                return OutputDelta(content=content or None, tool_calls=deltas, content_set=True)
        except Exception:
            pass
        return None


class Granite20bFCToolParser(ToolParser):
    """``granite-20b-fc``: ``<function_call> {"name": …, "arguments": …}`` repeated, as vLLM
    0.32's ``Granite20bFCToolParser``; streaming reads only an output that starts with the
    marker, advancing one step per delta."""

    name = "granite-20b-fc"
    BOT = "<function_call>"
    _BOT_SPACE = re.compile(r"<function_call>\s*")

    def __init__(self, vocab: Mapping[str, int], tools: Sequence[Mapping[str, Any]] = ()) -> None:
        """See :class:`ToolParser`."""
        super().__init__(vocab, tools)
        self._current = -1
        self._name_sent = False

    def extract(self, text: str) -> ExtractedToolCalls:
        """One JSON call after each marker (anything unreadable: plain content)."""
        if self.BOT not in text:
            return ExtractedToolCalls(False, content=text)
        decoder = json.JSONDecoder()
        try:
            marks = list(self._BOT_SPACE.finditer(text))
            calls = []
            for i, m in enumerate(marks):
                end = marks[i + 1].start() if i + 1 < len(marks) else None
                obj = decoder.raw_decode(text[m.end() : end])[0]
                name = obj["name"]
                arguments = json.dumps(obj["arguments"], ensure_ascii=False)
                if not isinstance(name, str):
                    raise _Malformed("tool name is not a string")
                calls.append((name, arguments))
        except Exception:
            return ExtractedToolCalls(False, content=text)
        return ExtractedToolCalls(True, calls, text[: text.find(self.BOT)] or None)

    def stream(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> OutputDelta | None:
        """Partial-parse every call so far and advance one step."""
        if len(current_text) < len(self.BOT) and self.BOT.startswith(current_text):
            return None
        if not current_text.startswith(self.BOT):
            return OutputDelta(content=delta_text)
        try:
            return self._step(current_text)
        except Exception:
            return None  # vLLM skips the chunk on any error

    def _step(self, text: str) -> OutputDelta | None:
        calls: list[Any] = []
        complete: list[bool] = []
        pos = _skip_space(text, len(self.BOT))
        while pos < len(text):
            obj, used = partial_json_loads(text[pos:], allow_partial_strings=self._name_sent)
            complete.append(is_complete_json(text[pos : pos + used]))
            pos = _skip_space(text, pos + used)
            pos = _skip_space(text, pos + len(self.BOT))
            calls.append(obj)
        current = calls[self._current] if len(calls) > 0 else {}
        if len(calls) == 0:
            return None
        index = self._current
        delta: OutputDelta | None = None
        if len(calls) > index + 1:
            if index >= 0 and (args := current.get("arguments")):
                rest = json.dumps(args, ensure_ascii=False)[len(self.streamed_args[index]) :]
                delta = OutputDelta(tool_calls=[ToolCallDelta(index, arguments=rest)])
                self.streamed_args[index] += rest
            self._current = len(calls) - 1
            self._name_sent = False
            self.streamed_args.append("")
            return delta
        if not self._name_sent:
            if name := current.get("name"):
                if not isinstance(name, str):
                    raise _Malformed("tool name is not a string")
                delta = OutputDelta(
                    tool_calls=[ToolCallDelta(index, id=new_tool_call_id(), name=name)]
                )
                self._name_sent = True
        elif args := current.get("arguments"):
            sent = len(self.streamed_args[index])
            dumped = json.dumps(args, ensure_ascii=False)
            prev_args = self.prev_calls[index].get("arguments")
            piece: str | None = None
            if complete[index]:
                piece = dumped[sent:]
            elif prev_args:
                prev_dumped = json.dumps(prev_args, ensure_ascii=False)
                if dumped != prev_dumped:
                    piece = common_prefix(prev_dumped, dumped)[sent:]
            if piece is not None:
                delta = OutputDelta(tool_calls=[ToolCallDelta(index, arguments=piece)])
                self.streamed_args[index] += piece
        self.prev_calls = calls
        return delta


def _skip_space(text: str, i: int) -> int:
    while i < len(text) and text[i].isspace():
        i += 1
    return i
