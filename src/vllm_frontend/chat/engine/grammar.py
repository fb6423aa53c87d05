"""A model's output format as a grammar: marker strings, a state machine over them, and how the
text between markers is read (vLLM 0.32's ``ParserEngineConfig``, ``vllm/parser/engine/``).

A :class:`Grammar` names its markers (*terminals*), says which of them are special tokens that
the model emits by id, and maps ``(state, terminal)`` to the next state and the events the step
emits. Text between markers is content, reasoning, a tool name or tool arguments by the state it
is read in.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import NamedTuple

import msgspec

__all__ = ["Event", "Grammar", "Kind", "State", "Step"]


class State(enum.IntEnum):
    """Where the reader is in the output."""

    CONTENT = 0
    REASONING = 1
    MESSAGE_HEADER = 2
    TOOL_PREAMBLE = 3
    TOOL_NAME = 4
    TOOL_ARGS = 5
    TOOL_BETWEEN = 6


TOOL_STATES = frozenset((State.TOOL_PREAMBLE, State.TOOL_NAME, State.TOOL_ARGS, State.TOOL_BETWEEN))
"""The states inside a tool-call region."""


class Kind(enum.IntEnum):
    """What an event says."""

    TEXT = 0
    REASONING_START = 1
    REASONING = 2
    REASONING_END = 3
    CALL_START = 4
    NAME = 5
    ARGS = 6
    CALL_END = 7


class Event(NamedTuple):
    """One thing the reader found: its kind, its text and the tool call it belongs to."""

    kind: Kind
    value: str
    call: int


class Step(NamedTuple):
    """Where a terminal leads and what it emits on the way."""

    next: State
    events: tuple[Kind, ...] = ()
    text_only: bool = False
    """Taken only while no token ids have been seen (else the terminal is read as text)."""


DEFAULT_TEXT_KINDS: Mapping[State, Kind] = {
    State.CONTENT: Kind.TEXT,
    State.REASONING: Kind.REASONING,
    State.TOOL_NAME: Kind.NAME,
    State.TOOL_ARGS: Kind.ARGS,
}


class Grammar(msgspec.Struct, frozen=True, eq=False, kw_only=True):
    """A model's output format (hashed by identity: build each once and share it)."""

    name: str
    terminals: Mapping[str, str | tuple[str, ...]]
    """Terminal name -> its spelling(s)."""
    steps: Mapping[tuple[State, str], Step]
    token_terminals: Mapping[str, str] = msgspec.field(default_factory=dict)
    """Terminal name -> the token whose id also stands for it."""
    text_kinds: Mapping[State, Kind] = msgspec.field(
        default_factory=lambda: dict(DEFAULT_TEXT_KINDS)
    )
    """The event text read in each state makes (text in other states is dropped)."""
    initial: State = State.CONTENT
    wait_for_reasoning: bool | None = None
    arg_converter: Callable[[str, bool], str] | None = None
    """Raw argument text (and whether it is partial) -> arguments JSON."""
    stream_arg_deltas: bool = True
    json_args: bool = True
    """Arguments are JSON text, streamed with their top-level closing brace held back."""
    array_body: bool = False
    """The tool region is one JSON array of call objects, one call per element (no closing
    marker: the array's ``]`` ends it)."""
    arg_structural_chars: frozenset[str] | None = None
    preserve_tokens: frozenset[str] = frozenset()
    """Special tokens that are neither terminals nor dropped."""
    turn_boundary_tokens: frozenset[str] = frozenset()
    strip_trailing_reasoning_whitespace: bool = True
    drop_blank_content_before_tools: bool = True
    strip_content_with_tools: bool = True
    validate_tool_names: bool = False

    def spellings(self) -> list[tuple[str, str]]:
        """Every ``(spelling, terminal name)`` pair."""
        return [
            (lit, name)
            for name, value in self.terminals.items()
            for lit in ((value,) if isinstance(value, str) else value)
        ]

    def literal(self, name: str) -> str | None:
        """The first spelling of terminal ``name``."""
        value = self.terminals.get(name)
        if isinstance(value, tuple):
            return value[0] if value else None
        return value
