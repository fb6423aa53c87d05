"""Hunyuan-A13B tool calls: ``<tool_calls>[{"name": …, "arguments": {…}}, …]</tool_calls>``
outside ``<think>`` regions, as vLLM 0.32's ``HunyuanA13BToolParser``, including its ids
(``call_<hex>`` whole, ``call_<index>_<hex>`` streamed) and its regex-driven streaming (whose
errors, as in vLLM, fail the stream)."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from vllm_frontend.chat.parsed import OutputDelta, ToolCallDelta
from vllm_frontend.chat.tools.base import ExtractedToolCalls, ToolParser
from vllm_frontend.chat.tools.listed_calls import ARGS, EMPTY_ARGS, arguments_delta, arguments_done

__all__ = ["HunyuanA13BToolParser"]

BOT = "<tool_calls>"
_BLOCK = re.compile(r"<tool_calls>([\s\S]*?)</tool_calls>", re.DOTALL)
_THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL)
_NAME = re.compile(r'"name"\s*:\s*"([^"]+)"')


def _hex() -> str:
    return f"{uuid.uuid4().int & 0xFFFFFFFFFFFFFFFF:016x}"


def _skip_space(text: str, i: int) -> int:
    while i < len(text) and text[i].isspace():
        i += 1
    return i


class HunyuanA13BToolParser(ToolParser):
    """``hunyuan_a13b``."""

    name = "hunyuan_a13b"

    def __init__(self, vocab: Mapping[str, int], tools: Sequence[Mapping[str, Any]] = ()) -> None:
        """See :class:`ToolParser`."""
        super().__init__(vocab, tools)
        self._current = -1
        # Per call: name sent, "{" sent, argument text sent. (As in vLLM, the base class's
        # streamed-arguments list stays empty: the finish resends the last call's arguments.)
        self._sent: list[list[Any]] = []

    def extract(self, text: str) -> ExtractedToolCalls:
        """Calls of the first readable block outside reasoning; content is the text before it."""
        try:
            content: str | None = text
            found: str | None = None
            for m in _BLOCK.finditer(text):
                start, end = m.span()
                thinks = [(t.start(), t.end()) for t in _THINK.finditer(text)]
                if any(a < start and end < b for a, b in thinks):
                    continue
                body = m.group(1).strip()
                try:
                    json.loads(body)
                except Exception:
                    continue
                content, found = text[:start], body
                break
            if not found:
                return ExtractedToolCalls(False, content=content)
            data = json.loads(found)
            if not isinstance(data, list):
                return ExtractedToolCalls(False, content=content or text)
            calls: list[tuple[str, str]] = []
            for call in data:
                if not isinstance(call, dict) or "name" not in call or "arguments" not in call:
                    continue
                name, arguments = call["name"], call["arguments"]
                if isinstance(arguments, dict):
                    arguments = json.dumps(arguments, ensure_ascii=False)
                if not isinstance(name, str) or not isinstance(arguments, str):
                    raise TypeError("name and arguments must be strings")
                calls.append((name, arguments))
            if not content or not content.strip():
                content = None
            ids = [f"call_{_hex()}" for _ in calls]
            return ExtractedToolCalls(bool(calls), calls, content, ids=ids)
        except Exception:
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
        """One step of vLLM's regex-driven streaming over the whole text so far."""
        at = _skip_space(current_text, 0)
        if current_text.startswith(BOT, at):
            at = _skip_space(current_text, at + len(BOT))
        if at >= len(current_text) or current_text[at] != "[":
            return OutputDelta(content=delta_text)
        try:
            parsed = json.loads(current_text[at:])
            if isinstance(parsed, list):
                self.prev_calls = parsed
        except json.JSONDecodeError:
            pass
        names = list(_NAME.finditer(current_text))
        count = len(names)
        if count == 0:
            return None
        while len(self._sent) < count:
            self._sent.append([False, False, ""])
        index = self._current
        if index == -1 or index < count - 1:
            nxt = index + 1
            if nxt < count and not self._sent[nxt][0]:
                self._current = nxt
                self._sent[nxt][0] = True
                call_id = f"call_{nxt}_{_hex()}"
                return OutputDelta(
                    tool_calls=[ToolCallDelta(nxt, id=call_id, name=names[nxt].group(1))]
                )
        if not 0 <= index < count:
            return None
        sent = self._sent[index]
        empty = EMPTY_ARGS.search(current_text)
        if empty and empty.start() > 0 and not sent[1]:
            sent[1], sent[2] = True, "{}"
            if index < count - 1:
                self._current += 1
            return OutputDelta(tool_calls=[ToolCallDelta(index, arguments="{}")])
        matches = list(ARGS.finditer(current_text))
        if index >= len(matches):
            return None
        args_text = matches[index].group(1)
        if index != count - 1:
            nxt_at = current_text.find("},{", matches[index].start())
            if nxt_at != -1:
                region = current_text[matches[index].start() : nxt_at + 1]
                args_text = region.split('"arguments":')[1].strip()  # may fail, as in vLLM
        delta = arguments_delta(sent, args_text, index)
        if delta is None and arguments_done(sent, args_text) and index < count - 1:
            self._current += 1
        return delta
