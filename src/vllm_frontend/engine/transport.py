"""The ZMQ side of the engine client: sockets, the startup handshake loop, connection liveness.

A thin pyzmq adapter around the sans-IO pieces (:mod:`~vllm_frontend.engine.handshake`, the
codec): it binds or adopts the frontend's sockets (engine protocol §2-§3), feeds received frames to
the handshake state machine, and watches the engines' TCP/IPC connections with socket monitors so
that an engine that vanishes (SIGKILL, lost host) is noticed at once instead of hanging every
request (§9.1). The two hot sockets, the input ROUTER and the output PULL, are by default our
own ZMTP on the event loop (:mod:`~vllm_frontend.engine.zmtp_sockets`, which reports closed
connections itself); ``VLLM_FRONTEND_ZMTP=0`` makes them libzmq's. The other sockets are plain
(non-asyncio) pyzmq sockets used without blocking on the event loop's thread;
:func:`wait_readable` parks a coroutine until one has input, under asyncio and uvloop alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import itertools
import logging
import os
import shutil
import socket
import struct
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import msgspec
import zmq
from zmq.backend import zmq_poll as _zmq_poll

from vllm_frontend.engine.handshake import (
    EngineHandshake,
    EngineState,
    HandshakeError,
    HandshakeTimeoutError,
    engine_index_of,
)
from vllm_frontend.engine.protocol import (
    COORDINATOR_SUBSCRIBE,
    EngineCoreReadyResponse,
    EngineZmqAddresses,
)
from vllm_frontend.engine.zmtp_sockets import ConnectionEvents, ZmtpPull, ZmtpRouter, ZmtpSocket
from vllm_frontend.private_dirs import make_private_dir

__all__ = [
    "BoundHandshake",
    "EngineSockets",
    "SocketOptions",
    "StreamListeners",
    "adopt_listeners",
    "bind_handshake",
    "bind_stream_listeners",
    "listener_endpoint",
    "own_handshake",
    "recv_nowait",
    "recv_ready",
    "send_parts",
    "wait_readable",
    "watch_readable",
]

logger = logging.getLogger(__name__)

_MONITOR_EVENTS = zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED
# Plain ints: pyzmq's enum constants make every `&` a Python-level Flag.__and__ (1.3% of a
# native profile at 5 ms steps); getsockopt(int) skips the sugar layer's enum wrapping.
_POLLIN = int(zmq.POLLIN)
_NOBLOCK = int(zmq.NOBLOCK)
_SNDMORE = int(zmq.SNDMORE)
_COPY_THRESHOLD = zmq.COPY_THRESHOLD
_send_frame = zmq.backend.Socket.send
_EVENT_HEADER = struct.Struct("=HI")
_monitor_ids = itertools.count()
REGISTRATION_GRACE_S = 10.0
"""How long an engine that sent READY and closed its handshake connection may take to register.
A vLLM engine queues its registration before READY, so only a dead engine stays unregistered
(its input connection may never have been made: nothing else would tell)."""


def _zmtp_default() -> bool:
    return os.environ.get("VLLM_FRONTEND_ZMTP", "1") != "0"


class SocketOptions(msgspec.Struct, frozen=True, gc=False):
    """Socket tuning; heartbeats make a silently lost engine host visible as a disconnect."""

    heartbeat_interval_ms: int = 5_000
    heartbeat_timeout_ms: int = 30_000
    zmtp: bool = msgspec.field(default_factory=_zmtp_default)
    """The input ROUTER and output PULL speak ZMTP on the event loop (engine/zmtp_sockets.py)
    rather than through libzmq; ``VLLM_FRONTEND_ZMTP=0`` turns it off."""


InputSocket = zmq.Socket[bytes] | ZmtpRouter
"""The input ROUTER: libzmq's, or ours."""
OutputSocket = zmq.Socket[bytes] | ZmtpPull
"""The output PULL: libzmq's, or ours."""


# -- asyncio glue -----------------------------------------------------------------------------


async def wait_readable(sock: zmq.Socket[bytes]) -> None:
    """Return once ``sock`` has a message to receive.

    libzmq's notification fd is edge-triggered (it signals changes, not readiness), so the
    socket's EVENTS are checked first and after every wake-up.
    """
    while not int(sock.get(zmq.EVENTS)) & zmq.POLLIN:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        fd = int(sock.get(zmq.FD))
        loop.add_reader(fd, _wake, fut)
        try:
            await fut
        finally:
            loop.remove_reader(fd)


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def watch_readable(sock: zmq.Socket[bytes], callback: Callable[[], None]) -> Callable[[], None]:
    """Call ``callback()`` from the event loop whenever ``sock`` may have input, and once now.

    The callback must take everything queued (:func:`recv_ready` until it returns None): the
    notification fd only signals changes. Returns the function that stops watching. Unlike a
    coroutine parked in :func:`wait_readable`, nothing is created or registered per message.
    """
    loop = asyncio.get_running_loop()
    fd = int(sock.get(zmq.FD))
    loop.add_reader(fd, callback)
    loop.call_soon(callback)  # what was queued before the watch began

    def unwatch() -> None:
        loop.remove_reader(fd)

    return unwatch


def recv_ready(sock: zmq.Socket[bytes]) -> list[zmq.Frame] | None:
    """Like :func:`recv_nowait`, but asks the socket first instead of catching zmq.Again (a
    raised ZMQError costs more than the check when the queue is empty, as it is once per batch).

    It asks with a zero-timeout ``zmq_poll`` and reads the parts with ``recv`` and ``Frame.more``:
    pyzmq's ``getsockopt`` (which ``recv_multipart`` also calls for RCVMORE after every part)
    builds a ``SocketOption`` enum per call. Per message that was ~9 µs against ~6 here, hot,
    and three enum constructions were ~5% of a c1 profile at 5 ms steps.
    """
    if not _zmq_poll([(sock, _POLLIN)], 0):
        return None
    try:
        frame = sock.recv(_NOBLOCK, copy=False)
        frames = [frame]
        while frame.more:  # the parts of a message arrive together
            frame = sock.recv(_NOBLOCK, copy=False)
            frames.append(frame)
    except zmq.Again:
        return None
    return frames


def send_parts(sock: zmq.Socket[bytes], parts: Sequence[Any]) -> None:
    """``sock.send_multipart(parts, copy=False)`` for parts known to be buffers, without its
    per-part type checks and ``SNDMORE | flags`` (a Python-level enum operation), through
    pyzmq's compiled ``send`` (the sugar class's Python override only adds the draft sockets'
    ``routing_id`` and ``group``); ``bytes`` below pyzmq's copy threshold, which pyzmq copies
    anyway, are sent as copies at once. A request's three parts: 1.93 -> 0.82 us (thread CPU,
    a ROUTER over inproc)."""
    last = len(parts) - 1
    send = _send_frame
    for i, part in enumerate(parts):
        copy = type(part) is bytes and len(part) < _COPY_THRESHOLD
        send(sock, part, _SNDMORE if i < last else 0, copy)


def recv_nowait(sock: zmq.Socket[bytes]) -> list[zmq.Frame] | None:
    """One multipart message as zero-copy frames, or None when nothing is queued."""
    try:
        return sock.recv_multipart(zmq.NOBLOCK, copy=False)
    except zmq.Again:
        return None


# -- connection liveness ----------------------------------------------------------------------


class _ConnectionWatch:
    """Maps a socket's peer connections to engines and reports engines whose connection closed.

    The monitor reports ACCEPTED/DISCONNECTED per connection file descriptor; a received message
    names the descriptor it came in on (ZMQ_SRCFD), which ties the engine to its connection.
    """

    def __init__(self, sock: zmq.Socket[bytes], name: str) -> None:
        self.name = name
        self._sock = sock
        # Like Socket.get_monitor_socket, but the receiving end gets an unlimited queue: libzmq
        # emits monitor events with a blocking send, so a full (or peerless) monitor pipe would
        # freeze whichever thread emits the next event, even our own.
        address = f"inproc://vllm-frontend-monitor-{next(_monitor_ids)}"
        sock.monitor(address, _MONITOR_EVENTS)
        self.monitor: zmq.Socket[bytes] = sock.context.socket(zmq.PAIR)
        self.monitor.setsockopt(zmq.RCVHWM, 0)
        self.monitor.setsockopt(zmq.LINGER, 0)
        self.monitor.connect(address)
        self._open: set[int] = set()
        self._engine_by_fd: dict[int, int] = {}
        self._mapped: set[int] = set()
        self._gone: list[int] = []
        self.unmapped_closed = 0
        """Connections that closed before any message tied them to an engine."""

    def is_mapped(self, engine_index: int) -> bool:
        return engine_index in self._mapped

    async def wait(self) -> None:
        """Return once the monitor may have events for :meth:`poll`."""
        await wait_readable(self.monitor)

    def note(self, frame: Any, engine_index: int) -> None:
        """Record that ``frame`` (just received) came from ``engine_index``."""
        if engine_index in self._mapped:
            return
        fd = frame.get(zmq.SRCFD)
        self.poll()
        self._mapped.add(engine_index)
        if fd in self._open:
            self._engine_by_fd[fd] = engine_index
        else:
            # The connection closed before we got here (the ACCEPTED event always precedes the
            # first message, so an unknown descriptor is one already disconnected).
            self._gone.append(engine_index)

    def poll(self) -> list[int]:
        """Apply queued monitor events; return engines whose connection closed since last time."""
        while True:
            try:
                header, _endpoint = self.monitor.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            event, fd = _EVENT_HEADER.unpack(header)
            if event == zmq.EVENT_ACCEPTED:
                self._open.add(fd)
            elif event == zmq.EVENT_DISCONNECTED:
                self._open.discard(fd)
                engine = self._engine_by_fd.pop(fd, None)
                if engine is not None:
                    self._gone.append(engine)
                else:
                    self.unmapped_closed += 1
        gone, self._gone = self._gone, []
        return gone

    def close(self) -> None:
        # Stop the monitor before closing its receiving end: an event sent to a PAIR without a
        # peer blocks inside libzmq.
        with contextlib.suppress(zmq.ZMQError):
            self._sock.disable_monitor()
        self.monitor.close(linger=0)


# -- the sockets ------------------------------------------------------------------------------


class EngineSockets(msgspec.Struct, eq=False):
    """The frontend's connected sockets and what the engines reported at registration."""

    context: zmq.Context[zmq.Socket[bytes]]
    input: InputSocket
    """ROUTER: requests to engines (frames prefixed with the engine identity)."""
    output: OutputSocket
    """PULL: outputs from all engines."""
    engine_indices: list[int]
    registrations: dict[int, EngineCoreReadyResponse | None]
    coordinator: zmq.Socket[bytes] | None = None
    """XSUB connected to the DP coordinator's frontend publisher, if any."""
    _input_watch: _ConnectionWatch | ConnectionEvents | None = None
    _output_watch: _ConnectionWatch | ConnectionEvents | None = None
    _tmpdir: str | None = None
    _closed: bool = False

    async def wait_connection_events(self) -> None:
        """Return once :meth:`disconnected_engines` may have something new."""
        waiters = [
            asyncio.ensure_future(w.wait())
            for w in (self._input_watch, self._output_watch)
            if w is not None
        ]
        if not waiters:
            await asyncio.get_running_loop().create_future()  # nothing to watch: wait forever
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            # Await the cancellations: a libzmq waiter owns its fd's reader registration.
            for w in waiters:
                w.cancel()
            await asyncio.gather(*waiters, return_exceptions=True)

    def disconnected_engines(self) -> list[tuple[int, str]]:
        """Engines whose input or output connection closed, with the socket that noticed."""
        out: list[tuple[int, str]] = []
        for watch in (self._input_watch, self._output_watch):
            if watch is not None:
                out.extend((index, watch.name) for index in watch.poll())
        return out

    def note_output_source(self, frame: object, engine_index: int) -> None:
        """Tie the output connection a message came in on to its engine (first message only)."""
        if self._output_watch is not None:
            self._output_watch.note(frame, engine_index)

    def output_sources_known(self) -> bool:
        """Whether every engine's output connection is already tied to it."""
        watch = self._output_watch
        return watch is None or all(watch.is_mapped(i) for i in self.engine_indices)

    def close(self) -> None:
        """Close everything at once (linger 0); idempotent."""
        if self._closed:
            return
        self._closed = True
        for watch in (self._input_watch, self._output_watch):
            if watch is not None:
                watch.close()
        for sock in (self.input, self.output, self.coordinator):
            if sock is not None:
                sock.close(linger=0)
        self.context.destroy(linger=0)
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)


def _tune(sock: zmq.Socket[bytes], options: SocketOptions) -> None:
    # Unbounded queues as vLLM uses (§2.1): a full HWM would drop or block requests.
    sock.setsockopt(zmq.RCVHWM, 0)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.LINGER, 0)
    if options.heartbeat_interval_ms > 0:
        sock.setsockopt(zmq.HEARTBEAT_IVL, options.heartbeat_interval_ms)
        sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, options.heartbeat_timeout_ms)


def _is_ipv6_endpoint(endpoint: str) -> bool:
    return endpoint.startswith("tcp://[")


def listener_endpoint(fd: int) -> str:
    """The ZMQ endpoint a bound, listening stream socket ``fd`` serves (§3.2.1)."""
    sock = socket.socket(fileno=os.dup(fd))
    try:
        family = sock.family
        name = sock.getsockname()
    finally:
        sock.close()
    if family == socket.AF_UNIX:
        path = name.decode() if isinstance(name, bytes) else name
        if not path:
            raise ValueError(f"listener fd {fd} is an unnamed unix socket")
        return f"ipc://{path}"
    if family == socket.AF_INET:
        return f"tcp://{name[0]}:{name[1]}"
    if family == socket.AF_INET6:
        return f"tcp://[{name[0]}]:{name[1]}"
    raise ValueError(f"listener fd {fd} has unsupported address family {family!r}")


def _make(
    ctx: zmq.Context[zmq.Socket[bytes]], kind: int, options: SocketOptions
) -> zmq.Socket[bytes]:
    sock = ctx.socket(kind)
    _tune(sock, options)
    return sock


def _make_pair(
    ctx: zmq.Context[zmq.Socket[bytes]], options: SocketOptions
) -> tuple[
    InputSocket,
    OutputSocket,
    _ConnectionWatch | ConnectionEvents,
    _ConnectionWatch | ConnectionEvents,
]:
    """The input ROUTER and output PULL with their connection watches."""
    if options.zmtp:
        ivl = options.heartbeat_interval_ms / 1000
        timeout = options.heartbeat_timeout_ms / 1000
        zin = ZmtpRouter("input", heartbeat_interval_s=ivl, heartbeat_timeout_s=timeout)
        zout = ZmtpPull("output", heartbeat_interval_s=ivl, heartbeat_timeout_s=timeout)
        return zin, zout, ConnectionEvents(zin, "input"), ConnectionEvents(zout, "output")
    input_sock = _make(ctx, zmq.ROUTER, options)
    output_sock = _make(ctx, zmq.PULL, options)
    return (
        input_sock,
        output_sock,
        _ConnectionWatch(input_sock, "input"),
        _ConnectionWatch(output_sock, "output"),
    )


async def _start(*socks: object) -> None:
    for sock in socks:
        if isinstance(sock, ZmtpSocket):
            await sock.start()


def _recv_input(sock: InputSocket) -> list[Any] | None:
    if isinstance(sock, ZmtpRouter):
        return sock.recv_nowait()
    return recv_nowait(sock)


async def _wait_input(sock: InputSocket) -> None:
    if isinstance(sock, ZmtpRouter):
        await sock.wait_readable()
    else:
        await wait_readable(sock)


def _adopt(sock: zmq.Socket[bytes] | ZmtpSocket, fd: int) -> str:
    if isinstance(sock, ZmtpSocket):
        sock.adopt(fd)
        return sock.last_endpoint
    endpoint = listener_endpoint(fd)
    if _is_ipv6_endpoint(endpoint):
        sock.setsockopt(zmq.IPV6, 1)
    sock.setsockopt(zmq.USE_FD, fd)
    sock.bind(endpoint)
    return endpoint


def _connect_coordinator(
    ctx: zmq.Context[zmq.Socket[bytes]], address: str, options: SocketOptions
) -> zmq.Socket[bytes]:
    sock = _make(ctx, zmq.XSUB, options)
    if _is_ipv6_endpoint(address):
        sock.setsockopt(zmq.IPV6, 1)
    sock.connect(address)
    sock.send(COORDINATOR_SUBSCRIBE)
    return sock


async def _first(
    awaitable: Awaitable[None], abort: Callable[[], Awaitable[str]] | None, what: str
) -> None:
    """Await ``awaitable`` unless ``abort()`` (a process watcher) finishes first."""
    if abort is None:
        await awaitable
        return
    main = asyncio.ensure_future(awaitable)
    watcher = asyncio.ensure_future(abort())
    try:
        done, _ = await asyncio.wait({main, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if main in done:
            main.result()
            return
        raise HandshakeError(f"{what}: {watcher.result()}")
    finally:
        for task in (main, watcher):
            task.cancel()
        await asyncio.gather(main, watcher, return_exceptions=True)


async def _run_handshake(
    hs: EngineHandshake,
    handshake_sock: zmq.Socket[bytes] | None,
    input_sock: InputSocket,
    input_watch: _ConnectionWatch | ConnectionEvents,
    output_watch: _ConnectionWatch | ConnectionEvents,
    handshake_watch: _ConnectionWatch | None,
    timeout_s: float,
) -> None:
    deadline = time.monotonic() + timeout_s
    waits: list[Callable[[], Awaitable[None]]] = [
        lambda: _wait_input(input_sock),
        input_watch.wait,
        output_watch.wait,
    ]
    if handshake_sock is not None and handshake_watch is not None:
        hs_sock = handshake_sock
        waits += [lambda: wait_readable(hs_sock), handshake_watch.wait]
    ready_closed: dict[int, float] = {}  # engine -> when its READY handshake closed unregistered
    while not hs.complete:
        progressed = False
        if handshake_sock is not None and handshake_watch is not None:
            while (frames := recv_nowait(handshake_sock)) is not None:
                progressed = True
                if len(frames) != 2:
                    raise HandshakeError(f"handshake message with {len(frames)} frames")
                identity = frames[0].bytes
                reply = hs.receive_handshake(identity, frames[1].bytes)
                handshake_watch.note(frames[1], engine_index_of(identity))
                if reply is not None:
                    handshake_sock.send_multipart([identity, reply])
        while (parts := _recv_input(input_sock)) is not None:
            progressed = True
            if len(parts) != 2:
                raise HandshakeError(f"registration with {len(parts)} frames")
            index = hs.receive_registration(bytes(parts[0]), bytes(parts[1]))
            input_watch.note(parts[1], index)
        gone = input_watch.poll()
        if handshake_watch is not None and handshake_sock is not None:
            # An engine closes its handshake socket right after READY; a READY still queued
            # behind the disconnect event is read before judging.
            closed = handshake_watch.poll()
            if closed:
                while (frames := recv_nowait(handshake_sock)) is not None and len(frames) == 2:
                    hs.receive_handshake(frames[0].bytes, frames[1].bytes)
                gone += [i for i in closed if hs.state(i) is not EngineState.READY]
                now = time.monotonic()
                for i in closed:
                    if hs.state(i) is EngineState.READY:
                        ready_closed.setdefault(i, now)
        if gone:
            raise HandshakeError(
                "engine(s) "
                + ", ".join(map(str, sorted(set(gone))))
                + " disconnected during startup (crashed or killed?)"
            )
        output_watch.poll()
        if input_watch.unmapped_closed or output_watch.unmapped_closed:
            # Engines connect these sockets only after INIT and keep them open, so a connection
            # that closes before its engine registered means that engine died while starting.
            pending = [i for i in hs.engine_indices if not hs.is_registered(i)]
            raise HandshakeError(
                "an engine closed its connection before registering (crashed or killed during "
                f"startup?); engines not registered yet: {', '.join(map(str, pending))}"
            )
        if hs.complete or progressed:
            continue
        now = time.monotonic()
        remaining = deadline - now
        late = sorted(i for i in ready_closed if not hs.is_registered(i))
        if late:
            grace_left = min(ready_closed[i] for i in late) + REGISTRATION_GRACE_S - now
            if grace_left <= 0:
                raise HandshakeError(
                    f"engine(s) {', '.join(map(str, late))} sent READY and closed the handshake "
                    f"but did not register within {REGISTRATION_GRACE_S:g} s (crashed or killed "
                    "during startup before registering?)"
                )
        if remaining <= 0:
            raise hs.timeout_error(timeout_s)
        if late:
            remaining = min(remaining, grace_left)
        waiters = [asyncio.ensure_future(w()) for w in waits]
        try:
            await asyncio.wait(waiters, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waiters:
                w.cancel()
            await asyncio.gather(*waiters, return_exceptions=True)


def bind_handshake(
    handshake_address: str,
    engine_indices: Sequence[int],
    *,
    local: bool = True,
    advertise_host: str | None = None,
    parallel_config: dict[str, object] | None = None,
    coordinator: EngineZmqAddresses | None = None,
    options: SocketOptions | None = None,
) -> BoundHandshake:
    """Mode A (§3.1), first half: bind input/output, then the handshake ROUTER; no waiting.

    ``local`` engines (on this host) get ``ipc://`` addresses in a private temporary directory;
    otherwise the input/output sockets bind TCP ports on ``advertise_host`` (default: the
    handshake host). ``coordinator`` supplies the coordinator fields of INIT, if one runs.
    Engines can connect from now on; :meth:`BoundHandshake.run` brings them up.
    Raises ValueError (bad address) or zmq.ZMQError (e.g. the port is taken).
    """
    options = options or SocketOptions()
    host, port = _split_tcp(handshake_address)
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    input_sock, output_sock, input_watch, output_watch = _make_pair(ctx, options)
    handshake_sock = _make(ctx, zmq.ROUTER, options)
    handshake_watch = _ConnectionWatch(handshake_sock, "handshake")
    sockets = EngineSockets(
        ctx,
        input_sock,
        output_sock,
        list(engine_indices),
        {},
        _input_watch=input_watch,
        _output_watch=output_watch,
    )
    try:
        if local:
            tmpdir = sockets._tmpdir = _ipc_dir()
            input_sock.bind(f"ipc://{tmpdir}/input")
            output_sock.bind(f"ipc://{tmpdir}/output")
        else:
            bind_host = advertise_host or host
            if _is_wildcard(bind_host):
                raise ValueError(
                    f"cannot tell remote engines to connect to {bind_host!r}; "
                    "pass an advertise_host they can reach"
                )
            for sock in (input_sock, output_sock):
                if ":" in bind_host and not isinstance(sock, ZmtpSocket):
                    sock.setsockopt(zmq.IPV6, 1)
                sock.bind(f"tcp://{_bracket(bind_host)}:*")
        addresses = EngineZmqAddresses(
            inputs=[_last_endpoint(input_sock)],
            outputs=[_last_endpoint(output_sock)],
            coordinator_input=coordinator.coordinator_input if coordinator else None,
            coordinator_output=coordinator.coordinator_output if coordinator else None,
            frontend_stats_publish_address=(
                coordinator.frontend_stats_publish_address if coordinator else None
            ),
        )
        hs = EngineHandshake(engine_indices, addresses=addresses, parallel_config=parallel_config)
        if ":" in host:
            handshake_sock.setsockopt(zmq.IPV6, 1)
        handshake_sock.bind(f"tcp://{_bracket(host)}:{port}")
    except BaseException:
        handshake_watch.close()
        handshake_sock.close(linger=0)
        sockets.close()
        raise
    logger.info(
        "waiting for engines %s on %s (inputs %s, outputs %s)",
        list(engine_indices),
        handshake_address,
        addresses.inputs,
        addresses.outputs,
    )
    return BoundHandshake(
        handshake_address,
        sockets,
        hs,
        (input_watch, output_watch, handshake_watch),
        handshake_sock,
        coordinator.frontend_stats_publish_address if coordinator else None,
        options,
    )


class BoundHandshake:
    """Mode A's sockets, bound by :func:`bind_handshake`, the handshake not yet run.

    Engines may connect as soon as this exists: libzmq's I/O thread accepts them and queues
    their HELLO without the event loop, so a frontend can bind first and load its model while
    the engines join. Finish with :meth:`run` (once) or :meth:`close`.
    """

    def __init__(
        self,
        address: str,
        sockets: EngineSockets,
        hs: EngineHandshake,
        watches: tuple[
            _ConnectionWatch | ConnectionEvents,
            _ConnectionWatch | ConnectionEvents,
            _ConnectionWatch,
        ],
        sock: zmq.Socket[bytes],
        stats_publish_address: str | None,
        options: SocketOptions,
    ) -> None:
        self.address = address
        """The handshake endpoint, ``tcp://HOST:PORT``."""
        self._sockets: EngineSockets | None = sockets
        self._hs = hs
        self._watches = watches  # input, output, handshake
        self._sock: zmq.Socket[bytes] | None = sock
        self._stats_publish_address = stats_publish_address
        self._options = options

    @property
    def engine_indices(self) -> list[int]:
        """The engines this handshake waits for."""
        return list(self._hs.engine_indices)

    async def run(
        self, *, timeout_s: float = 600.0, abort: Callable[[], Awaitable[str]] | None = None
    ) -> EngineSockets:
        """Bring up every engine and hand over the connected sockets (the handshake socket is
        closed; on failure everything is).

        ``abort`` (an async function returning e.g. "the managed engine process exited") ends
        the wait early with an error. Raises HandshakeError / HandshakeTimeoutError (naming the
        engines still missing), RuntimeError if already run or closed.
        """
        sockets, sock = self._sockets, self._sock
        if sockets is None or sock is None:
            raise RuntimeError("this handshake was already run or closed")
        self._sockets = None
        hs = self._hs
        input_watch, output_watch, handshake_watch = self._watches
        try:
            await _start(sockets.input, sockets.output)
            await _first(
                _run_handshake(
                    hs, sock, sockets.input, input_watch, output_watch, handshake_watch, timeout_s
                ),
                abort,
                "engine startup aborted",
            )
            sockets.registrations = {i: hs.registration(i) for i in hs.engine_indices}
            if self._stats_publish_address:
                sockets.coordinator = _connect_coordinator(
                    sockets.context, self._stats_publish_address, self._options
                )
        except BaseException:
            self._close_handshake_socket()
            sockets.close()
            raise
        self._close_handshake_socket()
        return sockets

    def close(self) -> None:
        """Close every socket unless :meth:`run` has taken them; idempotent."""
        self._close_handshake_socket()
        if self._sockets is not None:
            self._sockets.close()
            self._sockets = None

    def _close_handshake_socket(self) -> None:
        if self._sock is not None:
            self._watches[2].close()  # disables the monitor first
            self._sock.close(linger=0)
            self._sock = None


async def adopt_listeners(
    input_listener_fd: int,
    output_listener_fd: int,
    engine_indices: Sequence[int],
    *,
    coordinator_address: str | None = None,
    timeout_s: float = 600.0,
    options: SocketOptions | None = None,
    abort: Callable[[], Awaitable[str]] | None = None,
) -> EngineSockets:
    """Mode B (§3.2): adopt the supervisor's listeners and wait for every registration."""
    options = options or SocketOptions()
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    input_sock, output_sock, input_watch, output_watch = _make_pair(ctx, options)
    sockets = EngineSockets(
        ctx,
        input_sock,
        output_sock,
        list(engine_indices),
        {},
        _input_watch=input_watch,
        _output_watch=output_watch,
    )
    try:
        _adopt(input_sock, input_listener_fd)
        _adopt(output_sock, output_listener_fd)
        await _start(input_sock, output_sock)
        if coordinator_address:
            sockets.coordinator = _connect_coordinator(ctx, coordinator_address, options)
        hs = EngineHandshake(engine_indices)
        await _first(
            _run_handshake(hs, None, input_sock, input_watch, output_watch, None, timeout_s),
            abort,
            "engine startup aborted",
        )
        sockets.registrations = {i: hs.registration(i) for i in engine_indices}
    except BaseException:
        sockets.close()
        raise
    return sockets


# -- one handshake for several frontend processes (--api-server-count) ---------------------------


class StreamListeners(msgspec.Struct, eq=False):
    """Raw listening sockets for N frontends to adopt as input ROUTER / output PULL (§3.2.1).

    ``inputs[k]`` and ``outputs[k]`` belong to the frontend with client index ``k``.
    """

    inputs: list[socket.socket]
    outputs: list[socket.socket]
    tmpdir: str | None = None

    def addresses(self) -> tuple[list[str], list[str]]:
        """The ZMQ endpoints (input list, output list) to put in the engines' INIT."""
        return (
            [listener_endpoint(s.fileno()) for s in self.inputs],
            [listener_endpoint(s.fileno()) for s in self.outputs],
        )

    def close_sockets(self) -> None:
        """Close this process's copies (after the frontends inherited them); idempotent."""
        for sock in (*self.inputs, *self.outputs):
            sock.close()

    def cleanup(self) -> None:
        """Close the sockets and remove the private IPC directory, if any."""
        self.close_sockets()
        if self.tmpdir is not None:
            shutil.rmtree(self.tmpdir, ignore_errors=True)


def bind_stream_listeners(count: int, *, local: bool, host: str) -> StreamListeners:
    """Bind and listen on ``count`` input/output listener pairs, as vLLM's supervisor does.

    ``local`` engines (all on this host) get Unix sockets in a private temporary directory;
    otherwise TCP listeners on ``host`` (an address the engines can reach), port chosen by the
    kernel. Connections arriving before a frontend adopts its listener wait in the backlog.
    """
    if count < 1:
        raise ValueError("need at least one listener pair")
    if not local and _is_wildcard(host):
        raise ValueError(
            f"cannot tell remote engines to connect to {host!r}; give a reachable address"
        )
    listeners = StreamListeners([], [])
    try:
        if local:
            listeners.tmpdir = _ipc_dir()
        for kind in ("input", "output"):
            for k in range(count):
                if listeners.tmpdir is not None:
                    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    sock.bind(os.path.join(listeners.tmpdir, f"{kind}-{k}"))
                else:
                    family = socket.AF_INET6 if ":" in host else socket.AF_INET
                    sock = socket.socket(family, socket.SOCK_STREAM)
                    sock.bind((host, 0))
                (listeners.inputs if kind == "input" else listeners.outputs).append(sock)
                sock.listen()
    except BaseException:
        listeners.cleanup()
        raise
    return listeners


async def own_handshake(
    handshake_address: str,
    engine_indices: Sequence[int],
    addresses: EngineZmqAddresses,
    *,
    parallel_config: dict[str, object] | None = None,
    timeout_s: float = 600.0,
    abort: Callable[[], Awaitable[str]] | None = None,
) -> None:
    """Be the handshake owner (§3.1) for frontends that run elsewhere (other processes).

    Binds the handshake ROUTER at ``tcp://HOST:PORT``, answers every engine's HELLO with INIT
    (``addresses``: every frontend's input and output), and returns once every engine sent
    READY. The registrations go to the frontends' own sockets, not here; an engine sends them
    before READY. Raises HandshakeError (an engine broke the protocol or vanished before READY,
    or ``abort()`` finished first) or HandshakeTimeoutError.
    """
    host, port = _split_tcp(handshake_address)
    hs = EngineHandshake(engine_indices, addresses=addresses, parallel_config=parallel_config)
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    watch = _ConnectionWatch(sock, "handshake")
    try:
        if ":" in host:
            sock.setsockopt(zmq.IPV6, 1)
        sock.bind(f"tcp://{_bracket(host)}:{port}")
        logger.info(
            "waiting for engines %s on %s (inputs %s, outputs %s)",
            list(engine_indices),
            handshake_address,
            addresses.inputs,
            addresses.outputs,
        )
        await _first(_handshake_until_ready(hs, sock, watch, timeout_s), abort, "engine startup")
    finally:
        watch.close()  # disables the monitor first
        sock.close(linger=0)
        ctx.destroy(linger=0)


async def _handshake_until_ready(
    hs: EngineHandshake, sock: zmq.Socket[bytes], watch: _ConnectionWatch, timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s

    def drain() -> bool:
        got = False
        while (frames := recv_nowait(sock)) is not None:
            got = True
            if len(frames) != 2:
                raise HandshakeError(f"handshake message with {len(frames)} frames")
            identity = frames[0].bytes
            reply = hs.receive_handshake(identity, frames[1].bytes)
            watch.note(frames[1], engine_index_of(identity))
            if reply is not None:
                sock.send_multipart([identity, reply])
        return got

    def pending() -> list[int]:
        return [i for i in hs.engine_indices if hs.state(i) is not EngineState.READY]

    while pending():
        progressed = drain()
        closed = watch.poll()
        if closed:
            drain()  # an engine closes this socket right after READY: read a queued READY first
            gone = sorted({i for i in closed if hs.state(i) is not EngineState.READY})
            if gone:
                raise HandshakeError(
                    f"engine(s) {', '.join(map(str, gone))} disconnected during startup "
                    "(crashed or killed?)"
                )
        if progressed or not pending():
            continue
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise HandshakeTimeoutError(
                f"timed out after {timeout_s:g} s waiting for engines to start: "
                + "; ".join(
                    f"engine {i} ({'no HELLO' if hs.state(i) is EngineState.NEW else 'no READY'})"
                    for i in pending()
                )
            )
        waiters = [asyncio.ensure_future(wait_readable(s)) for s in (sock, watch.monitor)]
        try:
            await asyncio.wait(waiters, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waiters:
                w.cancel()
            await asyncio.gather(*waiters, return_exceptions=True)


_IPC_PREFIX = "vllm-fe-"


def _ipc_dir() -> str:
    """A new private directory for this process's IPC sockets (removed on a clean shutdown;
    those that killed frontends left behind are swept, see ``vllm_frontend.private_dirs``)."""
    return make_private_dir(_IPC_PREFIX)


def _split_tcp(address: str) -> tuple[str, int]:
    if not address.startswith("tcp://"):
        raise ValueError(f"handshake address must be tcp://HOST:PORT, got {address!r}")
    rest = address[len("tcp://") :]
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"handshake address must be tcp://HOST:PORT, got {address!r}")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    return host, int(port)


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _is_wildcard(host: str) -> bool:
    if host in ("", "*"):
        return True
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


def _last_endpoint(sock: zmq.Socket[bytes] | ZmtpSocket) -> str:
    if isinstance(sock, ZmtpSocket):
        return sock.last_endpoint
    endpoint = sock.getsockopt(zmq.LAST_ENDPOINT)
    return endpoint.decode() if isinstance(endpoint, bytes) else str(endpoint)
