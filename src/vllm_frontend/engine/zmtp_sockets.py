"""The engines' input ROUTER and output PULL as asyncio protocols speaking ZMTP themselves.

Through libzmq every message crosses its I/O thread: a send wakes that thread, which writes the
socket; an output is read by that thread, which then wakes the event loop through the socket's
notification fd. On a busy machine each hop waits for a core, and the thread costs CPU per
message. Here the event loop reads and writes the engines' connections itself, with the
sans-IO :class:`~vllm_frontend.engine.zmtp.Session` (vllm-rs does the same with zmq.rs).

Semantics kept from libzmq as our sockets use it (``engine/transport.py``'s ``_tune``): queues
without high-water marks, linger 0, heartbeats (a ``PING`` every interval; a connection silent
for the timeout is dropped), a peer that breaks the protocol dropped and logged. The ROUTER
routes a message by its first part, the peer's ``Identity``; a message for an identity with no
connection is dropped, as libzmq's ROUTER does without ``ROUTER_MANDATORY``, and a connection
whose identity another one holds stays open but is neither read nor sent to, even after the
holder closes (what libzmq 4.3.5 does without ``ROUTER_HANDOVER``, tested side by side). The
PULL hands messages out in the order their connections' reads came in.

A socket also reports its connections opening and closing (:class:`ConnectionEvents`, the
counterpart of a libzmq socket monitor), so a killed engine is noticed at once.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import os
import socket
from collections.abc import Callable, Sequence
from typing import Any

from vllm_frontend.engine import zmtp

__all__ = ["ConnectionEvents", "ZmtpPull", "ZmtpRouter", "ZmtpSocket"]

logger = logging.getLogger(__name__)

_anonymous_ids = itertools.count(1)


class ConnectionEvents:
    """Which engines' connections closed, as a libzmq socket monitor would tell.

    A connection is tied to an engine by :meth:`note` (the socket's :attr:`ZmtpSocket.last_source`
    when a message from that engine was just received); a tied connection that closes reports
    its engine from :meth:`poll`, an untied one counts in :attr:`unmapped_closed`.
    """

    def __init__(self, sock: ZmtpSocket, name: str) -> None:
        self.name = name
        self._sock = sock
        self._open: set[_Connection] = set()
        self._engine_by_conn: dict[_Connection, int] = {}
        self._mapped: set[int] = set()
        self._gone: list[int] = []
        self._changed: asyncio.Future[None] | None = None
        self._pending = False  # a connection closed since the last poll()
        self.unmapped_closed = 0
        """Connections that closed before any message tied them to an engine."""
        sock._events = self

    def is_mapped(self, engine_index: int) -> bool:
        """Whether a connection was tied to ``engine_index``."""
        return engine_index in self._mapped

    def note(self, frame: object, engine_index: int) -> None:
        """Tie the connection the socket's last message came in on to ``engine_index``."""
        del frame  # the socket knows the connection; the argument mirrors the libzmq watch
        if engine_index in self._mapped:
            return
        self._mapped.add(engine_index)
        conn = self._sock.last_source
        if conn is not None and conn in self._open:
            self._engine_by_conn[conn] = engine_index
        else:
            self._gone.append(engine_index)
            self._pending = True

    def poll(self) -> list[int]:
        """Engines whose connection closed since the last call."""
        self._pending = False
        gone, self._gone = self._gone, []
        return gone

    async def wait(self) -> None:
        """Return once a connection closed since the last :meth:`poll`."""
        while not self._pending:
            if self._changed is None or self._changed.done():
                self._changed = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._changed)

    def close(self) -> None:
        """Stop reporting (kept for symmetry with the libzmq watch)."""

    def _opened(self, conn: _Connection) -> None:
        self._open.add(conn)

    def _closed(self, conn: _Connection) -> None:
        self._open.discard(conn)
        engine = self._engine_by_conn.pop(conn, None)
        if engine is not None:
            self._gone.append(engine)
        else:
            self.unmapped_closed += 1
        self._pending = True
        if self._changed is not None and not self._changed.done():
            self._changed.set_result(None)


class _Connection(asyncio.Protocol):
    """One peer's stream: ZMTP session, heartbeats, hand-off of messages to its socket."""

    __slots__ = (
        "_deadline",
        "_deliver",
        "_heard",
        "_opened_at",
        "_owner",
        "_receive",
        "_session",
        "_timer",
        "_ttl_timer",
        "identity",
        "transport",
    )

    def __init__(self, owner: ZmtpSocket) -> None:
        self._owner = owner
        self._session = session = zmtp.Session(owner.socket_type)
        self._receive = session.receive
        self._deliver: Callable[[_Connection, list[list[Any]]], None] | None = None
        self._heard = True
        self._opened_at = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._deadline: asyncio.TimerHandle | None = None
        self._ttl_timer: asyncio.TimerHandle | None = None
        self.transport: Any = None
        self.identity: bytes | None = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        transport.write(self._session.opening())
        self._owner._opened(self)
        if self._owner.heartbeat_interval_s > 0:
            loop = asyncio.get_running_loop()
            self._opened_at = loop.time()
            self._timer = loop.call_later(self._owner.heartbeat_interval_s, self._tick)

    def data_received(self, data: bytes) -> None:
        self._heard = True
        if self._ttl_timer is not None:  # anything received ends the peer's PING TTL
            self._ttl_timer.cancel()
            self._ttl_timer = None
        try:
            messages = self._receive(data)
        except zmtp.ZmtpError as exc:
            self._drop(str(exc))
            return
        deliver = self._deliver
        if deliver is None or self._session.outgoing:
            if not self._control():
                return
            deliver = self._deliver
            assert deliver is not None
        if messages:
            deliver(self, messages)

    def _control(self) -> bool:
        """Send owed replies, start a PING's TTL, attach once READY; whether messages flow."""
        session = self._session
        if session.outgoing:
            self.transport.writelines(session.outgoing)
            session.outgoing.clear()
            if session.peer_ttl_s > 0:
                # As libzmq: a PING with a TTL asks to be dropped if nothing follows within it.
                self._ttl_timer = asyncio.get_running_loop().call_later(
                    session.peer_ttl_s, self._drop, "silent past its PING's TTL"
                )
        if self._deliver is None:
            if not session.ready:
                return False
            self._deliver = self._owner._attach(self, session.peer_identity or b"")
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        for timer in (self._timer, self._deadline, self._ttl_timer):
            if timer is not None:
                timer.cancel()
        self._timer = self._deadline = self._ttl_timer = None
        self._owner._lost(self)

    def send(self, parts: Sequence[Any]) -> None:
        """Write one message (its parts as frames)."""
        self.transport.writelines(zmtp.message(parts))

    def _tick(self) -> None:
        # libzmq's heartbeat: a PING every interval once the handshake is done; the first PING
        # left unanswered starts the timeout, which anything received cancels. Before the
        # handshake, libzmq's ZMQ_HANDSHAKE_IVL (30 s by default) bounds the wait instead.
        owner = self._owner
        loop = asyncio.get_running_loop()
        if not self._session.ready:
            if loop.time() - self._opened_at >= _HANDSHAKE_S:
                self._drop(f"no ZMTP handshake within {_HANDSHAKE_S:g} s")
                return
        else:
            if self._heard and self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None
            self._heard = False
            self.transport.write(_PING)
            if self._deadline is None:
                self._deadline = loop.call_later(owner.heartbeat_timeout_s, self._expire)
        self._timer = loop.call_later(owner.heartbeat_interval_s, self._tick)

    def _expire(self) -> None:
        self._deadline = None
        if not self._heard:
            self._drop(f"silent for {self._owner.heartbeat_timeout_s:g} s after a PING")

    def _drop(self, why: str) -> None:
        logger.warning("dropping %s peer connection: %s", self._owner.name, why)
        self.transport.abort()


_HANDSHAKE_S = 30.0  # libzmq's default ZMQ_HANDSHAKE_IVL
_PING = zmtp.ping()


def _drop(conn: _Connection, messages: list[list[Any]]) -> None:
    del conn, messages


class ZmtpSocket:
    """A listening ZMTP socket of one type: bind or adopt a listener, then :meth:`start`."""

    socket_type: bytes = b""
    """The ZMTP ``Socket-Type`` this socket announces (``ROUTER``/``PULL``)."""

    def __init__(
        self, name: str, *, heartbeat_interval_s: float = 5.0, heartbeat_timeout_s: float = 30.0
    ) -> None:
        self.name = name
        """What the logs call this socket (``input``/``output``)."""
        self.heartbeat_interval_s = heartbeat_interval_s
        """Seconds between our PINGs (0: no heartbeats, no handshake deadline)."""
        self.heartbeat_timeout_s = heartbeat_timeout_s
        """Seconds an unanswered PING waits before the connection is dropped."""
        self.last_endpoint = ""
        """The endpoint bound or adopted (``ipc://…`` / ``tcp://…``)."""
        self.last_source: _Connection | None = None
        """The connection the message received last came in on."""
        self._listener: socket.socket | None = None
        self._bound_path: str | None = None
        self._server: asyncio.AbstractServer | None = None
        self._connections: set[_Connection] = set()
        self._events: ConnectionEvents | None = None
        self._readable: Callable[[], None] | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._closed = False
        self._queue: collections.deque[tuple[_Connection, list[Any]]] = collections.deque()

    def bind(self, endpoint: str) -> None:
        """Listen on ``ipc://PATH`` or ``tcp://HOST:PORT`` (PORT ``*``: any free port)."""
        if endpoint.startswith("ipc://"):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.bind(endpoint[len("ipc://") :])
                self._bound_path = endpoint[len("ipc://") :]
            except BaseException:
                sock.close()
                raise
        elif endpoint.startswith("tcp://"):
            host, _, port = endpoint[len("tcp://") :].rpartition(":")
            host = host[1:-1] if host.startswith("[") else host
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((host, 0 if port == "*" else int(port)))
            except BaseException:
                sock.close()
                raise
        else:
            raise ValueError(f"unsupported endpoint {endpoint!r}")
        sock.listen(128)
        self._take(sock)

    def adopt(self, fd: int) -> None:
        """Serve a listening socket handed over by a supervisor (it becomes ours to close)."""
        self._take(socket.socket(fileno=fd))

    def _take(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self._listener = sock
        self.last_endpoint = _endpoint(sock)

    async def start(self) -> None:
        """Accept connections from now on (they wait in the backlog until then)."""
        sock = self._listener
        if sock is None or self._server is not None:
            return
        loop = asyncio.get_running_loop()
        if sock.family == socket.AF_UNIX:
            self._server = await loop.create_unix_server(lambda: _Connection(self), sock=sock)
        else:
            self._server = await loop.create_server(lambda: _Connection(self), sock=sock)

    def close(self, linger: int = 0) -> None:
        """Stop listening and drop every connection at once; idempotent."""
        del linger  # always 0: nothing queued is worth waiting for at shutdown
        if self._closed:
            return
        self._closed = True
        if self._server is not None:
            self._server.close()
        elif self._listener is not None:
            self._listener.close()
        if self._bound_path is not None:  # libzmq removes the ipc file it bound, too
            with contextlib.suppress(OSError):
                os.unlink(self._bound_path)
        for conn in list(self._connections):
            if conn.transport is not None:
                conn.transport.abort()
        self._connections.clear()

    # -- reading ---------------------------------------------------------------------------------

    def watch(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback()`` whenever messages arrive, and once soon (for what is queued)."""
        self._readable = callback
        asyncio.get_running_loop().call_soon(callback)

        def unwatch() -> None:
            if self._readable is callback:
                self._readable = None

        return unwatch

    async def wait_readable(self) -> None:
        """Return once a message is queued."""
        while not self._has_messages():
            if self._waiter is None or self._waiter.done():
                self._waiter = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._waiter)

    def _notify(self) -> None:
        if self._readable is not None:
            self._readable()
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def recv_ready(self) -> list[Any] | None:
        """The next message's frames (memoryviews; a ROUTER's with the peer's identity first),
        or None when nothing is queued."""
        queue = self._queue
        if not queue:
            return None
        conn, frames = queue.popleft()
        self.last_source = conn
        return frames

    recv_nowait = recv_ready

    def _has_messages(self) -> bool:
        return bool(self._queue)

    # -- connections (called by _Connection) -----------------------------------------------------

    def _opened(self, conn: _Connection) -> None:
        if self._closed:
            conn.transport.abort()
            return
        self._connections.add(conn)
        if self._events is not None:
            self._events._opened(conn)

    def _attach(
        self, conn: _Connection, identity: bytes
    ) -> Callable[[_Connection, list[list[Any]]], None]:
        raise NotImplementedError

    def _lost(self, conn: _Connection) -> None:
        self._connections.discard(conn)
        if self._events is not None:
            self._events._closed(conn)


class ZmtpPull(ZmtpSocket):
    """The output socket: PUSH peers' messages, queued in arrival order."""

    socket_type = b"PULL"

    def _attach(
        self, conn: _Connection, identity: bytes
    ) -> Callable[[_Connection, list[list[Any]]], None]:
        return self._deliver

    def _deliver(self, conn: _Connection, messages: list[list[Any]]) -> None:
        queue = self._queue
        for frames in messages:
            queue.append((conn, frames))
        self._notify()


class ZmtpRouter(ZmtpSocket):
    """The input socket: messages to DEALER peers routed by identity, theirs prefixed with it."""

    socket_type = b"ROUTER"

    def __init__(
        self, name: str, *, heartbeat_interval_s: float = 5.0, heartbeat_timeout_s: float = 30.0
    ) -> None:
        super().__init__(
            name,
            heartbeat_interval_s=heartbeat_interval_s,
            heartbeat_timeout_s=heartbeat_timeout_s,
        )
        self._by_identity: dict[bytes, _Connection] = {}
        self._ignored: set[_Connection] = set()  # connections whose identity was taken

    def send_parts(self, parts: Sequence[Any]) -> None:
        """Send ``parts[1:]`` to the peer whose identity is ``parts[0]`` (dropped if none)."""
        conn = self._by_identity.get(bytes(parts[0]))
        if conn is not None:
            try:  # noqa: SIM105 - a with block costs a call per send on the request path
                conn.transport.writelines(zmtp.message(parts[1:]))
            except RuntimeError:  # closed, its connection_lost not yet run: the peer is gone
                pass

    def send_many(self, messages: Sequence[Sequence[Any]]) -> None:
        """:meth:`send_parts` for each message, one write per peer."""
        if len(messages) == 1:  # (a burst cut short by its window: usually one message)
            self.send_parts(messages[0])
            return
        by_conn: dict[_Connection, list[Any]] = {}
        get = self._by_identity.get
        for parts in messages:
            conn = get(bytes(parts[0]))
            if conn is not None:
                buffers = by_conn.get(conn)
                if buffers is None:
                    by_conn[conn] = buffers = []
                buffers += zmtp.message(parts[1:])
        for conn, buffers in by_conn.items():
            try:  # noqa: SIM105 - as in send_parts
                conn.transport.writelines(buffers)
            except RuntimeError:  # as in send_parts
                pass

    def _attach(
        self, conn: _Connection, identity: bytes
    ) -> Callable[[_Connection, list[list[Any]]], None]:
        if not identity:
            # libzmq names a peer without an identity itself: a zero byte and a counter.
            identity = b"\0" + next(_anonymous_ids).to_bytes(4, "big")
        conn.identity = identity
        if identity in self._by_identity:
            logger.warning(
                "%s peer connection with identity %r ignored: another connection holds it",
                self.name,
                identity,
            )
            # Still read (its heartbeats keep it open, as libzmq's session layer would), but
            # what it sends is never delivered, so it is dropped rather than kept.
            self._ignored.add(conn)
            return _drop
        self._by_identity[identity] = conn
        return self._deliver

    def _deliver(self, conn: _Connection, messages: list[list[Any]]) -> None:
        identity = conn.identity
        for frames in messages:
            self._queue.append((conn, [identity, *frames]))
        self._notify()

    def _lost(self, conn: _Connection) -> None:
        identity = conn.identity
        if conn in self._ignored:
            self._ignored.remove(conn)
        elif identity is not None and self._by_identity.get(identity) is conn:
            del self._by_identity[identity]
        super()._lost(conn)


def _endpoint(sock: socket.socket) -> str:
    name = sock.getsockname()
    if sock.family == socket.AF_UNIX:
        return "ipc://" + (name.decode() if isinstance(name, bytes) else name)
    if sock.family == socket.AF_INET6:
        return f"tcp://[{name[0]}]:{name[1]}"
    return f"tcp://{name[0]}:{name[1]}"
