"""Reasoning parsers of the grammars vLLM 0.32 runs on its parser engine, read with the same
grammar as their tool parser (vLLM's ``ParserEngineReasoningAdapter``).

The reasoning pass is the family's tool parser with tool parsing skipped
(``EngineToolParser(reasoning_pass=True)``): it starts in the grammar's initial state, tool
markup is text of the state it is read in (a marker that ends reasoning still ends it), and the
deltas follow the engine's rules (whitespace-only content held back, trailing reasoning
whitespace held until more reasoning follows, where the grammar says so).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import msgspec

from vllm_frontend.chat.engine.calls import EngineToolParser
from vllm_frontend.chat.engine.grammar import Event, Grammar, Kind, State
from vllm_frontend.chat.parsed import OutputDelta
from vllm_frontend.chat.reasoning.base import ReasoningParser
from vllm_frontend.chat.tools.dsml import DeepSeekV4ToolParser, DeepSeekV41ToolParser
from vllm_frontend.chat.tools.gemma4 import CHANNEL_END, TOOL_RESPONSE, TURN, Gemma4ToolParser
from vllm_frontend.chat.tools.gemma4 import TOOL_START as GEMMA_TOOL_START
from vllm_frontend.chat.tools.inkling import CONTENT_TEXT as INK_TEXT
from vllm_frontend.chat.tools.inkling import CONTENT_THINKING as INK_THINKING
from vllm_frontend.chat.tools.inkling import END_MESSAGE as INK_END
from vllm_frontend.chat.tools.inkling import END_SAMPLING as INK_END_SAMPLING
from vllm_frontend.chat.tools.inkling import INKLING_TOKENS, InklingToolParser
from vllm_frontend.chat.tools.inkling import MESSAGE_MODEL as INK_MODEL
from vllm_frontend.chat.tools.mistral import TOOL_CALLS, MistralToolParser
from vllm_frontend.chat.tools.qwen3_xml import Qwen3XmlToolParser, qwen3_grammar

__all__ = [
    "DeepSeekV4ReasoningParser",
    "DeepSeekV41ReasoningParser",
    "Gemma4ReasoningParser",
    "GrammarReasoningParser",
    "GraniteThinkingReasoningParser",
    "InklingReasoningParser",
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
        self._count_state = grammar.initial
        self._id_terminals = {
            tid: name
            for name, text in grammar.token_terminals.items()
            if (tid := vocab.get(text)) is not None
        }

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
        if not self._streamed:
            self._streamed = True
            engine = self.engine
            self._count_state = engine.machine.state if engine._streaming else self.grammar.initial
        delta = self.engine.stream("", "", delta_text, (), (), delta_token_ids)
        n, self._count_state = self._count(self._read_ids(delta_token_ids), self._count_state)
        self._streamed_tokens += n
        return delta

    def _read_ids(self, delta_token_ids: Sequence[int]) -> Sequence[int]:
        """The ids the engine read for this delta."""
        return delta_token_ids

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

    def _count(self, token_ids: Sequence[int], state: State) -> tuple[int, State]:
        """Tokens read in reasoning from ``state`` on (the grammar's tokens move the state and
        are not counted), and the state after them."""
        n = 0
        steps = self.grammar.steps
        terminals = self._id_terminals
        for tid in token_ids:
            terminal = terminals.get(tid)
            if terminal is not None:
                step = steps.get((state, terminal))
                if step is not None:
                    state = step.next
                    continue
            if state == State.REASONING:
                n += 1
        return n, state

    def count_reasoning_tokens(self, token_ids: Sequence[int], streamed: bool) -> int:
        """Streaming: the tokens seen in reasoning; a whole output: one pass over its ids."""
        if streamed and self._streamed:
            return self._streamed_tokens
        return self._count(token_ids, self.grammar.initial)[0]


class MistralReasoningParser(GrammarReasoningParser):
    """``mistral``: ``[THINK]``/``[/THINK]`` when the vocabulary has ``[THINK]`` (``<think>``
    text markers for a grammar-capable mistral_common tokenizer without it); else no
    reasoning at all (the output is content as it is)."""

    name = "mistral"
    TOOL_CLS = MistralToolParser
    required_tokens = (TOOL_CALLS,)

    @classmethod
    def for_model(cls, model: Any) -> type[ReasoningParser]:
        """With a mistral_common tokenizer, read with the tool parser's class for it."""
        tool_cls = MistralToolParser.for_model(model)
        if tool_cls is MistralToolParser:
            return cls
        return _mistral_reasoning_class(cls, tool_cls)

    def extract(self, text: str) -> tuple[str | None, str | None]:
        """See :class:`GrammarReasoningParser`."""
        tool_cls = self.TOOL_CLS
        assert issubclass(tool_cls, MistralToolParser)
        if tool_cls.reasoning_encoding(self.vocab) == "none":
            return None, text
        return super().extract(text)


_MISTRAL_CLASSES: dict[type[EngineToolParser], type[ReasoningParser]] = {}


def _mistral_reasoning_class(
    base: type[MistralReasoningParser], tool_cls: type[EngineToolParser]
) -> type[ReasoningParser]:
    made = _MISTRAL_CLASSES.get(tool_cls)
    if made is None:
        made = _MISTRAL_CLASSES[tool_cls] = type(base.__name__, (base,), {"TOOL_CLS": tool_cls})
    return made


class Gemma4ReasoningParser(GrammarReasoningParser):
    """``gemma4``: ``<|channel>…<channel|>``, its leading ``thought\\n`` dropped; a prompt
    that ends inside an open channel starts the output in reasoning."""

    name = "gemma4"
    TOOL_CLS = Gemma4ToolParser
    optional_tokens = ("thought",)

    def _read_ids(self, delta_token_ids: Sequence[int]) -> Sequence[int]:
        engine = self.engine
        assert isinstance(engine, Gemma4ToolParser)
        opened, engine.opened = engine.opened, None
        return delta_token_ids if opened is None else opened

    def count_reasoning_tokens(self, token_ids: Sequence[int], streamed: bool) -> int:
        """See :class:`GrammarReasoningParser`; a whole output is read as the engine reads
        it, an opener put in front of an output that starts inside a channel (a ``thought``
        first token, or a channel end without a start)."""
        if streamed and self._streamed:
            return self._streamed_tokens
        ids = list(token_ids)
        end = self.vocab.get(CHANNEL_END)
        thought = self.vocab.get("thought")
        if (
            ids
            and self.start_id is not None
            and end is not None
            and self.start_id not in ids
            and (end in ids or ids[0] == thought)
        ):
            ids.insert(0, self.start_id)
        return self._count(ids, self.grammar.initial)[0]

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


@functools.cache
def granite_thinking_grammar(thinking: bool) -> Grammar:
    """Nemotron V3's grammar (Qwen3's with trailing reasoning whitespace stripped), starting in
    reasoning while thinking."""
    return msgspec.structs.replace(
        qwen3_grammar(),
        name="granite_thinking_parser",
        initial=State.REASONING if thinking else State.CONTENT,
        wait_for_reasoning=thinking,
        strip_trailing_reasoning_whitespace=True,
    )


def _thinking(chat_template_kwargs: Mapping[str, Any]) -> bool:
    return bool(chat_template_kwargs.get("enable_thinking", True))


class _GraniteThinkingEngine(Qwen3XmlToolParser):
    """The Granite 4.2 reader: leading newlines of the content dropped, and reasoning ends for
    the stream only once content has begun."""

    @classmethod
    def grammar_for(cls, chat_template_kwargs: Mapping[str, Any]) -> Grammar:
        """By ``enable_thinking`` (on unless given)."""
        return granite_thinking_grammar(_thinking(chat_template_kwargs))

    def _reset(self) -> None:
        super()._reset()
        self.content_started = False
        self.raw_reasoning: list[str] = []

    def _delta(self, events: list[Event], finished: bool = False) -> OutputDelta | None:
        delta = super()._delta(events, finished)
        if delta is None:
            return None
        if delta.reasoning is not None:
            self.raw_reasoning.append(delta.reasoning)
        if delta.content is not None and not self.content_started:
            stripped = delta.content.lstrip("\n")
            if stripped:
                self.content_started = True
                delta.content = stripped
            else:
                delta.content = None
                if delta.reasoning is None and not delta.tool_calls:
                    return None
        return delta


class GraniteThinkingReasoningParser(GrammarReasoningParser):
    """``granite_thinking_parser``: Nemotron V3's format (``<think>…</think>``, thinking unless
    ``enable_thinking`` is false); the content's leading newlines dropped; when the request's
    own kwargs say ``enable_thinking: false`` or ``force_nonempty_content: true``, an answer
    without content gets the reasoning as content."""

    name = "granite_thinking_parser"
    TOOL_CLS = _GraniteThinkingEngine
    required_tokens = ("<think>", "</think>")

    def ended_in(self, delta_token_ids: Sequence[int]) -> bool:
        """Once reasoning has ended and content has begun."""
        engine = self.engine
        assert isinstance(engine, _GraniteThinkingEngine)
        return engine.reasoning_ended and engine.content_started

    def _force_content(self) -> bool:
        kwargs = self.request_kwargs
        return bool(
            kwargs
            and (
                kwargs.get("enable_thinking") is False
                or kwargs.get("force_nonempty_content") is True
            )
        )

    def extract(self, text: str) -> tuple[str | None, str | None]:
        """See :class:`GrammarReasoningParser`."""
        reasoning: str | None
        content: str | None
        if self.grammar.initial != State.REASONING:
            reasoning, content = None, text
        else:
            reasoning, content = super().extract(text)
        absent = content is None
        if content is not None:
            content = content.lstrip("\n") or None
        if self._force_content() and absent:
            return content, reasoning
        return reasoning, content

    def fallback_content(self) -> str | None:
        """When forced: the reasoning streamed so far (before whitespace stripping)."""
        if not self._force_content():
            return None
        engine = self.engine
        assert isinstance(engine, _GraniteThinkingEngine)
        return "".join(engine.raw_reasoning) or None


class DeepSeekV4ReasoningParser(GrammarReasoningParser):
    """``deepseek_v4``: ``<think>…</think>``, from the start while thinking (``thinking`` or
    ``enable_thinking``, on when neither is given, off with ``reasoning_effort: none``); the
    DSML tool-calls start ends reasoning."""

    name = "deepseek_v4"
    TOOL_CLS = DeepSeekV4ToolParser


class DeepSeekV41ReasoningParser(GrammarReasoningParser):
    """``deepseek_v41``: ``deepseek_v4`` with V4.1's spaced DSML markers."""

    name = "deepseek_v41"
    TOOL_CLS = DeepSeekV41ToolParser


class InklingReasoningParser(GrammarReasoningParser):
    """``inkling``: thinking blocks; the prompt's last block token decides where the output
    starts (in a thinking block, a text block, or a message header)."""

    name = "inkling"
    TOOL_CLS = InklingToolParser

    def _ids(self, *tokens: str) -> list[int | None]:
        return [self.vocab.get(t) for t in tokens]

    def prompt_ends_reasoning(self, prompt_token_ids: Sequence[int]) -> bool:
        """Back to the last thinking or model token (open) or text or end-of-sampling token
        (ended); open when there is none. While open, the output starts in the state of the
        last of the thinking, text or model tokens before another Inkling token."""
        thinking, text, model, end = self._ids(INK_THINKING, INK_TEXT, INK_MODEL, INK_END_SAMPLING)
        ended = False
        for tid in reversed(prompt_token_ids):
            if tid in (thinking, model):
                break
            if tid in (text, end):
                ended = True
                break
        if not ended:
            self._start_from_prompt(prompt_token_ids, thinking, text, model)
        return ended

    def _start_from_prompt(
        self, prompt_token_ids: Sequence[int], thinking: Any, text: Any, model: Any
    ) -> None:
        specials = {tid for tid in self._ids(*INKLING_TOKENS) if tid is not None}
        states = {thinking: State.REASONING, text: State.CONTENT, model: State.MESSAGE_HEADER}
        states.pop(None, None)
        engine = self.engine
        assert isinstance(engine, InklingToolParser)
        for tid in reversed(prompt_token_ids):
            if tid in states:
                engine.start_in(states[tid])
                return
            if tid in specials:
                return

    def count_reasoning_tokens(self, token_ids: Sequence[int], streamed: bool) -> int:
        """The tokens between a thinking token and the next block end, over the whole
        output (streamed or not)."""
        thinking, end, end_sampling = self._ids(INK_THINKING, INK_END, INK_END_SAMPLING)
        ends = {tid for tid in (end, end_sampling) if tid is not None}
        count, inside = 0, False
        for tid in token_ids:
            if tid == thinking:
                inside = True
            elif tid in ends:
                inside = False
            elif inside:
                count += 1
        return count
