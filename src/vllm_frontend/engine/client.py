"""The asyncio engine-core client: requests in, per-request output streams out.

One :class:`EngineCoreClient` drives every engine this frontend serves. ``add_request`` validates
and sends an ``EngineCoreRequest`` to one engine (data-parallel choice per engine protocol §8.2)
and returns a :class:`RequestStream`: an async iterator of that request's ``EngineCoreOutput``
values that ends exactly once: after the output carrying a finish reason, after an abort (a
synthesized ABORT output, since the engine sends none for client aborts, §4.8), or by raising
:class:`EngineDeadError`. A single output loop decodes each message once and hands every output
to its stream in one pass: no task, future or queue per output.

Engine death is noticed three ways (§9.1): the ``ENGINE_CORE_DEAD`` sentinel, a closed engine
connection (socket monitors: SIGKILL, a crashed input thread, a lost host via ZMTP heartbeats),
and a caller-supplied process watcher. Any of them fails every stream and utility call at once,
sets :attr:`EngineCoreClient.dead_error` and makes new requests fail; like vLLM, one dead engine
makes the whole client dead.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Awaitable, Callable, Container, Iterable, Mapping, Sequence
from typing import Any

import msgspec

from vllm_frontend.engine import codec
from vllm_frontend.engine.errors import EngineDeadSignal, ProtocolError
from vllm_frontend.engine.protocol import (
    CoordinatorFirstRequest,
    EngineCoreOutput,
    EngineCoreOutputs,
    EngineCoreReadyResponse,
    EngineCoreRequest,
    EngineZmqAddresses,
    FinishReason,
    SchedulerStats,
    UtilityOutput,
    engine_identity,
)
from vllm_frontend.engine.transport import (
    BoundHandshake,
    EngineSockets,
    SocketOptions,
    adopt_listeners,
    bind_handshake,
    recv_nowait,
    recv_ready,
    send_parts,
    wait_readable,
    watch_readable,
)
from vllm_frontend.engine.validate import InvalidRequestError, RequestLimits, validate_request

__all__ = [
    "EngineCoreClient",
    "EngineDeadError",
    "EngineLoad",
    "InvalidRequestError",
    "RequestStream",
    "UtilityCallError",
    "UtilityTimeoutError",
]

logger = logging.getLogger(__name__)

ProcessWatcher = Callable[[], Awaitable[str]]
"""An async function that returns (with a description) when a managed engine process exits."""


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


class EngineLoad(msgspec.Struct, frozen=True, gc=False):
    """How busy one engine is, as far as this client knows."""

    engine_index: int
    in_flight: int
    """Requests this client sent to the engine that have not finished."""
    waiting: int
    """Engine-reported waiting requests (coordinator or scheduler stats; 0 if unknown)."""
    running: int
    """Engine-reported running requests (0 if unknown)."""
    kv_cache_usage: float
    """Engine-reported KV-cache usage in [0, 1] (0 if unknown)."""


_ABORTED = FinishReason.ABORT


class _RequestState:
    """The client's side of a stream: a tiny single-consumer queue (cheaper than asyncio.Queue).

    The client holds this, not the public stream, so an abandoned stream can be collected. A
    consumer either awaits a waiter future (pull) or registers a ``notify`` callback (push), which
    the client calls once per batch of engine messages that reached this stream. A push consumer
    may also register ``direct``, offered each running output as it is read (see ``put``).
    """

    __slots__ = (
        "direct",
        "done",
        "engine_index",
        "error",
        "finish_reason",
        "items",
        "notifier",
        "notify",
        "request_id",
        "served_by",
        "waiter",
    )

    def __init__(self, request_id: str, engine_index: int, notifier: _Notifier) -> None:
        self.request_id = request_id
        self.engine_index = engine_index
        # A list swapped out whole by take() (no copy); __anext__ pops from the front, which
        # for the few outputs a pulling consumer has queued costs less than a deque here.
        self.items: list[EngineCoreOutput] = []
        self.waiter: asyncio.Future[None] | None = None
        self.notify: Callable[[], None] | None = None
        self.direct: Callable[[EngineCoreOutput], bool] | None = None
        self.notifier = notifier
        self.done = False  # nothing more will be queued
        self.error: BaseException | None = None
        self.finish_reason: FinishReason | None = None
        self.served_by: int | None = None  # engine_index of the message with the final output

    def push(self, output: EngineCoreOutput) -> None:
        self.items.append(output)
        self._wake()

    def put(self, output: EngineCoreOutput) -> None:
        """Hand over a running (unfinished) output: to ``direct`` when nothing is queued before
        it and it takes the output, else to the queue."""
        direct = self.direct
        if direct is not None and not self.items:
            try:
                if direct(output):
                    return
            except Exception as e:  # a broken consumer: the request fails rather than the loop
                logger.exception("request output handler failed")
                self.direct = None
                self.fail(e)
                return
        self.items.append(output)
        self._wake()

    def finish(self, output: EngineCoreOutput) -> None:
        self.done = True
        self.finish_reason = output.finish_reason
        self.push(output)

    def fail(self, error: BaseException) -> None:
        if self.done:
            return
        self.done = True
        self.error = error
        self._wake()

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None:
            self.waiter = None
            if not waiter.done():
                waiter.set_result(None)
        elif self.notify is not None:
            self.notifier.add(self)


class _Notifier:
    """Calls push consumers' callbacks once per loop iteration, for every stream that changed.

    One engine message reaches many streams: instead of a task wake-up per stream, one callback
    per iteration runs each stream's consumer directly, after the output loop has handed out
    everything it read (so a consumer that fell behind sees several steps at once).
    """

    __slots__ = ("_loop", "_scheduled", "_states")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._states: dict[int, _RequestState] = {}
        self._scheduled = False

    def add(self, state: _RequestState) -> None:
        self._states[id(state)] = state
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._run)

    def _run(self) -> None:
        self._scheduled = False
        states, self._states = self._states, {}
        for state in states.values():
            notify = state.notify
            if notify is None:
                continue
            try:
                notify()
            except Exception:  # one broken consumer must not hold back the others
                logger.exception("request output callback failed")


class RequestStream:
    """The outputs of one request, in order; iterate with ``async for``.

    The iterator ends exactly once: after the output with a finish reason (a synthesized ABORT
    output for aborts), or by raising EngineDeadError. Stopping early (``aclose()``, leaving
    ``async with``, the consuming task being cancelled while it waits, or dropping the stream
    unfinished) aborts the request on its engine.
    """

    __slots__ = ("_client", "_state")

    def __init__(self, client: EngineCoreClient, state: _RequestState) -> None:
        self._client = client
        self._state = state

    @property
    def request_id(self) -> str:
        """The engine request id."""
        return self._state.request_id

    @property
    def engine_index(self) -> int:
        """The engine serving this request."""
        return self._state.engine_index

    @property
    def finish_reason(self) -> FinishReason | None:
        """The final output's finish reason once it is queued (None while running or failed)."""
        return self._state.finish_reason

    @property
    def served_by(self) -> int | None:
        """The engine that reported the final output (None before it, or for local aborts)."""
        return self._state.served_by

    @property
    def finished(self) -> bool:
        """True once the stream will produce nothing more (finished, aborted or failed)."""
        return self._state.done

    def __aiter__(self) -> RequestStream:
        return self

    async def __anext__(self) -> EngineCoreOutput:
        state = self._state
        while True:
            if state.items:
                return state.items.pop(0)
            if state.done:
                self._raise_failure()
                raise StopAsyncIteration
            await self._wait()

    async def next_batch(self) -> list[EngineCoreOutput]:
        """Every output queued since the last call, in order; ``[]`` once the stream has ended.

        Waits only when nothing is queued. A consumer that falls behind the engine gets the
        outputs of several engine steps at once and can handle them as one update, as vLLM's
        frontend merges the outputs a slow consumer has not collected yet.
        """
        state = self._state
        while not state.items and not state.done:
            await self._wait()
        return self.take()

    def _raise_failure(self) -> None:
        # A stream that ended by failing raises its error once, then ends normally.
        error = self._state.error
        if error is not None:
            self._state.error = None
            raise error

    def take(self) -> list[EngineCoreOutput]:
        """Every output queued now, in order, without waiting (``[]`` if none).

        Raises the stream's failure once, like :meth:`next_batch`. With :meth:`on_ready` this is
        the push-style way to consume: no task wakes up per engine step.
        """
        state = self._state
        batch = state.items
        if batch:
            state.items = []
            return batch
        if state.done:
            self._raise_failure()
        return []

    def on_ready(self, callback: Callable[[], None] | None) -> None:
        """Call ``callback()`` from the event loop whenever outputs were queued or the stream
        ended (at most once per loop iteration); then :meth:`take` them. None unregisters.

        The callback must not raise (errors are logged) and must not block. Outputs queued
        before registering are not announced: take them right after registering.
        """
        self._state.notify = callback

    def on_output(self, handler: Callable[[EngineCoreOutput], bool] | None) -> None:
        """Offer ``handler`` each running output (not the final one) as the client reads it,
        while nothing is queued for this stream; it returns True when it consumed the output,
        False to have it queued and announced as usual. It must not block; an exception fails
        the request. For a push consumer (:meth:`on_ready`) that can handle the common output
        on the spot, without waiting for the announcement. None unregisters.
        """
        self._state.direct = handler

    async def _wait(self) -> None:
        # Until an output is queued or the stream ends. Being cancelled while waiting (the
        # consumer went away) aborts the request. The client's loop, not get_running_loop():
        # on 3.11 that costs a getpid() call.
        state = self._state
        waiter = self._client._loop.create_future()
        state.waiter = waiter
        try:
            await waiter
        except asyncio.CancelledError:
            state.waiter = None
            self._client._abort_state(state)
            raise

    async def aclose(self) -> None:
        """Stop consuming: abort the request if it has not finished."""
        self._client._abort_state(self._state)
        self._state.items.clear()

    async def __aenter__(self) -> RequestStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __del__(self) -> None:
        if not self._state.done:
            with contextlib.suppress(Exception):
                self._client._abort_later(self._state.request_id)


class _PendingCall:
    __slots__ = ("engine_index", "future", "method")

    def __init__(self, method: str, engine_index: int, future: asyncio.Future[Any]) -> None:
        self.method = method
        self.engine_index = engine_index
        self.future = future


class EngineCoreClient:
    """Asyncio client for one or more EngineCore processes (data parallel).

    Build it with :meth:`connect` (Mode A: this process owns the handshake) or :meth:`adopt`
    (Mode B: ``vllm serve`` handed over listening sockets). Use it from one event loop.
    """

    def __init__(
        self,
        sockets: EngineSockets,
        *,
        client_index: int = 0,
        client_count: int = 1,
        vocab_size: int | None = None,
        max_logprobs: int | None = None,
        process_watcher: ProcessWatcher | None = None,
    ) -> None:
        """Take over connected ``sockets`` and start the output and liveness loops.

        ``client_index`` is this frontend's position among ``client_count`` frontends sharing
        the engines (``--api-server-count``, §8.1); both steer the engine choice (§8.2).
        """
        if not 0 <= client_index < client_count:
            raise ValueError(f"client_index {client_index} not in 0..{client_count - 1}")
        self._sockets = sockets
        self._input = sockets.input
        self._client_index = client_index
        self._client_count = client_count
        self._engines = list(sockets.engine_indices)
        self._identities = {i: engine_identity(i) for i in self._engines}
        self._registrations: dict[int, EngineCoreReadyResponse | None] = dict(sockets.registrations)
        regs = [r for r in self._registrations.values() if r is not None]
        lens = [r.max_model_len for r in regs if r.max_model_len is not None]
        self._limits = RequestLimits(
            client_index=client_index,
            engine_count=len(self._engines),
            max_model_len=min(lens) if lens else None,
            vocab_size=vocab_size,
            max_logprobs=max_logprobs,
            supports_lora=(all(bool(r.supports_lora) for r in regs) if regs else None),
        )
        self._streams: dict[str, _RequestState] = {}
        self._in_flight: dict[int, int] = dict.fromkeys(self._engines, 0)
        self._stats: dict[int, SchedulerStats] = {}
        self._stats_times: dict[int, float] = {}
        self._coord_counts: dict[int, list[float]] = {}
        self._stats_waiters: list[asyncio.Future[None]] = []
        self._step_observer: Callable[[EngineCoreOutputs, Container[str]], None] | None = None
        # Frontends start their rotation at different engines so they do not all pick the same.
        self._rotation = len(self._engines) * client_index // client_count
        self._current_wave = 0
        self._engines_running = False
        self._calls: dict[int, _PendingCall] = {}
        self._call_ids = itertools.count(1)
        self._dead: EngineDeadError | None = None
        self._closed = False
        self._pending_aborts: list[str] = []
        self._loop = asyncio.get_running_loop()
        self._notifier = _Notifier(self._loop)
        self._outputs_stopped: asyncio.Future[None] | None = None
        self._output_sources_known = sockets.output_sources_known()
        self._tasks = [
            asyncio.create_task(self._output_loop(), name="engine-output-loop"),
            asyncio.create_task(self._liveness_loop(), name="engine-liveness"),
        ]
        if sockets.coordinator is not None:
            self._tasks.append(
                asyncio.create_task(self._coordinator_loop(), name="engine-coordinator")
            )
        if process_watcher is not None:
            self._tasks.append(
                asyncio.create_task(self._watch_process(process_watcher), name="engine-watcher")
            )

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    async def connect(
        cls,
        handshake_address: str | BoundHandshake,
        *,
        engine_count: int = 1,
        start_index: int = 0,
        local: bool = True,
        advertise_host: str | None = None,
        ready_timeout_s: float = 600.0,
        coordinator: EngineZmqAddresses | None = None,
        parallel_config: dict[str, object] | None = None,
        vocab_size: int | None = None,
        max_logprobs: int | None = None,
        process_watcher: ProcessWatcher | None = None,
        socket_options: SocketOptions | None = None,
        query_supported_tasks: bool = True,
        client_index: int = 0,
        client_count: int = 1,
    ) -> EngineCoreClient:
        """Mode A: own the handshake at ``tcp://HOST:PORT`` and bring up engines
        ``start_index … start_index + engine_count - 1`` (started before or after this call).

        ``local``: the engines run on this host (ipc:// sockets); otherwise TCP on
        ``advertise_host`` (default: the handshake host). ``process_watcher`` reports managed
        engine processes exiting, during startup and after. Raises HandshakeError or
        HandshakeTimeoutError (naming the engines still missing).

        ``handshake_address`` may instead be a :func:`~vllm_frontend.engine.transport.
        bind_handshake` result, bound earlier so that the engines join while the caller loads
        its model; it fixes the engines, their locality, the coordinator, the parallel config
        and the socket options, so those arguments stay unset. The client owns (and on failure
        closes) it from this call on.
        """
        if isinstance(handshake_address, BoundHandshake):
            bound = handshake_address
            binding = (start_index, engine_count, local, advertise_host, coordinator)
            if binding != (0, 1, True, None, None) or parallel_config or socket_options:
                bound.close()
                raise ValueError("a bound handshake already fixes the engines and sockets")
        else:
            bound = bind_handshake(
                handshake_address,
                range(start_index, start_index + engine_count),
                local=local,
                advertise_host=advertise_host,
                parallel_config=parallel_config,
                coordinator=coordinator,
                options=socket_options,
            )
        sockets = await bound.run(timeout_s=ready_timeout_s, abort=process_watcher)
        return await cls._start(
            sockets,
            vocab_size,
            max_logprobs,
            process_watcher,
            query_supported_tasks,
            client_index=client_index,
            client_count=client_count,
        )

    @classmethod
    async def adopt(
        cls,
        *,
        input_listener_fd: int,
        output_listener_fd: int,
        engine_start_index: int = 0,
        engine_count: int = 1,
        coordinator_address: str | None = None,
        ready_timeout_s: float = 600.0,
        vocab_size: int | None = None,
        max_logprobs: int | None = None,
        process_watcher: ProcessWatcher | None = None,
        socket_options: SocketOptions | None = None,
        query_supported_tasks: bool = True,
        client_index: int = 0,
        client_count: int = 1,
    ) -> EngineCoreClient:
        """Mode B: adopt the listeners ``vllm serve`` passed (``--input-listener-fd`` …) and
        wait up to ``ready_timeout_s`` (``engine_ready_timeout_secs``) for every registration."""
        sockets = await adopt_listeners(
            input_listener_fd,
            output_listener_fd,
            range(engine_start_index, engine_start_index + engine_count),
            coordinator_address=coordinator_address,
            timeout_s=ready_timeout_s,
            options=socket_options,
            abort=process_watcher,
        )
        return await cls._start(
            sockets,
            vocab_size,
            max_logprobs,
            process_watcher,
            query_supported_tasks,
            client_index=client_index,
            client_count=client_count,
        )

    @classmethod
    async def _start(
        cls,
        sockets: EngineSockets,
        vocab_size: int | None,
        max_logprobs: int | None,
        process_watcher: ProcessWatcher | None,
        query_supported_tasks: bool,
        *,
        client_index: int = 0,
        client_count: int = 1,
    ) -> EngineCoreClient:
        try:
            client = cls(
                sockets,
                client_index=client_index,
                client_count=client_count,
                vocab_size=vocab_size,
                max_logprobs=max_logprobs,
                process_watcher=process_watcher,
            )
        except BaseException:
            sockets.close()
            raise
        if query_supported_tasks:
            try:
                tasks = await client.call_utility("get_supported_tasks", timeout=60.0)
                client._set_limits(supported_tasks=frozenset(tasks))
            except BaseException:
                await client.close()
                raise
        return client

    def _set_limits(self, **changes: Any) -> None:
        self._limits = msgspec.structs.replace(self._limits, **changes)

    # -- what upper layers read -----------------------------------------------------------------

    @property
    def engine_indices(self) -> list[int]:
        """Global indices of the engines this client serves, ascending."""
        return list(self._engines)

    @property
    def engine_count(self) -> int:
        """Number of engines this client serves."""
        return len(self._engines)

    @property
    def registrations(self) -> Mapping[int, EngineCoreReadyResponse | None]:
        """What each engine reported when it registered (None: it reported nothing)."""
        return self._registrations

    @property
    def max_model_len(self) -> int | None:
        """The context length every engine supports (minimum over engines), if reported."""
        return self._limits.max_model_len

    @property
    def num_gpu_blocks(self) -> int:
        """KV-cache blocks summed over engines (0 if unreported)."""
        return sum((r.num_gpu_blocks or 0) for r in self._registrations.values() if r)

    @property
    def limits(self) -> RequestLimits:
        """What requests are validated against."""
        return self._limits

    @property
    def is_dead(self) -> bool:
        """Whether the engines are dead or unreachable (report unhealthy)."""
        return self._dead is not None

    @property
    def dead_error(self) -> EngineDeadError | None:
        """Why the engines are considered dead, or None while healthy."""
        return self._dead

    @property
    def current_wave(self) -> int:
        """The data-parallel wave stamped on new requests (mirrored from the coordinator, §8.5)."""
        return self._current_wave

    @property
    def client_count(self) -> int:
        """How many frontends (API-server processes) share the engines, this one included."""
        return self._client_count

    @property
    def num_in_flight(self) -> int:
        """Requests sent and not yet finished, over all engines."""
        return len(self._streams)

    def scheduler_stats(self) -> Mapping[int, SchedulerStats]:
        """The latest scheduler stats each engine sent (engines that log stats only)."""
        return dict(self._stats)

    def scheduler_stats_times(self) -> Mapping[int, float]:
        """When each engine made the stats :meth:`scheduler_stats` holds (its outputs message's
        ``timestamp``, the engine's monotonic clock). An engine sends each step's stats to one
        frontend only: among several, the one with the larger time has the engine's newer stats.
        """
        return dict(self._stats_times)

    def observe_steps(
        self, observer: Callable[[EngineCoreOutputs, Container[str]], None] | None
    ) -> None:
        """Call ``observer(message, tracked)`` with every outputs message, before its outputs go
        to their streams; ``tracked`` holds the request ids still streamed (for metrics)."""
        self._step_observer = observer

    def load(self) -> list[EngineLoad]:
        """Current load of every engine, in index order."""
        out = []
        for i in self._engines:
            waiting, running, kv = self._engine_counts(i)
            out.append(EngineLoad(i, self._in_flight[i], int(waiting), int(running), kv))
        return out

    async def wait_for_scheduler_stats(
        self,
        predicate: Callable[[Mapping[int, SchedulerStats]], bool],
        timeout: float | None = None,
    ) -> Mapping[int, SchedulerStats]:
        """Wait until the latest stats satisfy ``predicate`` (checked now and on each update)."""

        async def wait() -> Mapping[int, SchedulerStats]:
            while True:
                self._raise_if_dead()
                if predicate(self._stats):
                    return dict(self._stats)
                fut: asyncio.Future[None] = self._loop.create_future()
                self._stats_waiters.append(fut)
                await fut

        return await asyncio.wait_for(wait(), timeout)

    # -- requests -------------------------------------------------------------------------------

    def add_request(self, request: EngineCoreRequest) -> RequestStream:
        """Validate ``request``, send it to an engine and return its output stream.

        Raises InvalidRequestError (nothing sent; the engines are unaffected) or
        EngineDeadError. The engine is ``data_parallel_rank`` if set (relative to the first
        engine this client serves), else the least loaded.
        """
        self._raise_if_dead()
        request_id = request.request_id
        if isinstance(request_id, str) and request_id in self._streams:
            # A live duplicate id kills the engine (§4.2).
            raise InvalidRequestError(
                f"request id {request_id!r} is already in flight", "request_id"
            )
        if request.resumable:
            raise InvalidRequestError(
                "streaming-input sessions (resumable=True) are not supported", "resumable"
            )
        validate_request(request, self._limits)
        rank = request.data_parallel_rank
        engine = self._engines[rank] if rank is not None else self._choose_engine()
        if self._sockets.coordinator is not None:
            request.current_wave = self._current_wave
        try:
            frames = codec.encode_request(request)
        except (TypeError, ValueError, OverflowError, msgspec.EncodeError) as exc:
            raise InvalidRequestError(f"request cannot be encoded: {exc}") from exc
        state = _RequestState(request_id, engine, self._notifier)
        send_parts(self._input, [self._identities[engine], *frames])
        self._streams[request_id] = state
        self._in_flight[engine] += 1
        if rank is None and engine in self._coord_counts:
            # As vLLM: count it waiting (once per frontend sharing the engine) until next publish.
            self._coord_counts[engine][0] += self._client_count
        if self._sockets.coordinator is not None and not self._engines_running:
            self._engines_running = True
            self._sockets.coordinator.send(
                codec.encode_coordinator_first_request(
                    CoordinatorFirstRequest(engine, self._current_wave)
                )
            )
        return RequestStream(self, state)

    def abort(self, request_id: str) -> bool:
        """Abort one request; its stream ends with an ABORT output. False if it was not live."""
        return self.abort_requests([request_id]) == 1

    def abort_requests(self, request_ids: Iterable[str]) -> int:
        """Abort requests by id (unknown or finished ids are ignored); returns how many."""
        by_engine: dict[int, list[str]] = {}
        for request_id in request_ids:
            stream = self._streams.pop(request_id, None)
            if stream is None:
                continue
            self._in_flight[stream.engine_index] -= 1
            by_engine.setdefault(stream.engine_index, []).append(request_id)
            stream.finish(EngineCoreOutput(request_id, [], finish_reason=_ABORTED))
        if self._dead is None and not self._closed:
            for engine, ids in by_engine.items():
                send_parts(self._input, [self._identities[engine], *codec.encode_abort(ids)])
        return sum(map(len, by_engine.values()))

    def _abort_state(self, state: _RequestState) -> None:
        if self._streams.get(state.request_id) is state:
            self.abort_requests([state.request_id])

    def _abort_later(self, request_id: str) -> None:
        # From __del__ (possibly inside another callback): batch and send from the loop.
        if self._closed or self._dead is not None:
            return
        self._pending_aborts.append(request_id)
        if len(self._pending_aborts) == 1:
            self._loop.call_soon(self._flush_pending_aborts)

    def _flush_pending_aborts(self) -> None:
        ids, self._pending_aborts = self._pending_aborts, []
        self.abort_requests(ids)

    # -- utility calls --------------------------------------------------------------------------

    async def call_utility(
        self, method: str, *args: Any, engine: int | None = None, timeout: float | None = 60.0
    ) -> Any:
        """Call ``method(*args)`` on one engine (default: the first) and return its result.

        Raises UtilityCallError (the engine reported a failure), UtilityTimeoutError or
        EngineDeadError.
        """
        target = self._engines[0] if engine is None else engine
        if target not in self._identities:
            raise ValueError(f"engine {target} is not served by this client ({self._engines})")
        return await self._call(method, args, target, timeout)

    async def call_utility_all(
        self, method: str, *args: Any, timeout: float | None = 60.0
    ) -> list[Any]:
        """Call ``method(*args)`` on every engine concurrently; results in engine order."""
        return list(
            await asyncio.gather(*(self._call(method, args, i, timeout) for i in self._engines))
        )

    async def _call(
        self, method: str, args: Sequence[Any], engine: int, timeout: float | None
    ) -> Any:
        self._raise_if_dead()
        if not isinstance(method, str) or not method:
            raise ValueError("utility method must be a non-empty string")
        call_id = next(self._call_ids)
        frames = codec.encode_utility(self._client_index, call_id, method, list(args))
        future: asyncio.Future[Any] = self._loop.create_future()
        self._calls[call_id] = _PendingCall(method, engine, future)
        self._input.send_multipart([self._identities[engine], *frames], copy=False)
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout)
        except TimeoutError:
            raise UtilityTimeoutError(
                f"utility {method!r} on engine {engine} got no reply within {timeout:g} s"
            ) from None
        finally:
            self._calls.pop(call_id, None)

    # -- death ----------------------------------------------------------------------------------

    def declare_dead(self, reason: str) -> None:
        """Mark the engines dead (e.g. a supervisor saw an engine process exit): fail everything."""
        self._die(EngineDeadError(reason))

    def _raise_if_dead(self) -> None:
        if self._dead is not None:
            # A fresh instance each time: re-raising one object would grow its traceback.
            raise EngineDeadError(str(self._dead)) from None
        if self._closed:
            raise EngineDeadError("the engine client is closed")

    def _die(self, error: EngineDeadError, *, closing: bool = False) -> None:
        if self._dead is not None or self._closed:
            return
        self._dead = error
        if not closing:
            logger.error("engine core client is dead: %s", error)
        streams, self._streams = self._streams, {}
        for stream in streams.values():
            stream.fail(EngineDeadError(str(error)))
        for call in self._calls.values():
            if not call.future.done():
                call.future.set_exception(EngineDeadError(str(error)))
        self._wake_stats_waiters()
        for i in self._in_flight:
            self._in_flight[i] = 0

    async def _watch_process(self, watcher: ProcessWatcher) -> None:
        try:
            reason = await watcher()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a broken watcher must not hide a dead engine silently
            reason = f"the process watcher failed: {exc!r}"
        self._die(EngineDeadError(f"engine process exited: {reason}"))

    # -- loops ----------------------------------------------------------------------------------

    async def _output_loop(self) -> None:
        # The outputs are handled from the socket's reader callback (no task resumes per engine
        # message); this task only holds the watch for as long as the client lives.
        self._outputs_stopped = stopped = self._loop.create_future()
        unwatch = watch_readable(self._sockets.output, self._read_outputs)
        try:
            await stopped
        finally:
            unwatch()

    def _read_outputs(self) -> None:
        # Everything queued on the output socket, in order.
        sock = self._sockets.output
        decode = codec.decode_outputs
        in_flight = self._in_flight
        sockets = self._sockets
        try:
            while self._dead is None:
                frames = recv_ready(sock)
                if frames is None:
                    return
                try:
                    msg = decode(frames)
                except EngineDeadSignal:
                    self._die(EngineDeadError("engine core died (it sent ENGINE_CORE_DEAD)"))
                    break
                except ProtocolError as exc:
                    # Which requests it carried is unknown; failing beats hanging them.
                    self._die(EngineDeadError(f"undecodable message from an engine: {exc}"))
                    break
                if not self._output_sources_known:
                    sockets.note_output_source(frames[0], msg.engine_index)
                    self._output_sources_known = sockets.output_sources_known()
                streams = self._streams
                if self._step_observer is not None:
                    self._step_observer(msg, streams)
                for out in msg.outputs:
                    stream = streams.get(out.request_id)
                    if stream is None:
                        continue  # already finished or aborted here
                    if out.finish_reason is None:
                        stream.put(out)
                    else:
                        del streams[out.request_id]
                        in_flight[stream.engine_index] -= 1
                        stream.served_by = msg.engine_index
                        stream.finish(out)
                if msg.finished_requests:
                    self._finished_elsewhere(msg.finished_requests)
                if msg.scheduler_stats is not None:
                    self._stats[msg.engine_index] = msg.scheduler_stats
                    self._stats_times[msg.engine_index] = msg.timestamp
                    self._wake_stats_waiters()
                if msg.utility_output is not None:
                    self._utility_reply(msg.engine_index, msg.utility_output)
                if msg.wave_complete is not None and self._sockets.coordinator is None:
                    self._current_wave = max(self._current_wave, msg.wave_complete + 1)
                    self._engines_running = False
                # Drop the message now: each output's last reference is then its stream's queue,
                # so it is freed right after its consumer has used it (while in cache), not when
                # the next message replaces this one (~5% of a 5 ms-step profile went there).
                del msg
        except Exception as exc:  # a bug here must not leave every stream hanging
            logger.exception("engine output loop failed")
            self._die(EngineDeadError(f"engine output loop failed: {exc!r}"))
        stopped = self._outputs_stopped
        if stopped is not None and not stopped.done():
            stopped.set_result(None)

    def _finished_elsewhere(self, request_ids: Iterable[str]) -> None:
        # Finished without a final output for us (engine-side abort bookkeeping, §5.2).
        for request_id in request_ids:
            stream = self._streams.pop(request_id, None)
            if stream is not None:
                self._in_flight[stream.engine_index] -= 1
                stream.finish(EngineCoreOutput(request_id, [], finish_reason=_ABORTED))

    def _utility_reply(self, engine_index: int, reply: UtilityOutput) -> None:
        call = self._calls.get(reply.call_id)
        if call is None:
            if reply.call_id >= 0:
                logger.warning("utility reply for unknown call id %d dropped", reply.call_id)
            return
        if call.future.done():
            return
        if reply.failure_message is not None:
            call.future.set_exception(
                UtilityCallError(call.method, engine_index, reply.failure_message)
            )
        else:
            call.future.set_result(reply.result.value if reply.result is not None else None)

    def _wake_stats_waiters(self) -> None:
        waiters, self._stats_waiters = self._stats_waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    async def _liveness_loop(self) -> None:
        monitors = self._sockets.monitors
        try:
            # Keeps draining after a death too, so monitor events never pile up until close().
            while True:
                gone = self._sockets.disconnected_engines()
                if gone and self._dead is None:
                    index, channel = gone[0]
                    self._die(
                        EngineDeadError(
                            f"engine {index} disconnected ({channel} connection closed): "
                            "the engine process exited or its host is unreachable"
                        )
                    )
                waiters = [asyncio.ensure_future(wait_readable(m)) for m in monitors]
                try:
                    await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    # Await the cancellations: each waiter owns its fd's reader registration.
                    for w in waiters:
                        w.cancel()
                    await asyncio.gather(*waiters, return_exceptions=True)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.exception("engine liveness monitor failed")
            self._die(EngineDeadError(f"engine liveness monitor failed: {exc!r}"))

    async def _coordinator_loop(self) -> None:
        sock = self._sockets.coordinator
        assert sock is not None
        first = self._engines[0]
        count = len(self._engines)
        while True:
            frames = recv_nowait(sock)
            if frames is None:
                await wait_readable(sock)
                continue
            try:
                publish = codec.decode_coordinator_publish(frames[0].buffer)
            except ProtocolError as exc:
                logger.warning("ignoring undecodable coordinator message: %s", exc)
                continue
            if publish.counts is not None:
                # Counts are indexed by global engine index (§8.4).
                for i, entry in enumerate(publish.counts[first : first + count]):
                    self._coord_counts[first + i] = [float(x) for x in entry]
            self._current_wave = publish.current_wave
            self._engines_running = publish.engines_running

    # -- data-parallel choice (§8.2) ------------------------------------------------------------

    def _engine_counts(self, engine: int) -> tuple[float, float, float]:
        coord = self._coord_counts.get(engine)
        if coord is not None:
            return coord[0], coord[1], coord[2]
        stats = self._stats.get(engine)
        if stats is not None:
            return stats.num_waiting_reqs, stats.num_running_reqs, stats.kv_cache_usage
        return 0, 0, 0.0

    def _choose_engine(self) -> int:
        engines = self._engines
        n = len(engines)
        if n == 1:
            return engines[0]
        best = engines[0]
        best_score = float("inf")
        start = self._rotation
        for k in range(n):
            engine = engines[(start + k) % n]
            waiting, running, kv = self._engine_counts(engine)
            score = max(self._client_count * self._in_flight[engine], waiting + running)
            if waiting > 0:
                score += waiting * 6 * max(0.0, kv - 0.5)
            if score < best_score:
                best, best_score = engine, score
        self._rotation = (start + 1) % n
        return best

    # -- shutdown -------------------------------------------------------------------------------

    async def close(self) -> None:
        """Fail what is still running, stop the loops and close the sockets (linger 0)."""
        if self._closed:
            return
        self._die(EngineDeadError("the engine client was closed"), closing=True)
        self._closed = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._sockets.close()

    async def __aenter__(self) -> EngineCoreClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
