"""The reader of one output: token ids and text in, events out (vLLM 0.32's
``StreamingParserEngine``, tool-parsing side).

Special tokens among the delta's ids split its text (:class:`TokenSplitter`), the lexer finds
terminal spellings in the text between them, and each terminal moves the state machine of the
:class:`Grammar`; text is classified by the state it is read in. Once any token ids have been
seen, the spelling of a terminal that is also a special token is plain text (the real one comes
by id). Arguments read as JSON are streamed with a top-level closing brace held back.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

from vllm_frontend.chat.engine.grammar import TOOL_STATES, Event, Grammar, Kind, State, Step
from vllm_frontend.chat.engine.lexer import DROP, Lexer, LexerTable, Piece, TokenSplitter

__all__ = ["Compiled", "Machine", "compile_grammar"]

_PLAIN = frozenset((State.CONTENT, State.REASONING))
_REASONING_KINDS = frozenset((Kind.REASONING_START, Kind.REASONING_END))


class Compiled:
    """What a grammar needs against one vocabulary, worked out once and shared."""

    __slots__ = (
        "grammar",
        "has_drops",
        "id_map",
        "id_terminals",
        "reasoning_markup",
        "table",
        "tool_exits",
        "tool_terminals",
    )

    def __init__(
        self, grammar: Grammar, vocab: Mapping[str, int], special_tokens: Mapping[str, int]
    ) -> None:
        """``special_tokens``: the tokenizer's special tokens (text -> id), which the reader
        drops unless the grammar names them."""
        self.grammar = grammar
        id_map: dict[int, tuple[str, str]] = {}
        for name, text in grammar.token_terminals.items():
            if (tid := vocab.get(text)) is not None:
                id_map[tid] = (name, text)
        spellings = grammar.spellings()
        configured = (
            set(grammar.token_terminals.values())
            | {lit for lit, _ in spellings}
            | grammar.preserve_tokens
        )
        drops = {t: i for t, i in special_tokens.items() if t not in configured}
        self.has_drops = bool(drops)
        for text, tid in drops.items():
            id_map[tid] = (DROP, text)
        self.id_map = id_map
        self.id_terminals = frozenset(name for name, _ in id_map.values())
        self.table = LexerTable([*spellings, *((t, DROP) for t in drops)])
        self.reasoning_markup = _reasoning_markup(grammar)
        steps = grammar.steps.items()
        self.tool_terminals = frozenset(
            terminal
            for (state, terminal), step in steps
            if step.next in TOOL_STATES or state in TOOL_STATES
        )
        """Terminals that enter, move within or leave a tool-call region."""
        self.tool_exits = frozenset(
            terminal
            for (state, terminal), step in steps
            if state in TOOL_STATES and step.next not in TOOL_STATES
        )
        """Terminals that leave a tool-call region."""


def _reasoning_markup(grammar: Grammar) -> frozenset[str]:
    """Terminals that only open or close reasoning (passed through as text when no reasoning
    parser is configured); none if any of them also takes part in other structure."""
    markers = {
        terminal
        for (state, terminal), step in grammar.steps.items()
        if State.REASONING in (state, step.next) and step.next not in TOOL_STATES
    }
    for (state, terminal), step in grammar.steps.items():
        if terminal in markers and (
            state not in _PLAIN
            or step.next not in _PLAIN
            or not _REASONING_KINDS.issuperset(step.events)
        ):
            return frozenset()
    return frozenset(markers)


@functools.lru_cache(maxsize=64)
def _compiled(
    grammar: Grammar, vocab_items: frozenset[tuple[str, int]], special: frozenset[tuple[str, int]]
) -> Compiled:
    return Compiled(grammar, dict(vocab_items), dict(special))


def compile_grammar(
    grammar: Grammar, vocab: Mapping[str, int], special_tokens: Mapping[str, int]
) -> Compiled:
    """:class:`Compiled` for ``grammar`` (cached: the same inputs give the same object)."""
    wanted = {t: vocab[t] for t in grammar.token_terminals.values() if t in vocab}
    return _compiled(grammar, frozenset(wanted.items()), frozenset(special_tokens.items()))


class Machine:
    """Reads one output (create one per choice)."""

    def __init__(self, compiled: Compiled, initial: State | None = None) -> None:
        """A reader in ``initial`` state (the grammar's by default)."""
        self.compiled = compiled
        self.grammar = compiled.grammar
        self.steps = self.grammar.steps
        self.text_kinds = self.grammar.text_kinds
        self.splitter = TokenSplitter(compiled.id_map)
        self.lexer = Lexer(compiled.table)
        self.skip_reasoning = False
        """Reasoning-only markers are text (no reasoning parser is configured)."""
        self.skip_tools = False
        """Tool-call markup is text of the state it is read in (the reasoning pass of a parser
        whose tool calls another pass reads): the reader never enters a tool state."""
        self._in_skipped_tool = False
        self.reset(initial)

    def reset(self, initial: State | None = None) -> None:
        """Start over in ``initial`` state."""
        self.state = initial if initial is not None else self.grammar.initial
        self.index = -1
        self.had_ids = False
        self.splitter = TokenSplitter(self.compiled.id_map)
        self.lexer.buffer = ""
        self._header = ""
        self._args = ""
        self._depth = 0
        self._in_string = False
        self._escape = False
        self._array_started = False
        self._in_element = False
        self._in_skipped_tool = False

    # -- input -------------------------------------------------------------------------------

    def feed(self, text: str, token_ids: Sequence[int]) -> list[Event]:
        """The events one delta completes."""
        if token_ids:
            self.had_ids = True
        splitter = self.splitter
        if (
            text
            and not self.lexer.buffer
            and not splitter.waiting
            and self.compiled.table.first_chars.isdisjoint(text)
            and not splitter.has_terminal(token_ids)
        ):
            return self._text(text)
        return self._pieces(splitter.split(text, token_ids))

    def finish(self) -> list[Event]:
        """The events the end of the output completes."""
        events = self._pieces(self.splitter.flush())
        events += self._lexed(self.lexer.flush())
        if self._args:
            events.append(Event(Kind.ARGS, self._args, self.index))
            self._args = ""
        state = self.state
        if state in TOOL_STATES:
            # In array mode a closed element has had its end; only an open one needs it.
            open_call = self._in_element if self.grammar.array_body else True
            if open_call and self.index >= 0:
                events.append(Event(Kind.CALL_END, "", self.index))
            self.state = State.CONTENT
        elif state == State.REASONING:
            events.append(Event(Kind.REASONING_END, "", self.index))
            self.state = State.CONTENT
        elif state == State.MESSAGE_HEADER:
            if self._header:
                events.append(Event(Kind.TEXT, self._header, self.index))
                self._header = ""
            self.state = State.CONTENT
        return events

    def _pieces(self, pieces: list[Piece]) -> list[Event]:
        events: list[Event] = []
        for piece in pieces:
            if piece.terminal is not None:
                events += self._lexed(self.lexer.flush())
                events += self._terminal(piece.terminal, piece.text)
            elif piece.text:
                events += self._lexed(self.lexer.feed(piece.text))
            elif piece.tokens:
                events += self._text("")
        return events

    def _lexed(self, pieces: list[Piece]) -> list[Event]:
        events: list[Event] = []
        strict = self.compiled.id_terminals if self.had_ids else ()
        for piece in pieces:
            terminal = piece.terminal
            if terminal is None or terminal in strict:
                if piece.text:
                    events += self._text(piece.text)
            else:
                events += self._terminal(terminal, piece.text)
        return events

    # -- state machine -----------------------------------------------------------------------

    def _terminal(self, terminal: str, value: str) -> list[Event]:
        step = self.steps.get((self.state, terminal))
        if step is None:
            if terminal == DROP and self.compiled.has_drops:
                return []
            if self.skip_tools and terminal in self.compiled.tool_exits:
                self._in_skipped_tool = False
            return self._text(value)
        if self.skip_reasoning and terminal in self.compiled.reasoning_markup:
            return self._text(value)
        if self.skip_tools and terminal in self.compiled.tool_terminals:
            skipped = self._skip_tool_terminal(step, terminal, value)
            if skipped is not None:
                return skipped
        if step.text_only and self.had_ids:
            return self._text(value)
        return self._take(step, value)

    def _skip_tool_terminal(self, step: Step, terminal: str, value: str) -> list[Event] | None:
        """A tool terminal while tool parsing is skipped: its text, in the state it is read in
        (a terminal that ends reasoning still ends it, its text then content); None for a
        closer outside any skipped tool region, which takes its ordinary step."""
        opens = step.next in TOOL_STATES
        exits = terminal in self.compiled.tool_exits
        if exits and not opens and not self._in_skipped_tool:
            return None
        if opens:
            self._in_skipped_tool = True
        elif exits:
            self._in_skipped_tool = False
        from_header = self.state == State.MESSAGE_HEADER
        if from_header:
            self._header = ""
        if Kind.REASONING_END in step.events:
            self.state = State.CONTENT
            return [
                Event(Kind.REASONING_END, value, self.index),
                Event(Kind.TEXT, value, self.index),
            ]
        if from_header:
            self.state = State.CONTENT
            return [Event(Kind.TEXT, value, self.index)]
        kind = self.text_kinds.get(self.state)
        return [] if kind is None else [Event(kind, value, self.index)]

    def _text(self, text: str) -> list[Event]:
        state = self.state
        if state == State.MESSAGE_HEADER:
            self._header += text
            return []
        if state == State.TOOL_ARGS:
            if self.grammar.array_body:
                return self._array(text)
            if self.grammar.json_args:
                return self._json_args(text)
            return [Event(Kind.ARGS, text, self.index)]
        kind = self.text_kinds.get(state)
        return [] if kind is None else [Event(kind, text, self.index)]

    def _take(self, step: Step, value: str) -> list[Event]:
        events: list[Event] = []
        previous = self.state
        if previous == State.TOOL_ARGS and step.next != State.TOOL_ARGS and self._args:
            events.append(Event(Kind.ARGS, self._args, self.index))
            self._args = ""
        header = ""
        if previous == State.MESSAGE_HEADER:
            header, self._header = self._header, ""
        self.state = step.next
        for kind in step.events:
            if kind == Kind.CALL_START:
                self.index += 1
            text = header if previous == State.MESSAGE_HEADER and kind == Kind.TEXT else value
            if kind == Kind.TEXT and not text:
                continue
            events.append(Event(kind, text, self.index))
        if self.state == State.TOOL_ARGS:
            self._depth = 0
            self._in_string = self._escape = False
            if self.grammar.array_body:
                self._array_started = self._in_element = False
        return events

    def _json_args(self, text: str) -> list[Event]:
        """Argument JSON, streamed as it comes except a closing brace at depth zero, held until
        more follows (or the call ends)."""
        events: list[Event] = []
        for ch in text:
            piece = self._json_char(ch)
            if piece is not None:
                events.append(Event(Kind.ARGS, piece, self.index))
        return events

    def _json_char(self, ch: str) -> str | None:
        """One character of argument JSON: what it releases (None while it is held)."""
        self._args += ch
        if self._escape:
            self._escape = False
        elif self._in_string:
            if ch == "\\":
                self._escape = True
            elif ch == '"':
                self._in_string = False
        elif ch == '"':
            self._in_string = True
        elif ch in "{[":
            self._depth += 1
        elif ch in "}]":
            if self._depth > 0:
                self._depth -= 1
            if self._depth == 0:
                return None
        piece, self._args = self._args, ""
        return piece

    def _array(self, text: str) -> list[Event]:
        """A JSON array of call objects after the marker: one call per element; the array's
        ``]`` ends the region (the rest is content); anything else than an array is content."""
        events: list[Event] = []
        for i, ch in enumerate(text):
            if self.state != State.TOOL_ARGS:
                events += self._text(text[i:])
                break
            events += self._array_char(ch)
        return events

    def _array_char(self, ch: str) -> list[Event]:
        if self._in_element:
            piece = self._json_char(ch)
            events = [] if piece is None else [Event(Kind.ARGS, piece, self.index)]
            if ch == "}" and not self._in_string and not self._escape and self._depth == 0:
                self._in_element = False
                if self._args:
                    events.append(Event(Kind.ARGS, self._args, self.index))
                    self._args = ""
                events.append(Event(Kind.CALL_END, "", self.index))
            return events
        if ch in " \t\r\n":
            return []
        if not self._array_started:
            if ch == "[":
                self._array_started = True
                return []
            return self._leave_array(ch)
        if ch == ",":
            return []
        if ch == "{":
            self.index += 1
            self._args = ""
            self._depth = 0
            self._in_string = self._escape = False
            self._in_element = True
            events = [Event(Kind.CALL_START, "", self.index)]
            piece = self._json_char(ch)
            if piece is not None:
                events.append(Event(Kind.ARGS, piece, self.index))
            return events
        if ch == "]":
            self.state = State.CONTENT
            self._array_started = self._in_element = False
            return []
        return self._leave_array(ch)

    def _leave_array(self, ch: str) -> list[Event]:
        self.state = State.CONTENT
        self._array_started = self._in_element = False
        return self._text(ch)
