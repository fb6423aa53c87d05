"""``kimi_k3``: Kimi K3's XTML think channel (``<|open|>think<|sep|>`` … ``<|close|>think<|sep|>``,
each marker three tokens), as vLLM 0.32's ``kimi_k3_reasoning_parser.py`` reads it.

Thinking is on unless the chat template kwargs say ``thinking`` (else ``enable_thinking``) is
false; then everything is content. A missing open marker means the reasoning began in the
prompt. Without tools to parse (no tools, or ``tool_choice: none``) the content is unwrapped
from the ``response`` channel and the ``message`` close is dropped; streaming re-reads the text
so far and sends what it makes visible, a marker's beginning held back. Its ``strip_content``
is what vLLM's Kimi K3 unified parser applies to content when no tool parser follows.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from vllm_frontend.chat.parsed import OutputDelta, both_set
from vllm_frontend.chat.reasoning.base import ReasoningParser, partial_overlap

__all__ = ["KimiK3ReasoningParser", "xtml_marker"]

THINK_OPEN = "<|open|>think<|sep|>"
THINK_CLOSE = "<|close|>think<|sep|>"
RESPONSE_OPEN = "<|open|>response<|sep|>"
RESPONSE_CLOSE = "<|close|>response<|sep|>"
MESSAGE_CLOSE = "<|close|>message<|sep|>"


def xtml_marker(kind: str, name: str) -> re.Pattern[str]:
    """``<|open|>name<|sep|>`` (``kind`` ``open``) or ``<|close|>name<|sep|>``, with the
    whitespace vLLM tolerates around the name."""
    return re.compile(rf"<\|{kind}\|>\s*{name}\s*<\|sep\|>")


_THINK_OPEN = xtml_marker("open", "think")
_THINK_CLOSE = xtml_marker("close", "think")
_RESPONSE_OPEN = xtml_marker("open", "response")
_RESPONSE_CLOSE = xtml_marker("close", "response")
_MESSAGE_CLOSE = xtml_marker("close", "message")


def _matches_at(ids: Sequence[int], i: int, marker: Sequence[int]) -> bool:
    return all(ids[i + k] == marker[k] for k in range(len(marker)))


def _last(ids: Sequence[int], marker: Sequence[int]) -> int:
    """Where ``marker`` last starts in ``ids`` (``-1`` if nowhere)."""
    n = len(marker)
    if not n:
        return -1
    for i in range(len(ids) - n, -1, -1):
        if ids[i] == marker[0] and _matches_at(ids, i, marker):
            return i
    return -1


def _close_is_newest(ids: Sequence[int], close: Sequence[int], open_: Sequence[int]) -> bool:
    """Whether ``close`` occurs in ``ids`` after the last ``open`` (vLLM's newest-marker scan:
    of two markers starting at the same place, ``close`` is checked first)."""
    if not close or not open_:
        return False
    n = len(ids)
    for i in range(n - min(len(close), len(open_)), -1, -1):
        head = ids[i]
        if head == close[0] and i + len(close) <= n and _matches_at(ids, i, close):
            return True
        if head == open_[0] and i + len(open_) <= n and _matches_at(ids, i, open_):
            return False
    return False


def _without_partial(text: str, markers: Sequence[str]) -> str:
    held = partial_overlap(text, markers)
    return text[:-held] if held else text


def _added(before: str, now: str) -> str:
    return now[len(before) :] if now.startswith(before) else now


class KimiK3ReasoningParser(ReasoningParser):
    """``kimi_k3``."""

    name = "kimi_k3"
    needs_special_tokens = True
    joins_special_tokens = True
    unified = "kimi_k3"
    reads_text = True
    uses_codec = True

    def __init__(
        self, vocab: Mapping[str, int], chat_template_kwargs: Mapping[str, Any] | None = None
    ) -> None:
        """See :class:`ReasoningParser`; the markers' ids come from the tokenizer's encoding
        (set per choice), on first use."""
        super().__init__(vocab, chat_template_kwargs)
        kwargs = chat_template_kwargs or {}
        thinking = kwargs.get("thinking")
        if thinking is None:
            thinking = kwargs.get("enable_thinking", True)
        self.thinking = bool(thinking)
        self._ids: tuple[list[int], list[int], list[int]] | None = None
        self._last_delta: tuple[int, ...] | None = None
        self._last_content: list[int] | None = None

    def _marker_ids(self) -> tuple[list[int], list[int], list[int]]:
        # (think open, think close, response open), as the tokenizer encodes the strings
        if self._ids is None:
            encode = self.encode
            if encode is None:
                raise RuntimeError("the kimi_k3 reasoning parser needs the tokenizer's encode")
            self._ids = (encode(THINK_OPEN), encode(THINK_CLOSE), encode(RESPONSE_OPEN))
        return self._ids

    # -- whole output ------------------------------------------------------------------------

    def prompt_ends_reasoning(self, prompt_token_ids: Sequence[int]) -> bool:
        """Whether the newest think marker of the prompt is a close (thinking off: always)."""
        if not self.thinking:
            return True
        open_, close, _ = self._marker_ids()
        return _close_is_newest(prompt_token_ids, close, open_)

    def _content_after(self, text: str) -> str | None:
        if self.keeps_tool_markup:
            return text or None
        return self.strip_wrapper(text) or None

    @staticmethod
    def strip_wrapper(text: str) -> str:
        """``text`` without its ``response`` channel markers and ``message`` closes."""
        m_open = _RESPONSE_OPEN.search(text)
        m_close = _RESPONSE_CLOSE.search(text, m_open.end() if m_open else 0)
        if m_open is not None and m_close is not None:
            text = text[m_open.end() : m_close.start()]
        elif m_open is not None:
            text = text[m_open.end() :]
        else:
            text = _RESPONSE_CLOSE.sub("", _RESPONSE_OPEN.sub("", text))
        return _MESSAGE_CLOSE.sub("", text)

    def extract(self, text: str) -> tuple[str | None, str | None]:
        """Reasoning from after the open marker (or the start) to the close marker; an output
        with a response channel and no think marker is all content."""
        if not self.thinking:
            return None, self._content_after(text)
        m_open = _THINK_OPEN.search(text)
        start = m_open.end() if m_open is not None else 0
        m_close = _THINK_CLOSE.search(text, start)
        if m_open is None and m_close is None and _RESPONSE_OPEN.search(text) is not None:
            return None, self._content_after(text)
        if m_close is not None:
            reasoning = text[start : m_close.start()]
            return reasoning or None, self._content_after(text[m_close.end() :])
        return text[start:] or None, None

    def count_reasoning_tokens(self, token_ids: Sequence[int], streamed: bool) -> int:
        """Tokens inside the think channel (from the start until a marker closes it; before
        any open marker, a response channel's opening closes it too)."""
        if not self.thinking:
            return 0
        think_open, think_close, response_open = self._marker_ids()
        firsts = {m[0] for m in (think_open, think_close, response_open) if m}
        n, count, inside, seen_open, i = len(token_ids), 0, True, False, 0
        while i < n:
            if token_ids[i] in firsts:
                if i + len(think_open) <= n and _matches_at(token_ids, i, think_open):
                    inside, seen_open = True, True
                    i += len(think_open)
                    continue
                if i + len(think_close) <= n and _matches_at(token_ids, i, think_close):
                    inside = False
                    i += len(think_close)
                    continue
                if (
                    not seen_open
                    and i + len(response_open) <= n
                    and _matches_at(token_ids, i, response_open)
                ):
                    inside = False
                    i += len(response_open)
                    continue
            if inside:
                count += 1
            i += 1
        return count

    # -- streaming ---------------------------------------------------------------------------

    @staticmethod
    def _reasoning_visible(text: str) -> str:
        m_open = _THINK_OPEN.search(text)
        if m_open is not None:
            text = text[m_open.end() :]
        return _without_partial(text, (THINK_OPEN, THINK_CLOSE))

    @staticmethod
    def _content_visible(text: str) -> str:
        m_open = _RESPONSE_OPEN.search(text)
        if m_open is not None:
            text = text[m_open.end() :]
        text = _MESSAGE_CLOSE.sub("", _RESPONSE_CLOSE.sub("", text))
        return _without_partial(text, (RESPONSE_OPEN, RESPONSE_CLOSE, MESSAGE_CLOSE))

    def strip_content(self, previous_text: str, current_text: str) -> str | None:
        """The unwrapped content the delta makes visible (vLLM's
        ``strip_content_streaming``)."""
        delta = _added(self._content_visible(previous_text), self._content_visible(current_text))
        return delta or None

    def stream_text(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_token_ids: Sequence[int],
        current_token_ids: Sequence[int],
        delta_token_ids: Sequence[int],
    ) -> OutputDelta | None:
        """Reasoning the text so far makes visible; at the close marker, the rest is content."""
        self._last_delta = self._last_content = None
        if not self.thinking or _THINK_CLOSE.search(previous_text):
            return OutputDelta(content=delta_text)
        m_close = _THINK_CLOSE.search(current_text)
        if m_close is not None:
            self._last_delta = tuple(delta_token_ids)
            self._last_content = self._content_ids(list(current_token_ids))
            m_open = _THINK_OPEN.search(current_text)
            start = m_open.end() if m_open is not None else 0
            reasoning = _added(
                self._reasoning_visible(previous_text), current_text[start : m_close.start()]
            )
            return both_set(reasoning or None, current_text[m_close.end() :] or None)
        reasoning = _added(
            self._reasoning_visible(previous_text), self._reasoning_visible(current_text)
        )
        return OutputDelta(reasoning=reasoning) if reasoning else None

    def ended_after(self, current_token_ids: Sequence[int], delta_token_ids: Sequence[int]) -> bool:
        """Whether the delta (with enough earlier ids for a marker cut by it) ends with the
        close marker as the newest think marker."""
        if not self.thinking:
            return True
        if not delta_token_ids:
            return False
        open_, close, _ = self._marker_ids()
        carry = max(len(close), len(open_)) - 1
        head = len(current_token_ids) - len(delta_token_ids)
        window = [*current_token_ids[max(0, head - carry) : head], *delta_token_ids]
        return _close_is_newest(window, close, open_)

    def _content_ids(self, ids: list[int]) -> list[int]:
        if not self.thinking:
            return ids
        _, close, _ = self._marker_ids()
        at = _last(ids, close)
        return [] if at == -1 else ids[at + len(close) :]

    def content_token_ids(self, delta_token_ids: list[int]) -> list[int]:
        """The content ids of the whole text when the delta just streamed ended the reasoning
        (vLLM's cached answer), else those after the delta's last close marker."""
        last_delta, last_content = self._last_delta, self._last_content
        self._last_delta = self._last_content = None
        if last_delta == tuple(delta_token_ids) and last_content is not None:
            return last_content
        return self._content_ids(delta_token_ids)
