"""LFM2 / LFM2.5 tool calls: a pythonic call list between ``<|tool_call_start|>`` and
``<|tool_call_end|>``, as vLLM 0.32's ``lfm2`` parser reads it. Content may come before and after
the block; the model's habit of echoing the call after the end marker (capped by a second end
marker) is dropped. Almost-Python call text is repaired first (chat/tools/python_repair.py).
Streaming reads the block as the pythonic parser does, holding back text after the block that
may be such an echo."""

from __future__ import annotations

import ast
import json
import re
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from vllm_frontend.chat.parsed import OutputDelta
from vllm_frontend.chat.tools.base import ExtractedToolCalls
from vllm_frontend.chat.tools.python_repair import (
    escape_control_chars,
    has_broken_string,
    rename_keyword_arguments,
    requote_nested_quotes,
    restore_keyword_arguments,
    unpad_integers,
)
from vllm_frontend.chat.tools.pythonic import (
    PythonicToolParser,
    call_list,
    close_partial_python,
)

__all__ = ["Lfm2ToolParser"]

START = "<|tool_call_start|>"
END = "<|tool_call_end|>"
_CALL_LIST = re.compile(r"\[.*\]$", re.DOTALL)


def _parse(text: str) -> ast.Module:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        return ast.parse(text)


def _without_echo(after: str) -> str:
    """Text after the block, without anything up to a further (orphan) end marker."""
    last = after.rfind(END)
    return after[last + len(END) :] if last != -1 else after


def _restored(calls: list[tuple[str, str]]) -> list[tuple[str, str]]:
    out = []
    for name, arguments in calls:
        args = json.loads(arguments)
        restored = restore_keyword_arguments(args)
        if restored != args:
            arguments = json.dumps(restored, ensure_ascii=False)
        out.append((name, arguments))
    return out


class Lfm2ToolParser(PythonicToolParser):
    """``lfm2``."""

    name = "lfm2"
    required_tokens = (START, END)
    needs_special_tokens = True

    def __init__(self, vocab: Mapping[str, int], tools: Sequence[Mapping[str, Any]] = ()) -> None:
        """See :class:`ToolParser`."""
        super().__init__(vocab, tools)
        self._trailing = ""
        """Text after the block already sent."""

    @staticmethod
    def _split(text: str) -> tuple[str | None, str | None]:
        """(the block's call text, the content around it); no call text without a block."""
        start = text.find(START)
        if start == -1:
            return None, text
        before = text[:start].strip()
        end = text.find(END, start)
        if end == -1:
            return text[start + len(START) :], before or None
        after = _without_echo(text[end + len(END) :]).strip()
        content = "\n".join(part for part in (before, after) if part)
        return text[start + len(START) : end], content or None

    def extract(self, text: str) -> ExtractedToolCalls:
        """The block's calls when it is a (repairable) Python list of calls, else content."""
        source, content = self._split(text)
        if source is None:
            return ExtractedToolCalls(False, content=text)
        source = source.strip()
        if not _CALL_LIST.match(source):
            return ExtractedToolCalls(False, content=text)
        try:
            renamed = False
            try:
                module = _parse(source)
            except (SyntaxError, ValueError):
                escaped = escape_control_chars(unpad_integers(source))
                candidates = [escaped]
                requoted, changed = requote_nested_quotes(escaped)
                if changed:
                    candidates.append(escape_control_chars(requoted))
                renamed_text, renamed = rename_keyword_arguments(candidates[-1])
                if renamed:
                    candidates.append(renamed_text)
                for candidate in candidates:
                    try:
                        module = _parse(candidate)
                        break
                    except (SyntaxError, ValueError):
                        continue
                else:
                    raise
            value = getattr(module.body[0], "value", None)
            if not isinstance(value, ast.List) or not value.elts:
                raise ValueError("the block is not a list of calls")
            calls = call_list(module)
            return ExtractedToolCalls(True, _restored(calls) if renamed else calls, content)
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
        """Content before the block, the calls as the pythonic parser streams them, and text
        after the block once it cannot be an echo of the call."""
        if START not in current_text:
            return OutputDelta(content=delta_text)
        leading = ""
        if START not in previous_text:
            leading = current_text[len(previous_text) : current_text.find(START)]
        ended = END in current_text
        trailing = ""
        if ended:
            after = current_text[current_text.find(END) + len(END) :]
            kept = _without_echo(after)
            if kept == after:
                # No second end marker yet: hold back what may be an echo of the call.
                suspect = after.lstrip().startswith(("[", "<"))
                kept = self._trailing if suspect else after
            if kept.startswith(self._trailing):
                trailing = kept[len(self._trailing) :]
            self._trailing = kept
        if ended and self.prev_calls and END in previous_text:
            return OutputDelta(content=trailing)
        source = current_text.split(START, 1)[1].split(END, 1)[0].lstrip()
        content = leading + trailing
        fallback = OutputDelta(content=content) if content else None
        try:
            source = escape_control_chars(unpad_integers(source))
            if ended:
                try:
                    _parse(source)
                except (SyntaxError, ValueError):
                    requoted, changed = requote_nested_quotes(source)
                    if changed:
                        source = escape_control_chars(requoted)
            renamed_text, renamed = rename_keyword_arguments(source)
            if renamed:
                source = renamed_text
            if has_broken_string(source):
                # Nested quotes still arriving: a partial reading could not be taken back.
                return fallback
            closed = close_partial_python(source)
            if closed is None:
                return fallback
            valid, added = closed
            calls = call_list(_parse(valid))
            deltas = self._call_deltas(_restored(calls) if renamed else calls, added)
        except Exception:
            return fallback  # vLLM skips the chunk's calls (its state changes stay)
        if deltas or content:
            return OutputDelta(content=content or None, tool_calls=deltas, content_set=True)
        if not added and self._current > 0:
            return OutputDelta(content="")
        return None
