"""Rewrites that make a model's almost-Python tool calls parse, as vLLM 0.32's pythonic helpers
(``vllm/tool_parsers/utils.py``) make them for the ``lfm2`` parser: raw control characters in
string literals escaped, zero-padded integers unpadded, keyword-named parameters (``from=1``)
renamed and restored, and a string broken by nested same-style quotes closed at the only quote
that lets the text parse. Every rewrite leaves text that already parses as it is, and never
touches what is inside string literals beyond its own purpose.
"""

from __future__ import annotations

import ast
import keyword
import warnings
from typing import Any

__all__ = [
    "escape_control_chars",
    "has_broken_string",
    "rename_keyword_arguments",
    "requote_nested_quotes",
    "restore_keyword_arguments",
    "unpad_integers",
]

_QUOTES = ("'", '"')
_CONTROL = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\x00": "\\x00"}
_RENAMED = "_pyreservedkw_"
_CLOSING_FOLLOWERS = frozenset(",)]}:")


def escape_control_chars(text: str) -> str:
    """``\\n``, ``\\r``, ``\\t`` and NUL inside string literals written as escapes."""
    out: list[str] = []
    quote: str | None = None
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if quote is None:
            if ch in _QUOTES:
                quote = ch
            out.append(ch)
        elif ch == "\\" and i + 1 < n:
            out.append(text[i : i + 2])
            i += 2
            continue
        elif ch == quote:
            quote = None
            out.append(ch)
        else:
            out.append(_CONTROL.get(ch, ch))
        i += 1
    return "".join(out)


def _skip_string(text: str, i: int, quote: str, out: list[str]) -> tuple[int, bool]:
    """Copy one character of a string literal at ``i``; (next index, still in the string)."""
    ch = text[i]
    out.append(ch)
    if ch == "\\" and i + 1 < len(text):
        out.append(text[i + 1])
        return i + 2, True
    return i + 1, ch != quote


def _name_end(text: str, i: int) -> int:
    while i < len(text) and (text[i].isalnum() or text[i] == "_"):
        i += 1
    return i


def rename_keyword_arguments(text: str) -> tuple[str, bool]:
    """Python keywords used as keyword-argument names (after ``(`` or ``,``, before a single
    ``=``, outside strings) renamed so the text parses; and whether any was."""
    out: list[str] = []
    quote: str | None = None
    changed = False
    last = ""  # the last significant character
    i, n = 0, len(text)
    while i < n:
        if quote is not None:
            i, inside = _skip_string(text, i, quote, out)
            quote = quote if inside else None
            continue
        ch = text[i]
        if ch in _QUOTES:
            quote = last = ch
            out.append(ch)
            i += 1
            continue
        if ch.isalpha() or ch == "_":
            end = _name_end(text, i)
            name = text[i:end]
            at = end
            while at < n and text[at].isspace():
                at += 1
            if (
                keyword.iskeyword(name)
                and at < n
                and text[at] == "="
                and (at + 1 >= n or text[at + 1] != "=")
                and last in ("(", ",")
            ):
                out.append(name + _RENAMED)
                changed = True
            else:
                out.append(name)
            last = name[-1]
            i = end
            continue
        out.append(ch)
        if not ch.isspace():
            last = ch
        i += 1
    return "".join(out), changed


def restore_keyword_arguments(arguments: dict[Any, Any]) -> dict[Any, Any]:
    """The arguments with the names :func:`rename_keyword_arguments` renamed restored."""
    restored: dict[Any, Any] = {}
    for key, value in arguments.items():
        if (
            isinstance(key, str)
            and key.endswith(_RENAMED)
            and keyword.iskeyword(key[: -len(_RENAMED)])
        ):
            restored[key[: -len(_RENAMED)]] = value
        else:
            restored[key] = value
    return restored


def unpad_integers(text: str) -> str:
    """Decimal integer literals with leading zeros (``07``) written without them, outside
    strings; ``00``, floats, exponents and ``0x``-style prefixes stay."""
    out: list[str] = []
    quote: str | None = None
    i, n = 0, len(text)
    while i < n:
        if quote is not None:
            i, inside = _skip_string(text, i, quote, out)
            quote = quote if inside else None
            continue
        ch = text[i]
        if ch in _QUOTES:
            quote = ch
            out.append(ch)
            i += 1
        elif ch.isalpha() or ch == "_":
            end = _name_end(text, i)
            out.append(text[i:end])
            i = end
        elif ch.isdigit():
            end = i
            while end < n and (text[end].isdigit() or text[end] == "_"):
                end += 1
            token = text[i:end]
            digits = token.replace("_", "")
            follower = text[end] if end < n else ""
            if (
                digits[0] == "0"
                and digits.strip("0")
                and not (i > 0 and text[i - 1] == ".")
                and follower not in (".", "e", "E", "j", "J")
            ):
                out.append(str(int(digits)))
            else:
                out.append(token)
            i = end
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _is_escaped(text: str, i: int) -> bool:
    k = 0
    while i - k - 1 >= 0 and text[i - k - 1] == "\\":
        k += 1
    return k % 2 == 1


def _closes(text: str, at: int) -> bool:
    """Whether the quote at ``at`` is followed (after spaces) by what may follow a string."""
    k = at + 1
    while k < len(text) and text[k].isspace():
        k += 1
    return k < len(text) and text[k] in _CLOSING_FOLLOWERS


def _quotes_from(text: str, start: int, quote: str) -> list[int]:
    found = []
    j = start
    while j < len(text):
        if text[j] == "\\":
            j += 2
            continue
        if text[j] == quote:
            found.append(j)
        j += 1
    return found


def _parses(text: str) -> bool:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        try:
            ast.parse(escape_control_chars(text))
        except (SyntaxError, ValueError):
            return False
    return True


def requote_nested_quotes(text: str) -> tuple[str, bool]:
    """The first string whose first closing quote cannot close it, closed instead at the one
    later quote that makes the text parse (the quotes inside escaped); unchanged when no or
    several quotes would. Returns (text, changed)."""
    i = 0
    while i < len(text):
        quote = text[i]
        if quote not in _QUOTES:
            i += 1
            continue
        closers = _quotes_from(text, i + 1, quote)
        if not closers:
            return text, False
        if _closes(text, closers[0]):
            i = closers[0] + 1
            continue
        winners = []
        for close in (j for j in closers if _closes(text, j)):
            inner = "".join(
                ("\\" + ch) if ch == quote and not _is_escaped(text, j) else ch
                for j, ch in enumerate(text[i + 1 : close], start=i + 1)
            )
            candidate = text[:i] + quote + inner + quote + text[close + 1 :]
            if _parses(candidate):
                winners.append(candidate)
        if len(winners) == 1:
            return winners[0], True
        return text, False
    return text, False


def has_broken_string(text: str) -> bool:
    """Whether some string literal's first closing quote is not followed by what may follow a
    string (a quote at the very end counts, its follower being unknown); an unclosed string
    is not broken."""
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch not in _QUOTES:
            i += 1
            continue
        j, close = i + 1, -1
        while j < len(text):
            if text[j] == "\\":
                j += 2
                continue
            if text[j] == ch:
                close = j
                break
            j += 1
        if close == -1:
            return False
        k = close + 1
        while k < len(text) and text[k].isspace():
            k += 1
        if k >= len(text) or text[k] not in _CLOSING_FOLLOWERS:
            return True
        i = close + 1
    return False
