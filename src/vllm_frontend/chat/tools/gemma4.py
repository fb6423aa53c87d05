"""Gemma 4's tool calls and channel reasoning (vLLM 0.32's ``vllm/parser/gemma4.py``)::

    <|channel>thought
    …reasoning…<channel|><|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}<tool_call|>

Arguments are ``key:value`` pairs: strings between ``<|"|>`` delimiters, nested ``{…}`` and
``[…]``, and bare values (kept as text, then typed by the tool's schema). The reasoning's
leading ``thought\\n`` is dropped; a first delta that looks like the inside of a channel
(``thought\\n…`` or a ``<channel|>``) is read as if ``<|channel>`` came first.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

from vllm_frontend.chat.engine.calls import EngineToolParser
from vllm_frontend.chat.engine.grammar import Event, Grammar, Kind, State, Step
from vllm_frontend.chat.parsed import OutputDelta

__all__ = ["Gemma4ToolParser", "gemma4_arguments", "gemma4_grammar"]

CHANNEL_START = "<|channel>"
CHANNEL_END = "<channel|>"
TOOL_START = "<|tool_call>"
TOOL_END = "<tool_call|>"
QUOTE = '<|"|>'
TURN = "<|turn>"
TOOL_RESPONSE = "<|tool_response>"
_THOUGHT = "thought\n"


# -- the argument format -----------------------------------------------------------------------


def _skip(text: str, i: int, chars: str) -> int:
    n = len(text)
    while i < n and text[i] in chars:
        i += 1
    return i


def _block_end(text: str, i: int, opener: str, closer: str) -> tuple[int, bool]:
    """From just inside an ``opener`` at ``i``: the index after its ``closer`` (quoted strings
    skipped), and whether it was found (else the end of the text)."""
    depth, n = 1, len(text)
    while i < n:
        if text.startswith(QUOTE, i):
            close = text.find(QUOTE, i + len(QUOTE))
            i = n if close < 0 else close + len(QUOTE)
            continue
        ch = text[i]
        i += 1
        if ch == opener:
            depth += 1
        elif ch == closer:
            depth -= 1
            if depth == 0:
                return i, True
    return i, False


def _nested(text: str, i: int) -> tuple[Any, int]:
    """The object or list opening at ``i``, and where reading goes on."""
    is_object = text[i] == "{"
    start = i + 1
    end, closed = _block_end(text, start, *("{}" if is_object else "[]"))
    body = text[start : end - 1] if closed else text[start:end]
    read = _object if is_object else _list
    return read(body, not closed), end


def _object(text: str, partial: bool = False) -> dict[str, Any]:
    """``key:value,…`` as a dict. ``partial``: a value that may still grow is left out."""
    result: dict[str, Any] = {}
    if not text.strip():
        return result
    i, n = 0, len(text)
    while True:
        i = _skip(text, i, " ,\n\t")
        if i >= n:
            return result
        colon = text.find(":", i)
        if colon < 0:
            return result
        key = text[i:colon].strip()
        if key.startswith(QUOTE) and key.endswith(QUOTE):
            key = key[len(QUOTE) : -len(QUOTE)]
        i = _skip(text, colon + 1, " \n\t")
        if i >= n:
            if not partial:
                result[key] = ""
            return result
        if text.startswith(QUOTE, i):
            start = i + len(QUOTE)
            close = text.find(QUOTE, start)
            if close < 0:
                value = text[start:]
                result[key] = _without_partial_quote(value) if partial else value
                return result
            result[key] = text[start:close]
            i = close + len(QUOTE)
        elif text[i] in "{[":
            result[key], i = _nested(text, i)
        else:
            start = i
            while i < n and text[i] not in ",}]":
                i += 1
            if (partial and i >= n) or i == start:
                return result
            raw = text[start:i].strip()
            if partial and raw.endswith("."):
                return result
            result[key] = raw


def _list(text: str, partial: bool = False) -> list[Any]:
    """``value,…`` as a list."""
    items: list[Any] = []
    i, n = 0, len(text)
    while True:
        i = _skip(text, i, " ,\n\t")
        if i >= n:
            return items
        if text.startswith(QUOTE, i):
            start = i + len(QUOTE)
            close = text.find(QUOTE, start)
            if close < 0:
                items.append(text[start:])
                return items
            items.append(text[start:close])
            i = close + len(QUOTE)
        elif text[i] in "{[":
            item, i = _nested(text, i)
            items.append(item)
        else:
            start = i
            while i < n and text[i] not in ",]":
                i += 1
            if (partial and i >= n) or i == start:
                return items
            raw = text[start:i].strip()
            if partial and raw.endswith("."):
                return items
            items.append(raw)


def _without_partial_quote(value: str) -> str:
    for k in range(len(QUOTE), 0, -1):
        if value.endswith(QUOTE[:k]):
            return value[:-k]
    return value


def gemma4_arguments(raw: str, partial: bool) -> str:
    """Gemma 4 arguments as JSON (a closing ``}``, or an unbalanced ``)``, dropped first)."""
    text = raw.strip()
    if text.endswith("}") or (text.endswith(")") and text.count("(") < text.count(")")):
        text = text[:-1]
    return json.dumps(_object(text, partial), ensure_ascii=False)


# -- the grammar -------------------------------------------------------------------------------


@functools.cache
def gemma4_grammar(thinking: bool) -> Grammar:
    """The Gemma 4 grammar; ``thinking`` (``enable_thinking``) makes reasoning open at the end
    of a prompt without channel markers."""
    C, R, P, N, A = (
        State.CONTENT,
        State.REASONING,
        State.TOOL_PREAMBLE,
        State.TOOL_NAME,
        State.TOOL_ARGS,
    )
    markers = {
        "THINK_START": CHANNEL_START,
        "THINK_END": CHANNEL_END,
        "TOOL_START": TOOL_START,
        "TOOL_END": TOOL_END,
    }
    ends_call = Step(C, (Kind.CALL_END,))
    steps = {
        (C, "THINK_START"): Step(R, (Kind.REASONING_START,)),
        (R, "THINK_START"): Step(R),
        (R, "THINK_END"): Step(C, (Kind.REASONING_END,)),
        (R, "TOOL_START"): Step(P, (Kind.REASONING_END, Kind.CALL_START)),
        (C, "TOOL_START"): Step(P, (Kind.REASONING_END, Kind.CALL_START)),
        (P, "TOOL_END"): ends_call,
        (P, "CALL_PREFIX"): Step(N),
        (P, "COLON"): Step(N),  # "<|tool_call>:name{…}" without "call"
        (N, "OPEN_BRACE"): Step(A),
        (N, "OPEN_PAREN"): Step(A),
        (N, "TOOL_END"): ends_call,
        (A, "TOOL_END"): ends_call,
        (C, "TOOL_END"): Step(C),
        (C, "THINK_END"): Step(C),
    }
    return Grammar(
        name="gemma4",
        initial=C,
        wait_for_reasoning=thinking,
        turn_boundary_tokens=frozenset((TURN, TOOL_RESPONSE)),
        terminals={
            **markers,
            "CALL_PREFIX": "call:",
            "COLON": ":",
            "OPEN_BRACE": "{",
            "OPEN_PAREN": "(",
        },
        token_terminals=markers,
        steps=steps,
        arg_converter=gemma4_arguments,
        json_args=False,
        arg_structural_chars=frozenset(",:{}[]<"),
        preserve_tokens=frozenset((QUOTE,)),
    )


def gemma4_thinking(chat_template_kwargs: Mapping[str, Any]) -> bool:
    """``enable_thinking`` (off unless given)."""
    return bool(chat_template_kwargs.get("enable_thinking", False))


class Gemma4ToolParser(EngineToolParser):
    """``gemma4``."""

    name = "gemma4"
    supports_required_and_named = False
    optional_tokens = (TURN, TOOL_RESPONSE)

    @classmethod
    def grammar_for(cls, chat_template_kwargs: Mapping[str, Any]) -> Grammar:
        """By ``enable_thinking``."""
        return gemma4_grammar(gemma4_thinking(chat_template_kwargs))

    def _reset(self) -> None:
        super()._reset()
        self.opened: Sequence[int] | None = None
        """The ids of the first delta with the channel opener put in front, once done."""
        self._first_feed = True
        self._thought = ""
        self._thought_done = False

    def feed(self, text: str, token_ids: Sequence[int]) -> list[Event]:
        """A first delta that reads like the inside of a channel gets its opener."""
        if self._first_feed:
            self._first_feed = False
            start = self.vocab.get(CHANNEL_START)
            if (
                text
                and self.machine.state == State.CONTENT
                and start is not None
                and CHANNEL_END in self.vocab
                and CHANNEL_START not in text
                and (CHANNEL_END in text or text.startswith(_THOUGHT) or text == "thought")
            ):
                text = CHANNEL_START + text
                if token_ids:
                    token_ids = self.opened = [start, *token_ids]
        return super().feed(text, token_ids)

    def _delta(self, events: list[Event], finished: bool = False) -> OutputDelta | None:
        """The reasoning's leading ``thought\\n`` is dropped (held while it may be one)."""
        delta = super()._delta(events, finished)
        if delta is None or delta.reasoning is None or self._thought_done:
            return delta
        seen = len(self._thought)
        self._thought += delta.reasoning
        if self._thought.startswith(_THOUGHT):
            if seen >= len(_THOUGHT):
                self._thought_done = True
                return delta
            rest = delta.reasoning[len(_THOUGHT) - seen :]
            self._thought_done = True
            delta.reasoning = rest or None
            if rest or delta.content is not None or delta.tool_calls:
                return delta
            return None
        if _THOUGHT.startswith(self._thought):
            if finished:
                self._thought_done = True
            return None
        self._thought_done = True
        delta.reasoning = self._thought
        return delta

    def start_in_reasoning(self) -> None:
        """Read from reasoning on (the prompt left a channel open)."""
        self._streaming = True
        self._reset()
        self.machine.reset(State.REASONING)
