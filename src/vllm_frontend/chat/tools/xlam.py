"""xLAM tool calls: a JSON list of ``{"name", "arguments"}`` objects, bare or in a json code
fence, ``[TOOL_CALLS]`` line or ``<tool_call>`` block, possibly after ``</think>``; as vLLM 0.32's
``xLAMToolParser``, including its ``call_<index>_<hex>`` tool-call ids and its streaming, which
re-reads the whole text with regular expressions on every delta."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from vllm_frontend.chat.parsed import OutputDelta, ToolCallDelta
from vllm_frontend.chat.tools.base import ExtractedToolCalls, ToolParser
from vllm_frontend.chat.tools.listed_calls import ARGS, EMPTY_ARGS, arguments_delta, arguments_done

__all__ = ["XLamToolParser"]

_BLOCKS = (
    re.compile(r"```(?:json)?\s*([\s\S]*?)```"),
    re.compile(r"\[TOOL_CALLS\]([\s\S]*?)(?=\n|$)"),
    re.compile(r"<tool_call>([\s\S]*?)</tool_call>"),
)
_AFTER_THINK = re.compile(r"</think>([\s\S]*)")
_OPEN_FENCE = re.compile(r"```(?:json)?\s*([\s\S]*?)(?:```|$)")
_NAME = re.compile(r'"name"\s*:\s*"([^"]+)"')


def _call_id(index: int) -> str:
    return f"call_{index}_{uuid.uuid4().int & 0xFFFFFFFFFFFFFFFF:016x}"


def _loads_ok(text: str) -> bool:
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return False
    return True


def split_output(text: str) -> tuple[str | None, str | None]:
    """``(content, call list JSON text)`` of an output (vLLM's ``preprocess_model_output``)."""
    if m := _AFTER_THINK.search(text):
        content = text[: m.start() + len("</think>")].strip()
        after = m.group(1).strip()
        if _loads_ok(after):
            return content, after
        for block in _BLOCKS:
            for found in block.findall(after):
                if _loads_ok(found):
                    return content, found
    for block in _BLOCKS:
        for found in block.findall(text):
            if _loads_ok(found):
                return block.sub("", text).strip(), found
    if text.strip().startswith("[") and (
        _loads_ok(text) or ("{" in text and "name" in text and "arguments" in text)
    ):
        return None, text
    return text, None


class XLamToolParser(ToolParser):
    """``xlam``."""

    name = "xlam"

    def __init__(self, vocab: Mapping[str, int], tools: Sequence[Mapping[str, Any]] = ()) -> None:
        """See :class:`ToolParser`."""
        super().__init__(vocab, tools)
        self._current = -1
        # Per call: name sent, "{" sent, argument text sent. (vLLM keeps these apart from the
        # base class's streamed-arguments list, which stays empty: at the finish, the last
        # call's whole arguments are sent again.)
        self._sent: list[list[Any]] = []
        self._ids: list[str | None] = []

    def extract(self, text: str) -> ExtractedToolCalls:
        """Calls of the first readable list; entries without name or arguments are skipped."""
        try:
            content, found = split_output(text)
            if not found:
                return ExtractedToolCalls(False, content=content)
            data = json.loads(found)
            if not isinstance(data, list):
                return ExtractedToolCalls(False, content=content or text)
            calls: list[tuple[str, str]] = []
            ids: list[str] = []
            for index, call in enumerate(data):
                if not isinstance(call, dict) or "name" not in call or "arguments" not in call:
                    continue
                name, arguments = call["name"], call["arguments"]
                if isinstance(arguments, dict):
                    arguments = json.dumps(arguments, ensure_ascii=False)
                if not isinstance(name, str) or not isinstance(arguments, str):
                    raise TypeError("name and arguments must be strings")
                calls.append((name, arguments))
                ids.append(_call_id(index))
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
        """One step of vLLM's regex-driven streaming."""
        stripped = current_text.strip()
        _, found = split_output(current_text)
        has_block = (
            "```json" in current_text
            or "```\n[" in current_text
            or "[TOOL_CALLS]" in current_text
            or "<tool_call>" in current_text
        )
        is_calls = (
            stripped.startswith(("[", "<tool_call>", "[TOOL_CALLS]"))
            or "</think>[" in current_text
            or found is not None
            or (has_block and '"name"' in current_text and '"arguments"' in current_text)
        )
        if not is_calls:
            return OutputDelta(content=delta_text)
        try:
            return self._step(current_text, found, has_block)
        except Exception:
            return OutputDelta(content=delta_text)

    def _step(self, current_text: str, found: str | None, has_block: bool) -> OutputDelta | None:
        try:
            parsed = json.loads(found or current_text)
            if isinstance(parsed, list):
                self.prev_calls = parsed
        except json.JSONDecodeError:
            pass
        search = found or current_text
        if not found and has_block and (m := _OPEN_FENCE.search(current_text)):
            fenced = m.group(1).strip()
            if fenced.startswith("[") and '"name"' in fenced and '"arguments"' in fenced:
                search = fenced
        names = list(_NAME.finditer(search))
        count = len(names)
        if count == 0:
            return None
        while len(self._sent) < count:
            self._sent.append([False, False, ""])
        while len(self._ids) < count:
            self._ids.append(None)
        index = self._current
        if index == -1 or index < count - 1:
            nxt = index + 1
            if nxt < count and not self._sent[nxt][0]:
                self._current = index = nxt
                call_id = _call_id(index)
                self._ids[index] = call_id
                self._sent[index][0] = True
                return OutputDelta(
                    tool_calls=[ToolCallDelta(index, id=call_id, name=names[index].group(1))]
                )
        if not 0 <= index < count:
            return None
        sent = self._sent[index]
        empty = EMPTY_ARGS.search(search)
        if empty and empty.start() > 0 and not sent[1]:
            sent[1], sent[2] = True, "{}"
            if index < count - 1:
                self._current += 1
            return OutputDelta(tool_calls=[ToolCallDelta(index, arguments="{}")])
        matches = list(ARGS.finditer(search))
        if index >= len(matches):
            return None
        args_text = matches[index].group(1)
        if count > 1:
            try:
                parsed = json.loads(search)
                if isinstance(parsed, list) and index < len(parsed):
                    value = parsed[index].get("arguments")
                    if isinstance(value, dict):
                        args_text = json.dumps(value, ensure_ascii=False)
                    else:
                        args_text = str(parsed[index].get("arguments", "{}"))
            except (json.JSONDecodeError, KeyError, IndexError):
                pass
        delta = arguments_delta(sent, args_text, index)
        if delta is None and arguments_done(sent, args_text) and index < count - 1:
            self._current += 1
        return delta
