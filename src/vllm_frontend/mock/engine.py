"""ZMQ adapter of the mock engine: joins a frontend's handshake and serves like a headless engine.

Each engine runs in its own thread with blocking pyzmq sockets, following what vLLM 0.32's
``EngineCoreProc`` does on the wire (``vllm/v1/engine/core.py``): DEALER to the handshake
address → HELLO → INIT → a DEALER per input address sending the registration → XSUB to the
coordinator (subscribe, wait for ``READY``) → a PUSH per output address → READY. Then it loops:
drain input, step on the clock, push one message per client per step.
"""

from __future__ import annotations

import hashlib
import logging
import math
import resource
import threading
import time
from collections.abc import Sequence

import msgspec
import zmq

from vllm_frontend.engine.codec import (
    MessageEncoder,
    RequestDecoder,
    decode_handshake_init,
    encode_handshake_status,
    encode_registration,
)
from vllm_frontend.engine.errors import ProtocolError
from vllm_frontend.engine.protocol import (
    COORDINATOR_READY,
    COORDINATOR_SUBSCRIBE,
    ENGINE_CORE_DEAD,
    EngineCoreOutputs,
    EngineCoreRequest,
    EngineZmqAddresses,
    HandshakeStatus,
    RequestType,
    UtilityRequest,
    engine_identity,
)
from vllm_frontend.mock.core import Message, MockEngineCore, MockEngineOptions, registration_message
from vllm_frontend.mock.recording import append_request

__all__ = ["EngineDied", "MockEngine", "MockEngineGroup", "step_wait"]

logger = logging.getLogger("vllm_frontend.mock")

HANDSHAKE_TIMEOUT_S = 300.0
"""How long an engine waits for INIT after HELLO (vLLM: 5 minutes)."""

_POLL_CAP_MS = 100  # how often an idle engine notices a stop request


def step_wait(remaining_s: float, precise: bool) -> tuple[int, float]:
    """How a busy engine waits for its next step, ``remaining_s`` seconds away: (milliseconds to
    poll its inputs for, seconds to sleep first).

    The poll takes whole milliseconds. Without ``precise`` it rounds up (a 0 ms poll before a
    step is due would spin), so a step no input wakes the engine for runs up to 1 ms late. With
    ``precise`` it polls the whole milliseconds that fit and, when less than one is left, sleeps
    out the rest (inputs arriving meanwhile are read right after, before the step).
    """
    if not precise:
        return max(math.ceil(remaining_s * 1000), 0), 0.0
    whole = math.floor(remaining_s * 1000)
    if whole <= 0 < remaining_s:
        return 0, remaining_s
    return max(whole, 0), 0.0


class EngineDied(Exception):
    """The engine sent ``ENGINE_CORE_DEAD`` (fault injection) and stopped."""


def parallel_config_hash(data_parallel_size: int) -> str:
    """A stable stand-in for ``ParallelConfig.compute_hash()``; equal across one deployment."""
    return hashlib.sha256(f"mock-engine dp={data_parallel_size}".encode()).hexdigest()


def _socket(ctx: zmq.Context[zmq.Socket[bytes]], kind: int, address: str) -> zmq.Socket[bytes]:
    sock = ctx.socket(kind)
    sock.setsockopt(zmq.RCVHWM, 0)
    sock.setsockopt(zmq.SNDHWM, 0)
    if address.startswith("tcp://["):
        sock.setsockopt(zmq.IPV6, 1)
    return sock


class MockEngine:
    """One mock engine: handshake, then serve until :meth:`stop` (or fault-injected death).

    :meth:`run` blocks; run it in a thread. ``core`` holds the counters for cost reporting.
    """

    def __init__(
        self,
        engine_index: int,
        handshake_address: str,
        options: MockEngineOptions,
        ctx: zmq.Context[zmq.Socket[bytes]],
        stop_event: threading.Event,
    ) -> None:
        self.engine_index = engine_index
        self.handshake_address = handshake_address
        self.options = options
        self.core = MockEngineCore(engine_index, options)
        self._ctx = ctx
        self._stop = stop_event
        self._identity = engine_identity(engine_index)
        self._encoder = MessageEncoder()
        self._decoder = RequestDecoder()
        self._outputs: list[zmq.Socket[bytes]] = []
        self.ready = threading.Event()
        """Set once READY was sent (the engine is serving)."""
        self.cpu_at_ready: float | None = None
        """Process CPU seconds when this engine became ready (to tell startup from serving)."""

    def stop(self) -> None:
        """Ask the engine to shut down (in-flight requests finish with ABORT, as in vLLM)."""
        self._stop.set()

    # ------------------------------------------------------------------ startup

    def _status(self, status: str) -> bytes:
        dp = self.options.data_parallel_size
        return encode_handshake_status(
            HandshakeStatus(
                status=status,
                local=False,
                headless=True,
                parallel_config_hash=parallel_config_hash(dp) if dp > 1 else None,
            )
            if status == "READY"
            else HandshakeStatus(status=status, local=False, headless=True)
        )

    def _wait(self, sock: zmq.Socket[bytes], timeout_s: float, what: str) -> bytes:
        deadline = time.monotonic() + timeout_s
        while not self._stop.is_set():
            remaining_ms = (deadline - time.monotonic()) * 1000
            if remaining_ms <= 0:
                raise TimeoutError(f"engine {self.engine_index}: no {what} within {timeout_s}s")
            if sock.poll(math.ceil(min(remaining_ms, _POLL_CAP_MS))):
                return sock.recv()
        raise InterruptedError

    def _handshake(self, handshake: zmq.Socket[bytes]) -> EngineZmqAddresses:
        handshake.send(self._status("HELLO"))
        init = decode_handshake_init(self._wait(handshake, HANDSHAKE_TIMEOUT_S, "INIT"))
        return init.addresses

    def run(self) -> None:
        """Handshake, then serve until stopped. Raises EngineDied after fault injection."""
        handshake = _socket(self._ctx, zmq.DEALER, self.handshake_address)
        handshake.setsockopt(zmq.IDENTITY, self._identity)
        handshake.setsockopt(zmq.LINGER, 5000)
        handshake.connect(self.handshake_address)
        sockets: list[zmq.Socket[bytes]] = [handshake]
        try:
            addresses = self._handshake(handshake)
            inputs = []
            for address in addresses.inputs:
                sock = _socket(self._ctx, zmq.DEALER, address)
                sock.setsockopt(zmq.IDENTITY, self._identity)
                sock.setsockopt(zmq.LINGER, 0)
                sock.connect(address)
                inputs.append(sock)
            sockets += inputs
            registration = encode_registration(
                registration_message(
                    self.options,
                    self.engine_index,
                    dp_stats_address=addresses.frontend_stats_publish_address,
                    instance_id=f"mock-{self.engine_index}",
                )
            )
            for sock in inputs:
                sock.send(registration)
            coord_in = coord_out = None
            if addresses.coordinator_input is not None:
                coord_in = _socket(self._ctx, zmq.XSUB, addresses.coordinator_input)
                coord_in.setsockopt(zmq.IDENTITY, self._identity)
                coord_in.setsockopt(zmq.LINGER, 0)
                coord_in.connect(addresses.coordinator_input)
                sockets.append(coord_in)
                coord_in.send(COORDINATOR_SUBSCRIBE)
                while self._wait(coord_in, HANDSHAKE_TIMEOUT_S, "coordinator READY") != (
                    COORDINATOR_READY
                ):
                    pass
            for address in addresses.outputs:
                sock = _socket(self._ctx, zmq.PUSH, address)
                sock.setsockopt(zmq.LINGER, 4000)
                sock.connect(address)
                self._outputs.append(sock)
            sockets += self._outputs
            if addresses.coordinator_output is not None:
                coord_out = _socket(self._ctx, zmq.PUSH, addresses.coordinator_output)
                coord_out.setsockopt(zmq.LINGER, 4000)
                coord_out.connect(addresses.coordinator_output)
                sockets.append(coord_out)
            # vLLM reports finished ids on step messages only with internal DP load balancing.
            self.core.track_finished = coord_out is not None
            handshake.send(self._status("READY"))
            usage = resource.getrusage(resource.RUSAGE_SELF)
            self.cpu_at_ready = usage.ru_utime + usage.ru_stime
            self.ready.set()
            logger.info(
                "engine %d ready: %d client(s)%s",
                self.engine_index,
                len(self._outputs),
                ", with DP coordinator" if coord_out is not None else "",
            )
            self._serve(inputs, coord_in, coord_out)
        except InterruptedError:
            logger.info("engine %d stopped during startup", self.engine_index)
        finally:
            for sock in sockets:
                sock.close()

    # ------------------------------------------------------------------ serving

    def _send(self, messages: Sequence[Message]) -> None:
        outputs = self._outputs
        for client, msg in messages:
            if client >= len(outputs):
                # vLLM's output thread would die here; the mock drops the message instead.
                logger.error(
                    "engine %d: client_index %d out of range (%d clients); output dropped",
                    self.engine_index,
                    client,
                    len(outputs),
                )
                continue
            outputs[client].send_multipart(self._encoder.encode_outputs(msg), copy=False)

    def _handle(self, frames: list[bytes]) -> None:
        core = self.core
        if self.options.record_requests and frames and frames[0] == RequestType.ADD.value:
            append_request(self.options.record_requests, frames)
        try:
            kind, payload = self._decoder.decode(frames)
        except ProtocolError as exc:
            # vLLM's input thread would die on this; the mock reports and carries on.
            logger.error("engine %d: undecodable request dropped: %s", self.engine_index, exc)
            self._error_for_undecodable(frames)
            return
        if kind is RequestType.ADD:
            assert isinstance(payload, EngineCoreRequest)
            if payload.client_index >= len(self._outputs):
                logger.error(
                    "engine %d: request %s has client_index %d but only %d client(s); dropped",
                    self.engine_index,
                    payload.request_id,
                    payload.client_index,
                    len(self._outputs),
                )
                return
            core.add(payload)
        elif kind is RequestType.ABORT:
            assert isinstance(payload, list)
            core.abort(payload)
        elif kind is RequestType.UTILITY:
            assert isinstance(payload, UtilityRequest)
            core.utility(payload)
        # START_DP_WAVE: waves only matter for MoE lockstep, which the mock does not model.

    def _error_for_undecodable(self, frames: list[bytes]) -> None:
        """Finish an undecodable ADD with ERROR when its request id is still readable."""
        if len(frames) < 2 or frames[0] != RequestType.ADD.value:
            return
        try:
            raw = msgspec.msgpack.decode(frames[1])
        except Exception:
            return
        if isinstance(raw, list) and raw and isinstance(raw[0], str):
            client = raw[11] if len(raw) > 11 and isinstance(raw[11], int) else 0
            if 0 <= client < len(self._outputs):
                self.core.fail(client, raw[0])

    def _serve(
        self,
        inputs: list[zmq.Socket[bytes]],
        coord_in: zmq.Socket[bytes] | None,
        coord_out: zmq.Socket[bytes] | None,
    ) -> None:
        core = self.core
        poller = zmq.Poller()
        for sock in inputs:
            poller.register(sock, zmq.POLLIN)
        if coord_in is not None:
            poller.register(coord_in, zmq.POLLIN)
        period = self.options.step_ms / 1000.0
        precise = self.options.precise_steps
        next_step = 0.0
        was_busy = False
        die_at_step: int | None = None
        last_counts = (0, 0)
        while not self._stop.is_set():
            busy = core.has_work
            if busy and not was_busy:
                # An idle engine starts its step clock when work arrives: the first step
                # (prefill and first token) completes one period later.
                next_step = time.monotonic() + period
            was_busy = busy
            if not busy:
                timeout = _POLL_CAP_MS
            else:
                timeout, nap = step_wait(next_step - time.monotonic(), precise)
                if nap:
                    time.sleep(nap)
            for sock, _ in poller.poll(timeout):
                if sock is coord_in:
                    while coord_in.poll(0):
                        coord_in.recv_multipart()  # READY gates / wave starts: nothing to do
                    continue
                while True:
                    try:
                        frames = sock.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    self._handle(frames)
            pending = core.take_pending()
            if pending:
                self._send(pending)
            if core.has_work and time.monotonic() >= next_step:
                self._send(core.step())
                next_step = max(next_step + period, time.monotonic()) if period else 0.0
            if coord_out is not None:
                counts = (core.num_running, core.num_waiting)
                if counts != last_counts:
                    last_counts = counts
                    stats = EngineCoreOutputs(
                        engine_index=self.engine_index,
                        scheduler_stats=core.load_stats(),
                        timestamp=time.monotonic(),
                    )
                    coord_out.send_multipart(self._encoder.encode_outputs(stats))
            if core.quota_reached:
                if die_at_step is None:
                    die_at_step = core.steps + 1
                if core.steps >= die_at_step or not core.has_work:
                    self._die()
        self._shutdown()

    def _die(self) -> None:
        logger.error("engine %d: injected failure, sending ENGINE_CORE_DEAD", self.engine_index)
        for sock in self._outputs:
            sock.send(ENGINE_CORE_DEAD)
        raise EngineDied(
            f"engine {self.engine_index} died after {self.core.requests_added} requests"
        )

    def _shutdown(self) -> None:
        # vLLM with shutdown_timeout 0: every in-flight request finishes with ABORT.
        core = self.core
        core.shutting_down = True
        core.abort_all()
        self._send(core.take_pending())


class MockEngineGroup:
    """Several mock engines served by threads of this process (one thread per engine)."""

    def __init__(
        self, handshake_address: str, engine_indices: Sequence[int], options: MockEngineOptions
    ) -> None:
        self._ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self._stop = threading.Event()
        self.engines = [
            MockEngine(i, handshake_address, options, self._ctx, self._stop) for i in engine_indices
        ]
        self._threads = [
            threading.Thread(target=self._run, args=(e,), name=f"mock-engine-{e.engine_index}")
            for e in self.engines
        ]
        self.died = threading.Event()
        """Set when an engine died by fault injection (the others stop too)."""
        self.errors: list[BaseException] = []

    def _run(self, engine: MockEngine) -> None:
        try:
            engine.run()
        except EngineDied:
            self.died.set()
            self._stop.set()  # like vLLM's launcher: one dead engine takes the set down
        except BaseException as exc:
            logger.exception("engine %d failed", engine.engine_index)
            self.errors.append(exc)
            self._stop.set()

    def start(self) -> None:
        """Start every engine's thread (each begins with its HELLO)."""
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """Ask every engine to shut down (in-flight requests finish with ABORT)."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        """Whether a stop was requested or an engine ended the group."""
        return self._stop.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the group is asked to stop; True if it was."""
        return self._stop.wait(timeout)

    def join(self, timeout: float | None = None) -> None:
        """Wait for every engine thread to end, then release the sockets' context."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in self._threads:
            if thread.is_alive():
                thread.join(None if deadline is None else max(deadline - time.monotonic(), 0))
        if not any(t.is_alive() for t in self._threads):
            self._ctx.term()

    def wait_ready(self, timeout: float) -> bool:
        """Wait until every engine has completed its handshake."""
        deadline = time.monotonic() + timeout
        return all(e.ready.wait(max(deadline - time.monotonic(), 0)) for e in self.engines)

    def totals(self) -> dict[str, int]:
        """Counters summed over the engines: requests, output tokens, steps."""
        return {
            "requests": sum(e.core.requests_added for e in self.engines),
            "output_tokens": sum(e.core.output_tokens for e in self.engines),
            "steps": sum(e.core.steps for e in self.engines),
        }

    def per_engine(self) -> dict[int, dict[str, int]]:
        """The same counters for each engine, plus its current running/waiting counts."""
        return {
            e.engine_index: {
                "requests": e.core.requests_added,
                "output_tokens": e.core.output_tokens,
                "steps": e.core.steps,
                "running": e.core.num_running,
                "waiting": e.core.num_waiting,
            }
            for e in self.engines
        }

    @property
    def cpu_at_ready(self) -> float | None:
        """Process CPU seconds when the last engine became ready; None before that."""
        marks = [e.cpu_at_ready for e in self.engines]
        return None if None in marks else max(m for m in marks if m is not None)
