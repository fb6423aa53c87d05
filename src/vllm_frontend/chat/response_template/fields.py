"""The parts of a loaded ``response_template``: its delimiters (:class:`Anchor`) and regions
(:class:`Field`), and the ``regex`` package they are compiled with."""

from __future__ import annotations

import functools
from typing import Any

import msgspec

__all__ = ["Anchor", "Field", "regex_module"]


@functools.cache
def regex_module() -> Any:
    """The ``regex`` package (delimiter patterns and their partial matching), with what to
    install when it is missing."""
    try:
        import regex
    except ImportError as e:
        raise ImportError(
            "The hf reasoning / tool-call parser reads the model's response_template with the "
            "`regex` package (as vLLM does). Install it with:\n"
            "    pip install 'vllm-frontend-py[hf-parser]'  (or: pip install regex)"
        ) from e
    return regex


class Anchor(msgspec.Struct, frozen=True):
    """One delimiter: its compiled pattern, and its literals when it was given as text."""

    pattern: Any
    literals: tuple[str, ...] | None
    can_extend: bool
    """A literal is a strict prefix of another: a match at the buffer's end may still grow."""


class Field(msgspec.Struct, frozen=True):
    """One region of the assistant message."""

    name: str
    open: Anchor | None
    close: Anchor | None
    content: str
    """The content parser's name (``text``, ``json``, ``xml-inline``, …)."""
    content_args: dict[str, Any]
    repeats: bool
    join: str | None
    optional: bool
    transform: Any
    transform_each: bool

    @property
    def open_literals(self) -> tuple[str, ...] | None:
        """The opening delimiter's literals (None for a pattern or no opener)."""
        return self.open.literals if self.open is not None else None

    @property
    def close_literals(self) -> tuple[str, ...] | None:
        """The closing delimiter's literals (None for a pattern or no closer)."""
        return self.close.literals if self.close is not None else None
