"""``k2_horizon``: K2 Horizon's ``<ifm|think…>`` reasoning, as vLLM 0.32's
``k2_horizon_reasoning_parser.py`` reads it: the markers depend on ``reasoning_effort`` (``high``
``<ifm|think>``, ``medium`` ``<ifm|think_fast>``, ``low`` ``<ifm|think_faster>``; anything else
is refused), the reasoning also ends where a ``<ifm|tool_calls>`` block starts, and a stream
without an end is reasoning until one comes (a marker's beginning held back)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from vllm_frontend.chat.parsed import OutputDelta, both_set
from vllm_frontend.chat.reasoning.base import ReasoningParser, partial_overlap
from vllm_frontend.chat.reasoning.think_tags import ThinkTagReasoningParser

__all__ = ["K2HorizonReasoningParser", "k2_horizon_effort"]

TOOL_CALLS = "<ifm|tool_calls>"
_MARKERS = {
    "high": ("<ifm|think>", "</ifm|think>"),
    "medium": ("<ifm|think_fast>", "</ifm|think_fast>"),
    "low": ("<ifm|think_faster>", "</ifm|think_faster>"),
}


def k2_horizon_effort(kwargs: Mapping[str, Any]) -> str:
    """The chat template kwargs' ``reasoning_effort`` (``high`` when missing), refused with
    vLLM's message when it has no markers."""
    effort = kwargs.get("reasoning_effort", "high")
    if not isinstance(effort, str) or effort not in _MARKERS:
        raise ValueError(
            f"Unsupported reasoning_effort {effort!r}. Supported values: {', '.join(_MARKERS)}."
        )
    return effort


class K2HorizonReasoningParser(ThinkTagReasoningParser):
    """``k2_horizon``."""

    name = "k2_horizon"
    START: ClassVar[str] = _MARKERS["high"][0]
    END: ClassVar[str] = _MARKERS["high"][1]
    required_tokens: ClassVar[tuple[str, ...]] = _MARKERS["high"]
    optional_tokens: ClassVar[tuple[str, ...]] = (
        *_MARKERS["medium"],
        *_MARKERS["low"],
        TOOL_CALLS,
    )

    @classmethod
    def check_request(cls, chat_template_kwargs: Mapping[str, Any]) -> None:
        """Refuse a ``reasoning_effort`` without markers (before anything is generated)."""
        k2_horizon_effort(chat_template_kwargs)

    def __init__(
        self, vocab: Mapping[str, int], chat_template_kwargs: Mapping[str, Any] | None = None
    ) -> None:
        """See :class:`ReasoningParser`; the effort picks the markers."""
        start, end = _MARKERS[k2_horizon_effort(chat_template_kwargs or {})]
        ReasoningParser.__init__(self, vocab, chat_template_kwargs)
        if start not in vocab or end not in vocab:
            raise RuntimeError(
                "K2HorizonReasoningParser reasoning parser could not locate think start/end "
                "tokens in the tokenizer!"
            )
        self.START, self.END = start, end  # type: ignore[misc]
        self.start_id, self.end_id = vocab[start], vocab[end]
        self.tool_calls_id = vocab.get(TOOL_CALLS)
        self._buffer = ""
        self._at_start = True
        self._finished = False

    def _split(self, text: str) -> tuple[str, str | None]:
        text = text.removeprefix(self.START)
        if self.END in text:
            reasoning, _, content = text.partition(self.END)
            return reasoning, content or None
        if (at := text.find(TOOL_CALLS)) != -1:
            return text[:at], text[at:]
        return "", text or None

    def extract(self, text: str) -> tuple[str | None, str | None]:
        """Up to the end marker (or a tool-call block) is reasoning; without either, all of
        it is content (and the reasoning is empty)."""
        return self._split(text)

    def prompt_ends_reasoning(self, prompt_token_ids: Sequence[int]) -> bool:
        """The last start, end or tool-call marker decides; none means open."""
        for tid in reversed(prompt_token_ids):
            if tid == self.start_id:
                return False
            if tid == self.end_id or tid == self.tool_calls_id:
                return True
        return False

    def ended_in(self, delta_token_ids: Sequence[int]) -> bool:
        """Once the stream found the end (or a tool-call block), or the end token came."""
        return self._finished or self.end_id in delta_token_ids

    def content_token_ids(self, delta_token_ids: list[int]) -> list[int]:
        """The ids after the end marker, from a tool-call marker, or all once ended."""
        if self.end_id in delta_token_ids:
            return delta_token_ids[delta_token_ids.index(self.end_id) + 1 :]
        if self.tool_calls_id is not None and self.tool_calls_id in delta_token_ids:
            return delta_token_ids[delta_token_ids.index(self.tool_calls_id) :]
        return delta_token_ids if self._finished else []

    def stream(
        self,
        previous_token_ids: Sequence[int],
        delta_text: str,
        delta_token_ids: Sequence[int],
    ) -> OutputDelta | None:
        """Buffer the text; reasoning up to the end marker or a tool-call block."""
        if self._finished:
            return OutputDelta(content=delta_text) if delta_text else None
        self._buffer += delta_text
        if self._at_start:
            if self.START.startswith(self._buffer):
                if self._buffer != self.START:
                    return None  # may still become the start marker
                self._buffer = ""
            elif self._buffer.startswith(self.START):
                self._buffer = self._buffer[len(self.START) :]
            self._at_start = False
        end = self._buffer.find(self.END)
        tools = self._buffer.find(TOOL_CALLS)
        if end != -1:
            reasoning, content = self._buffer[:end], self._buffer[end + len(self.END) :]
        elif tools != -1:
            reasoning, content = self._buffer[:tools], self._buffer[tools:]
        else:
            held = partial_overlap(self._buffer, (self.END, TOOL_CALLS))
            cut = len(self._buffer) - held
            reasoning, self._buffer = self._buffer[:cut], self._buffer[cut:]
            return OutputDelta(reasoning=reasoning) if reasoning else None
        self._buffer = ""
        self._finished = True
        return both_set(reasoning, content or None)
