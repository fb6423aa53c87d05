"""Sans-IO startup handshake with EngineCore processes (engine protocol §3).

The state machine takes the messages the frontend's sockets received (handshake ROUTER and
input ROUTER) and returns the replies to send; it never touches a socket. The transport feeds it
in Mode A (the frontend owns the handshake ROUTER: HELLO → INIT → registration → READY per
engine) and in Mode B (inherited listeners: only the registrations are expected).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping

import msgspec

from vllm_frontend.engine.codec import decode_registration
from vllm_frontend.engine.errors import ProtocolError
from vllm_frontend.engine.protocol import (
    EngineCoreReadyResponse,
    EngineHandshakeMetadata,
    EngineZmqAddresses,
)

__all__ = [
    "EngineHandshake",
    "EngineState",
    "HandshakeError",
    "HandshakeTimeoutError",
    "engine_index_of",
]

_IDENTITY_LEN = 2


def engine_index_of(identity: bytes) -> int:
    """The engine index encoded in a 2-byte routing identity; ValueError for anything else."""
    if len(identity) != _IDENTITY_LEN:
        raise ValueError(f"engine identity must be {_IDENTITY_LEN} bytes, got {identity!r}")
    return int.from_bytes(identity, "little")


class HandshakeError(ProtocolError):
    """An engine broke the startup protocol (unexpected identity, message out of order, …)."""


class HandshakeTimeoutError(HandshakeError, TimeoutError):
    """Not every expected engine finished the handshake in time; the message names them."""


class EngineState(enum.Enum):
    """Handshake progress of one engine (vLLM's ``CoreEngineState``)."""

    NEW = "new"
    CONNECTED = "connected"  # HELLO received, INIT sent
    READY = "ready"  # READY received


class _Engine(msgspec.Struct):
    index: int
    state: EngineState
    registered: bool = False
    registration: EngineCoreReadyResponse | None = None
    hello: dict[str, object] = msgspec.field(default_factory=dict)
    config_hash: str | None = None


class EngineHandshake:
    """Tracks every expected engine from first contact to registered-and-ready.

    With ``addresses`` (Mode A) each engine must send HELLO (answered with INIT), its registration
    on the input socket and READY; the registration and READY travel on different sockets, so
    either may be observed first. Without ``addresses`` (Mode B, the supervisor did the
    handshake) only registrations are expected.
    """

    def __init__(
        self,
        engine_indices: Iterable[int],
        *,
        addresses: EngineZmqAddresses | None = None,
        parallel_config: Mapping[str, object] | None = None,
    ) -> None:
        indices = list(engine_indices)
        if not indices:
            raise ValueError("the handshake needs at least one engine")
        if len(set(indices)) != len(indices):
            raise ValueError(f"duplicate engine indices in {indices}")
        for index in indices:
            if not 0 <= index < 1 << 16:
                raise ValueError(f"engine index {index} does not fit the 16-bit identity")
        self._owns_handshake = addresses is not None
        self._init_payload = (
            msgspec.msgpack.encode(
                EngineHandshakeMetadata(
                    addresses=addresses, parallel_config=dict(parallel_config or {})
                )
            )
            if addresses is not None
            else b""
        )
        initial = EngineState.NEW if self._owns_handshake else EngineState.READY
        self._engines = {i: _Engine(i, initial) for i in indices}

    # -- inputs -------------------------------------------------------------------------------

    def receive_handshake(self, identity: bytes, payload: bytes) -> bytes | None:
        """Feed one message from the handshake ROUTER; return the INIT payload to send back.

        Returns the bytes to send to ``identity`` (after a HELLO) or None (after READY).
        Raises HandshakeError for an unexpected identity, a malformed message, a duplicate
        HELLO or a READY before HELLO.
        """
        if not self._owns_handshake:
            raise HandshakeError("received a handshake message but this frontend is not the owner")
        engine = self._engine_for(identity, "handshake message")
        try:
            message = msgspec.msgpack.decode(payload)
        except msgspec.DecodeError as exc:
            raise HandshakeError(
                f"engine {engine.index} sent an undecodable handshake message: {exc}"
            ) from exc
        status = message.get("status") if isinstance(message, dict) else None
        if status == "HELLO":
            if engine.state is not EngineState.NEW:
                raise HandshakeError(
                    f"engine {engine.index} sent HELLO twice (state {engine.state.value}); "
                    "is a second engine running with the same data-parallel rank?"
                )
            engine.state = EngineState.CONNECTED
            engine.hello = message
            return self._init_payload
        if status == "READY":
            if engine.state is EngineState.NEW:
                raise HandshakeError(f"engine {engine.index} sent READY before HELLO")
            if engine.state is EngineState.READY:
                raise HandshakeError(f"engine {engine.index} sent READY twice")
            config_hash = message.get("parallel_config_hash")
            if config_hash is not None:
                self._check_config_hash(engine, str(config_hash))
            engine.state = EngineState.READY
            return None
        raise HandshakeError(
            f"engine {engine.index} sent a handshake message with unknown status: {message!r}"
        )

    def receive_registration(self, identity: bytes, payload: bytes) -> int:
        """Feed the registration message (first message on the input ROUTER); return the index.

        An empty payload is legal (older engines) and records no information.
        """
        engine = self._engine_for(identity, "registration")
        if engine.state is EngineState.NEW:
            raise HandshakeError(
                f"engine {engine.index} registered before its HELLO; it cannot know this "
                "frontend's addresses (left over from an earlier frontend?)"
            )
        if engine.registered:
            raise HandshakeError(f"engine {engine.index} registered twice")
        try:
            engine.registration = decode_registration(payload)
        except ProtocolError as exc:
            raise HandshakeError(
                f"engine {engine.index} sent an undecodable registration: {exc}"
            ) from exc
        engine.registered = True
        return engine.index

    # -- queries ------------------------------------------------------------------------------

    @property
    def complete(self) -> bool:
        """True when every expected engine is ready and registered: serving may start."""
        return all(e.registered and e.state is EngineState.READY for e in self._engines.values())

    @property
    def engine_indices(self) -> list[int]:
        """The expected engine indices, ascending."""
        return sorted(self._engines)

    def state(self, index: int) -> EngineState:
        """The handshake state of engine ``index``."""
        return self._engines[index].state

    def is_registered(self, index: int) -> bool:
        """Whether engine ``index`` has sent its registration message."""
        return self._engines[index].registered

    def registration(self, index: int) -> EngineCoreReadyResponse | None:
        """The registration engine ``index`` sent (None if empty or not yet received)."""
        return self._engines[index].registration

    def missing(self) -> list[str]:
        """One description per engine that is not done yet, e.g. ``"engine 1 (no HELLO)"``."""
        out = []
        for index in sorted(self._engines):
            engine = self._engines[index]
            lacking = []
            if engine.state is EngineState.NEW:
                lacking.append("no HELLO")
            elif engine.state is EngineState.CONNECTED:
                lacking.append("no READY")
            if not engine.registered:
                lacking.append("no registration")
            if lacking:
                out.append(f"engine {index} ({', '.join(lacking)})")
        return out

    def timeout_error(self, timeout_s: float) -> HandshakeTimeoutError:
        """The error to raise when ``timeout_s`` passed without completing; names the laggards."""
        return HandshakeTimeoutError(
            f"timed out after {timeout_s:g} s waiting for engines to start: "
            + "; ".join(self.missing())
        )

    # -- internals ----------------------------------------------------------------------------

    def _engine_for(self, identity: bytes, what: str) -> _Engine:
        try:
            index = engine_index_of(identity)
        except ValueError as exc:
            raise HandshakeError(f"{what} from a peer with an invalid identity: {exc}") from exc
        engine = self._engines.get(index)
        if engine is None:
            raise HandshakeError(
                f"{what} from unexpected engine {index}; expected engines "
                f"{_ranges(sorted(self._engines))}"
            )
        return engine

    def _check_config_hash(self, engine: _Engine, config_hash: str) -> None:
        # Like vLLM's frontend: every DP rank must agree on the collective-communication layout.
        for other in self._engines.values():
            if other.config_hash is not None and other.config_hash != config_hash:
                raise HandshakeError(
                    f"engine {engine.index} reports parallel config hash {config_hash}, but "
                    f"engine {other.index} reports {other.config_hash}: all data-parallel "
                    "engines must be started with identical parallel settings"
                )
        engine.config_hash = config_hash


def _ranges(indices: list[int]) -> str:
    if len(indices) > 1 and indices == list(range(indices[0], indices[-1] + 1)):
        return f"{indices[0]}..{indices[-1]}"
    return ", ".join(map(str, indices))
