"""Exceptions of the engine layer: the wire (codec and structs) and the engine client."""

from __future__ import annotations

__all__ = [
    "EngineDeadError",
    "EngineDeadSignal",
    "ProtocolError",
    "UtilityCallError",
    "UtilityTimeoutError",
]


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


class EngineDeadError(RuntimeError):
    """The engine(s) died or became unreachable; in-flight and new requests cannot complete."""


class UtilityCallError(RuntimeError):
    """A utility call reached the engine and failed there (unknown method, exception, …)."""

    def __init__(self, method: str, engine_index: int, message: str) -> None:
        super().__init__(f"utility {method!r} failed on engine {engine_index}: {message}")
        self.method = method
        self.engine_index = engine_index
        self.failure_message = message


class UtilityTimeoutError(TimeoutError):
    """A utility call got no reply in time."""
