"""The server: serves one app on listening sockets, with limits and graceful shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import Callable
from typing import cast

from .connection import HttpConnection
from .limits import HttpLimits, RefusalRecorder, RefusalRenderer, plain_refusal
from .messages import App
from .sockets import LISTEN_BACKLOG
from .state import SharedState

logger = logging.getLogger(__name__)


SETTLE_GRACE = 1.0
"""Seconds a shutdown gives the responses that its ``settle`` step ended to go out."""


async def _wait_closed(connections: set[HttpConnection], timeout: float) -> None:
    # until every connection has closed, or ``timeout`` seconds
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while connections and loop.time() < deadline:
        await asyncio.sleep(0.05)


class HttpServer:
    """Serves ``app`` on one or more listening sockets, with graceful shutdown.

    ``refusal`` words the responses to requests refused before they reach the app (see
    ``limits``); ``on_refusal`` is told of each one sent (e.g. to count it).
    """

    def __init__(
        self,
        app: App,
        *,
        limits: HttpLimits | None = None,
        refusal: RefusalRenderer = plain_refusal,
        on_refusal: RefusalRecorder | None = None,
    ) -> None:
        self._state = SharedState(
            app, limits if limits is not None else HttpLimits(), refusal, on_refusal
        )
        self.app = app
        self.limits = self._state.limits
        self.refusal = refusal
        self.on_refusal = on_refusal
        self._servers: list[asyncio.AbstractServer] = []

    async def start(self, sock: socket.socket, ssl_context: ssl.SSLContext | None = None) -> None:
        """Start accepting on a bound socket; calls ``listen(LISTEN_BACKLOG)`` on it. With
        ``ssl_context``, connections speak TLS (see ``tls``)."""
        loop = asyncio.get_running_loop()
        state = self._state
        sock.listen(LISTEN_BACKLOG)
        sock.setblocking(False)
        server: asyncio.AbstractServer
        if sock.family == socket.AF_UNIX:
            server = await loop.create_unix_server(
                lambda: HttpConnection(state), sock=sock, backlog=LISTEN_BACKLOG, ssl=ssl_context
            )
        else:
            server = await loop.create_server(
                lambda: HttpConnection(state), sock=sock, backlog=LISTEN_BACKLOG, ssl=ssl_context
            )
        self._servers.append(server)
        state.start_clock()

    @property
    def open_connections(self) -> int:
        """Number of client connections currently open."""
        return len(self._state.connections)

    async def shutdown(
        self, timeout: float = 0.0, settle: Callable[[], object] | None = None
    ) -> None:
        """Stop accepting, let in-flight requests finish for up to ``timeout`` seconds; then,
        with ``settle``, call it (e.g. to end what is left with an error) and give the
        responses up to ``SETTLE_GRACE`` seconds to go out; then cancel what is left (which
        aborts its engine requests) and close every connection."""
        state = self._state
        state.closing = True
        for server in self._servers:
            server.close()
        connections = cast(set[HttpConnection], state.connections)
        for conn in list(connections):
            conn.close_if_idle()
        if timeout > 0:
            await _wait_closed(connections, timeout)
        if settle is not None and connections:
            settle()
            await _wait_closed(connections, SETTLE_GRACE)
        tasks = [t for conn in list(connections) if (t := conn.abort()) is not None]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        for server in self._servers:
            with contextlib.suppress(Exception):
                await server.wait_closed()
        self._servers.clear()
        state.stop_clock()
