"""``hunyuan_a13b``: ``<think>\\n`` … ``\\n</think>\\n<answer>\\n`` … ``\\n</answer>``, as vLLM
0.32's ``hunyuan_a13b_reasoning_parser.py`` reads it: whole outputs by pattern, streams one
token at a time against the Hunyuan tokenizer's ids of those sequences (vLLM fails a stream
whose update carries several tokens, and so does this parser)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from vllm_frontend.chat.parsed import OutputDelta, both_set
from vllm_frontend.chat.reasoning.base import ReasoningParser

__all__ = ["HunyuanA13BReasoningParser"]

# Ids of the Hunyuan A13B tokenizer (vLLM hard-codes them): "<think>\n" (and its variant
# "<think>\n\n" whose last piece is "\n\n"), "\n</think>\n<answer>\n" (also without its first
# "\n"), "\n</answer>".
_THINK = (14023, 771, 397)
_THINK_ALT = (14023, 771, 1363)
_ANSWER = (198, 524, 27963, 397, 27, 9399, 397)
_ANSWER_ALT = (524, 27963, 397, 27, 9399, 397)
_ANSWER_END = (198, 524, 9399, 29)

_FULL = re.compile(r"(?:<think>\n(.*?)\n</think>\n<answer>\n)?(.*?)\n</answer>", re.DOTALL)
_HALF = re.compile(r"<think>\n(.*?)\n</think>\n<answer>\n(.*)", re.DOTALL)


class HunyuanA13BReasoningParser(ReasoningParser):
    """``hunyuan_a13b``: a state machine idle → think → response over token ids."""

    name = "hunyuan_a13b"

    def __init__(
        self, vocab: Mapping[str, int], chat_template_kwargs: Mapping[str, Any] | None = None
    ) -> None:
        """See :class:`ReasoningParser`."""
        super().__init__(vocab, chat_template_kwargs)
        self.state = "idle"
        self._expected: tuple[int, ...] = _THINK
        self._alternative: tuple[int, ...] = _THINK_ALT
        self._matched = 0
        self._held = ""

    def prompt_ends_reasoning(self, prompt_token_ids: Sequence[int]) -> bool:
        """Only once this choice's stream reached its answer (never for a prompt)."""
        return self.state == "response"

    def extract(self, text: str) -> tuple[str | None, str | None]:
        """The think and answer sections; without them, all content."""
        if found := _FULL.findall(text):
            reasoning, content = found[0]
            return reasoning or None, content or None
        if found := _HALF.findall(text):
            reasoning, content = found[0]
            content = content.removesuffix("\n</answer>")
            return reasoning or None, content or None
        return None, text

    def stream(
        self,
        previous_token_ids: Sequence[int],
        delta_text: str,
        delta_token_ids: Sequence[int],
    ) -> OutputDelta | None:
        """Advance the marker match by the delta's one token; text of a marker is dropped,
        text of a broken match is sent with the token that broke it."""
        assert len(delta_token_ids) == 1  # as vLLM's parser
        token = delta_token_ids[0]
        opening = self.state in ("idle", "think")
        i = self._matched
        matches = token == self._expected[i] or (opening and token == self._alternative[i])
        if not matches:
            text = self._held + delta_text
            self._matched, self._held = 0, ""
            if self.state == "think":
                return both_set(text, None)  # vLLM's DeltaMessage(reasoning=..., content=None)
            return both_set(None, text)
        self._held += delta_text
        self._matched = i = i + 1
        if opening and i - 1 < len(self._alternative) and token == self._alternative[i - 1]:
            done = i == len(self._alternative)
        else:
            done = i == len(self._expected)
        if done:
            if self.state == "idle":
                self.state, self._expected, self._alternative = "think", _ANSWER, _ANSWER_ALT
            elif self.state == "think":
                self.state, self._expected = "response", _ANSWER_END
            else:
                self.state, self._expected, self._alternative = "idle", _THINK, _THINK_ALT
            self._matched, self._held = 0, ""
        return None

    def ended_in(self, delta_token_ids: Sequence[int]) -> bool:
        """Whether the answer marker has been read."""
        return self.state == "response"

    def content_token_ids(self, delta_token_ids: list[int]) -> list[int]:
        """None: the delta that ended reasoning is the answer marker's."""
        return []

    def count_reasoning_tokens(self, token_ids: Sequence[int], streamed: bool) -> int:
        """vLLM counts none for this parser."""
        return 0
