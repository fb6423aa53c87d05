"""Tool calls out of a grammar's events: the base of the tool parsers vLLM 0.32 runs on its parser
engine (``ParserEngine`` seen through ``ParserEngineToolAdapter``, ``vllm/parser/engine/``).

The reader (:class:`Machine`) starts in content. Events open call slots, name them and feed them
argument text; a call's name is sent once it is known (and, where the grammar says so, one of
the request's tools), with an id; its arguments are sent as they become stable: raw for JSON
formats, else converted to JSON by the grammar's converter, typed by the tool's schema, and cut
before the last value unless that value is a string that stays a string. Whitespace-only content
waits until it is known not to precede a call.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from vllm_frontend.chat.engine.coerce import (
    has_tool,
    schema_types,
    tool_properties,
    typed_arguments,
)
from vllm_frontend.chat.engine.grammar import Event, Grammar, Kind, State
from vllm_frontend.chat.engine.machine import Machine, compile_grammar
from vllm_frontend.chat.parsed import OutputDelta, ToolCallDelta, new_tool_call_id
from vllm_frontend.chat.tools.base import ExtractedToolCalls, ToolParser

__all__ = ["EngineToolParser", "Slot", "safe_arg_prefix"]

_NAME = re.compile(r'"name"\s*:\s*"([^"]*)"')


class Slot:
    """One tool call being read."""

    __slots__ = ("_parts", "id", "name", "name_sent", "streamed_json", "string_keys")

    def __init__(self) -> None:
        """An empty call."""
        self.id = ""
        self.name = ""
        self._parts: list[str] = []
        self.name_sent = False
        self.string_keys: set[str] | None = None
        self.streamed_json = ""

    @property
    def args(self) -> str:
        """The raw argument text so far."""
        if len(self._parts) > 1:
            self._parts = ["".join(self._parts)]
        return self._parts[0] if self._parts else ""

    def add_args(self, text: str) -> None:
        """Append raw argument text."""
        self._parts.append(text)


class EngineToolParser(ToolParser):
    """A tool parser reading its output with a :class:`Grammar`."""

    engine_based = True
    needs_special_tokens = True
    special_tokens_without_tools = True
    GRAMMAR: ClassVar[Grammar]

    def __init__(
        self,
        vocab: Mapping[str, int],
        tools: Sequence[Mapping[str, Any]] = (),
        *,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        special_tokens: Mapping[str, int] | None = None,
        skip_reasoning: bool = False,
        tool_choice: Any = "auto",
        reasoning_pass: bool = False,
    ) -> None:
        """``special_tokens``: the tokenizer's special tokens (dropped from the output unless
        the grammar names them); ``skip_reasoning``: no reasoning parser is configured, so
        reasoning-only markers are text; ``tool_choice: "none"`` suppresses the calls;
        ``reasoning_pass``: this reader is a reasoning parser's (vLLM's reasoning adapter):
        it starts in the grammar's initial state and reads tool markup as text."""
        super().__init__(vocab, tools)
        self.vocab = vocab
        self.tool_choice = tool_choice
        self.grammar = self.grammar_with(vocab, chat_template_kwargs or {})
        compiled = compile_grammar(self.grammar, vocab, special_tokens or {})
        self.initial = self.grammar.initial if reasoning_pass else State.CONTENT
        self.machine = Machine(compiled, self.initial)
        self.machine.skip_reasoning = skip_reasoning
        self.machine.skip_tools = reasoning_pass
        self.suppress = tool_choice == "none" and bool(tools)
        grammar = self.grammar
        self._converter = grammar.arg_converter
        self.has_reasoning = (
            "THINK_END" in grammar.token_terminals
            or "THINK_START" in grammar.terminals
            or "THINK_END" in grammar.terminals
            or grammar.initial == State.REASONING
        )
        self._properties: dict[str, dict[str, Any]] = {}
        self._reset()
        self._streaming = False

    def _typed(self, args_json: str, name: str) -> str:
        """Arguments typed by the schema of tool ``name`` (looked up once per name)."""
        if not self.tools or not name:
            return args_json
        properties = self._properties.get(name)
        if properties is None:
            properties = self._properties[name] = tool_properties(self.tools, name)
        return typed_arguments(args_json, properties)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Its grammar's special tokens are looked up by id (startup builds the vocabulary the
        parsers see from ``optional_tokens``)."""
        super().__init_subclass__(**kwargs)
        if "GRAMMAR" in cls.__dict__ or "grammar_for" in cls.__dict__:
            grammar = cls.grammar_for({})
            tokens = dict.fromkeys((*cls.optional_tokens, *grammar.token_terminals.values()))
            cls.optional_tokens = tuple(tokens)

    @classmethod
    def grammar_for(cls, chat_template_kwargs: Mapping[str, Any]) -> Grammar:
        """The grammar for a request with these chat template kwargs (the default one for
        none)."""
        return cls.GRAMMAR

    def grammar_with(
        self, vocab: Mapping[str, int], chat_template_kwargs: Mapping[str, Any]
    ) -> Grammar:
        """The grammar for this vocabulary (the parser's tokens found in it) and request."""
        return self.grammar_for(chat_template_kwargs)

    def _reset(self) -> None:
        self.machine.reset(self.initial)
        self.reasoning_ended = not self.has_reasoning
        self.slots: list[Slot] = []
        self._deferred_content = ""
        self._deferred_reasoning = ""
        self._content_seen = False

    # -- the ToolParser interface ------------------------------------------------------------

    def extract(self, text: str) -> ExtractedToolCalls:
        """One pass over a whole (reasoning-free) output, from the content state."""
        self._reset()
        events = self.feed(text, ())
        events += self.machine.finish()
        delta = self._delta(events, finished=True)
        calls, ids = self._calls()
        content = delta.content if delta is not None else None
        if content:
            content = self._strip_content(content, bool(calls))
        return ExtractedToolCalls(bool(calls), calls, content, ids)

    def stream(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> OutputDelta | None:
        """What this delta (text and ids) adds."""
        if not self._streaming:
            self._streaming = True
            self._reset()
        return self._strip_reasoning(self._delta(self.feed(delta_text, delta_ids)))

    def feed(self, text: str, token_ids: Sequence[int]) -> list[Event]:
        """The reader's events for one delta (a family may adjust what it reads)."""
        return self.machine.feed(text, token_ids)

    def finish_stream(self) -> OutputDelta | None:
        """What the end of the stream releases (held text, an unfinished call)."""
        if not self._streaming:
            return None
        events = self.machine.finish()
        if events or self._deferred_content:
            return self._delta(events, finished=True)
        return None

    def remaining_arguments(self) -> str:
        """Nothing: arguments are sent as they are read."""
        return ""

    # -- events to deltas --------------------------------------------------------------------

    def _delta(self, events: list[Event], finished: bool = False) -> OutputDelta | None:
        if not events and not self._deferred_content:
            return None
        calls: list[ToolCallDelta] = []
        content: list[str] = []
        reasoning: list[str] = []
        carried = self._deferred_content
        seen_tool = False
        suppress = self.suppress
        for event in events:
            kind = event.kind
            if kind == Kind.TEXT:
                if seen_tool:
                    self._deferred_content += event.value
                else:
                    content.append(event.value)
            elif kind == Kind.REASONING:
                reasoning.append(event.value)
            elif kind == Kind.REASONING_END:
                self.reasoning_ended = True
            elif kind == Kind.REASONING_START or suppress:
                continue
            else:
                seen_tool = True
                if kind == Kind.CALL_START:
                    while len(self.slots) <= event.call:
                        self.slots.append(Slot())
                elif kind == Kind.NAME:
                    self.slots[event.call].name += event.value
                elif kind == Kind.ARGS:
                    self.on_args(event, calls)
                else:
                    self._on_end(event, calls)
        if len(calls) > 1:
            calls = _coalesce(calls)
        if self._deferred_content and (not seen_tool or not calls):
            now = self._deferred_content[len(carried) :]
            if carried:
                content.insert(0, carried)
            if now:
                content.append(now)
            self._deferred_content = ""
        text = "".join(content)
        if not self._content_seen and text:
            if text.strip():
                self._content_seen = True
            elif self.slots:
                if self.grammar.drop_blank_content_before_tools:
                    text = ""
            elif not finished:
                self._deferred_content = text
                text = ""
        joined_reasoning = "".join(reasoning)
        if not text and not calls and not joined_reasoning:
            return None
        return OutputDelta(
            content=text or None, reasoning=joined_reasoning or None, tool_calls=calls
        )

    def _strip_reasoning(self, delta: OutputDelta | None) -> OutputDelta | None:
        """Trailing reasoning whitespace waits until more reasoning follows."""
        if not self.grammar.strip_trailing_reasoning_whitespace:
            return delta
        if delta is not None and delta.reasoning is not None:
            combined = self._deferred_reasoning + delta.reasoning
            trimmed = combined.rstrip()
            self._deferred_reasoning = combined[len(trimmed) :]
            delta.reasoning = trimmed or None
            if delta.reasoning is None and delta.content is None and not delta.tool_calls:
                return None
        elif self._deferred_reasoning and self.reasoning_ended:
            self._deferred_reasoning = ""
        return delta

    def _strip_content(self, content: str, tools_called: bool) -> str | None:
        if tools_called:
            if self.grammar.strip_content_with_tools:
                content = content.strip()
            elif self.grammar.drop_blank_content_before_tools and not content.strip():
                content = ""
        return content or None

    # -- calls -------------------------------------------------------------------------------

    def _accept(self, name: str) -> bool:
        if not name:
            return False
        if not self.grammar.validate_tool_names or not self.tools:
            return True
        return has_tool(self.tools, name)

    def _ensure_id(self, slot: Slot) -> None:
        if not slot.id:
            slot.id = self.new_id()

    def new_id(self) -> str:
        """A fresh tool-call id in the family's format."""
        return new_tool_call_id()

    def _start(self, slot: Slot, name: str) -> None:
        slot.name = name
        slot.name_sent = True
        slot.string_keys = _string_keys(tool_properties(self.tools, name))
        self._ensure_id(slot)

    def emit_name(self, index: int, calls: list[ToolCallDelta], name: str | None) -> None:
        """Send the call's name (with its id) if it is acceptable."""
        if name is None or not self._accept(name):
            return
        slot = self.slots[index]
        self._start(slot, name)
        calls.append(ToolCallDelta(index, id=slot.id, name=name))

    def on_args(self, event: Event, calls: list[ToolCallDelta]) -> None:
        """Raw argument text: send the name once known, then what the arguments add."""
        index, value = event.call, event.value
        slot = self.slots[index]
        if value:
            slot.add_args(value)
        if not slot.name_sent:
            if slot.name:
                self.emit_name(index, calls, slot.name)
            elif value:
                self.emit_name(index, calls, self._name_in_args(slot))
        elif value:
            diff = self._args_delta(slot, value)
            if diff:
                calls.append(ToolCallDelta(index, arguments=diff))

    def _on_end(self, event: Event, calls: list[ToolCallDelta]) -> None:
        index = event.call
        if index >= len(self.slots):
            return
        self.end_call(self.slots[index], event)
        remaining = self._flush_args(index)
        slot = self.slots[index]
        if not slot.name_sent:
            name = slot.name or self._name_in_args(slot) or ""
            if self._accept(name):
                self._start(slot, name)
                calls.append(ToolCallDelta(index, id=slot.id, name=name, arguments=remaining or ""))
                remaining = None
        if remaining and slot.name_sent:
            calls.append(ToolCallDelta(index, arguments=remaining))

    def end_call(self, slot: Slot, event: Event) -> None:
        """A family's look at a call as it ends (before its name is settled)."""

    def _args_delta(self, slot: Slot, raw: str) -> str | None:
        converter = self._converter
        if converter is None:
            return raw
        grammar = self.grammar
        if not grammar.stream_arg_deltas:
            return None
        structural = grammar.arg_structural_chars
        if structural is not None and structural.isdisjoint(raw):
            return None
        try:
            current = converter(slot.args, True)
        except (ValueError, TypeError):
            return None
        if not current:
            return None
        if slot.name:
            current = self._typed(current, slot.name)
        prev = slot.streamed_json
        safe = safe_arg_prefix(current, slot.string_keys)
        if not safe or safe == prev:
            return None
        if prev and not safe.startswith(prev):
            return None
        diff = safe[len(prev) :]
        if diff:
            slot.streamed_json = safe
            return diff
        return None

    def _flush_args(self, index: int) -> str | None:
        converter = self._converter
        if converter is None:
            return None
        slot = self.slots[index]
        try:
            final = converter(slot.args, False)
        except (ValueError, TypeError):
            return None
        if final:
            final = self._typed(final, slot.name)
        prev = slot.streamed_json
        if final and len(final) > len(prev):
            if prev and not final.startswith(prev):
                return None
            slot.streamed_json = final
            return final[len(prev) :]
        return None

    def _name_in_args(self, slot: Slot) -> str | None:
        """The name of a call whose name is not known from its markers."""
        m = _NAME.search(slot.args)
        return m.group(1) or None if m else None

    def _calls(self) -> tuple[list[tuple[str, str]], list[str]]:
        """The calls read so far (whole-output form) and their ids."""
        calls: list[tuple[str, str]] = []
        ids: list[str] = []
        for slot in self.slots:
            if not slot.name and not slot.args:
                continue
            name = slot.name.strip()
            raw = slot.args
            if not name and raw.strip():
                name, args = self.name_and_args(raw)
            elif raw.strip():
                converter = self._converter
                if converter is not None:
                    try:
                        args = converter(raw, False)
                    except (ValueError, TypeError):
                        args = self.args_json(raw, name)
                else:
                    args = self.args_json(raw, name)
            else:
                args = "{}"
            if self._accept(name):
                self._ensure_id(slot)
                calls.append((name, self._typed(args, name)))
                ids.append(slot.id)
        return calls, ids

    def args_json(self, raw: str, name: str) -> str:
        """Arguments JSON of a raw argument body the converter could not read."""
        if not raw.strip():
            return "{}"
        return _name_and_args(raw)[1]

    def name_and_args(self, raw: str) -> tuple[Any, str]:
        """Name and arguments JSON of an unnamed call's raw body (a JSON envelope)."""
        return _name_and_args(raw)


def _name_and_args(raw: str) -> tuple[Any, str]:
    raw = raw.strip()
    try:
        parsed = json.loads(raw)
    except ValueError:
        return "", raw
    if not isinstance(parsed, dict):
        return "", raw
    name = parsed.get("name", "")
    for key in ("arguments", "parameters"):
        if key in parsed:
            value = parsed[key]
            return name, value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    rest = {k: v for k, v in parsed.items() if k != "name"}
    return name, json.dumps(rest, ensure_ascii=False)


def _string_keys(properties: Mapping[str, Any]) -> set[str] | None:
    """Keys whose trailing string value may stream before it is closed (``None``: no schema,
    every string stays a string)."""
    if not properties:
        return None
    return {key for key, schema in properties.items() if set(schema_types(schema)) == {"string"}}


def _coalesce(calls: list[ToolCallDelta]) -> list[ToolCallDelta]:
    """One piece per call index (ids, names and argument text merged in order)."""
    merged: dict[int, ToolCallDelta] = {}
    for call in calls:
        seen = merged.get(call.index)
        if seen is None:
            merged[call.index] = call
            continue
        if call.id is not None and seen.id is None:
            seen.id = call.id
        if call.name is not None and seen.name is None:
            seen.name = call.name
        if call.arguments is not None:
            seen.arguments = (
                call.arguments if seen.arguments is None else seen.arguments + call.arguments
            )
    return calls if len(merged) == len(calls) else list(merged.values())


_JSON_TOKEN = re.compile(r'"((?:[^"\\]|\\.)*)("?)|[{}\[\]:]', re.DOTALL)


def safe_arg_prefix(text: str, string_keys: set[str] | None = None) -> str:
    """The part of an arguments JSON object that cannot change as more is read: up to the last
    top-level value, plus that value if it is a string of a key in ``string_keys`` (all keys
    when ``None``), without its closing quote."""
    last_colon = -1
    last_key: str | None = None
    pending: str | None = None
    depth = 0
    for m in _JSON_TOKEN.finditer(text):
        token = m.group(0)
        if token[0] == '"':
            if not m.group(2):
                break  # a string that runs to the end
            if depth == 1:
                pending = m.group(1)
        elif token in "{[":
            depth += 1
        elif token in "}]":
            depth -= 1
        elif depth == 1:
            last_colon = m.start()
            last_key = pending
            pending = None
    if last_colon < 0:
        return ""
    end = last_colon + 1
    n = len(text)
    while end < n and text[end] in " \t\n\r":
        end += 1
    if end >= n or text[end] != '"':
        return text[:end]
    if string_keys is not None and last_key not in string_keys:
        return text[:end]
    value = _JSON_TOKEN.match(text, end)
    if value is not None and value.group(2):
        return text[: value.end() - 1]
    return text
