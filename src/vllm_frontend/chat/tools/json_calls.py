"""JSON call lists after a marker, as vLLM 0.32's ``Phi4MiniJsonToolParser`` (``functools[…]``)
and ``JambaToolParser`` (``<tool_calls>[…]</tool_calls>``)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from vllm_frontend.chat.parsed import OutputDelta, ToolCallDelta, new_tool_call_id
from vllm_frontend.chat.partial_json import partial_json_loads
from vllm_frontend.chat.tools.base import ExtractedToolCalls, ToolParser, is_complete_json

__all__ = [
    "JambaToolParser",
    "Phi4MiniJsonToolParser",
    "common_prefix",
    "intermediate_diff",
    "partial_json",
]


def _str(value: Any) -> str:
    """``value`` if it is a string (vLLM's pydantic ``FunctionCall`` refuses anything else)."""
    if not isinstance(value, str):
        raise TypeError("tool name is not a string")
    return value


def partial_json(text: str, allow_partial_strings: bool) -> Any:
    """``partial_json_parser.loads``: a complete or cut-off JSON value, nothing after it."""
    value, used = partial_json_loads(text, allow_partial_strings)
    if used < len(text):
        raise ValueError("extra data after the JSON value")
    return value


def _common_suffix(a: str, b: str) -> str:
    n = 0
    while n < min(len(a), len(b)) and a[-n - 1] == b[-n - 1] and not a[-n - 1].isalnum():
        n += 1
    return a[len(a) - n :]


def common_prefix(a: str, b: str) -> str:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


def intermediate_diff(new: str, old: str) -> str:
    """What ``new`` adds in the middle of ``old`` (vLLM's ``extract_intermediate_diff``: the
    common non-alphanumeric suffix and the common prefix are removed, first occurrences)."""
    suffix = _common_suffix(new, old)
    if suffix:
        old = old[::-1].replace(suffix[::-1], "", 1)[::-1]
    prefix = common_prefix(new, old)
    diff = new
    if suffix:
        diff = diff[::-1].replace(suffix[::-1], "", 1)[::-1]
    if prefix:
        diff = diff.replace(prefix, "", 1)
    return diff


class Phi4MiniJsonToolParser(ToolParser):
    """``phi4_mini_json``: ``functools[{"name": …, "arguments"|"parameters": …}, …]``. vLLM does
    not stream these: a streamed output sends nothing at all."""

    name = "phi4_mini_json"
    _CALLS = re.compile(r"functools\[(.*?)\]", re.DOTALL)

    def extract(self, text: str) -> ExtractedToolCalls:
        """The calls of the first ``functools[…]`` (an unreadable list: called, no calls)."""
        m = self._CALLS.search(text)
        if m is None:
            return ExtractedToolCalls(False, content=text)
        try:
            raw = json.loads("[" + m.group(1) + "]")
        except json.JSONDecodeError:
            raw = []
        try:
            calls = [
                (
                    _str(c["name"]),
                    json.dumps(
                        c["arguments"] if "arguments" in c else c["parameters"],
                        ensure_ascii=False,
                    ),
                )
                for c in raw
            ]
        except Exception:
            return ExtractedToolCalls(False, content=text)
        return ExtractedToolCalls(True, calls, None)

    def stream(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> OutputDelta | None:
        """Nothing (as vLLM)."""
        return None


class JambaToolParser(ToolParser):
    """``jamba``: a JSON list of ``{"name", "arguments"}`` objects between ``<tool_calls>`` and
    ``</tool_calls>``; text before it is content."""

    name = "jamba"
    START = "<tool_calls>"
    END = "</tool_calls>"
    required_tokens = (START, END)
    needs_special_tokens = True
    _BLOCK = re.compile(r"<tool_calls>(.*?)</tool_calls>", re.DOTALL)

    def __init__(self, vocab: Mapping[str, int], tools: Sequence[Mapping[str, Any]] = ()) -> None:
        """See :class:`ToolParser`."""
        super().__init__(vocab, tools)
        self._start_id = vocab.get(self.START)
        self._current = -1
        self._name_sent = False

    def extract(self, text: str) -> ExtractedToolCalls:
        """The calls of the first closed block (anything unreadable: plain content)."""
        if self.START not in text:
            return ExtractedToolCalls(False, content=text)
        try:
            raw = json.loads(self._BLOCK.findall(text)[0])
            calls = [(_str(c["name"]), json.dumps(c["arguments"], ensure_ascii=False)) for c in raw]
        except Exception:
            return ExtractedToolCalls(False, content=text)
        content = text[: text.find(self.START)]
        return ExtractedToolCalls(True, calls, content if content not in ("", " ") else None)

    def stream(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> OutputDelta | None:
        """Partial-parse the open block and advance one step (vLLM's state machine)."""
        if self.START not in current_text:
            return OutputDelta(content=delta_text)
        if self._start_id in delta_ids and len(delta_ids) == 1:
            return None
        try:
            return self._step(current_text, delta_text)
        except Exception:
            return None  # vLLM skips the chunk on any error

    def _step(self, current_text: str, delta_text: str) -> OutputDelta | None:
        body = current_text.split(self.START)[-1].split(self.END)[0]
        calls: Any = partial_json(body, allow_partial_strings=self._name_sent)
        current = calls[self._current] if len(calls) > 0 else {}
        if len(calls) == 0:
            return None
        index = self._current
        if len(calls) > index + 1:
            # A new call begins: the previous one gets its full arguments (minus what was sent).
            delta = None
            if index >= 0 and (args := current.get("arguments")):
                rest = json.dumps(args, ensure_ascii=False).replace(self.streamed_args[index], "")
                delta = OutputDelta(tool_calls=[ToolCallDelta(index, arguments=rest)])
                self.streamed_args[index] += rest
            self._current = len(calls) - 1
            self._name_sent = False
            self.streamed_args.append("")
            return delta
        delta = None
        if not self._name_sent:
            if name := current.get("name"):
                delta = OutputDelta(
                    tool_calls=[ToolCallDelta(index, id=new_tool_call_id(), name=_str(name))]
                )
                self._name_sent = True
        else:
            prev_args = self.prev_calls[index].get("arguments")
            cur_args = current.get("arguments")
            piece: str | None = None
            if cur_args and not prev_args:
                dumped = json.dumps(cur_args, ensure_ascii=False)
                new_text = delta_text.replace("'", '"')
                at = dumped.find(new_text)
                if at != -1:
                    piece = dumped[: at + len(new_text)]
                elif is_complete_json(body):
                    piece = dumped
                else:
                    return None
            elif cur_args and prev_args:
                piece = intermediate_diff(
                    json.dumps(cur_args, ensure_ascii=False),
                    json.dumps(prev_args, ensure_ascii=False),
                )
            if piece is not None:
                delta = OutputDelta(tool_calls=[ToolCallDelta(index, arguments=piece)])
                self.streamed_args[index] += piece
        self.prev_calls = calls
        return delta
