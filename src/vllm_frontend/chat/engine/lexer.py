"""Cutting streamed text into terminals and plain text, as vLLM 0.32's parser engine does.

:class:`Lexer` finds terminal spellings in text fed piece by piece, holding back text that may
still become one (``"<tool_"`` before ``"call>"``). :class:`TokenSplitter` reads a delta's token
ids first: special tokens that stand for terminals (or are to be dropped) split the delta's text
at their own text; a terminal whose text has not reached the delta yet waits for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

__all__ = ["DROP", "Lexer", "LexerTable", "Piece", "TokenSplitter"]

DROP = "__DROP__"
"""The terminal of special tokens that are not the grammar's (read as nothing)."""


class Piece(NamedTuple):
    """A terminal (``terminal`` set) or plain text (``terminal`` None)."""

    terminal: str | None
    text: str
    tokens: int = 0
    """Tokens behind a text-less piece (an empty text piece stands for tokens without text)."""


class LexerTable:
    """The spellings a lexer looks for, prepared once per grammar and vocabulary."""

    __slots__ = ("by_first", "first_chars", "literals", "prefixes")

    def __init__(self, spellings: Iterable[tuple[str, str]]) -> None:
        """``spellings``: ``(text, terminal name)`` pairs."""
        self.literals = [(lit, name) for lit, name in spellings if lit]
        self.first_chars = frozenset(lit[0] for lit, _ in self.literals)
        self.prefixes = frozenset(lit[:i] for lit, _ in self.literals for i in range(1, len(lit)))
        by_first: dict[str, list[tuple[str, str]]] = {}
        for lit, name in self.literals:
            by_first.setdefault(lit[0], []).append((lit, name))
        self.by_first = by_first


class Lexer:
    """Terminals and text out of text fed piece by piece."""

    __slots__ = ("buffer", "table")

    def __init__(self, table: LexerTable) -> None:
        """A lexer looking for ``table``'s spellings."""
        self.table = table
        self.buffer = ""

    def feed(self, text: str) -> list[Piece]:
        """What ``text`` completes (text that may begin a terminal is held back)."""
        if not self.buffer and self.table.first_chars.isdisjoint(text):
            return [Piece(None, text)]
        self.buffer += text
        return self._drain(final=False)

    def flush(self) -> list[Piece]:
        """Everything held back."""
        if not self.buffer:
            return []
        out = self._drain(final=True)
        if self.buffer:
            out.append(Piece(None, self.buffer))
            self.buffer = ""
        return out

    def _drain(self, final: bool) -> list[Piece]:
        table = self.table
        out: list[Piece] = []
        while buf := self.buffer:
            if table.first_chars.isdisjoint(buf):
                out.append(Piece(None, buf))
                self.buffer = ""
                break
            candidates = table.by_first.get(buf[0], ())
            best: tuple[str, str] | None = None
            for lit, name in candidates:
                if buf.startswith(lit) and (best is None or len(lit) > len(best[0])):
                    best = (lit, name)
            # The whole buffer may still grow into a (longer) terminal: wait, unless it is a
            # terminal already that no longer spelling extends.
            if (
                not final
                and buf in table.prefixes
                and (
                    best is None
                    or any(len(lit) > len(best[0]) and lit.startswith(buf) for lit, _ in candidates)
                )
            ):
                break
            if best is not None:
                out.append(Piece(best[1], best[0]))
                self.buffer = buf[len(best[0]) :]
                continue
            end = self._text_end(buf)
            out.append(Piece(None, buf[:end]))
            self.buffer = buf[end:]
        return out

    def _text_end(self, buf: str) -> int:
        """Where the text at the start of ``buf`` ends: the first later position that starts
        a spelling or a proper prefix of one that runs to the end."""
        first = self.table.first_chars
        literals = self.table.literals
        n = len(buf)
        for i in range(1, n):
            if buf[i] not in first:
                continue
            rest = n - i
            for lit, _ in literals:
                k = min(rest, len(lit))
                if buf[i : i + k] == lit[:k]:
                    return i
        return n


class TokenSplitter:
    """Split a delta's text at the special tokens among its ids that stand for terminals."""

    __slots__ = ("_pending", "_pending_text", "_pending_tokens", "ids")

    def __init__(self, ids: Mapping[int, tuple[str, str]]) -> None:
        """``ids``: token id -> (terminal name, token text)."""
        self.ids = ids
        self._pending: list[tuple[str, str]] = []
        """Terminals seen by id whose text has not arrived."""
        self._pending_text = ""
        self._pending_tokens = 0

    @property
    def waiting(self) -> bool:
        """Whether a terminal seen by id waits for its text."""
        return bool(self._pending)

    def has_terminal(self, token_ids: Sequence[int]) -> bool:
        """Whether any of ``token_ids`` stands for a terminal."""
        ids = self.ids
        return any(t in ids for t in token_ids)

    def split(self, text: str, token_ids: Sequence[int]) -> list[Piece]:
        """The delta as pieces: text, and terminals seen by id at their text's position."""
        out: list[Piece] = []
        trailing = 0
        if self._pending:
            out, text, trailing = self._resolve(text)
        ids = self.ids
        marks = [(i, ids[t]) for i, t in enumerate(token_ids) if t in ids]
        if not marks:
            if text:
                out.append(Piece(None, text))
            return out
        if not text:
            # No text to place the terminals in: they wait for it, with the count of the
            # tokens after the last one.
            self._pending.extend(m[1] for m in marks)
            self._pending_tokens += len(token_ids) - marks[-1][0] - 1
            return out
        if trailing:
            out.append(Piece(None, "", trailing))
        out.extend(self._anchor(text, [m[1] for m in marks]))
        return out

    def flush(self) -> list[Piece]:
        """Whatever still waits, at the end of the output."""
        if not self._pending and not self._pending_text:
            return []
        out: list[Piece] = []
        if self._pending_text:
            out.append(Piece(None, self._pending_text))
            self._pending_text = ""
        out.extend(Piece(name, tok_text) for name, tok_text in self._pending)
        if self._pending_tokens:
            out.append(Piece(None, "", self._pending_tokens))
        self._pending.clear()
        self._pending_tokens = 0
        return out

    def _resolve(self, text: str) -> tuple[list[Piece], str, int]:
        """Place waiting terminals in the new text; text before one waits with it."""
        pending, self._pending = self._pending, []
        trailing, self._pending_tokens = self._pending_tokens, 0
        out: list[Piece] = []
        rest = self._pending_text + text
        self._pending_text = ""
        for name, tok_text in pending:
            pos = rest.find(tok_text)
            if pos >= 0:
                if pos:
                    out.append(Piece(None, rest[:pos]))
                out.append(Piece(name, tok_text))
                rest = rest[pos + len(tok_text) :]
            else:
                if rest:
                    self._pending_text += rest
                    rest = ""
                self._pending.append((name, tok_text))
        if self._pending:
            self._pending_tokens, trailing = trailing, 0
        return out, rest, trailing

    def _anchor(self, text: str, marks: list[tuple[str, str]]) -> list[Piece]:
        """Split ``text`` at the marks' texts, placed right to left (each at the last place
        before the next one); a mark not found waits for its text."""
        positions = [-1] * len(marks)
        end = len(text)
        for i in range(len(marks) - 1, -1, -1):
            pos = text.rfind(marks[i][1], 0, end)
            if pos >= 0:
                positions[i] = end = pos
        out: list[Piece] = []
        done = 0
        for i, (name, tok_text) in enumerate(marks):
            pos = positions[i]
            if pos >= done:
                if pos > done:
                    out.append(Piece(None, text[done:pos]))
                out.append(Piece(name, tok_text))
                done = pos + len(tok_text)
                continue
            later = any(p >= 0 for p in positions[i + 1 :])
            if not later and done < len(text) and name != DROP:
                self._pending_text += text[done:]
                done = len(text)
            self._pending.append((name, tok_text))
        if done < len(text):
            out.append(Piece(None, text[done:]))
        return out
