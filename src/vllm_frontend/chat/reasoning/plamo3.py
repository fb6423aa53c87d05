"""``plamo3``: PLaMo 3's reasoning, read with its tool grammar (vLLM 0.32's ``Plamo3Parser``
through its reasoning adapter). Its thinking markers span several tokens, so where reasoning
ends in token ids is found by their token sequences (the tokenizer's encoder is needed), and
reasoning tokens are counted as vLLM's parser engine counts them: each token at the first
character of its text in the update that brought it (a token whose text is not found there at
the update's first character), counted when that character is reasoning text."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from vllm_frontend.chat.engine.grammar import Grammar, State
from vllm_frontend.chat.parsed import OutputDelta
from vllm_frontend.chat.reasoning.engine_grammar import GrammarReasoningParser
from vllm_frontend.chat.tools.plamo3 import (
    EOT,
    Plamo3ToolParser,
    content_after_reasoning,
    ends_reasoning,
    plamo3_grammar,
    plamo3_thinking,
)

__all__ = ["Plamo3ReasoningParser"]


class Plamo3ReasoningParser(GrammarReasoningParser):
    """``plamo3``."""

    name = "plamo3"
    TOOL_CLS = Plamo3ToolParser
    uses_codec: ClassVar[bool] = True

    def __init__(
        self,
        vocab: Mapping[str, int],
        chat_template_kwargs: Mapping[str, Any] | None = None,
        *,
        special_tokens: Mapping[str, int] | None = None,
    ) -> None:
        """See :class:`GrammarReasoningParser`."""
        super().__init__(vocab, chat_template_kwargs, special_tokens=special_tokens)
        self._thinking = plamo3_thinking(chat_template_kwargs or {})

        self._text: list[str] = []
        self._length = 0
        self._token_at: dict[int, int] = {}
        """Streamed tokens per character position of the streamed text."""

    def _engine(self) -> Plamo3ToolParser:
        engine = self.engine
        assert isinstance(engine, Plamo3ToolParser)
        engine.encode = self.encode
        return engine

    def prompt_ends_reasoning(self, prompt_token_ids: Sequence[int]) -> bool:
        """Back from the end: the end-of-thinking ids close reasoning; the start-of-thinking
        ids or an end of turn keep it open; with none of them it is open while thinking."""
        return ends_reasoning(prompt_token_ids, self._thinking, self.encode, self.vocab.get(EOT))

    def content_token_ids(self, delta_token_ids: list[int]) -> list[int]:
        """After the last end-of-thinking ids."""
        return content_after_reasoning(delta_token_ids, self._thinking, self.encode)

    def extract(self, text: str) -> tuple[str | None, str | None]:
        """One pass over a whole output; a marker cut short ends no reasoning."""
        engine = self._engine()
        reasoning, content = super().extract(text)
        return engine.strip_reasoning_marker(reasoning), content

    def stream(
        self,
        previous_token_ids: Sequence[int],
        delta_text: str,
        delta_token_ids: Sequence[int],
    ) -> OutputDelta | None:
        """See :class:`GrammarReasoningParser`."""
        self._engine()
        _place_tokens(self._token_at, self._length, delta_text, delta_token_ids, self.decode)
        self._text.append(delta_text)
        self._length += len(delta_text)
        return super().stream(previous_token_ids, delta_text, delta_token_ids)

    def finish(self) -> OutputDelta | None:
        """See :class:`GrammarReasoningParser`."""
        self._engine()
        return super().finish()

    def count_reasoning_tokens(self, token_ids: Sequence[int], streamed: bool) -> int:
        """Tokens placed on reasoning text: of the streamed text while streaming, else of
        the whole output's text read in one update."""
        if streamed and self._streamed:
            text = "".join(self._text)
            token_at = self._token_at
        else:
            if not token_ids or self.decode is None:
                return 0
            text = self.decode(token_ids)
            token_at = {}
            _place_tokens(token_at, 0, text, token_ids, self.decode)
        spans = reasoning_spans(text, plamo3_grammar(self._thinking))
        return sum(n for pos, n in token_at.items() if _inside(pos, spans))


def _place_tokens(
    token_at: dict[int, int],
    offset: int,
    text: str,
    token_ids: Sequence[int],
    decode: Callable[[Sequence[int]], str] | None,
) -> None:
    """vLLM's ``IncrementalLexer._char_token_counts`` for one update at ``offset``."""
    if not token_ids:
        return
    if decode is None or not text:
        token_at[offset] = token_at.get(offset, 0) + len(token_ids)
        return
    pos = placed = 0
    for tid in token_ids:
        piece = _token_text(decode, tid)
        if not piece:
            continue
        found = text.find(piece, pos)
        if found < 0:
            continue
        token_at[offset + found] = token_at.get(offset + found, 0) + 1
        placed += 1
        pos = found + len(piece)
    if missing := len(token_ids) - placed:
        token_at[offset] = token_at.get(offset, 0) + missing


@functools.lru_cache(maxsize=1 << 16)
def _token_text(decode: Callable[[Sequence[int]], str], token_id: int) -> str:
    """One token's text (decoded alone, as vLLM's engine decodes it; cached as there)."""
    return decode([token_id])


def reasoning_spans(text: str, grammar: Grammar) -> list[tuple[int, int]]:
    """The ``[start, end)`` character ranges of ``text`` read as reasoning by ``grammar``
    (markers leftmost first, the longest at one position; a marker with no step from the
    state it is met in is text of that state)."""
    spellings = grammar.spellings()
    steps = grammar.steps
    state = grammar.initial
    spans: list[tuple[int, int]] = []
    pos, n = 0, len(text)
    while pos < n:
        best: tuple[int, int, str] | None = None
        for literal, terminal in spellings:
            at = text.find(literal, pos)
            if at >= 0 and (
                best is None or at < best[0] or (at == best[0] and len(literal) > best[1])
            ):
                best = (at, len(literal), terminal)
        if best is None:
            if state == State.REASONING:
                spans.append((pos, n))
            break
        at, length, terminal = best
        step = steps.get((state, terminal))
        end = at + length if step is None else at
        if state == State.REASONING and end > pos:
            spans.append((pos, end))
        if step is not None:
            state = step.next
        pos = at + length
    return spans


def _inside(pos: int, spans: list[tuple[int, int]]) -> bool:
    return any(start <= pos < end for start, end in spans)
