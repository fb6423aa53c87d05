"""Reasoning parsers: split ``<think>…</think>`` style reasoning from the answer.

Each class follows the vLLM 0.32 parser of the same ``--reasoning-parser`` name (see
``vllm/reasoning/`` and, for ``qwen3``, the parser engine in ``vllm/parser/qwen3.py``), including
where its streaming and whole-output behaviours differ. One instance serves one choice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from vllm_frontend.chat.parsed import OutputDelta

__all__ = [
    "REASONING_PARSERS",
    "DeepSeekR1ReasoningParser",
    "Qwen3ReasoningParser",
    "ReasoningParser",
]

THINK_START = "<think>"
THINK_END = "</think>"


class ReasoningParser:
    """Interface of a per-choice reasoning parser."""

    name: ClassVar[str]
    required_tokens: ClassVar[tuple[str, ...]] = ()
    """Marker strings that must be single tokens of the vocabulary (checked at startup)."""
    needs_special_tokens: ClassVar[bool] = False
    """Whether the request must be detokenized with ``skip_special_tokens=False``."""
    engine_based: ClassVar[bool] = False
    """vLLM runs this parser on its parser engine (changes how the reasoning phase ends)."""

    def __init__(
        self, vocab: Mapping[str, int], chat_template_kwargs: Mapping[str, Any] | None = None
    ) -> None:
        """Build the parser for one choice; ``vocab`` maps token strings to ids."""
        self.vocab = vocab

    def prompt_ends_reasoning(self, prompt_token_ids: Sequence[int]) -> bool:
        """Whether generation after this prompt starts outside reasoning."""
        raise NotImplementedError

    def extract(self, text: str) -> tuple[str | None, str | None]:
        """A whole output as ``(reasoning, content)``."""
        raise NotImplementedError

    def stream(
        self,
        previous_token_ids: Sequence[int],
        delta_text: str,
        delta_token_ids: Sequence[int],
    ) -> OutputDelta | None:
        """Classify one streamed delta while reasoning may still be open."""
        raise NotImplementedError

    def ended_in(self, delta_token_ids: Sequence[int]) -> bool:
        """Whether the reasoning phase ended with the delta just streamed."""
        raise NotImplementedError

    def content_token_ids(self, delta_token_ids: list[int]) -> list[int]:
        """The token ids after the end of reasoning in the delta that ended it."""
        return delta_token_ids

    def finish(self) -> OutputDelta | None:
        """Text held back at the end of the stream (engine-based parsers only)."""
        return None

    def count_reasoning_tokens(self, token_ids: Sequence[int], streamed: bool) -> int:
        """Reasoning tokens among the generated ``token_ids`` (``usage`` reporting)."""
        raise NotImplementedError


class DeepSeekR1ReasoningParser(ReasoningParser):
    """``deepseek_r1``: ``<think>``…``</think>``, reasoning assumed even without ``<think>``
    (``vllm/reasoning/deepseek_r1_reasoning_parser.py`` on ``BaseThinkingReasoningParser``)."""

    name = "deepseek_r1"
    required_tokens = (THINK_START, THINK_END)

    def __init__(
        self, vocab: Mapping[str, int], chat_template_kwargs: Mapping[str, Any] | None = None
    ) -> None:
        """See :class:`ReasoningParser`."""
        super().__init__(vocab, chat_template_kwargs)
        self.start_id = vocab[THINK_START]
        self.end_id = vocab[THINK_END]

    def prompt_ends_reasoning(self, prompt_token_ids: Sequence[int]) -> bool:
        """The last marker in the prompt decides; none means reasoning is open."""
        for tid in reversed(prompt_token_ids):
            if tid == self.start_id:
                return False
            if tid == self.end_id:
                return True
        return False

    def extract(self, text: str) -> tuple[str | None, str | None]:
        """Text after ``<think>`` (if any) up to ``</think>`` is reasoning, the rest content."""
        before, marker, after = text.partition(THINK_START)
        text = after if marker else before
        if THINK_END not in text:
            return text, None
        reasoning, _, content = text.partition(THINK_END)
        return reasoning, content or None

    def stream(
        self,
        previous_token_ids: Sequence[int],
        delta_text: str,
        delta_token_ids: Sequence[int],
    ) -> OutputDelta | None:
        """vLLM decides by token ids where the markers are, then cuts the delta text."""
        start, end = self.start_id, self.end_id
        if len(delta_token_ids) == 1 and delta_token_ids[0] in (start, end):
            return None
        if start in previous_token_ids or start not in delta_token_ids:
            # Reasoning started earlier, or (R1) is assumed without a start marker.
            if end in delta_token_ids:
                cut = delta_text.find(THINK_END)
                rest = delta_text[cut + len(THINK_END) :]
                return OutputDelta(content=rest or None, reasoning=delta_text[:cut])
            if end in previous_token_ids:
                return OutputDelta(content=delta_text)
            return OutputDelta(reasoning=delta_text)
        # The start marker is in this delta.
        if end in delta_token_ids:
            s = delta_text.find(THINK_START)
            e = delta_text.find(THINK_END)
            rest = delta_text[e + len(THINK_END) :]
            return OutputDelta(content=rest or None, reasoning=delta_text[s + len(THINK_START) : e])
        return OutputDelta(reasoning=delta_text)

    def ended_in(self, delta_token_ids: Sequence[int]) -> bool:
        """The end marker token is in the delta."""
        return self.end_id in delta_token_ids

    def content_token_ids(self, delta_token_ids: list[int]) -> list[int]:
        """Ids after the end marker, as vLLM's ``extract_content_ids`` (empty if it is last)."""
        if self.end_id not in delta_token_ids[:-1]:
            return []
        return delta_token_ids[delta_token_ids.index(self.end_id) + 1 :]

    def count_reasoning_tokens(self, token_ids: Sequence[int], streamed: bool) -> int:
        """Tokens inside ``<think>``…``</think>`` spans (nesting-safe; none without a start)."""
        count = depth = 0
        for tid in token_ids:
            if tid == self.start_id:
                depth += 1
            elif tid == self.end_id:
                depth = max(0, depth - 1)
            elif depth:
                count += 1
        return count


class Qwen3ReasoningParser(ReasoningParser):
    """``qwen3``: the Qwen3 parser engine with tool parsing switched off
    (``vllm/parser/qwen3.py``). Generation starts in reasoning unless the chat template kwargs
    say ``enable_thinking: false``; ``</think>`` ends reasoning and so does ``<tool_call>``
    (which is kept as content); another ``<think>`` inside reasoning is dropped, and so is a
    ``</think>`` after it in whole outputs."""

    name = "qwen3"
    required_tokens = (THINK_START, THINK_END)
    needs_special_tokens = True
    engine_based = True
    _TOOL_START = "<tool_call>"
    _BOUNDARIES = ("<|im_start|>", "<|im_end|>")

    def __init__(
        self, vocab: Mapping[str, int], chat_template_kwargs: Mapping[str, Any] | None = None
    ) -> None:
        """See :class:`ReasoningParser`."""
        super().__init__(vocab, chat_template_kwargs)
        self.thinking = bool((chat_template_kwargs or {}).get("enable_thinking", True))
        self.start_id = vocab[THINK_START]
        self.end_id = vocab[THINK_END]
        # Tokens that end reasoning when seen by id: </think> and, if it is one token, <tool_call>.
        self.end_ids = {self.end_id}
        if (tool_id := vocab.get(self._TOOL_START)) is not None:
            self.end_ids.add(tool_id)
        self.boundary_ids = {vocab[t] for t in self._BOUNDARIES if t in vocab}
        self._reasoning = self.thinking
        self._held = ""
        self._streamed_reasoning_tokens = 0

    def prompt_ends_reasoning(self, prompt_token_ids: Sequence[int]) -> bool:
        """Scan back to the current turn's start: an end marker closes reasoning, a start
        marker opens it; with neither, reasoning is open exactly when thinking is enabled."""
        for tid in reversed(prompt_token_ids):
            if tid in self.end_ids:
                return True
            if tid == self.start_id:
                if self.thinking:
                    return False
                break
            if tid in self.boundary_ids:
                break
        return not self.thinking

    def _scan(self, text: str, final: bool) -> tuple[str, str | None]:
        """Consume reasoning text: (reasoning, content after the end or None if still open).

        Text that may be the start of a marker is held back until the next call."""
        text = self._held + text
        self._held = ""
        out: list[str] = []
        i = 0
        while True:
            hits = [
                (pos, marker)
                for marker in (THINK_START, THINK_END, self._TOOL_START)
                if (pos := text.find(marker, i)) >= 0
            ]
            if not hits:
                break
            pos, marker = min(hits)
            out.append(text[i:pos])
            if marker == THINK_START:
                i = pos + len(marker)
                continue
            self._reasoning = False
            rest = text[pos + len(marker) :] if marker == THINK_END else text[pos:]
            # The engine reads the rest of this text in its content state, where a stray
            # </think> is dropped; later deltas bypass it.
            return "".join(out), rest.replace(THINK_END, "")
        tail = text[i:]
        if not final:
            keep = _partial_overlap(tail, (THINK_START, THINK_END, self._TOOL_START))
            if keep:
                self._held = tail[-keep:]
                tail = tail[:-keep]
        out.append(tail)
        return "".join(out), None

    def extract(self, text: str) -> tuple[str | None, str | None]:
        """Whole output: reasoning until the end marker, the rest content."""
        if not self.thinking:
            return None, text
        self._reasoning, self._held = True, ""
        reasoning, rest = self._scan(text, final=True)
        return reasoning or None, rest or None

    def stream(
        self,
        previous_token_ids: Sequence[int],
        delta_text: str,
        delta_token_ids: Sequence[int],
    ) -> OutputDelta | None:
        """Reasoning text until the end; the text after the end marker comes out as content."""
        if not self._reasoning:
            return OutputDelta(content=delta_text) if delta_text else None
        reasoning, rest = self._scan(delta_text, final=False)
        self._streamed_reasoning_tokens += self._count(delta_token_ids)
        if not reasoning and not rest:
            return None
        return OutputDelta(content=rest or None, reasoning=reasoning or None)

    def _count(self, token_ids: Sequence[int]) -> int:
        n = 0
        for tid in token_ids:
            if tid in self.end_ids:
                break
            if tid != self.start_id:
                n += 1
        return n

    def ended_in(self, delta_token_ids: Sequence[int]) -> bool:
        """The engine reports the end once it has seen the end marker."""
        return not self._reasoning

    def finish(self) -> OutputDelta | None:
        """Held-back text is reasoning if reasoning is still open."""
        held, self._held = self._held, ""
        if not held:
            return None
        return OutputDelta(reasoning=held) if self._reasoning else OutputDelta(content=held)

    def count_reasoning_tokens(self, token_ids: Sequence[int], streamed: bool) -> int:
        """Streaming: the tokens this parser saw as reasoning; whole output: one pass."""
        if streamed:
            return self._streamed_reasoning_tokens
        return self._count(token_ids) if self.thinking else 0


def _partial_overlap(text: str, markers: Sequence[str]) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of one of ``markers``."""
    best = 0
    for marker in markers:
        for k in range(min(len(marker) - 1, len(text)), best, -1):
            if text.endswith(marker[:k]):
                best = k
                break
    return best


REASONING_PARSERS: dict[str, type[ReasoningParser]] = {
    cls.name: cls for cls in (DeepSeekR1ReasoningParser, Qwen3ReasoningParser)
}
"""``--reasoning-parser`` names this frontend implements."""
