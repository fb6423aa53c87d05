"""``kimi_k3``: Kimi K3's XTML ``tools`` channel, as vLLM 0.32's ``kimi_k3_tool_parser.py`` reads
it (``<|open|>tools<|sep|>``, then per call ``<|open|>call tool="NAME" index="N"<|sep|>``
``<|open|>argument key="K" type="T"<|sep|>VALUE<|close|>argument<|sep|>`` …
``<|close|>call<|sep|>``, then ``<|close|>tools<|sep|>``).

A ``string`` argument is its raw text, any other type is JSON (raw text when it is not);
attribute values are unescaped (``&quot;``, ``&amp;``). Content is the ``response`` channel,
unwrapped. Streaming sends the response text as it comes (a marker's beginning held back) and
each call whole once its ``call`` block closes. vLLM's Kimi K3 unified parser runs this parser
even for ``tool_choice: none`` (its content kept, its calls dropped), and constrains forced
choices with its own structural tag, never JSON.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from vllm_frontend.chat.parsed import OutputDelta, ToolCallDelta, new_tool_call_id
from vllm_frontend.chat.reasoning.kimi_k3 import xtml_marker
from vllm_frontend.chat.tools.base import ExtractedToolCalls, ToolParser, tag_overlap

__all__ = ["KimiK3ToolParser"]

TOOLS_OPEN = "<|open|>tools<|sep|>"
RESPONSE_OPEN = "<|open|>response<|sep|>"
RESPONSE_CLOSE = "<|close|>response<|sep|>"

_TOOLS_OPEN = xtml_marker("open", "tools")
_TOOLS_CLOSE = xtml_marker("close", "tools")
_RESPONSE_OPEN = xtml_marker("open", "response")
_RESPONSE_CLOSE = xtml_marker("close", "response")
_MESSAGE_CLOSE = xtml_marker("close", "message")
_UNTIL_SEP = r"(?:(?!<\|sep\|>).)*?"
_CALL = re.compile(
    rf"<\|open\|>\s*call\s+(?P<attrs>{_UNTIL_SEP})<\|sep\|>(?P<body>.*?)<\|close\|>\s*call\s*"
    r"<\|sep\|>",
    re.DOTALL,
)
_ARGUMENT = re.compile(
    rf"<\|open\|>\s*argument\s+(?P<attrs>{_UNTIL_SEP})<\|sep\|>(?P<val>.*?)"
    r"<\|close\|>\s*argument\s*<\|sep\|>",
    re.DOTALL,
)
_ATTR = re.compile(r'(?P<k>\w+)="(?P<v>[^"]*)"')
_RESPONSE = re.compile(
    r"<\|open\|>\s*response\s*<\|sep\|>(?P<c>.*?)<\|close\|>\s*response\s*<\|sep\|>", re.DOTALL
)


def _attrs(text: str) -> dict[str, str]:
    return {
        m["k"]: m["v"].replace("&quot;", '"').replace("&amp;", "&") for m in _ATTR.finditer(text)
    }


def _decode_call(attrs: str, body: str) -> tuple[str, str] | None:
    """``(name, arguments JSON)`` of one ``call`` block; ``None`` without a tool name."""
    name = _attrs(attrs).get("tool", "")
    arguments: dict[str, Any] = {}
    for m in _ARGUMENT.finditer(body):
        arg = _attrs(m["attrs"])
        key, value = arg.get("key", ""), m["val"]
        if arg.get("type", "string") == "string":
            arguments[key] = value
        else:
            try:
                arguments[key] = json.loads(value)
            except json.JSONDecodeError:
                arguments[key] = value
    if not name:
        return None
    return name, json.dumps(arguments, ensure_ascii=False)


def _calls(section: str) -> list[tuple[str, str]]:
    return [c for m in _CALL.finditer(section) if (c := _decode_call(m["attrs"], m["body"]))]


def _strip_response(text: str) -> str | None:
    m_open = _RESPONSE_OPEN.search(text)
    if m_open is not None:
        m_close = _RESPONSE_CLOSE.search(text, m_open.end())
        text = text[m_open.end() : m_close.start() if m_close is not None else len(text)]
    else:
        text = _RESPONSE_CLOSE.sub("", text)
    return _MESSAGE_CLOSE.sub("", text) or None


def _content(text: str, before: str) -> str | None:
    m = _RESPONSE.search(text)
    if m is not None:
        return m["c"] or None
    return _strip_response(before)


class KimiK3ToolParser(ToolParser):
    """``kimi_k3``."""

    name = "kimi_k3"
    special_tokens_without_tools = True
    joins_special_tokens = True
    supports_required_and_named = False
    unified = "kimi_k3"
    named_choice_needs_tag: ClassVar[str | None] = (
        "Named tool choice for Kimi K3 requires strict tool calling "
        "(VLLM_ENFORCE_STRICT_TOOL_CALLING) so the XTML structural tag can force the call. "
        'Otherwise use `tool_choice` set to "auto", "required", or "none".'
    )

    def __init__(self, vocab: Mapping[str, int], tools: Sequence[Mapping[str, Any]] = ()) -> None:
        """See :class:`ToolParser`."""
        super().__init__(vocab, tools)
        self._sent_content = 0
        self._sent_calls = 0

    def extract(self, text: str) -> ExtractedToolCalls:
        """The calls of the tools channel; content is the response channel."""
        m_open = _TOOLS_OPEN.search(text)
        if m_open is None:
            return ExtractedToolCalls(False, content=_content(text, text))
        try:
            before = text[: m_open.start()]
            m_close = _TOOLS_CLOSE.search(text, m_open.end())
            section = text[m_open.end() : m_close.start() if m_close is not None else len(text)]
            calls = _calls(section)
            return ExtractedToolCalls(bool(calls), calls, _content(text, before))
        except Exception:
            return ExtractedToolCalls(False, content=text)

    def _response_delta(self, text: str) -> str | None:
        m_open = _RESPONSE_OPEN.search(text)
        body = m_open.end() if m_open is not None else 0
        m_tools = _TOOLS_OPEN.search(text, body)
        m_close = _RESPONSE_CLOSE.search(text, body)
        ends = [m.start() for m in (m_tools, m_close) if m is not None]
        if ends:
            sendable = min(ends)
        else:
            held = max(tag_overlap(text, t) for t in (RESPONSE_OPEN, RESPONSE_CLOSE, TOOLS_OPEN))
            sendable = len(text) - held
        if sendable <= body:
            return None
        self._sent_content = max(self._sent_content, body)
        if sendable <= self._sent_content:
            return None
        out = text[self._sent_content : sendable]
        self._sent_content = sendable
        return out or None

    def stream(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> OutputDelta | None:
        """The response text the text so far makes visible, and each newly closed call."""
        content = self._response_delta(current_text)
        m_tools = _TOOLS_OPEN.search(current_text)
        calls = _calls(current_text[m_tools.end() :]) if m_tools is not None else []
        if len(calls) <= self._sent_calls:
            return OutputDelta(content=content) if content else None
        deltas = [
            ToolCallDelta(self._sent_calls + i, id=new_tool_call_id(), name=n, arguments=a)
            for i, (n, a) in enumerate(calls[self._sent_calls :])
        ]
        self._sent_calls = len(calls)
        return OutputDelta(content=content, tool_calls=deltas, content_set=True)
