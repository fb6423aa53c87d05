"""Tool-call parsers: find function calls in model output, whole or streamed.

Each class follows the vLLM 0.32 ``--tool-call-parser`` of the same name
(``vllm/tool_parsers/``), including its streaming quirks, so that a client sees the same calls,
ids format and argument text. One instance serves one choice. The JSON-in-tags families live
here, the others in :mod:`vllm_frontend.chat.tools`; the ``--tool-call-parser`` names
(:data:`TOOL_PARSERS`) are kept in :mod:`vllm_frontend.chat.parser_registry`, which imports a
class when its name is first looked up.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from vllm_frontend.chat.parsed import OutputDelta, ToolCallDelta, new_tool_call_id
from vllm_frontend.chat.parser_registry import TOOL_PARSERS
from vllm_frontend.chat.partial_json import partial_json_loads
from vllm_frontend.chat.tools.base import ExtractedToolCalls, ToolParser, is_complete_json
from vllm_frontend.chat.tools.base import tag_overlap as _tag_overlap
from vllm_frontend.chat.tools.refused import REFUSED_TOOL_PARSERS

__all__ = [
    "REFUSED_TOOL_PARSERS",
    "TOOL_PARSERS",
    "ExtractedToolCalls",
    "HermesToolParser",
    "Llama3JsonToolParser",
    "LongcatToolParser",
    "ToolParser",
]


class HermesToolParser(ToolParser):
    """``hermes``: ``<tool_call>{"name": …, "arguments": {…}}</tool_call>`` blocks
    (``vllm/tool_parsers/hermes_tool_parser.py``). Streamed arguments are the model's raw JSON
    text; whole outputs re-serialise the parsed arguments."""

    name = "hermes"
    needs_special_tokens = True
    START = "<tool_call>"
    END = "</tool_call>"
    _BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)", re.DOTALL)
    _NAME = re.compile(r'"name"\s*:\s*"([^"]+)"')
    _ARGS = re.compile(r'"arguments"\s*:\s*')

    def __init__(self, vocab: Mapping[str, int], tools: Sequence[Mapping[str, Any]] = ()) -> None:
        """See :class:`ToolParser`."""
        super().__init__(vocab, tools)
        self._sent_content = 0

    def extract(self, text: str) -> ExtractedToolCalls:
        """Every block is a call; any unreadable block makes the whole output plain content."""
        if self.START not in text:
            return ExtractedToolCalls(False, content=text)
        try:
            calls = []
            for closed, open_ in self._BLOCK.findall(text):
                obj = json.loads(closed or open_)
                calls.append((obj["name"], json.dumps(obj["arguments"], ensure_ascii=False)))
            if any(not isinstance(name, str) for name, _ in calls):
                raise TypeError("tool name is not a string")
        except Exception:
            return ExtractedToolCalls(False, content=text)
        content = text[: text.find(self.START)]
        return ExtractedToolCalls(True, calls, content or None)

    def _content(self, text: str) -> str | None:
        # Only text before the first block is content; hold back a possible partial tag.
        if self.START in text:
            end = text.index(self.START)
        else:
            end = len(text) - _tag_overlap(text, self.START)
        if end > self._sent_content:
            out = text[self._sent_content : end]
            self._sent_content = end
            return out
        return None

    def _blocks(self, text: str) -> list[tuple[str, bool]]:
        out: list[tuple[str, bool]] = []
        pos = 0
        while (start := text.find(self.START, pos)) != -1:
            body_start = start + len(self.START)
            end = text.find(self.END, body_start)
            if end != -1:
                out.append((text[body_start:end].strip(), True))
                pos = end + len(self.END)
                continue
            raw = text[body_start:]
            if overlap := _tag_overlap(raw, self.END):
                raw = raw[:-overlap]
            body = raw.strip()
            # A body that is already valid JSON is complete even before its closing tag.
            out.append((body, is_complete_json(body) if body else False))
            break
        return out

    def stream(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> OutputDelta | None:
        """Re-read every block of the text so far and send what is new."""
        try:
            return self._step(current_text)
        except Exception:
            return None  # vLLM skips the chunk on any parse error

    def _step(self, current_text: str) -> OutputDelta | None:
        content = self._content(current_text)
        deltas: list[ToolCallDelta] = []
        for i, (body, complete) in enumerate(self._blocks(current_text)):
            if i >= len(self.prev_calls):
                self.prev_calls.append({})
                self.streamed_args.append("")
            if "name" not in self.prev_calls[i]:
                m = self._NAME.search(body)
                if not m:
                    break  # later calls wait for this one's name
                self.prev_calls[i]["name"] = m.group(1)
                deltas.append(ToolCallDelta(i, id=new_tool_call_id(), name=m.group(1)))
            m = self._ARGS.search(body)
            if m is None:
                continue
            args = body[m.end() :]
            if complete:
                args = args.rstrip()
                if args.endswith("}"):
                    args = args[:-1].rstrip()  # the brace closing the call object
            if len(args) > len(self.streamed_args[i]):
                diff = args[len(self.streamed_args[i]) :]
                self.streamed_args[i] = args
                self.prev_calls[i]["arguments"] = args
                deltas.append(ToolCallDelta(i, arguments=diff))
        if content or deltas:
            # vLLM's DeltaMessage(content=content, ...): "content": null beside the calls
            return OutputDelta(content=content, tool_calls=deltas, content_set=True)
        return None


class LongcatToolParser(HermesToolParser):
    """``longcat``: :class:`HermesToolParser` with ``<longcat_tool_call>`` tags
    (``vllm/tool_parsers/longcat_tool_parser.py``)."""

    name = "longcat"
    START = "<longcat_tool_call>"
    END = "</longcat_tool_call>"
    _BLOCK = re.compile(
        r"<longcat_tool_call>(.*?)</longcat_tool_call>|<longcat_tool_call>(.*)", re.DOTALL
    )


class Llama3JsonToolParser(ToolParser):
    """``llama3_json``: bare JSON call objects (``{"name", "arguments"|"parameters"}``), one or
    several separated by ``"; "``, optionally after ``<|python_tag|>``
    (``vllm/tool_parsers/llama_tool_parser.py``). Whole outputs: every ``{`` outside a parsed
    object must start a call, else the output is plain content. Streaming: only an output that
    starts with a call is parsed, one step per delta, as vLLM does."""

    name = "llama3_json"
    required_tokens = ("<|python_tag|>",)
    BOT = "<|python_tag|>"

    def __init__(self, vocab: Mapping[str, int], tools: Sequence[Mapping[str, Any]] = ()) -> None:
        """See :class:`ToolParser`."""
        super().__init__(vocab, tools)
        self._current = -1
        self._name_sent = False

    def extract(self, text: str) -> ExtractedToolCalls:
        """Decode a call object at every ``{`` that is not inside an earlier one."""
        if self.BOT not in text and "{" not in text:
            return ExtractedToolCalls(False, content=text)
        decoder = json.JSONDecoder()
        calls: list[tuple[str, str]] = []
        end = -1
        for m in re.finditer(r"\{", text):
            start = m.start()
            if start <= end:
                continue
            try:
                obj, length = decoder.raw_decode(text[start:])
                end = start + length
                name = obj["name"]
                args = obj["arguments"] if "arguments" in obj else obj["parameters"]
                if not isinstance(name, str):
                    raise TypeError("tool name is not a string")
                calls.append((name, json.dumps(args, ensure_ascii=False)))
            except Exception:
                return ExtractedToolCalls(False, content=text)
        if calls:
            return ExtractedToolCalls(True, calls, None)
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
        """Partial-parse all call objects so far and advance one step."""
        if not (current_text.startswith(self.BOT) or current_text.startswith("{")):
            return OutputDelta(content=delta_text)
        try:
            return self._step(current_text)
        except Exception:
            return None  # vLLM skips the chunk on any parse error

    def _step(self, text: str) -> OutputDelta | None:
        calls: list[dict[str, Any]] = []
        complete: list[bool] = []
        pos = len(self.BOT) if text.startswith(self.BOT) else 0
        while pos < len(text):
            obj, used = partial_json_loads(text[pos:], allow_partial_strings=self._name_sent)
            complete.append(is_complete_json(text[pos : pos + used]))
            pos += used + len("; ")
            if "parameters" in obj:
                if "arguments" in obj:
                    raise ValueError("model generated both parameters and arguments")
                obj["arguments"] = obj["parameters"]
            calls.append(obj)
        if not calls:
            return None
        current = calls[self._current]
        delta: OutputDelta | None = None
        if len(calls) > self._current + 1:
            # A new call begins: first send what the previous one still owes.
            if self._current >= 0 and (args := current.get("arguments")):
                dumped = json.dumps(args, ensure_ascii=False)
                owed = dumped[len(self.streamed_args[self._current]) :]
                delta = OutputDelta(tool_calls=[ToolCallDelta(self._current, arguments=owed)])
                self.streamed_args[self._current] += owed
            self._current = len(calls) - 1
            self._name_sent = False
            self.streamed_args.append("")
            return delta  # prev_calls is not updated on this step (as in vLLM)
        if not self._name_sent:
            if name := current.get("name"):
                delta = OutputDelta(
                    tool_calls=[ToolCallDelta(self._current, id=new_tool_call_id(), name=name)]
                )
                self._name_sent = True
        elif args := current.get("arguments"):
            sent = len(self.streamed_args[self._current])
            dumped = json.dumps(args, ensure_ascii=False)
            prev_args = self.prev_calls[self._current].get("arguments")
            diff: str | None = None
            if complete[self._current]:
                diff = dumped[sent:]
            elif prev_args:
                prev_dumped = json.dumps(prev_args, ensure_ascii=False)
                if dumped != prev_dumped:
                    diff = _common_prefix(prev_dumped, dumped)[sent:]
            if diff is not None:
                delta = OutputDelta(tool_calls=[ToolCallDelta(self._current, arguments=diff)])
                self.streamed_args[self._current] += diff
        self.prev_calls = calls
        return delta


def _common_prefix(a: str, b: str) -> str:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return a[:n]
