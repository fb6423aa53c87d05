"""Run the real HTTP server on a background event loop (uvloop) for tests over loopback."""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

import httpx
import uvloop

from vllm_frontend.server.transport import App, HttpServer, bind_tcp

T = TypeVar("T")

HTTP = httpx.Client(timeout=30)
"""One shared client: ``httpx.get`` builds a client (and an SSL context) per call, ~0.1 s."""


class RunningServer:
    """An HttpServer serving ``app`` on 127.0.0.1:<ephemeral> (or the given sockets)."""

    def __init__(
        self,
        app: App,
        *,
        sockets: list[socket.socket] | None = None,
        ssl_context: ssl.SSLContext | None = None,
        **server_kwargs: Any,
    ) -> None:
        self.loop = uvloop.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.server = HttpServer(app, **server_kwargs)
        if sockets is None:
            sock = bind_tcp("127.0.0.1", 0)
            self.port = sock.getsockname()[1]
            sockets = [sock]
        for sock in sockets:
            self.call(self.server.start(sock, ssl_context))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        """Run a coroutine on the server's loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self, timeout: float = 0.0) -> None:
        self.call(self.server.shutdown(timeout))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


def raw_exchange(port: int, data: bytes, until: bytes | None = None) -> bytes:
    """Send raw bytes and read until ``until`` appears (or the server closes)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        out = b""
        while until is None or until not in out:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
        return out
