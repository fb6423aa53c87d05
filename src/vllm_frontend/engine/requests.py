"""Sending requests and aborts, and the table of requests still live on the engines.

:meth:`RequestSender.add` validates an ``EngineCoreRequest``, picks its engine, sends it and
returns its :class:`~vllm_frontend.engine.streams.RequestStream`; aborts end a stream with a
synthesized ABORT output, since the engine sends none for client aborts (§4.8).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping

import msgspec

from vllm_frontend.engine import codec
from vllm_frontend.engine.balance import EngineBalancer
from vllm_frontend.engine.errors import EngineDeadError
from vllm_frontend.engine.liveness import Liveness
from vllm_frontend.engine.outbox import Outbox
from vllm_frontend.engine.protocol import EngineCoreOutput, EngineCoreRequest, FinishReason
from vllm_frontend.engine.streams import Notifier, RequestState, RequestStream
from vllm_frontend.engine.validate import InvalidRequestError, RequestLimits, validate_request

__all__ = ["RequestSender"]

_ABORTED = FinishReason.ABORT


class RequestSender:
    """Sends requests and aborts; owns the live-request table the output router delivers to."""

    __slots__ = (
        "_balancer",
        "_coordinated",
        "_engines",
        "_identities",
        "_liveness",
        "_notifier",
        "_outbox",
        "_pending_aborts",
        "in_flight",
        "limits",
        "loop",
        "streams",
    )

    def __init__(
        self,
        outbox: Outbox,
        identities: Mapping[int, bytes],
        in_flight: dict[int, int],
        limits: RequestLimits,
        balancer: EngineBalancer,
        liveness: Liveness,
        *,
        coordinated: bool,
    ) -> None:
        """``identities``: engine index -> ROUTER identity, in engine order; ``in_flight``: the
        live count per engine, shared with the balancer; ``coordinated``: a DP coordinator runs
        the waves (requests are stamped with the current one)."""
        self._outbox = outbox
        self._identities = identities
        self._engines = list(identities)
        self._balancer = balancer
        self._liveness = liveness
        self._coordinated = coordinated
        self.loop = asyncio.get_running_loop()
        """The event loop the client runs on."""
        self._notifier = Notifier(self.loop)
        self._pending_aborts: list[str] = []
        self.streams: dict[str, RequestState] = {}
        """Request id -> its stream state, while the request is live on its engine."""
        self.in_flight = in_flight
        """Engine index -> how many of its requests are live."""
        self.limits = limits
        """What requests are validated against."""

    def add(self, request: EngineCoreRequest) -> RequestStream:
        """Validate ``request``, send it to an engine and return its output stream."""
        self._liveness.raise_if_dead()
        request_id = request.request_id
        if isinstance(request_id, str) and request_id in self.streams:
            # A live duplicate id kills the engine (§4.2).
            raise InvalidRequestError(
                f"request id {request_id!r} is already in flight", "request_id"
            )
        if request.resumable:
            raise InvalidRequestError(
                "streaming-input sessions (resumable=True) are not supported", "resumable"
            )
        validate_request(request, self.limits)
        rank = request.data_parallel_rank
        balancer = self._balancer
        engine = self._engines[rank] if rank is not None else balancer.choose()
        if self._coordinated:
            request.current_wave = balancer.current_wave
        try:
            frames = codec.encode_request(request)
        except (TypeError, ValueError, OverflowError, msgspec.EncodeError) as exc:
            raise InvalidRequestError(f"request cannot be encoded: {exc}") from exc
        state = RequestState(request_id, engine, self._notifier)
        self._outbox.send([self._identities[engine], *frames])
        self.streams[request_id] = state
        self.in_flight[engine] += 1
        balancer.sent(engine, rank is None)
        return RequestStream(self, state)

    def abort_requests(self, request_ids: Iterable[str]) -> int:
        """Abort requests by id (unknown or finished ids are ignored); returns how many."""
        by_engine: dict[int, list[str]] = {}
        for request_id in request_ids:
            stream = self.streams.pop(request_id, None)
            if stream is None:
                continue
            self.in_flight[stream.engine_index] -= 1
            by_engine.setdefault(stream.engine_index, []).append(request_id)
            stream.finish(EngineCoreOutput(request_id, [], finish_reason=_ABORTED))
        liveness = self._liveness
        if liveness.dead is None and not liveness.closed:
            for engine, ids in by_engine.items():
                self._outbox.send_now([self._identities[engine], *codec.encode_abort(ids)])
        return sum(map(len, by_engine.values()))

    def abort_state(self, state: RequestState) -> None:
        """Abort the request of ``state`` if it is still the live one of its id."""
        if self.streams.get(state.request_id) is state:
            self.abort_requests([state.request_id])

    def abort_later(self, request_id: str) -> None:
        """Abort ``request_id`` from the loop soon: safe from ``__del__`` inside a callback."""
        liveness = self._liveness
        if liveness.closed or liveness.dead is not None:
            return
        self._pending_aborts.append(request_id)
        if len(self._pending_aborts) == 1:
            self.loop.call_soon(self._flush_pending_aborts)

    def _flush_pending_aborts(self) -> None:
        ids, self._pending_aborts = self._pending_aborts, []
        self.abort_requests(ids)

    def finished_elsewhere(self, request_ids: Iterable[str]) -> None:
        """End the streams of requests the engine finished without a final output for us
        (engine-side abort bookkeeping, §5.2)."""
        for request_id in request_ids:
            stream = self.streams.pop(request_id, None)
            if stream is not None:
                self.in_flight[stream.engine_index] -= 1
                stream.finish(EngineCoreOutput(request_id, [], finish_reason=_ABORTED))

    def fail_in_flight(self, error: EngineDeadError) -> int:
        """Abort every live request at its engine and fail its stream with (a copy of)
        ``error``; returns how many. The engines live on (a shutdown's last step)."""
        states = list(self.streams.values())
        self.streams.clear()
        by_engine: dict[int, list[str]] = {}
        for state in states:
            self.in_flight[state.engine_index] -= 1
            by_engine.setdefault(state.engine_index, []).append(state.request_id)
            state.fail(EngineDeadError(str(error)))
        liveness = self._liveness
        if liveness.dead is None and not liveness.closed:
            for engine, ids in by_engine.items():
                self._outbox.send_now([self._identities[engine], *codec.encode_abort(ids)])
        return len(states)

    def fail_all(self, error: EngineDeadError) -> None:
        """Fail every live stream with (a copy of) ``error`` and forget them."""
        states = list(self.streams.values())
        self.streams.clear()
        for state in states:
            state.fail(EngineDeadError(str(error)))
        for engine in self.in_flight:
            self.in_flight[engine] = 0
