"""What the JSON-list tool parsers (xlam, hunyuan_a13b) share, as vLLM's two parsers do: the
patterns that find a call's arguments in the text so far, and how they are streamed."""

from __future__ import annotations

import re
from typing import Any

from vllm_frontend.chat.parsed import OutputDelta, ToolCallDelta

__all__ = ["ARGS", "EMPTY_ARGS", "arguments_delta", "arguments_done"]

EMPTY_ARGS = re.compile(r'"name"\s*:\s*"[^"]+"\s*,\s*"arguments"\s*:\s*\{\s*\}')
"""A call whose arguments are an empty object."""
ARGS = re.compile(r'"name"\s*:\s*"[^"]+"\s*,\s*"arguments"\s*:\s*(\{(?:[^{}]|(?:\{[^{}]*\}))*\})')
"""A call's arguments object (nested one level at most), as group 1."""


def arguments_delta(sent: list[Any], args_text: str, index: int) -> OutputDelta | None:
    """The next piece of call ``index``'s arguments: the opening brace first, then what
    ``args_text`` adds to what was sent. ``sent`` is the call's ``[named, started, sent text]``."""
    if not sent[1] and args_text.startswith("{"):
        sent[1], sent[2] = True, "{"
        return OutputDelta(tool_calls=[ToolCallDelta(index, arguments="{")])
    if args_text.startswith(sent[2]) and (new := args_text[len(sent[2]) :]):
        sent[2] = args_text
        return OutputDelta(tool_calls=[ToolCallDelta(index, arguments=new)])
    return None


def arguments_done(sent: list[Any], args_text: str) -> bool:
    """Whether call's arguments are whole and all sent (the stream moves to the next call)."""
    return args_text.endswith("}") and args_text == sent[2]
