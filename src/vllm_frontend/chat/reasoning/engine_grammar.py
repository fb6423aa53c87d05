"""Reasoning parsers of the grammars vLLM 0.32 runs on its parser engine, read with the same
grammar as their tool parser (vLLM's ``ParserEngineReasoningAdapter``).

The reasoning pass is the family's tool parser with tool parsing skipped
(``EngineToolParser(reasoning_pass=True)``): it starts in the grammar's initial state, tool
markup is text of the state it is read in (a marker that ends reasoning still ends it), and the
deltas follow the engine's rules (whitespace-only content held back, trailing reasoning
whitespace held until more reasoning follows, where the grammar says so).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from vllm_frontend.chat.engine.calls import EngineToolParser
from vllm_frontend.chat.engine.grammar import Grammar, Kind, State
from vllm_frontend.chat.parsed import OutputDelta
from vllm_frontend.chat.reasoning.base import ReasoningParser
from vllm_frontend.chat.tools.gemma4 import CHANNEL_END, TOOL_RESPONSE, TURN, Gemma4ToolParser
from vllm_frontend.chat.tools.gemma4 import TOOL_START as GEMMA_TOOL_START
from vllm_frontend.chat.tools.mistral import THINK, TOOL_CALLS, MistralToolParser

__all__ = [
    "Gemma4ReasoningParser",
    "GrammarReasoningParser",
    "MistralReasoningParser",
    "reasoning_end_ids",
]


def reasoning_end_ids(grammar: Grammar, vocab: Mapping[str, int]) -> frozenset[int]:
    """The ids of the special tokens that end reasoning (none when a marker that ends it is
    not a token of this vocabulary, or when reasoning can be left without ending it)."""
    ends: dict[str, State] = {}
    for (state, terminal), step in grammar.steps.items():
        if state != State.REASONING:
            continue
        if Kind.REASONING_END in step.events:
            ends.setdefault(terminal, step.next)
        elif step.next != State.REASONING:
            return frozenset()
    ids: set[int] = set()
    for terminal, nxt in ends.items():
        text = grammar.token_terminals.get(terminal)
        tid = vocab.get(text) if text is not None else None
        if tid is not None:
            ids.add(tid)
        elif nxt == State.CONTENT:
            return frozenset()
    return frozenset(ids)


class GrammarReasoningParser(ReasoningParser):
    """The reasoning side of an engine grammar (set ``TOOL_CLS`` to the family's parser)."""

    TOOL_CLS: ClassVar[type[EngineToolParser]]
    needs_special_tokens = True
    engine_based = True
    reads_special_tokens: ClassVar[bool] = True
    """Built with the tokenizer's special tokens (dropped from the output, as vLLM's engine
    drops them)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Its grammar's tokens are looked up at startup."""
        super().__init_subclass__(**kwargs)
        if "TOOL_CLS" in cls.__dict__:
            tokens = dict.fromkeys((*cls.optional_tokens, *cls.TOOL_CLS.optional_tokens))
            cls.optional_tokens = tuple(tokens)

    def __init__(
        self,
        vocab: Mapping[str, int],
        chat_template_kwargs: Mapping[str, Any] | None = None,
        *,
        special_tokens: Mapping[str, int] | None = None,
    ) -> None:
        """See :class:`ReasoningParser`."""
        super().__init__(vocab, chat_template_kwargs)
        self.engine = self.TOOL_CLS(
            vocab,
            (),
            chat_template_kwargs=chat_template_kwargs,
            special_tokens=special_tokens,
            reasoning_pass=True,
        )
        grammar = self.grammar = self.engine.grammar
        self.end_ids = reasoning_end_ids(grammar, vocab)
        start = grammar.token_terminals.get("THINK_START")
        end = grammar.token_terminals.get("THINK_END")
        self.start_id = vocab.get(start) if start else None
        self.end_id = vocab.get(end) if end else None
        self.boundary_ids = frozenset(
            tid for t in grammar.turn_boundary_tokens if (tid := vocab.get(t)) is not None
        )
        wait = grammar.wait_for_reasoning
        self.wait = grammar.initial == State.REASONING if wait is None else wait
        step = grammar.steps.get((grammar.initial, "THINK_START"))
        self.start_opens = step is not None and step.next == State.REASONING
        self._streamed = False
        self._streamed_tokens = 0

    def prompt_ends_reasoning(self, prompt_token_ids: Sequence[int]) -> bool:
        """Back to the current turn's start: an end token closes reasoning, a start token
        that opens it keeps it open; else it is open exactly when the grammar waits for it."""
        for tid in reversed(prompt_token_ids):
            if tid in self.end_ids:
                return True
            if tid == self.start_id:
                if self.start_opens:
                    return False
                break
            if tid in self.boundary_ids:
                break
        return not self.wait

    def content_token_ids(self, delta_token_ids: list[int]) -> list[int]:
        """After the last end token; else from the first token that ends reasoning implicitly
        in the current turn; else all of them."""
        ids = delta_token_ids
        if not self.wait:
            return ids
        if self.end_id is not None:
            for i in range(len(ids) - 1, -1, -1):
                if ids[i] == self.end_id:
                    return ids[i + 1 :]
        if self.end_ids:
            start = 0
            for i in range(len(ids) - 1, -1, -1):
                if ids[i] in self.boundary_ids:
                    start = i + 1
                    break
            for i in range(start, len(ids)):
                if ids[i] in self.end_ids:
                    return ids[i:]
        return ids

    def extract(self, text: str) -> tuple[str | None, str | None]:
        """One pass over a whole output."""
        engine = self.engine
        engine._reset()
        events = engine.feed(text, ())
        events += engine.machine.finish()
        reasoning = "".join(e.value for e in events if e.kind == Kind.REASONING)
        content = "".join(e.value for e in events if e.kind == Kind.TEXT)
        if self.grammar.strip_trailing_reasoning_whitespace:
            reasoning = reasoning.rstrip()
        return reasoning or None, content or None

    def stream(
        self,
        previous_token_ids: Sequence[int],
        delta_text: str,
        delta_token_ids: Sequence[int],
    ) -> OutputDelta | None:
        """The engine's delta for this text and these ids."""
        self._streamed = True
        self._streamed_tokens += self._count(delta_token_ids, self._in_reasoning())
        return self.engine.stream("", "", delta_text, (), (), delta_token_ids)

    def _in_reasoning(self) -> bool:
        engine = self.engine
        if not engine._streaming:
            return self.grammar.initial == State.REASONING
        return engine.machine.state == State.REASONING

    def ended_in(self, delta_token_ids: Sequence[int]) -> bool:
        """Once the engine has read the end of reasoning."""
        return self.engine.reasoning_ended

    def finish(self) -> OutputDelta | None:
        """What the engine still holds."""
        engine = self.engine
        if not engine._streaming:
            engine._streaming = True
            engine._reset()
        return engine.finish_stream()

    def _count(self, token_ids: Sequence[int], reasoning: bool) -> int:
        """Tokens read in reasoning (markers excluded), from the reasoning state given."""
        n = 0
        for tid in token_ids:
            if tid == self.start_id and self.start_opens:
                reasoning = True
            elif tid in self.end_ids:
                reasoning = False
            elif reasoning:
                n += 1
        return n

    def count_reasoning_tokens(self, token_ids: Sequence[int], streamed: bool) -> int:
        """Streaming: the tokens seen in reasoning; a whole output: one pass over its ids."""
        if streamed and self._streamed:
            return self._streamed_tokens
        return self._count(token_ids, self.grammar.initial == State.REASONING)


class MistralReasoningParser(GrammarReasoningParser):
    """``mistral``: ``[THINK]``/``[/THINK]`` when the vocabulary has ``[THINK]``; else no
    reasoning at all (the output is content as it is)."""

    name = "mistral"
    TOOL_CLS = MistralToolParser
    required_tokens = (TOOL_CALLS,)

    def extract(self, text: str) -> tuple[str | None, str | None]:
        """See :class:`GrammarReasoningParser`."""
        if THINK not in self.vocab:
            return None, text
        return super().extract(text)


class Gemma4ReasoningParser(GrammarReasoningParser):
    """``gemma4``: ``<|channel>…<channel|>``, its leading ``thought\\n`` dropped; a prompt
    that ends inside an open channel starts the output in reasoning."""

    name = "gemma4"
    TOOL_CLS = Gemma4ToolParser

    def prompt_ends_reasoning(self, prompt_token_ids: Sequence[int]) -> bool:
        """See :class:`GrammarReasoningParser`."""
        if super().prompt_ends_reasoning(prompt_token_ids):
            return True
        if self._channel_open(prompt_token_ids):
            engine = self.engine
            assert isinstance(engine, Gemma4ToolParser)
            engine.start_in_reasoning()
        return False

    def _channel_open(self, prompt_token_ids: Sequence[int]) -> bool:
        """Whether the prompt ends inside a ``<|channel>`` block (back to a closing,
        tool-call or turn token)."""
        if self.start_id is None:
            return False
        vocab = self.vocab
        closers = {
            tid
            for t in (CHANNEL_END, GEMMA_TOOL_START, TURN, TOOL_RESPONSE)
            if (tid := vocab.get(t)) is not None
        }
        for tid in reversed(prompt_token_ids):
            if tid == self.start_id:
                return True
            if tid in closers:
                return False
        return False

    def extract(self, text: str) -> tuple[str | None, str | None]:
        """See :class:`GrammarReasoningParser`; the leading ``thought\\n`` dropped."""
        reasoning, content = super().extract(text)
        if reasoning:
            if reasoning.startswith("thought\n"):
                reasoning = reasoning[len("thought\n") :]
            elif reasoning == "thought":
                reasoning = None
        return reasoning or None, content
