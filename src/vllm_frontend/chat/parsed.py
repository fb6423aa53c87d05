"""What output parsers produce: streaming deltas and whole-output results (plain data)."""

from __future__ import annotations

import uuid
from typing import Any

import msgspec

__all__ = ["OutputDelta", "ParsedOutput", "ToolCall", "ToolCallDelta", "new_tool_call_id"]


def new_tool_call_id() -> str:
    """A fresh tool-call id in vLLM's format (``make_tool_call_id`` with ``random_uuid``:
    ``chatcmpl-tool-`` and the low 64 bits of a UUID4 as 16 hex digits)."""
    return f"chatcmpl-tool-{uuid.uuid4().int & 0xFFFFFFFFFFFFFFFF:016x}"


class ToolCallDelta(msgspec.Struct, gc=False):
    """A piece of a streamed tool call.

    The first piece of a call carries ``id`` and ``name`` (a *tool-call start*); later pieces
    carry argument text to append (an *arguments delta*).
    """

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str | None = None
    typed: bool = False
    """The piece says ``"type": "function"`` even without an id (Cohere's unnamed-id calls)."""

    @property
    def starts_call(self) -> bool:
        """True for the piece that opens a call (it has the id)."""
        return self.id is not None


class OutputDelta(msgspec.Struct):
    """What one streamed engine update adds to the assistant message (vLLM's ``DeltaMessage``)."""

    content: str | None = None
    reasoning: str | None = None
    tool_calls: list[ToolCallDelta] = msgspec.field(default_factory=list)
    reasoning_hidden: bool = False
    """``reasoning`` is None but set, not left unset (vLLM's parsers clear it so for
    ``include_reasoning: false``, and some reasoning parsers set it beside content): the chunk
    then says ``"reasoning": null``."""
    content_set: bool = False
    """vLLM's parser set ``content`` even when it is None (the tool-call deltas of hermes,
    granite4, apertus, dots, lfm2, poolside_v1, hy_v3, k2_horizon, kimi_k3, ernie45, plamo3):
    the chunk then says ``"content": null``."""
    citations: list[dict[str, Any]] | None = None
    """Grounding citations of the delta (Cohere Command), as vLLM's chat stream writes them."""


def both_set(reasoning: str | None, content: str | None) -> OutputDelta:
    """A delta whose ``reasoning`` and ``content`` are both set, None too (vLLM's
    ``DeltaMessage(reasoning=..., content=...)``): the chunk writes both keys."""
    return OutputDelta(
        content=content, reasoning=reasoning, content_set=True, reasoning_hidden=reasoning is None
    )


class ToolCall(msgspec.Struct, gc=False):
    """A complete tool call of a finished message."""

    id: str
    name: str
    arguments: str
    """The arguments as a JSON text."""


class ParsedOutput(msgspec.Struct):
    """A finished output split into reasoning, content and tool calls."""

    reasoning: str | None
    content: str | None
    tool_calls: list[ToolCall] = msgspec.field(default_factory=list)
    tools_called: bool = False
    """True when tool calls were extracted in ``auto`` mode (finish reason ``tool_calls``)."""
