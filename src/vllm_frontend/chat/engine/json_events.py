"""A push reader of JSON text that reports what it completes as ``(prefix, event, value)``
events, the way ``ijson``'s C backend (yajl) reports them when fed piece by piece.

A value is reported once it is complete: strings at their closing quote, numbers at the first
character after them, ``true``/``false``/``null`` at their last letter, containers at their
brackets. Prefixes name where a value is (``""`` for the top level, ``item`` for the elements
of an array, ``key`` for the members of an object, joined by dots). Anything that is not one
JSON value, optionally surrounded by whitespace, raises :class:`JsonEventError` at the
character where it stops being JSON; the reader is then broken for good.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["JsonEventError", "JsonEvents"]

_WS = " \t\n\r"
_ESCAPES = '"\\/bfnrtu'
_HEX = "0123456789abcdefABCDEF"
_LITERALS = {"t": ("true", True), "f": ("false", False), "n": ("null", None)}

# What the reader expects next.
_VALUE, _FIRST_ITEM, _FIRST_KEY, _KEY, _COLON, _AFTER, _DONE = range(7)
# Where in a number the reader is.
_N_SIGN, _N_ZERO, _N_INT, _N_DOT, _N_FRAC, _N_E, _N_ESIGN, _N_EXP = range(8)
_N_COMPLETE = frozenset((_N_ZERO, _N_INT, _N_FRAC, _N_EXP))


class JsonEventError(ValueError):
    """The text is not (the beginning of) one JSON value."""


Event = tuple[str, str, Any]


class JsonEvents:
    """Feeds text, returns the events it completes."""

    def __init__(self) -> None:
        """A reader at the start of a document."""
        self._expect = _VALUE
        self._stack: list[list[Any]] = []
        """Open containers: ``[is_map, prefix, current key]``."""
        self._token = ""
        self._kind = ""  # "s" string, "n" number, "l" literal, "" between tokens
        self._escape = 0  # 1 after a backslash, 2-5 inside \\u digits
        self._number = _N_SIGN
        self._broken = False

    def feed(self, text: str) -> list[Event]:
        """The events ``text`` completes (raises :class:`JsonEventError` on bad JSON)."""
        if self._broken:
            raise JsonEventError("the JSON text was already broken")
        events: list[Event] = []
        try:
            for ch in text:
                self._char(ch, events)
        except JsonEventError:
            self._broken = True
            raise
        return events

    # -- where a value goes ------------------------------------------------------------------

    def _value_prefix(self) -> str:
        if not self._stack:
            return ""
        is_map, prefix, key = self._stack[-1]
        name = key if is_map else "item"
        return f"{prefix}.{name}" if prefix else name

    def _scalar(self, event: str, value: Any, events: list[Event]) -> None:
        events.append((self._value_prefix(), event, value))
        self._expect = _AFTER if self._stack else _DONE

    # -- characters --------------------------------------------------------------------------

    def _char(self, ch: str, events: list[Event]) -> None:
        kind = self._kind
        if kind == "s":
            self._string_char(ch, events)
            return
        if kind == "n":
            if self._number_char(ch):
                return
            if self._number not in _N_COMPLETE:
                raise JsonEventError(f"malformed number before {ch!r}")
            self._kind = ""
            token, self._token = self._token, ""
            self._token_done("number", _number(token), events)
        elif kind == "l":
            word, value = _LITERALS[self._token[0]]
            token = self._token + ch
            if not word.startswith(token):
                raise JsonEventError(f"invalid literal {token!r}")
            self._token = token
            if token == word:
                self._kind = ""
                self._token = ""
                self._token_done("boolean" if isinstance(value, bool) else "null", value, events)
            return
        self._structure(ch, events)

    def _structure(self, ch: str, events: list[Event]) -> None:
        """A character between tokens: a one-character token is read at once, a longer one
        (string, number, literal) is read whole before the parser looks at it."""
        if ch in _WS:
            return
        if ch == '"':
            self._kind, self._token = "s", ""
            return
        if ch == "-" or (ch.isascii() and ch.isdigit()):
            self._kind, self._token = "n", ""
            self._number = _N_SIGN
            self._number_char(ch)
            return
        if ch in _LITERALS:
            self._kind, self._token = "l", ch
            return
        if ch not in "{}[],:":
            raise JsonEventError(f"invalid character {ch!r}")
        expect = self._expect
        if expect in (_VALUE, _FIRST_ITEM):
            if expect == _FIRST_ITEM and ch == "]":
                self._close(False, events)
            elif ch in "{[":
                is_map = ch == "{"
                prefix = self._value_prefix()
                events.append((prefix, "start_map" if is_map else "start_array", None))
                self._stack.append([is_map, prefix, None])
                self._expect = _FIRST_KEY if is_map else _FIRST_ITEM
            else:
                raise JsonEventError(f"expected a value, got {ch!r}")
        elif expect == _FIRST_KEY and ch == "}":
            self._close(True, events)
        elif expect == _COLON and ch == ":":
            self._expect = _VALUE
        elif expect == _AFTER:
            is_map = self._stack[-1][0]
            if ch == ",":
                self._expect = _KEY if is_map else _VALUE
            elif ch == ("}" if is_map else "]"):
                self._close(is_map, events)
            else:
                raise JsonEventError(f"expected ',' or a closing bracket, got {ch!r}")
        else:
            raise JsonEventError(f"unexpected {ch!r}")

    def _token_done(self, event: str, value: Any, events: list[Event]) -> None:
        """A whole string, number or literal, where the parser is."""
        expect = self._expect
        if expect in (_VALUE, _FIRST_ITEM):
            self._scalar(event, value, events)
        elif expect in (_FIRST_KEY, _KEY) and event == "string":
            self._stack[-1][2] = value
            events.append((self._stack[-1][1], "map_key", value))
            self._expect = _COLON
        else:
            raise JsonEventError(f"unexpected {event}")

    def _close(self, is_map: bool, events: list[Event]) -> None:
        _, prefix, _ = self._stack.pop()
        events.append((prefix, "end_map" if is_map else "end_array", None))
        self._expect = _AFTER if self._stack else _DONE

    def _string_char(self, ch: str, events: list[Event]) -> None:
        escape = self._escape
        if escape == 1:
            if ch not in _ESCAPES:
                raise JsonEventError(f"invalid escape \\{ch}")
            self._escape = 2 if ch == "u" else 0
        elif escape:
            if ch not in _HEX:
                raise JsonEventError(f"invalid \\u escape digit {ch!r}")
            self._escape = escape + 1 if escape < 5 else 0
        elif ch == "\\":
            self._escape = 1
        elif ch == '"':
            value = _decode_string(self._token)
            self._token = ""
            self._kind = ""
            self._token_done("string", value, events)
            return
        elif ord(ch) < 0x20:
            raise JsonEventError("a control character inside a string")
        self._token += ch

    def _number_char(self, ch: str) -> bool:
        """Whether ``ch`` continues the number."""
        state = self._number
        digit = ch.isascii() and ch.isdigit()
        if state == _N_SIGN:
            if ch == "-" and not self._token:
                nxt = _N_SIGN
            elif digit:
                nxt = _N_ZERO if ch == "0" else _N_INT
            else:
                return False
        elif state in (_N_ZERO, _N_INT):
            if digit and state == _N_INT:
                nxt = _N_INT
            elif ch == ".":
                nxt = _N_DOT
            elif ch in "eE":
                nxt = _N_E
            else:
                return False
        elif state in (_N_DOT, _N_FRAC):
            if digit:
                nxt = _N_FRAC
            elif state == _N_FRAC and ch in "eE":
                nxt = _N_E
            else:
                return False
        elif state == _N_E:
            if ch in "+-":
                nxt = _N_ESIGN
            elif digit:
                nxt = _N_EXP
            else:
                return False
        elif digit:
            nxt = _N_EXP
        else:
            return False
        self._number = nxt
        self._token += ch
        return True


def _decode_string(raw: str) -> str:
    try:
        value = json.loads(f'"{raw}"')
    except ValueError as e:  # a lone surrogate escape and the like
        raise JsonEventError(str(e)) from e
    if not isinstance(value, str):  # pragma: no cover - json.loads of a quoted text
        raise JsonEventError("not a string")
    return value


def _number(token: str) -> int | float:
    if any(c in token for c in ".eE"):
        return float(token)
    return int(token)
