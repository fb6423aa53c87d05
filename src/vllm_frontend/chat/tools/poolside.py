"""Poolside V1 tool calls, as vLLM 0.32's ``poolside_v1`` parser reads them: GLM-4 style
``<tool_call>NAME\\n<arg_key>K</arg_key><arg_value>V</arg_value>…</tool_call>`` blocks. Values of
string-typed parameters are taken verbatim (and streamed as they grow); others are read as
JSON, else a Python literal, else kept as text. Streaming writes the arguments object piece by
piece; required and named tool choices are read in this format."""

from __future__ import annotations

import ast
import contextlib
import json
import re
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from vllm_frontend.chat.parsed import OutputDelta, ToolCallDelta, new_tool_call_id
from vllm_frontend.chat.tools.base import ExtractedToolCalls, ToolParser

__all__ = ["PoolsideV1ToolParser"]

START, END = "<tool_call>", "</tool_call>"
KEY_START, KEY_END = "<arg_key>", "</arg_key>"
VALUE_START, VALUE_END = "<arg_value>", "</arg_value>"
_CALL = re.compile(r"<tool_call>.*?</tool_call>", re.DOTALL)
_DETAIL = re.compile(r"<tool_call>\s*([^\n<]+?)\s*\n?\s*(<arg_key>.*?)?</tool_call>", re.DOTALL)
_PAIR = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.DOTALL)


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _held(text: str, marker: str) -> int:
    """Length of the shortest end of ``text`` that begins ``marker`` (vLLM holds back the
    first match it finds, trying the shortest first)."""
    for k in range(1, len(marker)):
        if text.endswith(marker[:k]):
            return k
    return 0


def _escaped(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)[1:-1] if text else ""


class PoolsideV1ToolParser(ToolParser):
    """``poolside_v1``."""

    name = "poolside_v1"
    supports_required_and_named = False
    needs_special_tokens = True

    def __init__(self, vocab: Mapping[str, int], tools: Sequence[Mapping[str, Any]] = ()) -> None:
        """See :class:`ToolParser`."""
        super().__init__(vocab, tools)
        self._buffer = ""
        self._current = -1
        self._in_call = False
        self._name: str | None = None
        self._name_sent = False
        self._key: str | None = None
        self._in_string = False
        self._ids: list[str] = []
        self._started: list[bool] = []
        self._closed: list[bool] = []
        self._keys: list[set[str]] = []

    def _is_string(self, tool: str, key: str) -> bool:
        for t in self.tools:
            function = t.get("function") or {}
            if function.get("name") != tool:
                continue
            parameters = function.get("parameters")
            if parameters is None:
                return False
            return parameters.get("properties", {}).get(key, {}).get("type", None) == "string"
        return False

    def extract(self, text: str) -> ExtractedToolCalls:
        """Every call block with a name; content is the text before the first block."""
        try:
            calls: list[tuple[str, str]] = []
            for block in _CALL.findall(text):
                m = _DETAIL.search(block)
                if not m:
                    continue
                name = m.group(1).strip()
                args: dict[str, Any] = {}
                for key, value in _PAIR.findall(m.group(2)) if m.group(2) else ():
                    key = key.strip()
                    args[key] = value if self._is_string(name, key) else _value(value.strip())
                calls.append((name, json.dumps(args, ensure_ascii=False)))
        except Exception:
            return ExtractedToolCalls(False, content=text)
        if not calls:
            return ExtractedToolCalls(False, content=text)
        content: str | None = text[: text.find(START)]
        if not content or not content.strip():
            content = None
        return ExtractedToolCalls(True, calls, content)

    # -- streaming ---------------------------------------------------------------------------

    def stream(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> OutputDelta | None:
        """Consume the buffer as far as it goes: content outside calls, each call's name,
        then its arguments as JSON pieces."""
        if not self.tools:
            return OutputDelta(content=delta_text) if delta_text else None
        self._buffer += delta_text
        pieces: dict[int, ToolCallDelta] = {}
        content: str | None = None
        while True:
            if not self._in_call:
                at = self._buffer.find(START)
                if at == -1:
                    held = _held(self._buffer, START)
                    out = self._buffer[: len(self._buffer) - held]
                    self._buffer = self._buffer[len(self._buffer) - held :]
                    if out:
                        content = (content or "") + out
                    break
                if at > 0:
                    content = (content or "") + self._buffer[:at]
                self._buffer = self._buffer[at + len(START) :]
                self._begin()
                continue
            if not self._name_sent:
                found = (self._buffer.find(c) for c in ("\n", KEY_START, END))
                cuts = [i for i in found if i != -1]
                if not cuts:
                    break
                cut = min(cuts)
                name = self._buffer[:cut].strip()
                if name == "" and cut == self._buffer.find(END):
                    # <tool_call></tool_call>: drop the empty call.
                    self._buffer = self._buffer[cut + len(END) :]
                    self._end_call()
                    self._forget_call()
                    continue
                skip = 1 if cut == self._buffer.find("\n") else 0
                self._buffer = self._buffer[cut + skip :]
                self._name, self._name_sent = name, True
                self.prev_calls[self._current] = {"name": name, "arguments": {}}
                piece = self._piece(pieces)
                piece.id, piece.name = self._ids[self._current], name
                if piece.arguments is None:
                    piece.arguments = ""
                continue
            if self._in_string:
                end = self._buffer.find(VALUE_END)
                if end != -1:
                    raw, self._buffer = self._buffer[:end], self._buffer[end + len(VALUE_END) :]
                    self._in_string, self._key = False, None
                    self._add(pieces, _escaped(raw) + '"')
                    continue
                keep = len(self._buffer) - _held(self._buffer, VALUE_END)
                if keep > 0:
                    out, self._buffer = self._buffer[:keep], self._buffer[keep:]
                    if escaped := _escaped(out):
                        self._add(pieces, escaped)
                break
            if self._key is not None:
                at = self._buffer.find(VALUE_START)
                if at == -1:
                    break
                self._buffer = self._buffer[at:]
                key = self._key.strip()
                if self._is_string(self._name or "", key):
                    self._buffer = self._buffer[len(VALUE_START) :]
                    if key in self._keys[self._current]:
                        self._key = None
                        continue
                    self._keys[self._current].add(key)
                    self._in_string = True
                    quoted = json.dumps(key, ensure_ascii=False)
                    self._add(pieces, f'{self._opening()}{quoted}: "')
                    continue
                end = self._buffer.find(VALUE_END)
                if end == -1:
                    break
                raw = self._buffer[len(VALUE_START) : end].strip()
                self._buffer = self._buffer[end + len(VALUE_END) :]
                self._key = None
                if key and key not in self._keys[self._current]:
                    self._keys[self._current].add(key)
                    dumped = json.dumps(_value(raw), ensure_ascii=False)
                    quoted = json.dumps(key, ensure_ascii=False)
                    self._add(pieces, f"{self._opening()}{quoted}: {dumped}")
                continue
            end = self._buffer.find(END)
            key_at = self._buffer.find(KEY_START)
            if end != -1 and (key_at == -1 or end < key_at):
                self._buffer = self._buffer[end + len(END) :]
                closing = self._close()
                if self._name:
                    try:
                        args = json.loads(self.streamed_args[self._current])
                        self.prev_calls[self._current] = {"name": self._name, "arguments": args}
                    except json.JSONDecodeError:
                        pass
                self._end_call()
                if closing:
                    self._add(pieces, closing, append=False)
                continue
            if key_at == -1:
                break
            self._buffer = self._buffer[key_at:]
            key_end = self._buffer.find(KEY_END)
            if key_end == -1:
                break
            self._key = self._buffer[len(KEY_START) : key_end]
            self._buffer = self._buffer[key_end + len(KEY_END) :]
        calls = list(pieces.values())
        if content is None and not calls:
            return OutputDelta(content="") if self.wants_logprobs else None
        return OutputDelta(content=content, tool_calls=calls, content_set=True)

    def _begin(self) -> None:
        self._current += 1
        self._ids.append(new_tool_call_id())
        self.streamed_args.append("")
        self.prev_calls.append({})
        self._started.append(False)
        self._closed.append(False)
        self._keys.append(set())
        self._name_sent, self._name, self._key, self._in_string = False, None, None, False
        self._in_call = True

    def _end_call(self) -> None:
        self._in_call, self._name, self._key, self._in_string = False, None, None, False

    def _forget_call(self) -> None:
        for state in (self._ids, self.streamed_args, self.prev_calls):
            state.pop()
        for flags in (self._started, self._closed, self._keys):
            flags.pop()
        self._current -= 1

    def _opening(self) -> str:
        """What comes before the next key: ``{`` for the first, ``, `` after one."""
        if self._started[self._current]:
            return ", "
        self._started[self._current] = True
        return "{"

    def _close(self) -> str | None:
        """The arguments' closing: ``}``, or ``{}`` when none was written (once)."""
        i = self._current
        if self._closed[i]:
            return None
        self._closed[i] = True
        if not self._started[i]:
            self.streamed_args[i] = "{}"
            return "{}"
        self.streamed_args[i] += "}"
        return "}"

    def _piece(self, pieces: dict[int, ToolCallDelta]) -> ToolCallDelta:
        if self._current not in pieces:
            pieces[self._current] = ToolCallDelta(self._current)
        return pieces[self._current]

    def _add(self, pieces: dict[int, ToolCallDelta], fragment: str, append: bool = True) -> None:
        """Send ``fragment`` (after adding it to the call's text when ``append``), and keep
        the arguments parsed so far (the open string and object closed) for the finish."""
        i = self._current
        if append:
            self.streamed_args[i] += fragment
        closers = ('"' if self._in_string else "") + ("" if self._closed[i] else "}")
        with contextlib.suppress(ValueError):
            self.prev_calls[i]["arguments"] = json.loads(self.streamed_args[i] + closers)
        piece = self._piece(pieces)
        piece.arguments = (piece.arguments or "") + fragment
