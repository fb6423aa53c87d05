"""GigaChat 3 tool calls: one JSON call after ``<|function_call|>`` (or ``function call`` +
``<|role_sep|>``), as vLLM 0.32's ``GigaChat3ToolParser``: streamed arguments are the model's raw
JSON text (without the call object's closing brace)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from vllm_frontend.chat.parsed import OutputDelta, ToolCallDelta, new_tool_call_id
from vllm_frontend.chat.tools.base import ExtractedToolCalls, ToolParser

__all__ = ["GigaChat3ToolParser"]

_CALL = re.compile(r"(?:function call<\|role_sep\|>\n|<\|function_call\|>)(.*)", re.DOTALL)
_CONTENT = re.compile(r"^(.*?)(?:<\|message_sep\|>|<\|function_call\|>)", re.DOTALL)
_NAME = re.compile(r'"name"\s*:\s*"([^"]*)"', re.DOTALL)
_ARGS = re.compile(r'"arguments"\s*:\s*(.*)', re.DOTALL)
EOS = "</s>"


def _loads_lenient(text: str) -> tuple[bool, Any]:
    try:
        return True, json.loads(text, strict=False)
    except json.JSONDecodeError:
        return False, None


class GigaChat3ToolParser(ToolParser):
    """``gigachat3``."""

    name = "gigachat3"
    needs_special_tokens = True

    def __init__(self, vocab: Mapping[str, int], tools: Sequence[Mapping[str, Any]] = ()) -> None:
        """See :class:`ToolParser`."""
        super().__init__(vocab, tools)
        self._started = False
        self._name_sent = False
        self._content_ended = False

    def extract(self, text: str) -> ExtractedToolCalls:
        """The call (an object with object arguments), and the content before it."""
        call: Any = None
        if text.rstrip().endswith(EOS):
            text = text[: text.rfind(EOS)]
        if m := _CALL.search(text):
            ok, call = _loads_lenient(m.group(1))
            if not ok:
                return ExtractedToolCalls(False, content=text)
            if not (
                isinstance(call, dict)
                and "name" in call
                and "arguments" in call
                and isinstance(call["arguments"], dict)
            ):
                call = None
        mc = _CONTENT.search(text)
        content = mc.group(1) if mc else text
        if not call:
            return ExtractedToolCalls(False, content=content or None)
        name = call["name"]
        if not isinstance(name, str):
            raise TypeError("tool name is not a string")  # (vLLM fails the request too)
        arguments = json.dumps(call["arguments"], ensure_ascii=False)
        return ExtractedToolCalls(True, [(name, arguments)], content or None)

    def stream(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> OutputDelta | None:
        """Content up to the call marker, then the call's name, then its argument text."""
        m = _CALL.search(current_text)
        if not self._started:
            content: str | None = None
            if mc := _CONTENT.search(delta_text):
                content = mc.group(1)
                self._content_ended = True
            elif not self._content_ended:
                content = delta_text
            if m:
                self._started = True
            if content:
                return OutputDelta(content=content)
        if not m:
            return None
        tail = m.group(1).strip()
        name = nm.group(1) if (nm := _NAME.search(tail)) else None
        arguments: str | None = None
        if am := _ARGS.search(tail):
            arguments = am.group(1).strip()
            if arguments.endswith(EOS):
                arguments = arguments[: -len(EOS)]
            if arguments.endswith("}"):
                candidate = arguments[:-1].strip()
                if _loads_lenient(candidate)[0]:
                    arguments = candidate  # the brace closed the call object
        if not self.prev_calls:
            self.prev_calls.append({})
        call = self.prev_calls[0]
        if not self._name_sent:
            if not name:
                return None
            self._name_sent = True
            call["name"] = name
            return OutputDelta(tool_calls=[ToolCallDelta(0, id=new_tool_call_id(), name=name)])
        if arguments is None:
            return None
        sent = call.get("arguments_str", "")
        if not sent:
            new = arguments
        elif arguments.startswith(sent):
            new = arguments[len(sent) :]
        else:
            return None
        if not new:
            return None
        call["arguments_str"] = arguments
        ok, parsed = _loads_lenient(arguments)
        call["arguments"] = parsed if ok else {}
        if not self.streamed_args:
            self.streamed_args.append("")
        self.streamed_args[0] = arguments
        return OutputDelta(tool_calls=[ToolCallDelta(0, arguments=new)])
