"""Mistral's tool calls and ``[THINK]`` reasoning (vLLM 0.32's ``vllm/parser/mistral.py``).

Tokenizers of version 11 and later (their vocabulary has ``[ARGS]``) write calls as
``[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}`` (or ``[TOOL_CALLS]get_weather{...}``), read
by the parser engine; older ones write ``[TOOL_CALLS][{"name": ..., "arguments": {...}}]``, read
by :class:`PreV11Calls`. Reasoning between ``[THINK]`` and ``[/THINK]`` is read when the
vocabulary has ``[THINK]``. With ``--tokenizer-mode mistral`` (:meth:`MistralToolParser.
for_model`), as in vLLM, the tokenizer's version decides the pre-v11 form (below 11), and a
tekken tokenizer of version 11 on without ``[THINK]`` reads reasoning between ``<think>`` and
``</think>`` text markers. Call ids are 9 random letters and digits.
"""

from __future__ import annotations

import functools
import json
import random
import re
import string
from collections.abc import Mapping, Sequence
from typing import Any

from vllm_frontend.chat.engine.calls import EngineToolParser, Slot
from vllm_frontend.chat.engine.grammar import Event, Grammar, Kind, State, Step
from vllm_frontend.chat.engine.json_events import JsonEventError, JsonEvents
from vllm_frontend.chat.parsed import OutputDelta, ToolCallDelta
from vllm_frontend.chat.tools.base import ExtractedToolCalls

__all__ = ["MistralToolParser", "PreV11Calls", "mistral_grammar", "mistral_id"]

TOOL_CALLS = "[TOOL_CALLS]"
ARGS = "[ARGS]"
THINK = "[THINK]"
END_THINK = "[/THINK]"

_ID_CHARS = string.ascii_letters + string.digits
_ARRAY = re.compile(r"\[{.*}\]", re.DOTALL)


def mistral_id() -> str:
    """A Mistral tool-call id: 9 random letters and digits."""
    return "".join(random.choices(_ID_CHARS, k=9))


THINK_TEXT = "<think>"
END_THINK_TEXT = "</think>"


@functools.cache
def mistral_grammar(thinking: bool, text_markers: bool = False) -> Grammar:
    """The v11+ grammar, with ``[THINK]``/``[/THINK]`` reasoning (``text_markers``: the
    ``<think>``/``</think>`` text instead, which are no tokens) or without."""
    C, R, N, A = State.CONTENT, State.REASONING, State.TOOL_NAME, State.TOOL_ARGS
    think = {"THINK_START": THINK, "THINK_END": END_THINK} if thinking else {}
    if thinking and text_markers:
        think = {"THINK_START": THINK_TEXT, "THINK_END": END_THINK_TEXT}
    steps: dict[tuple[State, str], Step] = {}
    if thinking:
        steps |= {
            (C, "THINK_START"): Step(R),
            (R, "THINK_START"): Step(R),
            (R, "THINK_END"): Step(C, (Kind.REASONING_END,)),
            (C, "THINK_END"): Step(C),
            (R, "TOOL_CALLS"): Step(N, (Kind.REASONING_END, Kind.CALL_START)),
        }
    opens = (Kind.REASONING_END, Kind.CALL_START) if thinking else (Kind.CALL_START,)
    steps |= {
        (C, "TOOL_CALLS"): Step(N, opens),
        (N, "ARGS"): Step(A),
        # "{" after the name starts the arguments and is their first character.
        (N, "OPEN_BRACE"): Step(A, (Kind.ARGS,)),
        (A, "TOOL_CALLS"): Step(N, (Kind.CALL_END, Kind.CALL_START)),
    }
    markers = {**think, "TOOL_CALLS": TOOL_CALLS, "ARGS": ARGS}
    # Text markers are matched in the text only (they are no tokens).
    token_markers = {"TOOL_CALLS": TOOL_CALLS, "ARGS": ARGS} if text_markers else markers
    return Grammar(
        name="mistral",
        initial=C,
        wait_for_reasoning=thinking,
        terminals={**markers, "OPEN_BRACE": "{"},
        token_terminals=token_markers,
        steps=steps,
    )


def _first_json(raw: str) -> str:
    """The first JSON value of ``raw`` (text after it dropped), else ``raw`` stripped."""
    stripped = raw.strip()
    if not stripped:
        return "{}"
    try:
        _, end = json.JSONDecoder().raw_decode(stripped)
    except ValueError:
        return stripped
    return stripped[:end]


class MistralToolParser(EngineToolParser):
    """``mistral``."""

    name = "mistral"
    required_tokens = (TOOL_CALLS,)
    supports_required_and_named = False
    GRAMMAR = mistral_grammar(True)
    MISTRAL_VERSION: int | None = None
    """The mistral_common tokenizer's version (``--tokenizer-mode mistral``; see
    :meth:`for_model`), None for a Hugging Face tokenizer."""
    MISTRAL_GRAMMAR: bool = False
    """The mistral_common tokenizer has grammars (tekken, version 11 on)."""

    @classmethod
    def for_model(cls, model: Any) -> type[MistralToolParser]:
        """For a mistral_common tokenizer, the class that reads as vLLM's parser reads with
        vLLM's ``MistralTokenizer``."""
        version = getattr(model, "mistral_version", None)
        if version is None:
            return cls
        return _mistral_mode_class(cls, version, bool(getattr(model, "mistral_grammar", False)))

    @classmethod
    def reasoning_encoding(cls, vocab: Mapping[str, int]) -> str:
        """vLLM's choice: ``special_token`` with ``[THINK]`` in the vocabulary, else ``text``
        for a grammar-capable mistral_common tokenizer, else ``none``."""
        if THINK in vocab:
            return "special_token"
        return "text" if cls.MISTRAL_GRAMMAR else "none"

    def __init__(
        self,
        vocab: Mapping[str, int],
        tools: Sequence[Mapping[str, Any]] = (),
        **kwargs: Any,
    ) -> None:
        """See :class:`EngineToolParser`; a vocabulary without ``[ARGS]`` is pre-v11's."""
        super().__init__(vocab, tools, **kwargs)
        self.pre_v11: PreV11Calls | None = None
        version = self.MISTRAL_VERSION
        if (version < 11) if version is not None else ARGS not in vocab:
            self.pre_v11 = PreV11Calls(vocab.get(TOOL_CALLS), tools, self.tool_choice)

    @classmethod
    def forced_schema(
        cls, tools: Sequence[Mapping[str, Any]], tool_choice: Any
    ) -> dict[str, Any] | None:
        """``required`` / a named function: a non-empty JSON list of ``{"name", "arguments"}``
        objects of the allowed tools (one at most for a named one; none if it is unknown)."""
        extra: dict[str, Any] = {}
        functions = [t.get("function") or {} for t in tools]
        if isinstance(tool_choice, Mapping):
            wanted = (tool_choice.get("function") or {}).get("name")
            functions = [f for f in functions if f.get("name") == wanted]
            if not functions:
                return None
            extra["maxItems"] = 1
        elif tool_choice != "required":
            return None
        variants = [
            {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "enum": [f.get("name")]},
                    "arguments": f.get("parameters") or {"type": "object"},
                },
                "required": ["name", "arguments"],
            }
            for f in functions
        ]
        items = {"type": "object", "anyOf": variants}
        return {"type": "array", "minItems": 1, **extra, "items": items}

    def grammar_with(
        self, vocab: Mapping[str, int], chat_template_kwargs: Mapping[str, Any]
    ) -> Grammar:
        """With ``[THINK]`` reasoning when the vocabulary has ``[THINK]``, with ``<think>``
        text markers for a grammar-capable mistral_common tokenizer without it."""
        encoding = self.reasoning_encoding(vocab)
        return mistral_grammar(encoding != "none", text_markers=encoding == "text")

    # -- the pre-v11 form --------------------------------------------------------------------

    def extract(self, text: str) -> ExtractedToolCalls:
        """See :class:`EngineToolParser`."""
        if self.pre_v11 is not None:
            return self.pre_v11.extract(text)
        return super().extract(text)

    def stream(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> OutputDelta | None:
        """See :class:`EngineToolParser`."""
        if self.pre_v11 is not None:
            return self.pre_v11.stream(delta_text, delta_ids)
        return super().stream(
            previous_text, current_text, delta_text, previous_ids, current_ids, delta_ids
        )

    def finish_stream(self) -> OutputDelta | None:
        """See :class:`EngineToolParser`."""
        if self.pre_v11 is not None:
            return None
        return super().finish_stream()

    # -- the engine's hooks ------------------------------------------------------------------

    def new_id(self) -> str:
        """A Mistral id."""
        return mistral_id()

    def _accept(self, name: str) -> bool:
        # The name is final once [ARGS] or "{" ends it, even empty.
        return not self.grammar.validate_tool_names or not self.tools or super()._accept(name)

    def _name_in_args(self, slot: Slot) -> str | None:
        return slot.name

    def name_and_args(self, raw: str) -> tuple[Any, str]:
        """No name inside the arguments: a ``"name"`` key is an argument."""
        return "", _first_json(raw)

    def args_json(self, raw: str, name: str) -> str:
        """The first JSON value (text the model wrote after it dropped)."""
        return _first_json(raw)

    def on_args(self, event: Event, calls: list[ToolCallDelta]) -> None:
        """The argument text that carried the name out (the ``{``) is sent too."""
        index = event.call
        before = 0 <= index < len(self.slots) and self.slots[index].name_sent
        super().on_args(event, calls)
        if event.value and not before and self.slots[index].name_sent:
            calls.append(ToolCallDelta(index, arguments=event.value))


_MODE_CLASSES: dict[tuple[str, int, bool], type[MistralToolParser]] = {}


def _mistral_mode_class(
    base: type[MistralToolParser], version: int, grammar: bool
) -> type[MistralToolParser]:
    key = (base.__qualname__, version, grammar)
    made = _MODE_CLASSES.get(key)
    if made is None:
        attrs = {"MISTRAL_VERSION": version, "MISTRAL_GRAMMAR": grammar}
        made = _MODE_CLASSES[key] = type(base.__name__, (base,), attrs)
    return made


# -- pre-v11: [TOOL_CALLS] and a JSON array --------------------------------------------------

_WAIT_START, _WAIT_KEY, _NAME, _NAME_DONE, _WAIT_ARGS, _ARGS, _ARGS_DONE, _TOOL_DONE, _ALL_DONE = (
    range(9)
)
_STOPS = {
    _WAIT_START: "{",
    _WAIT_KEY: ":{}",
    _NAME: ",]}",
    _WAIT_ARGS: "{}",
    _ARGS: "}",
    _ARGS_DONE: "}]",
    _NAME_DONE: "}]",
    _TOOL_DONE: "{]",
}
"""Per state, the characters after which a delta's text is cut before reading on (each piece
is read by the JSON reader with the state it leaves behind)."""


def _forced(tool_choice: Any) -> bool:
    return tool_choice == "required" or isinstance(tool_choice, Mapping)


def _calls_of(parsed: Any) -> list[tuple[str, str]]:
    """The calls of the JSON after the marker: one object or a list of them; entries without
    ``name`` or ``arguments`` skipped; a name that is not a string is ``""``."""
    if isinstance(parsed, dict):
        parsed = [parsed]
    if not isinstance(parsed, list):
        return []
    calls: list[tuple[str, str]] = []
    for item in parsed:
        if not isinstance(item, dict) or ("name" not in item and "arguments" not in item):
            continue
        name = item.get("name")
        args = item.get("arguments")
        if args is None:
            args = "{}"
        elif not isinstance(args, str):
            args = json.dumps(args, ensure_ascii=False)
        calls.append((name if isinstance(name, str) else "", args))
    return calls


class PreV11Calls:
    """The pre-v11 reader: ``[TOOL_CALLS]`` then a JSON array of ``{"name", "arguments"}``
    objects (or one such object); with ``required`` or a named tool choice, also the bare
    array the constrained model writes."""

    def __init__(
        self, marker_id: int | None, tools: Sequence[Mapping[str, Any]], tool_choice: Any
    ) -> None:
        """One choice's reader."""
        self.marker_id = marker_id
        self.tools = tools
        self.tool_choice = tool_choice
        self._started = False
        self._json = JsonEvents()
        self._state = _WAIT_START
        self._bare = False
        self._new_call = False
        self._name: str | None = None
        self._string_args: str | None = None
        self._index = -1
        self._pending_id: str | None = None
        """The id of the call being read, until its first piece is sent."""

    # -- whole output ------------------------------------------------------------------------

    def extract(self, text: str) -> ExtractedToolCalls:
        """The calls of a whole output."""
        if self.tool_choice == "none" and self.tools:
            return ExtractedToolCalls(False, [], text)
        content: str | None = None
        if TOOL_CALLS in text:
            content, *rest = text.split(TOOL_CALLS)
            body = next((part.strip() for part in rest if part.strip()), "")
        elif _forced(self.tool_choice):
            body = text.strip()
        else:
            return ExtractedToolCalls(False, [], text)
        parsed: Any
        try:
            parsed, _ = json.JSONDecoder().raw_decode(body)
        except ValueError:
            found = _ARRAY.findall(body)
            try:
                parsed = json.loads(found[0]) if found else None
            except ValueError:
                parsed = None
        calls = _calls_of(parsed)
        if not calls:
            return ExtractedToolCalls(False, [], body)
        ids = [mistral_id() for _ in calls]
        kept = content if content and content.strip() else None
        return ExtractedToolCalls(True, calls, kept, ids)

    # -- streaming ---------------------------------------------------------------------------

    def stream(self, delta_text: str, delta_ids: Sequence[int]) -> OutputDelta | None:
        """What one delta adds."""
        marked = self.marker_id in delta_ids or TOOL_CALLS in delta_text
        if marked or (not self._started and delta_text and _forced(self.tool_choice)):
            self._started = True
        if not self._started:
            return OutputDelta(content=delta_text)
        try:
            return self._stream(delta_text, marked)
        except JsonEventError:  # (raised again by every later piece the reader is fed)
            return None

    def _stream(self, text: str, marked: bool) -> OutputDelta | None:
        content: str | None = None
        if marked:
            parts = text.split(TOOL_CALLS)
            if not text.startswith(TOOL_CALLS):
                content = parts[0]
            text = "".join(parts[1:])
        calls: list[ToolCallDelta] = []
        current = ToolCallDelta(self._index)
        touched = False
        piece = ""
        while text:
            before = self._state
            if before == _ALL_DONE:
                content, text = text, ""
            else:
                piece, text = _cut(text, _STOPS[before])
                for prefix, event, value in self._json.feed(piece):
                    self._on_event(prefix, event, value)
            if self._new_call:
                self._new_call = False
                if touched:
                    if self._pending_id is not None:
                        current.id, self._pending_id = self._pending_id, None
                    calls.append(current)
                touched = False
                self._index += 1
                self._pending_id = mistral_id()
                current = ToolCallDelta(self._index)
            if self._name is not None:
                touched = True
                current.name, self._name = self._name, None
            if self._string_args is not None:
                touched = True
                current.arguments, self._string_args = self._string_args, None
            if self._state == _NAME_DONE:
                self._state = _WAIT_KEY
            if self._state in (_ARGS, _ARGS_DONE):
                if self._state == _ARGS_DONE:
                    self._state = _WAIT_KEY
                touched = True
                current.arguments = (current.arguments or "") + piece
                if before != _ARGS:
                    current.arguments = current.arguments.lstrip()
        if touched:
            if self._pending_id is not None:
                current.id, self._pending_id = self._pending_id, None
            calls.append(current)
        if content or calls:
            return OutputDelta(content=content or None, tool_calls=calls)
        return OutputDelta() if self._state == _ALL_DONE else None

    def _on_event(self, prefix: str, event: str, value: Any) -> None:
        if prefix == "" and event == "start_map":
            self._bare = True
        if self._bare:
            prefix = f"item.{prefix}" if prefix else "item"
        if prefix == "item":
            if event == "start_map":
                self._state = _WAIT_KEY
                self._new_call = True
            elif event == "map_key" and value == "name":
                self._state = _NAME
            elif event == "map_key" and value == "arguments":
                self._state = _WAIT_ARGS
            elif event == "end_map":
                self._state = _ALL_DONE if self._bare else _TOOL_DONE
        elif prefix == "item.name" and event == "string":
            self._name = value
            self._state = _NAME_DONE
        elif prefix == "item.arguments":
            if event == "start_map":
                self._state = _ARGS
            elif event == "end_map":
                self._state = _ARGS_DONE
            elif event == "string":
                self._string_args = value
        elif prefix == "" and event == "end_array":
            self._state = _ALL_DONE


def _cut(text: str, stops: str) -> tuple[str, str]:
    """``text`` cut after its first character in ``stops`` (whole if none)."""
    for i, ch in enumerate(text):
        if ch in stops:
            return text[: i + 1], text[i + 1 :]
    return text, ""
