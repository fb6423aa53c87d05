"""The streaming reader of a ``response_template``: text in, region events out.

Follows ``ResponseParser`` of ``vllm/parser/chat_parsing/response_parser.py`` (transformers'
``utils/chat_parsing``) event for event. The reader sits in one region at a time: the
*implicit* one (the field without an opener, or nowhere) until an opener matches, then that
field's region until its closer matches. Text is routed to the current region as soon as no
delimiter could still start in it: a delimiter cut by a chunk boundary, or a complete one that
more text could lengthen (a pattern, or a literal that another literal extends), is held back.

Events are dicts, as vLLM's are: ``region_open`` / ``region_chunk`` / ``region_close`` /
``region_malformed``, with the ``field``, the span of the input the delimiter took
(``start``, ``end``), the chunk ``text``, the closed region's ``value`` or the ``error``.

The prompt's tail after the start anchor is read first (:attr:`initial_events`): a template may
have opened a region (``<think>``) before the model writes anything.
"""

from __future__ import annotations

import copy
from typing import Any

from vllm_frontend.chat.response_template.content import (
    STREAMED_AS_TEXT,
    coerce_tool_calls,
    field_value,
    tool_properties,
)
from vllm_frontend.chat.response_template.template import Field, ResponseTemplate

__all__ = ["RegionScanner"]

Event = dict[str, Any]
"""One region event (``type``, ``field`` and the keys of its kind), as vLLM's are."""


class RegionScanner:
    """One generation read against a template (``prefix``: the prompt)."""

    def __init__(self, template: ResponseTemplate, prefix: str, tools: Any = None) -> None:
        """``tools``: OpenAI tool dicts whose schemas type the calls' string arguments."""
        self._t = template
        self._props = tool_properties(tools)
        self._buf = ""
        self._pos = 0
        self._output: dict[str, Any] = copy.deepcopy(template.defaults)
        self._current: str | None = template.implicit
        self._captures: dict[str, str] = {}
        self._body = ""
        self._opened = False
        self._done = False
        self._prefix_len = 0
        self._malformed: set[str] = set()
        self.initial_events: list[Event] = []
        """What reading the prompt's tail produced."""
        if prefix:
            tail = template.after_last_anchor(prefix)
            if tail:
                self._buf = tail
                self._run(self.initial_events, eos=False)
                self._prefix_len = len(tail)

    @property
    def input_text(self) -> str:
        """Everything read: the prompt's tail, then the generated text."""
        return self._buf

    def feed(self, text: str) -> list[Event]:
        """Read more generated text."""
        if self._done:
            raise RuntimeError("the scanner is finished")
        self._buf += text
        events: list[Event] = []
        self._run(events, eos=False)
        return events

    def finalize(self) -> tuple[dict[str, Any], list[Event]]:
        """End of the generation: every held delimiter resolves, the open region closes."""
        if self._done:
            raise RuntimeError("the scanner is finished")
        events: list[Event] = []
        self._run(events, eos=True)
        missing = [
            name
            for name, f in self._t.fields.items()
            if not f.optional and name not in self._output and name not in self._malformed
        ]
        if missing:
            raise ValueError(
                f"Required response_template fields missing from parsed output: {missing}"
            )
        defaults = self._t.defaults
        self._output = {k: v for k, v in self._output.items() if k in defaults or not _empty(v)}
        self._done = True
        return self._output, events

    # -- the loop ------------------------------------------------------------------------------

    def _run(self, events: list[Event], eos: bool) -> None:
        while True:
            found, hold = self._next_delimiter(eos)
            if found is not None:
                kind, field, m = found
                if m.start() > self._pos:
                    self._route(events, self._buf[self._pos : m.start()])
                self._pos = m.end()
                if kind == "open":
                    self._close(events, m.start(), m.start())
                    self._open(events, field, m)
                    continue
                had_text = self._opened
                self._close(events, m.start(), m.end())
                if not had_text and m.start() == m.end():
                    break  # an empty closer of an empty region: nothing would change
                continue
            if eos:
                if self._pos < len(self._buf):
                    self._route(events, self._buf[self._pos :])
                    self._pos = len(self._buf)
                self._close(events, self._pos, self._pos)
                break
            if hold > self._pos:
                self._route(events, self._buf[self._pos : hold])
                self._pos = hold
            break

    def _watched(self) -> list[tuple[str, Field]]:
        # In an explicit region only its closer; in the implicit one every opener and its closer.
        fields = self._t.fields
        if self._current is not None and self._current != self._t.implicit:
            f = fields[self._current]
            return [("close", f)] if f.close is not None else []
        out = [("open", f) for f in fields.values() if f.open is not None]
        if self._t.implicit is not None and (imp := fields[self._t.implicit]).close is not None:
            out.append(("close", imp))
        return out

    def _next_delimiter(self, eos: bool) -> tuple[tuple[str, Field, Any] | None, int]:
        """The earliest delimiter that can be acted on now (longest, then openers first, then
        by field name on ties), and where held-back text starts."""
        best_key: tuple[Any, ...] | None = None
        best: tuple[str, Field, Any] | None = None
        hold = len(self._buf)
        for kind, field in self._watched():
            anchor = field.open if kind == "open" else field.close
            assert anchor is not None
            if eos:
                m = anchor.pattern.search(self._buf, self._pos)
            else:
                m = anchor.pattern.search(self._buf, self._pos, partial=True)
            if m is None:
                continue
            if not eos and (m.partial or self._may_grow(anchor.literals, anchor.can_extend, m)):
                hold = min(hold, m.start())
                continue
            key = (m.start(), m.start() - m.end(), 0 if kind == "open" else 1, field.name)
            if best_key is None or key < best_key:
                best_key, best = key, (kind, field, m)
        if best is not None and best[2].start() >= hold:
            best = None  # a pending delimiter at or before it may be the real one
        return best, hold

    def _may_grow(self, literals: tuple[str, ...] | None, can_extend: bool, m: Any) -> bool:
        if m.end() != len(self._buf):
            return False
        if m.start() == m.end():
            return True
        return literals is None or can_extend

    # -- regions -------------------------------------------------------------------------------

    def _route(self, events: list[Event], text: str) -> None:
        if not text or self._current is None:
            return
        field = self._t.fields[self._current]
        if not self._opened:
            events.append(
                {
                    "type": "region_open",
                    "field": self._current,
                    "start": self._pos,
                    "end": self._pos,
                }
            )
            self._opened = True
        self._body += text
        # Prompt text held back as a possible delimiter is not part of the chunk.
        text = text[max(0, self._prefix_len - self._pos) :]
        if text:
            events.append(
                {
                    "type": "region_chunk",
                    "field": self._current,
                    "text": text,
                    "dirty": field.content not in STREAMED_AS_TEXT,
                }
            )

    def _open(self, events: list[Event], field: Field, m: Any) -> None:
        self._current = field.name
        self._captures = {k: v for k, v in m.groupdict().items() if v is not None}
        self._body = ""
        self._opened = True
        events.append(
            {
                "type": "region_open",
                "field": field.name,
                "start": m.start(),
                "end": m.end(),
                "captures": self._captures,
            }
        )

    def _close(self, events: list[Event], start: int, end: int) -> None:
        name = self._current
        if name is None or not self._opened:
            self._reset()
            return
        field = self._t.fields[name]
        try:
            value = field_value(self._body, field, self._captures)
            if self._props:
                value = coerce_tool_calls(value, self._props)
            if field.join is not None and not isinstance(value, str):
                raise ValueError(f"Field '{name}': 'join' needs string values")
        except (KeyError, TypeError, ValueError) as error:
            self._malformed.add(name)
            events.append(
                {
                    "type": "region_malformed",
                    "field": name,
                    "start": start,
                    "end": end,
                    "error": error,
                }
            )
            self._reset()
            return
        if field.join is not None:
            before = self._output.get(name)
            self._output[name] = value if before is None else before + field.join + value
        elif field.repeats:
            self._output.setdefault(name, []).append(value)
        else:
            self._output[name] = value
        events.append(
            {"type": "region_close", "field": name, "start": start, "end": end, "value": value}
        )
        self._reset()

    def _reset(self) -> None:
        self._current = self._t.implicit
        self._captures = {}
        self._body = ""
        self._opened = False


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, list | dict | str) and not value)
