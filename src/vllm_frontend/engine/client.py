"""The asyncio engine-core client: requests in, per-request output streams out.

One :class:`EngineCoreClient` drives every engine this frontend serves. ``add_request`` validates
and sends an ``EngineCoreRequest`` to one engine (data-parallel choice per engine protocol §8.2)
and returns a :class:`RequestStream`: an async iterator of that request's ``EngineCoreOutput``
values that ends exactly once: after the output carrying a finish reason, after an abort (a
synthesized ABORT output, since the engine sends none for client aborts, §4.8), or by raising
:class:`EngineDeadError`. A dead engine (§9.1) fails every stream and utility call at once, sets
:attr:`EngineCoreClient.dead_error` and makes new requests fail; like vLLM, one dead engine makes
the whole client dead.

The client is a facade over modules of one job each: :mod:`.startup` (handshake or adopted
sockets), :mod:`.requests` (sending requests and aborts, the live-request table),
:mod:`.streams` (per-request streams), :mod:`.routing` (the output socket's messages to their
owners), :mod:`.utility` (utility calls), :mod:`.balance` (engine choice and waves),
:mod:`.scheduler_stats` and :mod:`.liveness` (engine death).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Unpack

import msgspec

from vllm_frontend.engine.balance import EngineBalancer, EngineLoad
from vllm_frontend.engine.errors import EngineDeadError, UtilityCallError, UtilityTimeoutError
from vllm_frontend.engine.liveness import Liveness
from vllm_frontend.engine.outbox import Outbox
from vllm_frontend.engine.protocol import (
    EngineCoreReadyResponse,
    EngineCoreRequest,
    EngineZmqAddresses,
    SchedulerStats,
    engine_identity,
)
from vllm_frontend.engine.requests import RequestSender
from vllm_frontend.engine.routing import OutputRouter, StepObserver
from vllm_frontend.engine.scheduler_stats import StatsBoard
from vllm_frontend.engine.startup import (
    ClientOptions,
    adopted_sockets,
    handshake_sockets,
    registered_limits,
)
from vllm_frontend.engine.streams import RequestStream
from vllm_frontend.engine.transport import BoundHandshake, EngineSockets
from vllm_frontend.engine.utility import UtilityCalls
from vllm_frontend.engine.validate import InvalidRequestError, RequestLimits

__all__ = [
    "ClientOptions",
    "EngineCoreClient",
    "EngineDeadError",
    "EngineLoad",
    "InvalidRequestError",
    "RequestStream",
    "UtilityCallError",
    "UtilityTimeoutError",
]


class EngineCoreClient:
    """Asyncio client for one or more EngineCore processes (data parallel).

    Build it with :meth:`connect` (Mode A: this process owns the handshake) or :meth:`adopt`
    (Mode B: ``vllm serve`` handed over listening sockets). Use it from one event loop.
    """

    def __init__(self, sockets: EngineSockets, options: ClientOptions) -> None:
        """Take over connected ``sockets`` and start the output and liveness loops."""
        client_index = options.get("client_index", 0)
        client_count = options.get("client_count", 1)
        if not 0 <= client_index < client_count:
            raise ValueError(f"client_index {client_index} not in 0..{client_count - 1}")
        self._sockets = sockets
        self._client_count = client_count
        self._engines = engines = list(sockets.engine_indices)
        identities = {i: engine_identity(i) for i in engines}
        self._registrations: dict[int, EngineCoreReadyResponse | None] = dict(sockets.registrations)
        in_flight = dict.fromkeys(engines, 0)
        self._liveness = liveness = Liveness()
        self._stats = StatsBoard(asyncio.get_running_loop(), liveness)
        self._balancer = EngineBalancer(
            engines,
            in_flight,
            self._stats,
            sockets.coordinator,
            client_index=client_index,
            client_count=client_count,
        )
        outbox = Outbox(sockets.input, asyncio.get_running_loop())
        self._utility = UtilityCalls(outbox, identities, liveness, client_index=client_index)
        self._requests = RequestSender(
            outbox,
            identities,
            in_flight,
            registered_limits(sockets, options),
            self._balancer,
            liveness,
            coordinated=sockets.coordinator is not None,
        )
        self._router = OutputRouter(
            sockets, self._requests, self._stats, self._utility, self._balancer, liveness
        )
        for hook in (self._requests.fail_all, self._utility.fail_all, self._stats.wake):
            liveness.on_death(hook)
        self._tasks = [
            asyncio.create_task(self._router.run(), name="engine-output-loop"),
            asyncio.create_task(liveness.watch_connections(sockets), name="engine-liveness"),
        ]
        if sockets.coordinator is not None:
            follow = self._balancer.follow_coordinator()
            self._tasks.append(asyncio.create_task(follow, name="engine-coordinator"))
        watcher = options.get("process_watcher")
        if watcher is not None:
            watch = liveness.watch_process(watcher)
            self._tasks.append(asyncio.create_task(watch, name="engine-watcher"))

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
        coordinator: EngineZmqAddresses | None = None,
        parallel_config: dict[str, object] | None = None,
        **options: Unpack[ClientOptions],
    ) -> EngineCoreClient:
        """Mode A: own the handshake at ``tcp://HOST:PORT`` and bring up engines
        ``start_index … start_index + engine_count - 1`` (started before or after this call).

        ``local``: the engines run on this host (ipc:// sockets); otherwise TCP on
        ``advertise_host`` (default: the handshake host). ``handshake_address`` may instead be
        a handshake bound earlier (see :func:`~vllm_frontend.engine.startup.handshake_sockets`).
        Raises HandshakeError or HandshakeTimeoutError (naming the engines still missing).
        """
        engines = range(start_index, start_index + engine_count)
        sockets = await handshake_sockets(
            handshake_address,
            engines,
            local=local,
            advertise_host=advertise_host,
            coordinator=coordinator,
            parallel_config=parallel_config,
            options=options,
        )
        return await cls._start(sockets, options)

    @classmethod
    async def adopt(
        cls,
        *,
        input_listener_fd: int,
        output_listener_fd: int,
        engine_start_index: int = 0,
        engine_count: int = 1,
        coordinator_address: str | None = None,
        **options: Unpack[ClientOptions],
    ) -> EngineCoreClient:
        """Mode B: adopt the listeners ``vllm serve`` passed (``--input-listener-fd`` …) and
        wait up to ``ready_timeout_s`` (``engine_ready_timeout_secs``) for every registration."""
        engines = range(engine_start_index, engine_start_index + engine_count)
        sockets = await adopted_sockets(
            input_listener_fd,
            output_listener_fd,
            engines,
            coordinator_address=coordinator_address,
            options=options,
        )
        return await cls._start(sockets, options)

    @classmethod
    async def _start(cls, sockets: EngineSockets, options: ClientOptions) -> EngineCoreClient:
        try:
            client = cls(sockets, options)
        except BaseException:
            sockets.close()
            raise
        if options.get("query_supported_tasks", True):
            try:
                tasks = await client.call_utility("get_supported_tasks", timeout=60.0)
                client._set_limits(supported_tasks=frozenset(tasks))
            except BaseException:
                await client.close()
                raise
        return client

    def _set_limits(self, **changes: Any) -> None:
        self._requests.limits = msgspec.structs.replace(self._requests.limits, **changes)

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
        return self._requests.limits.max_model_len

    @property
    def weight_version(self) -> str | None:
        """The label of the weights the engines sample with, as their latest outputs named it
        (vLLM's ``EngineCoreOutputs.weight_version``; None until one is named)."""
        return self._router.weight_version

    @property
    def num_gpu_blocks(self) -> int:
        """KV-cache blocks summed over engines (0 if unreported)."""
        return sum((r.num_gpu_blocks or 0) for r in self._registrations.values() if r)

    @property
    def limits(self) -> RequestLimits:
        """What requests are validated against."""
        return self._requests.limits

    @property
    def is_dead(self) -> bool:
        """Whether the engines are dead or unreachable (report unhealthy)."""
        return self._liveness.dead is not None

    @property
    def dead_error(self) -> EngineDeadError | None:
        """Why the engines are considered dead, or None while healthy."""
        return self._liveness.dead

    @property
    def current_wave(self) -> int:
        """The data-parallel wave stamped on new requests (mirrored from the coordinator, §8.5)."""
        return self._balancer.current_wave

    @property
    def client_count(self) -> int:
        """How many frontends (API-server processes) share the engines, this one included."""
        return self._client_count

    @property
    def num_in_flight(self) -> int:
        """Requests sent and not yet finished, over all engines."""
        return len(self._requests.streams)

    def scheduler_stats(self) -> Mapping[int, SchedulerStats]:
        """The latest scheduler stats each engine sent (engines that log stats only)."""
        return dict(self._stats.latest)

    def scheduler_stats_times(self) -> Mapping[int, float]:
        """When each engine made the stats :meth:`scheduler_stats` holds (its outputs message's
        ``timestamp``, the engine's monotonic clock). An engine sends each step's stats to one
        frontend only: among several, the one with the larger time has the engine's newer stats.
        """
        return dict(self._stats.times)

    def observe_steps(self, observer: StepObserver | None) -> None:
        """Call ``observer(message, tracked)`` with every outputs message, before its outputs go
        to their streams; ``tracked`` holds the request ids still streamed (for metrics)."""
        self._router.step_observer = observer

    def load(self) -> list[EngineLoad]:
        """Current load of every engine, in index order."""
        return self._balancer.load()

    async def wait_for_scheduler_stats(
        self,
        predicate: Callable[[Mapping[int, SchedulerStats]], bool],
        timeout: float | None = None,
    ) -> Mapping[int, SchedulerStats]:
        """Wait until the latest stats satisfy ``predicate`` (checked now and on each update)."""
        return await self._stats.wait_for(predicate, timeout)

    # -- requests -------------------------------------------------------------------------------

    def add_request(self, request: EngineCoreRequest) -> RequestStream:
        """Validate ``request``, send it to an engine and return its output stream.

        Raises InvalidRequestError (nothing sent; the engines are unaffected) or
        EngineDeadError. The engine is ``data_parallel_rank`` if set (relative to the first
        engine this client serves), else the least loaded.
        """
        return self._requests.add(request)

    def abort(self, request_id: str) -> bool:
        """Abort one request; its stream ends with an ABORT output. False if it was not live."""
        return self._requests.abort_requests([request_id]) == 1

    def abort_requests(self, request_ids: Iterable[str]) -> int:
        """Abort requests by id (unknown or finished ids are ignored); returns how many."""
        return self._requests.abort_requests(request_ids)

    def end_in_flight(self, reason: str) -> int:
        """Shutting down: abort every in-flight request at its engine and fail its stream with
        ``EngineDeadError(reason)``, as vLLM's API server ends what is in flight when it shuts
        its engine client down (each client gets vLLM's dead-engine 500 or SSE error event);
        returns how many. New requests are still taken."""
        return self._requests.fail_in_flight(EngineDeadError(reason))

    # -- utility calls --------------------------------------------------------------------------

    async def call_utility(
        self, method: str, *args: Any, engine: int | None = None, timeout: float | None = 60.0
    ) -> Any:
        """Call ``method(*args)`` on one engine (default: the first) and return its result.

        Raises UtilityCallError (the engine reported a failure), UtilityTimeoutError or
        EngineDeadError.
        """
        return await self._utility.call(method, args, engine, timeout)

    async def call_utility_all(
        self, method: str, *args: Any, timeout: float | None = 60.0
    ) -> list[Any]:
        """Call ``method(*args)`` on every engine concurrently; results in engine order."""
        return await self._utility.call_all(method, args, timeout)

    # -- death and shutdown ---------------------------------------------------------------------

    def declare_dead(self, reason: str) -> None:
        """Mark the engines dead (e.g. a supervisor saw an engine process exit): fail everything."""
        self._liveness.die(EngineDeadError(reason))

    async def close(self) -> None:
        """Fail what is still running, stop the loops and close the sockets (linger 0)."""
        if self._liveness.closed:
            return
        self._liveness.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._sockets.close()

    async def __aenter__(self) -> EngineCoreClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
