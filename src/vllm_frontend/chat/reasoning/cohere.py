"""``cohere_command3`` / ``cohere_command4``: the reasoning names of vLLM 0.32's Cohere Command
unified parser (chat/cohere_output.py parses their output with ``cohere_melody``); this class
answers what vLLM asks the reasoning parser itself: whether a prompt ends the reasoning, and
which preset the filter runs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from vllm_frontend.chat.cohere_output import CHATBOT, END_THINKING, START_THINKING
from vllm_frontend.chat.reasoning.base import ReasoningParser

__all__ = ["CohereCommand3ReasoningParser", "CohereCommand4ReasoningParser"]


class CohereCommand3ReasoningParser(ReasoningParser):
    """``cohere_command3``."""

    name = "cohere_command3"
    preset: ClassVar[str] = "cmd3"
    """The ``cohere_melody`` filter preset."""
    unified = "cohere"
    needs_special_tokens = True
    optional_tokens: ClassVar[tuple[str, ...]] = (START_THINKING, END_THINKING, CHATBOT)

    def __init__(
        self, vocab: Mapping[str, int], chat_template_kwargs: Mapping[str, Any] | None = None
    ) -> None:
        """See :class:`ReasoningParser`."""
        super().__init__(vocab, chat_template_kwargs)
        self.start_id = vocab.get(START_THINKING)
        self.end_id = vocab.get(END_THINKING)
        self.chatbot_id = vocab.get(CHATBOT)

    def prompt_ends_reasoning(self, prompt_token_ids: Sequence[int]) -> bool:
        """From the end: a start marker decides (ended if an end marker came after it), the
        chatbot turn marker means open; else whether an end marker came at all."""
        seen_end = False
        for tid in reversed(prompt_token_ids):
            if tid == self.start_id:
                return seen_end
            if tid == self.chatbot_id:
                return False
            if tid == self.end_id:
                seen_end = True
        return seen_end


class CohereCommand4ReasoningParser(CohereCommand3ReasoningParser):
    """``cohere_command4``."""

    name = "cohere_command4"
    preset = "cmd4"
