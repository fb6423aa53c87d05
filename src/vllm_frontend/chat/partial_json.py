"""Parse a JSON text that may be cut off (a tool call still being generated).

Streaming tool parsers need the object a model has written *so far*. The completion rules are
those of the ``partial-json-parser`` package that vLLM's JSON tool parsers use, so the partial
objects (and hence the streamed argument fragments) match vLLM's: an unfinished key is dropped,
an unfinished string value is kept (without a half-written escape) or dropped when partial
strings are not allowed, an unfinished number or literal keeps its valid prefix, and open arrays
and objects are closed.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["MalformedJSON", "partial_json_loads"]

_WS = " \t\n\r"
_LITERALS: dict[str, Any] = {
    "true": True,
    "false": False,
    "null": None,
    "NaN": float("nan"),
    "Infinity": float("inf"),
    "-Infinity": float("-inf"),
}
_NUMBER_CHARS = frozenset("0123456789+-.eE")
_OMIT = object()


class MalformedJSON(ValueError):
    """The text is not a prefix of any JSON value."""


def partial_json_loads(text: str, allow_partial_strings: bool) -> tuple[Any, int]:
    """The value ``text`` starts with and how many characters it used.

    A complete value followed by more text gives the value and its end (as
    ``JSONDecoder.raw_decode``); a cut-off value is completed and uses all of ``text``.
    Raises :class:`MalformedJSON` (or ``json.JSONDecodeError``) when ``text`` cannot be read.
    """
    try:
        return json.loads(text), len(text)
    except json.JSONDecodeError as e:
        if "Extra data" in e.msg:
            return json.JSONDecoder().raw_decode(text)
    # partial-json-parser strips the whole input first, so trailing whitespace inside a cut-off
    # string is dropped too.
    stripped = text.strip()
    parser = _Parser(stripped, allow_partial_strings)
    value, i = parser.value(0)
    if value is _OMIT:
        raise MalformedJSON("no value")
    i = parser.ws(i)
    if i < len(stripped):
        raise MalformedJSON(f"unexpected {stripped[i]!r} at {i}")
    return value, len(text)


class _Parser:
    def __init__(self, text: str, allow_partial_strings: bool) -> None:
        self.s = text
        self.partial_strings = allow_partial_strings

    def ws(self, i: int) -> int:
        s = self.s
        while i < len(s) and s[i] in _WS:
            i += 1
        return i

    def value(self, i: int) -> tuple[Any, int]:
        """(value or _OMIT, end); _OMIT means the input ended before a usable value."""
        s = self.s
        if i >= len(s):
            return _OMIT, i
        c = s[i]
        if c == "{":
            return self.obj(i + 1)
        if c == "[":
            return self.arr(i + 1)
        if c == '"':
            text, i, complete = self.string(i + 1)
            if not complete and not self.partial_strings:
                return _OMIT, i
            return text, i
        if c in _NUMBER_CHARS and c not in "+.eE":
            if s.startswith("-I", i):
                return self.literal(i)
            return self.number(i)
        return self.literal(i)

    def obj(self, i: int) -> tuple[Any, int]:
        s = self.s
        out: dict[str, Any] = {}
        i = self.ws(i)
        if i < len(s) and s[i] == "}":
            return out, i + 1
        while True:
            i = self.ws(i)
            if i >= len(s):
                return out, i
            if s[i] != '"':
                raise MalformedJSON(f"expected a key at {i}")
            key, i, complete = self.string(i + 1)
            if not complete:
                return out, i
            i = self.ws(i)
            if i >= len(s):
                return out, i
            if s[i] != ":":
                raise MalformedJSON(f"expected ':' at {i}")
            i = self.ws(i + 1)
            value, i = self.value(i)
            if value is _OMIT:
                return out, i
            out[key] = value
            i = self.ws(i)
            if i >= len(s):
                return out, i
            if s[i] == "}":
                return out, i + 1
            if s[i] != ",":
                raise MalformedJSON(f"expected ',' or '}}' at {i}")
            i += 1

    def arr(self, i: int) -> tuple[Any, int]:
        s = self.s
        out: list[Any] = []
        i = self.ws(i)
        if i < len(s) and s[i] == "]":
            return out, i + 1
        while True:
            i = self.ws(i)
            value, i = self.value(i)
            if value is _OMIT:
                return out, i
            out.append(value)
            i = self.ws(i)
            if i >= len(s):
                return out, i
            if s[i] == "]":
                return out, i + 1
            if s[i] != ",":
                raise MalformedJSON(f"expected ',' or ']' at {i}")
            i += 1

    def string(self, i: int) -> tuple[str, int, bool]:
        """The string starting after its opening quote: (text, end, complete)."""
        s = self.s
        j = i
        while j < len(s):
            c = s[j]
            if c == "\\":
                j += 2
                continue
            if c == '"':
                return json.loads(s[i - 1 : j + 1]), j + 1, True
            j += 1
        body = s[i:]
        # Drop an escape sequence the input ends inside of.
        k = body.rfind("\\")
        while k >= 0:
            run = len(body[: k + 1]) - len(body[: k + 1].rstrip("\\"))
            if run % 2 == 0:
                break  # an escaped backslash, not an open escape
            tail = body[k + 1 :]
            if tail == "" or (tail[0] == "u" and len(tail) < 5):
                body = body[:k]
            break
        try:
            return json.loads('"' + body + '"'), len(s), False
        except json.JSONDecodeError as e:
            raise MalformedJSON(str(e)) from None

    def number(self, i: int) -> tuple[Any, int]:
        s = self.s
        j = i
        while j < len(s) and s[j] in _NUMBER_CHARS:
            j += 1
        token = s[i:j]
        if j < len(s):
            try:
                return json.loads(token), j
            except json.JSONDecodeError as e:
                raise MalformedJSON(str(e)) from None
        # Cut off: drop a dangling sign, point or exponent marker.
        token = token.rstrip("+-.eE")
        if not token:
            return _OMIT, j
        try:
            return json.loads(token), j
        except json.JSONDecodeError as e:
            raise MalformedJSON(str(e)) from None

    def literal(self, i: int) -> tuple[Any, int]:
        s = self.s
        for word, value in _LITERALS.items():
            if s.startswith(word, i):
                return value, i + len(word)
        rest = s[i:]
        for word, value in _LITERALS.items():
            if word.startswith(rest):
                return value, len(s)
        raise MalformedJSON(f"unexpected {s[i]!r} at {i}")
