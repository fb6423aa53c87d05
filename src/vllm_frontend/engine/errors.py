"""Exceptions raised by the engine wire layer (codec and structs)."""

from __future__ import annotations

__all__ = ["EngineDeadSignal", "ProtocolError"]


class ProtocolError(Exception):
    """A frame or message that does not follow the EngineCore wire protocol.

    The codec raises only this for truncated, garbled or mis-shaped input, so a receive loop can
    catch it, log it and carry on (or fail the engine) without ever crashing on bad bytes.
    """


class EngineDeadSignal(Exception):
    """The engine sent the ``ENGINE_CORE_DEAD`` sentinel: it failed fatally and is exiting.

    Raised by :func:`vllm_frontend.engine.codec.decode_outputs`; every in-flight request and
    pending utility call of that engine must be failed (engine-protocol.md §9.1).
    """

    def __init__(self, message: str = "engine core died (ENGINE_CORE_DEAD received)") -> None:
        super().__init__(message)
