"""PLaMo 3's tool calls and reasoning (vLLM 0.32's ``vllm/parser/plamo3.py``, a parser-engine
grammar)::

    <|plamo:begin_think:plamo|>…<|plamo:end_think:plamo|>
    <|plamo:begin_tool_requests:plamo|>
    <|plamo:begin_tool_request:plamo|><|plamo:begin_tool_name:plamo|>NAME<|plamo:end_tool_name:plamo|>
    <|plamo:begin_tool_arguments:plamo|><|plamo:constrain|>json<|plamo:msg|>{…}
    <|plamo:end_tool_arguments:plamo|><|plamo:end_tool_request:plamo|>
    <|plamo:end_tool_requests:plamo|>

The markers span several tokens (``<|plamo:begin_``, the word, ``:plamo|>``), so they are read in
the text; only ``<|plamo:tag|>`` (end of turn) is one token. Generation starts in reasoning
unless ``enable_thinking`` is false. Arguments are the model's JSON as written (``{}`` when
empty). At the end of the output, a marker cut short (its token ids a proper prefix of a
marker's) is dropped from the reasoning, the content and a tool's name.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from vllm_frontend.chat.engine.calls import EngineToolParser
from vllm_frontend.chat.engine.grammar import Event, Grammar, Kind, State, Step
from vllm_frontend.chat.parsed import OutputDelta, ToolCallDelta

__all__ = [
    "BEGIN_THINK",
    "END_THINK",
    "EOT",
    "Plamo3ToolParser",
    "content_after_reasoning",
    "ends_reasoning",
    "plamo3_grammar",
    "plamo3_thinking",
    "strip_unfinished_marker",
    "think_sequences",
    "token_sequences",
]

_M = "<|plamo:"
BEGIN_TOOL_REQUESTS = "<|plamo:begin_tool_requests:plamo|>"
END_TOOL_REQUESTS = "<|plamo:end_tool_requests:plamo|>"
BEGIN_TOOL_REQUEST = "<|plamo:begin_tool_request:plamo|>"
END_TOOL_REQUEST = "<|plamo:end_tool_request:plamo|>"
BEGIN_TOOL_NAME = "<|plamo:begin_tool_name:plamo|>"
END_TOOL_NAME = "<|plamo:end_tool_name:plamo|>"
BEGIN_TOOL_ARGUMENTS = "<|plamo:begin_tool_arguments:plamo|><|plamo:constrain|>json<|plamo:msg|>"
END_TOOL_ARGUMENTS = "<|plamo:end_tool_arguments:plamo|>"
BEGIN_THINK = "<|plamo:begin_think:plamo|>"
END_THINK = "<|plamo:end_think:plamo|>"
EOT = "<|plamo:tag|>"
MARKER_PIECES = frozenset(("<|plamo:begin_", "<|plamo:end_", ":plamo|>"))
"""The special tokens the markers are made of: text, neither terminals nor dropped."""


@functools.cache
def plamo3_grammar(thinking: bool) -> Grammar:
    """The grammar with (``thinking``) or without the reasoning markers."""
    R, C, P, N, A, B = (
        State.REASONING,
        State.CONTENT,
        State.TOOL_PREAMBLE,
        State.TOOL_NAME,
        State.TOOL_ARGS,
        State.TOOL_BETWEEN,
    )
    think: dict[str, str] = {}
    steps: dict[tuple[State, str], Step] = {}
    if thinking:
        think = {"THINK_START": BEGIN_THINK, "THINK_END": END_THINK}
        steps |= {
            (R, "THINK_START"): Step(R),
            (C, "THINK_START"): Step(R, (Kind.REASONING_START,)),
            (R, "THINK_END"): Step(C, (Kind.REASONING_END,)),
            (C, "THINK_END"): Step(C),
            (R, "TOOL_REQUESTS_START"): Step(P, (Kind.REASONING_END,)),
        }
    steps |= {
        (C, "TOOL_REQUESTS_START"): Step(P),
        (P, "TOOL_REQUEST_START"): Step(P),
        (P, "TOOL_NAME_START"): Step(N, (Kind.CALL_START,)),
        (N, "TOOL_NAME_END"): Step(P),
        (P, "TOOL_ARGS_START"): Step(A),
        (A, "TOOL_ARGS_END"): Step(B),
        (B, "TOOL_REQUEST_END"): Step(P, (Kind.CALL_END,)),
        (P, "TOOL_REQUESTS_END"): Step(C),
        # The end of turn leaves any state (reasoning ends with it).
        (R, "EOT"): Step(C, (Kind.REASONING_END,)),
        **{(s, "EOT"): Step(C) for s in (C, P, N, A, B)},
    }
    return Grammar(
        name="plamo3",
        initial=R if thinking else C,
        terminals={
            **think,
            "TOOL_REQUESTS_START": BEGIN_TOOL_REQUESTS,
            "TOOL_REQUESTS_END": END_TOOL_REQUESTS,
            "TOOL_REQUEST_START": BEGIN_TOOL_REQUEST,
            "TOOL_REQUEST_END": END_TOOL_REQUEST,
            "TOOL_NAME_START": BEGIN_TOOL_NAME,
            "TOOL_NAME_END": END_TOOL_NAME,
            "TOOL_ARGS_START": BEGIN_TOOL_ARGUMENTS,
            "TOOL_ARGS_END": END_TOOL_ARGUMENTS,
            "EOT": EOT,
        },
        token_terminals={"EOT": EOT, **think},
        steps=steps,
        drop_blank_content_before_tools=True,
        stream_arg_deltas=True,
        strip_content_with_tools=False,
        strip_trailing_reasoning_whitespace=False,
        preserve_tokens=MARKER_PIECES,
        json_args=True,
    )


def plamo3_thinking(chat_template_kwargs: Mapping[str, Any]) -> bool:
    """Thinking is on unless ``enable_thinking`` is given and false."""
    return bool(chat_template_kwargs.get("enable_thinking", True))


Encode = Callable[[str], list[int]]


@functools.lru_cache(maxsize=32)
def token_sequences(encode: Encode, thinking: bool) -> tuple[tuple[int, ...], ...]:
    """The token ids of every marker spelling of the grammar (with or without ``thinking``)."""
    return tuple(tuple(encode(lit)) for lit, _ in plamo3_grammar(thinking).spellings())


@functools.lru_cache(maxsize=16)
def think_sequences(encode: Encode) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The token ids of the start and end of thinking."""
    return tuple(encode(BEGIN_THINK)), tuple(encode(END_THINK))


def strip_unfinished_marker(value: str | None, encode: Encode | None, thinking: bool) -> str | None:
    """``value`` without a trailing ``<|plamo:…`` whose token ids start those of a marker of
    the grammar (and are fewer); ``None`` for nothing left."""
    if not value:
        return value
    start = value.rfind(_M)
    if start < 0 or encode is None:
        return value or None
    ids = tuple(encode(value[start:]))
    n = len(ids)
    if any(len(seq) > n and seq[:n] == ids for seq in token_sequences(encode, thinking)):
        return value[:start] or None
    return value or None


def _coalesce_finished(events: list[Event], encode: Encode | None, thinking: bool) -> list[Event]:
    """Runs of name or argument pieces of one call joined into one event (a name stripped of a
    marker cut short, a name before any call dropped, empty pieces dropped)."""
    out: list[Event] = []
    i, n = 0, len(events)
    while i < n:
        event = events[i]
        kind = event.kind
        if kind not in (Kind.NAME, Kind.ARGS):
            out.append(event)
            i += 1
            continue
        j = i + 1
        while j < n and events[j].kind == kind and events[j].call == event.call:
            j += 1
        if not (kind == Kind.NAME and event.call < 0):
            value = "".join(e.value for e in events[i:j])
            if kind == Kind.NAME:
                value = strip_unfinished_marker(value, encode, thinking) or ""
            if value:
                out.append(Event(kind, value, event.call))
        i = j
    return out


class Plamo3ToolParser(EngineToolParser):
    """``plamo3``: PLaMo 3's tool requests (see the module docstring)."""

    name = "plamo3"
    supports_required_and_named = False
    GRAMMAR = plamo3_grammar(True)
    uses_codec = True  # a marker cut short is recognised by its token ids

    @classmethod
    def grammar_for(cls, chat_template_kwargs: Mapping[str, Any]) -> Grammar:
        """Reasoning markers only while thinking."""
        return plamo3_grammar(plamo3_thinking(chat_template_kwargs))

    @property
    def thinking(self) -> bool:
        """Whether this request's grammar reads the thinking markers."""
        return "THINK_END" in self.grammar.terminals

    def _strip(self, value: str | None) -> str | None:
        if value and _M in value:
            return strip_unfinished_marker(value, self.encode, self.thinking)
        return value or None

    def _delta(self, events: list[Event], finished: bool = False) -> OutputDelta | None:
        if not finished:
            return super()._delta(events)
        delta = super()._delta(
            _coalesce_finished(events, self.encode, self.thinking), finished=True
        )
        if delta is None:
            return None
        # vLLM assigns both fields here, so its chunk writes them, null too
        delta.reasoning = self._strip(delta.reasoning)
        delta.reasoning_hidden = delta.reasoning is None
        if not self.machine.skip_tools:
            delta.content = self._strip(delta.content)
            delta.content_set = True
        for call in delta.tool_calls:
            if not (call.arguments or "").strip():
                call.arguments = "{}"
        if delta.reasoning is None and delta.content is None and not delta.tool_calls:
            return None
        return delta

    def on_args(self, event: Event, calls: list[ToolCallDelta]) -> None:
        """A marker cut short at the end of valid JSON is dropped; the piece that names the
        call is also sent as its first arguments."""
        index = event.call
        slot = self.slots[index]
        if (at := event.value.rfind(_M)) >= 0:
            kept = event.value[:at]
            try:
                json.loads(slot.args + kept)
            except ValueError:
                pass
            else:
                event = Event(event.kind, kept, index)
        named_before = slot.name_sent
        super().on_args(event, calls)
        if event.value and not named_before and slot.name_sent:
            calls.append(ToolCallDelta(index, arguments=event.value))

    def args_json(self, raw: str, name: str) -> str:
        """The arguments as written (``{}`` when empty)."""
        return raw.strip() or "{}"

    def strip_reasoning_marker(self, reasoning: str | None) -> str | None:
        """Whole-output reasoning without a trailing marker cut short."""
        return self._strip(reasoning)


def ends_reasoning(
    token_ids: Sequence[int], thinking: bool, encode: Encode | None, eot_id: int | None
) -> bool:
    """vLLM's ``Plamo3Parser.is_reasoning_end``: back from the end, the end-of-thinking ids
    close reasoning, the start-of-thinking ids or the end of a turn keep it open."""
    if not thinking:
        return True
    if encode is None:
        return False
    start, end = think_sequences(encode)
    ids = list(token_ids)
    for i in range(len(ids) - 1, -1, -1):
        if tuple(ids[i : i + len(end)]) == end:
            return True
        if tuple(ids[i : i + len(start)]) == start:
            return False
        if ids[i] == eot_id:
            return False
    return False


def content_after_reasoning(
    token_ids: list[int], thinking: bool, encode: Encode | None
) -> list[int]:
    """The ids after the last end-of-thinking ids (all of them without one)."""
    if not thinking or encode is None:
        return token_ids
    end = think_sequences(encode)[1]
    for i in range(len(token_ids) - len(end), -1, -1):
        if tuple(token_ids[i : i + len(end)]) == end:
            return token_ids[i + len(end) :]
    return token_ids
