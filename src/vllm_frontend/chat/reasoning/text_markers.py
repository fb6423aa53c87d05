"""Families whose reasoning markers are plain text the model writes with ordinary tokens, read
from the text as it streams: ``olmo3`` (``<think>``/``</think>`` spelt with vocabulary pieces)
and ``granite`` ("Here is my thought process:" / "Here is my response:"), as vLLM 0.32's
``olmo3_reasoning_parser.py`` and ``granite_reasoning_parser.py`` do, buffering quirks included.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from vllm_frontend.chat.parsed import OutputDelta, both_set
from vllm_frontend.chat.reasoning.base import ReasoningParser

__all__ = ["GraniteReasoningParser", "Olmo3ReasoningParser"]


def _overlap_length(a: str, b: str) -> int | None:
    """Length of the overlap vLLM's olmo3 parser finds between ``a`` and ``b``: the shorter
    inside the longer, else the longest end of one that starts the other (the shorter's end
    tried first); ``None`` without any."""
    short, long = (a, b) if len(a) < len(b) else (b, a)
    if short in long:
        return len(short)
    for k in range(len(short) - 1, 0, -1):
        if short[-k:] == long[:k]:
            return k
    for k in range(len(short) - 1, 0, -1):
        if long[-k:] == short[:k]:
            return k
    return None


class Olmo3ReasoningParser(ReasoningParser):
    """``olmo3``: ``<think>`` (optional: the template may open it) … ``</think>`` written as
    text. Streaming buffers the text while a delta may be part of a marker; the reasoning
    phase ends once the ids so far hold ``</think>`` as the pieces ``</``/``Ġ</``, ``think``,
    ``>``."""

    name = "olmo3"
    reads_text = True
    START: ClassVar[str] = "<think>"
    END: ClassVar[str] = "</think>"
    END_FIRST: ClassVar[tuple[str, ...]] = ("Ġ</", "</")
    END_REST: ClassVar[tuple[str, ...]] = ("think", ">")
    required_tokens: ClassVar[tuple[str, ...]] = (*END_FIRST, *END_REST)
    _WHOLE = re.compile(r"^(?:<think>)?(.*?)</think>(.*)$", re.DOTALL)

    def __init__(
        self, vocab: Mapping[str, int], chat_template_kwargs: Mapping[str, Any] | None = None
    ) -> None:
        """See :class:`ReasoningParser`."""
        super().__init__(vocab, chat_template_kwargs)
        self.end_first = {vocab[t] for t in self.END_FIRST}
        self.end_rest = [vocab[t] for t in self.END_REST]
        self._buffer = ""
        self._in_reasoning = True  # the template may have opened the block

    def prompt_ends_reasoning(self, prompt_token_ids: Sequence[int]) -> bool:
        """Whether the ids hold the ``</think>`` pieces anywhere."""
        ids = list(prompt_token_ids)
        rest, n = self.end_rest, len(self.end_rest)
        for i in range(len(ids) - n - 1, -1, -1):
            if ids[i] in self.end_first and ids[i + 1 : i + 1 + n] == rest:
                return True
        return False

    def extract(self, text: str) -> tuple[str | None, str | None]:
        """Up to the first ``</think>`` (after an optional ``<think>``) is reasoning; without
        one, everything is content."""
        m = self._WHOLE.match(text)
        if m is None:
            return None, text
        return m.group(1) or None, m.group(2) or None

    def stream_text(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_token_ids: Sequence[int],
        current_token_ids: Sequence[int],
        delta_token_ids: Sequence[int],
    ) -> OutputDelta | None:
        """Buffer the delta, and release the buffer unless a marker may be under way."""
        msg = self._add(delta_text)
        if msg is None and self.END in self._buffer:
            msg = self._release()
        return msg

    def _add(self, delta_text: str) -> OutputDelta | None:
        self._buffer += delta_text
        start_len = _overlap_length(delta_text, self.START)
        end_len = _overlap_length(delta_text, self.END)
        partial_start = start_len is not None and start_len < len(self.START)
        partial_end = end_len is not None and end_len < len(self.END)
        if partial_start and self.START in self._buffer and not partial_end:
            return self._release()
        if partial_end and self.END in self._buffer:
            return self._release()
        if partial_start or partial_end:
            return None
        return self._release()

    def _release(self) -> OutputDelta | None:
        at = self._buffer.find(self.START)
        if at >= 0:
            self._in_reasoning = True
            before, self._buffer = self._buffer[:at], self._buffer[at + len(self.START) :]
            if at > 0:
                return OutputDelta(content=before)
        at = self._buffer.rfind(self.END)
        if at >= 0:
            self._in_reasoning = False
            before, self._buffer = self._buffer[:at], self._buffer[at + len(self.END) :]
            if at > 0:
                return OutputDelta(reasoning=before)
        text, self._buffer = self._buffer, ""
        return OutputDelta(reasoning=text) if self._in_reasoning else OutputDelta(content=text)

    def ended_after(self, current_token_ids: Sequence[int], delta_token_ids: Sequence[int]) -> bool:
        """Whether the ids so far hold the ``</think>`` pieces."""
        return self.prompt_ends_reasoning(current_token_ids)

    def content_token_ids(self, delta_token_ids: list[int]) -> list[int]:
        """None: the ids of the delta that ended reasoning are not content."""
        return []

    def count_reasoning_tokens(self, token_ids: Sequence[int], streamed: bool) -> int:
        """vLLM counts none for this parser."""
        return 0


_THINK_STARTS = ("Here's my thought process:", "Here is my thought process:")
_RESPONSE_STARTS = ("Here's my response:", "Here is my response:")


class GraniteReasoningParser(ReasoningParser):
    """``granite``: "Here is my thought process:" (or "Here's") opens the reasoning at the
    start of the output, "Here is my response:" (or "Here's") starts the answer. The
    reasoning phase never ends for vLLM's stream (it has no end test), so every delta goes
    through this parser."""

    name = "granite"
    reads_text = True
    _WHOLE = re.compile(
        r"(?:Here's|Here is) my thought process:(.*?)(?:Here's|Here is) my response:(.*)",
        re.DOTALL,
    )

    def prompt_ends_reasoning(self, prompt_token_ids: Sequence[int]) -> bool:
        """Never (vLLM's test answers nothing)."""
        return False

    def extract(self, text: str) -> tuple[str | None, str | None]:
        """The first thought-process … response pair; without one, all content."""
        m = self._WHOLE.search(text)
        if m is None:
            return None, text
        return m.group(1), m.group(2) or None

    def ended_in(self, delta_token_ids: Sequence[int]) -> bool:
        """Never."""
        return False

    def ended_after(self, current_token_ids: Sequence[int], delta_token_ids: Sequence[int]) -> bool:
        """Never."""
        return False

    def count_reasoning_tokens(self, token_ids: Sequence[int], streamed: bool) -> int:
        """vLLM counts none for this parser."""
        return 0

    @staticmethod
    def _sections(text: str) -> tuple[str | None, int | None, str | None]:
        """(reasoning, length of the response marker, content) of the text so far, as far as
        its markers are complete: the thought-process marker must open the text."""
        chunk_start = 0
        reasoning_at: int | None = None
        for colon in (i for i, ch in enumerate(text) if ch == ":"):
            chunk = text[chunk_start:colon]
            if reasoning_at is None:
                if any(chunk == marker[:-1] for marker in _THINK_STARTS):
                    reasoning_at = chunk_start = colon + 1
                continue
            for marker in _RESPONSE_STARTS:
                if chunk[-len(marker) + 1 :] == marker[:-1]:
                    return text[reasoning_at : colon - len(marker)], len(marker), text[colon + 1 :]
        if reasoning_at:
            return text[reasoning_at:], None, None
        return None, None, None

    def stream_text(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_token_ids: Sequence[int],
        current_token_ids: Sequence[int],
        delta_token_ids: Sequence[int],
    ) -> OutputDelta | None:
        """Re-read the sections of the text so far and send what the delta adds."""
        reasoning, marker_len, content = self._sections(current_text)
        if not reasoning:
            reasoning_out, content_out = self._before_reasoning(current_text, delta_text)
        elif not content:
            reasoning_out, content_out = self._in_reasoning(current_text, reasoning, delta_text)
        else:
            assert marker_len is not None
            reasoning_out, content_out = self._after_response(
                delta_text, reasoning, content, current_text, marker_len
            )
        if not content_out and not reasoning_out:
            return None
        return both_set(reasoning_out, content_out)  # vLLM's granite sets both

    @staticmethod
    def _starts_thinking(text: str) -> bool:
        return any(marker.startswith(text) for marker in _THINK_STARTS)

    @staticmethod
    def _starts_response(text: str) -> bool:
        return any(marker.startswith(text) for marker in _RESPONSE_STARTS)

    def _before_reasoning(self, current: str, delta: str) -> tuple[str | None, str | None]:
        # Held back while the text may still become the thought-process marker; all of it
        # is content once it cannot.
        is_prefix = self._starts_thinking(current)
        was_prefix = self._starts_thinking(current[: len(current) - len(delta)])
        if was_prefix and not is_prefix:
            return None, current
        if is_prefix:
            return None, None
        return None, delta

    def _in_reasoning(
        self, current: str, reasoning: str, delta: str
    ) -> tuple[str | None, str | None]:
        # Reasoning, holding back a tail that may become the response marker.
        if any(current.endswith(marker) for marker in _RESPONSE_STARTS):
            return None, None
        before = reasoning[: -len(delta)]
        prev_at = before.rfind("Here")
        delta_at = delta.rfind("Here")
        prev_held = prev_at >= 0 and self._starts_response(before[prev_at:])
        still_held = prev_at >= 0 and self._starts_response(reasoning[prev_at:])
        new_held = delta_at >= 0 and self._starts_response(delta[delta_at:])
        if still_held:
            return None, None
        if not prev_held:
            return (delta[:delta_at], None) if new_held else (delta, None)
        if new_held:
            return before[prev_at:] + delta[:delta_at], None
        return before[prev_at:] + delta, None

    @staticmethod
    def _after_response(
        delta: str, reasoning: str, content: str, current: str, marker_len: int
    ) -> tuple[str | None, str | None]:
        content_out = delta[-len(content) :]
        reasoning_end = len(delta) - (len(content) + marker_len)
        if reasoning_end < 0:
            return None, content_out
        start = len(reasoning) + marker_len + len(content) - 1 - (len(current) - len(delta))
        return delta[max(start, 0) : reasoning_end], content_out
