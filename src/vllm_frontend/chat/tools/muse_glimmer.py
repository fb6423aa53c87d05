"""MuseGlimmer ATEM tool calls, as vLLM 0.32's ``muse_glimmer`` parser reads them: the output is
cut into channel messages (``[<|start|>assistant] [to=RECIPIENT]<|message|>…<|eom|>|<|eot|>``);
``<atem:invoke name="…"><atem:parameter name="…">value</atem:parameter></atem:invoke>`` count
only in messages to a tool (not ``self``, reasoning, nor ``user``, the answer). Parameter values
are JSON when they parse. Streaming sends each invoke once it closes, with the answer and
reasoning bodies as they grow (a possible marker at their end held back)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from vllm_frontend.chat.parsed import OutputDelta, ToolCallDelta, new_tool_call_id
from vllm_frontend.chat.tools.base import ExtractedToolCalls, ToolParser

__all__ = ["MuseGlimmerToolParser"]

_HEADER = re.compile(
    r"(?:<\|start\|>\s*assistant)?[^\S\n]*(?:to=(?P<rcpt>[A-Za-z0-9_.\-]+))?<\|message\|>"
)
_END = re.compile(r"<\|eom\|>|<\|eot\|>")
_MARKERS = ("<|eom|>", "<|eot|>", "<|start|>", "<|message|>")
_LONGEST = max(len(m) for m in _MARKERS)
_TAIL_TO = re.compile(r"[^\S\n]+to=[A-Za-z0-9_.\-]*$")
_INVOKE = re.compile(r"(<atem:invoke\b.*?</atem:invoke>)", re.DOTALL)
_NAME = re.compile(r'<atem:invoke\b[^>]*?\bname="([^"]+)"')
_PARAM = re.compile(
    r'<atem:parameter\b[^>]*?\bname="(?P<key>[^"]+)"[^>]*?>(?P<value>.*?)</atem:parameter>',
    re.DOTALL,
)
_CALLS_OPEN = "<atem:function_calls>"


def _value(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _messages(text: str) -> Iterator[tuple[str | None, str, bool]]:
    """(recipient, body, closed) of each message; a message also ends where the next header
    or a ``<|start|>`` begins (then it is not closed)."""
    pos = 0
    while pos < len(text):
        header = _HEADER.search(text, pos)
        if header is None:
            return
        start = header.end()
        end = _END.search(text, start)
        nxt = _HEADER.search(text, start)
        body_end = end.start() if end is not None else len(text)
        closed = end is not None
        if nxt is not None and nxt.start() < body_end:
            body_end, closed, pos = nxt.start(), False, nxt.start()
        else:
            pos = end.end() if end is not None else len(text)
        body = text[start:body_end]
        if (cut := body.find("<|start|>")) != -1:
            body, closed = body[:cut], False
        yield header.group("rcpt"), body, closed


def _safe(body: str) -> str:
    """An open body without a tail that may still be framing."""
    if (tail := _TAIL_TO.search(body)) is not None:
        return body[: tail.start()]
    for k in range(min(len(body), _LONGEST - 1), 0, -1):
        if any(m.startswith(body[-k:]) for m in _MARKERS):
            return body[:-k]
    return body


def _channels(text: str) -> tuple[str, str, bool, bool]:
    """(answer, reasoning, answer still open, reasoning still open)."""
    content: list[str] = []
    reasoning: list[str] = []
    content_open = reasoning_open = False
    for rcpt, body, closed in _messages(text):
        if rcpt == "self":
            reasoning.append(body)
            reasoning_open = not closed
        elif rcpt is None or rcpt == "user":
            content.append(body)
            content_open = not closed
    return "".join(content), "".join(reasoning), content_open, reasoning_open


def _content(text: str) -> str | None:
    content, reasoning, _, _ = _channels(text)
    if content:
        return content
    if not reasoning and _HEADER.search(text) is None:
        return text or None
    return None


class MuseGlimmerToolParser(ToolParser):
    """``muse_glimmer``: required and named tool choices are read in this format."""

    name = "muse_glimmer"
    supports_required_and_named = False
    needs_special_tokens = True
    special_tokens_without_tools = True

    def __init__(self, vocab: Mapping[str, int], tools: Sequence[Mapping[str, Any]] = ()) -> None:
        """See :class:`ToolParser`."""
        super().__init__(vocab, tools)
        self._names = {n for t in tools if (n := (t.get("function") or t).get("name"))}
        self._sent_content = 0
        self._sent_reasoning = 0
        self._sent_calls = 0

    def _name(self, emitted: str) -> str:
        """A doubled bare name (``get_weather.get_weather``) as the registered one."""
        if not self._names or emitted in self._names:
            return emitted
        head, dot, tail = emitted.partition(".")
        return head if dot and head == tail and head in self._names else emitted

    def _calls(self, text: str) -> list[tuple[str, str]]:
        bodies = [
            body
            for rcpt, body, _ in _messages(text)
            if rcpt is not None and rcpt not in ("self", "user")
        ]
        if bodies:
            scoped = "\n".join(bodies)
        elif _HEADER.search(text) is None and (_CALLS_OPEN in text or "<atem:invoke" in text):
            scoped = text  # no framing at all: read everything
        else:
            scoped = ""
        calls = []
        for invoke in _INVOKE.findall(scoped):
            if (m := _NAME.search(invoke)) is None:
                continue
            args = {p.group("key"): _value(p.group("value")) for p in _PARAM.finditer(invoke)}
            calls.append((self._name(m.group(1)), json.dumps(args, ensure_ascii=False)))
        return calls

    def extract(self, text: str) -> ExtractedToolCalls:
        """The tool channels' calls, and the answer body as content."""
        if _CALLS_OPEN not in text and "<atem:invoke" not in text:
            return ExtractedToolCalls(False, content=_content(text))
        try:
            calls = self._calls(text)
            return ExtractedToolCalls(bool(calls), calls, _content(text))
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
        """Re-read the text so far: new closed invokes, and what the bodies gained."""
        if not previous_text:
            self._sent_content = self._sent_reasoning = self._sent_calls = 0
        try:
            calls = self._calls(current_text)
            content, reasoning, content_open, reasoning_open = _channels(current_text)
        except Exception:
            return None
        if content_open:
            content = _safe(content)
        if reasoning_open:
            reasoning = _safe(reasoning)
        content_out = content[self._sent_content :]
        reasoning_out = reasoning[self._sent_reasoning :]
        pieces = [
            ToolCallDelta(i, id=new_tool_call_id(), name=name, arguments=arguments)
            for i, (name, arguments) in enumerate(calls[self._sent_calls :], self._sent_calls)
        ]
        if not content_out and not reasoning_out and not pieces:
            return None
        self._sent_content, self._sent_reasoning = len(content), len(reasoning)
        self._sent_calls = len(calls)
        return OutputDelta(
            content=content_out or None, reasoning=reasoning_out or None, tool_calls=pieces
        )
