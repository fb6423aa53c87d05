"""Apertus tool calls: ``<|tools_prefix|>[{"NAME": {…arguments…}}, …]<|tools_suffix|>``, as vLLM
0.32's ``ApertusToolParser``. Its streaming quirks are kept: a possible partial marker at the
end of a delta is held back, a call's name is sent with empty arguments, arguments are sent as
their JSON grows (trailing closers held back until the list is complete), and a delta that has
content but no tool-call piece inside or right after the list is dropped (vLLM's message
constructor refuses it)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from vllm_frontend.chat.parsed import OutputDelta, ToolCallDelta, new_tool_call_id
from vllm_frontend.chat.partial_json import partial_json_loads
from vllm_frontend.chat.tools.base import ExtractedToolCalls, ToolParser
from vllm_frontend.chat.tools.json_calls import common_prefix

__all__ = ["ApertusToolParser"]

PREFIX = "<|tools_prefix|>"
SUFFIX = "<|tools_suffix|>"
_BLOCK = re.compile(re.escape(PREFIX) + r"(.*?)(?:" + re.escape(SUFFIX) + r"|$)", re.DOTALL)
_TRAILING_CLOSERS = '}"] ,'


def _as_list(value: Any) -> list[Any]:
    if isinstance(value, list):
        return value
    return [value] if value else []


class ApertusToolParser(ToolParser):
    """``apertus``."""

    name = "apertus"
    needs_special_tokens = True

    def __init__(self, vocab: Mapping[str, int], tools: Sequence[Mapping[str, Any]] = ()) -> None:
        """See :class:`ToolParser`."""
        super().__init__(vocab, tools)
        self._held = ""
        self._current = -1
        self._name_sent = False

    def extract(self, text: str) -> ExtractedToolCalls:
        """The calls of the first list; content is the text around it."""
        m = _BLOCK.search(text)
        if m is None:
            return ExtractedToolCalls(False, content=text)
        try:
            body = m.group(1)
            stripped = body.lstrip()
            try:
                parsed, used = json.JSONDecoder().raw_decode(stripped)
                trailing = stripped[used:]
            except json.JSONDecodeError:
                parsed, _ = partial_json_loads(body, allow_partial_strings=True)
                trailing = ""
            calls = []
            for obj in _as_list(parsed):
                if isinstance(obj, dict) and obj:
                    name, arguments = next(iter(obj.items()))
                    calls.append((name, json.dumps(arguments, ensure_ascii=False)))
            content = text[: m.start()].strip()
            if trailing.strip() and (rest := trailing.replace(SUFFIX, "").strip()):
                content = (content + "\n" + rest).strip()
            if after := text[m.end() :].replace(SUFFIX, "").strip():
                content = (content + "\n" + after).strip()
            return ExtractedToolCalls(True, calls, content or None)
        except Exception:
            return ExtractedToolCalls(False, content=text)

    def _release(self, delta_text: str) -> str:
        """The delta minus a held-back marker prefix at its end (vLLM's longest-first check)."""
        self._held += delta_text
        text = self._held
        for tag in (PREFIX, SUFFIX):
            if text.endswith(tag):
                self._held = ""
                return text
            for i in range(len(tag) - 1, 0, -1):
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
        """Content outside the list; inside it, names and growing arguments."""
        delta_text = self._release(delta_text)
        if not delta_text:
            return None
        if PREFIX not in current_text:
            return OutputDelta(content=delta_text)
        try:
            return self._step(current_text, delta_text)
        except Exception:
            return None

    def _step(self, text: str, delta_text: str) -> OutputDelta | None:
        prefix_at, suffix_at = text.rfind(PREFIX), text.rfind(SUFFIX)
        inside = prefix_at > suffix_at
        completed = False
        json_end: int | None = None
        if inside:
            body = text[prefix_at + len(PREFIX) :].lstrip()
            try:
                _, used = json.JSONDecoder().raw_decode(body)
                json_end = len(text) - len(body) + used
                completed, inside = True, False
            except Exception:
                pass
        just_finished = SUFFIX in delta_text or completed
        if not inside and not just_finished:
            plain = delta_text.replace(PREFIX, "").replace(SUFFIX, "")
            return OutputDelta(content=plain) if plain else None
        content = ""
        if PREFIX in delta_text:
            content += delta_text.split(PREFIX)[0].replace(SUFFIX, "")
        if just_finished:
            if completed and json_end is not None:
                start = max(json_end, len(text) - len(delta_text))
                if start < len(text):
                    content += text[start:].replace(SUFFIX, "")
            else:
                content += delta_text.split(SUFFIX)[-1]
        end = suffix_at if suffix_at > prefix_at else json_end
        pieces = self._pieces(text[prefix_at + len(PREFIX) : end], final=not inside)
        if content and not pieces:
            return None  # vLLM's DeltaMessage(tool_calls=None) fails validation
        if pieces or content:
            return OutputDelta(content=content or None, tool_calls=pieces, content_set=True)
        return None

    def _pieces(self, json_text: str, final: bool) -> list[ToolCallDelta]:
        try:
            parsed = _as_list(partial_json_loads(json_text, allow_partial_strings=True)[0])
        except Exception:
            return []
        if not parsed:
            return []
        out: list[ToolCallDelta] = []
        while self._current < len(parsed) - 1:
            if self._current >= 0:
                if not self._name_sent:
                    self._name(parsed, self._current, out)
                if piece := self._arguments(parsed, self._current, final=True):
                    out.append(piece)
            self._current += 1
            self._name_sent = False
            while len(self.streamed_args) <= self._current:
                self.streamed_args.append("")
        if self._current >= 0:
            if not self._name_sent:
                self._name(parsed, self._current, out)
            if piece := self._arguments(parsed, self._current, final):
                out.append(piece)
        return out

    def _name(self, parsed: list[Any], index: int, out: list[ToolCallDelta]) -> None:
        obj = parsed[index]
        if isinstance(obj, dict) and obj:
            self._name_sent = True
            out.append(ToolCallDelta(index, new_tool_call_id(), next(iter(obj)), ""))

    def _arguments(self, parsed: list[Any], index: int, final: bool) -> ToolCallDelta | None:
        obj = parsed[index]
        if not isinstance(obj, dict) or not obj:
            return None
        arguments = next(iter(obj.values()))
        if arguments is None:
            return None
        dumped = json.dumps(arguments, ensure_ascii=False)
        if not final:
            dumped = dumped.rstrip(_TRAILING_CLOSERS)
        sent = self.streamed_args[index]
        if dumped == sent:
            return None
        if len(common_prefix(sent, dumped)) < len(sent):
            self.streamed_args[index] = common_prefix(sent, dumped)
            return None
        if new := dumped[len(sent) :]:
            self.streamed_args[index] = dumped
            return ToolCallDelta(index, arguments=new)
        return None
