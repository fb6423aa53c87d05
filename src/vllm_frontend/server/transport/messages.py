"""What a handler gets (:class:`Request`) and what it returns (:class:`Response`,
:class:`StreamingResponse`, :class:`PushedStreamingResponse`), plus the :class:`StreamSink` a
pushed body is written into."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import msgspec

Headers = list[tuple[bytes, bytes]]
BackgroundCallback = Callable[[], None]

_json_encode = msgspec.json.Encoder().encode


class Request:
    """One parsed HTTP request with its whole body.

    Header names are lower-case bytes; values are raw bytes (use :meth:`header` for a ``str``).
    ``state`` is a free slot for the app (e.g. the request id chosen by middleware).
    ``server`` is the address the connection came in on (ASGI's ``scope["server"]``: host and
    port, or a Unix socket's path and None).
    """

    __slots__ = ("body", "headers", "method", "path", "query", "server", "state")

    def __init__(
        self,
        method: str,
        path: str,
        query: bytes,
        headers: dict[bytes, bytes],
        body: bytes,
        server: tuple[str, int | None] | None = None,
    ) -> None:
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
        self.server = server
        self.state: Any = None

    def header(self, name: bytes) -> str | None:
        """The value of header ``name`` (lower-case bytes) decoded as latin-1, or None."""
        value = self.headers.get(name)
        return None if value is None else value.decode("latin-1")


class Response:
    """A complete response sent with ``Content-Length``."""

    __slots__ = ("background", "body", "headers", "status")

    def __init__(
        self,
        body: bytes = b"",
        status: int = 200,
        content_type: bytes | None = b"application/json",
        headers: Headers | None = None,
    ) -> None:
        self.body = body
        self.status = status
        self.headers: Headers = headers if headers is not None else []
        if content_type is not None and body:
            self.headers.append((b"content-type", content_type))
        self.background: BackgroundCallback | None = None


class _Streaming:
    """What both streaming responses carry besides their body: status, headers (content type
    included), the SSE keep-alive interval and the completion callback."""

    __slots__ = ("background", "headers", "keep_alive_interval", "status")

    def __init__(
        self, status: int, content_type: bytes, headers: Headers | None, keep_alive_interval: float
    ) -> None:
        self.keep_alive_interval = keep_alive_interval
        self.status = status
        self.headers: Headers = headers if headers is not None else []
        self.headers.append((b"content-type", content_type))
        self.background: BackgroundCallback | None = None


class StreamingResponse(_Streaming):
    """A response whose body is produced by an async iterator of byte chunks (chunked encoding;
    close-delimited for an HTTP/1.0 client).

    Chunks yielded without an await in between leave in one write. Empty chunks are skipped
    (they would end the stream). With ``keep_alive_interval > 0`` the server sends an SSE
    comment (``: keep-alive``) whenever no chunk went out for that many seconds.
    """

    __slots__ = ("body",)

    def __init__(
        self,
        body: AsyncIterator[bytes],
        status: int = 200,
        content_type: bytes = b"text/event-stream; charset=utf-8",
        headers: Headers | None = None,
        keep_alive_interval: float = 0.0,
    ) -> None:
        super().__init__(status, content_type, headers, keep_alive_interval)
        self.body = body


class StreamSink:
    """Where a :class:`PushedStreamingResponse` puts its body (the server's sink frames each
    chunk and sends everything queued in one loop iteration with one write)."""

    __slots__ = ()

    def send(self, chunk: bytes) -> None:
        """Queue one chunk of the body (empty chunks are skipped; dropped after a disconnect)."""
        raise NotImplementedError

    @property
    def paused(self) -> bool:
        """The client is not reading fast enough: stop producing until :meth:`on_resume`."""
        return False

    def on_resume(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` once, from the event loop, when the client drains its backlog."""
        asyncio.get_running_loop().call_soon(callback)

    async def drain(self) -> None:
        """Send what is queued and wait while the client's backlog is too large."""


class PushedStreamingResponse(_Streaming):
    """A streaming response whose body is pushed rather than iterated.

    ``produce(sink)`` runs in the request's task and returns when the body is complete; it can
    hand :class:`StreamSink` to callbacks (e.g. engine output notifications) that send chunks
    directly, so no task resumes per chunk. Cancellation (client disconnect) reaches it as for
    :class:`StreamingResponse`. Keep-alive comments as for :class:`StreamingResponse`.
    """

    __slots__ = ("produce",)

    def __init__(
        self,
        produce: Callable[[StreamSink], Awaitable[None]],
        status: int = 200,
        content_type: bytes = b"text/event-stream; charset=utf-8",
        headers: Headers | None = None,
        keep_alive_interval: float = 0.0,
    ) -> None:
        super().__init__(status, content_type, headers, keep_alive_interval)
        self.produce = produce


AnyResponse = Response | StreamingResponse | PushedStreamingResponse
"""What an app returns."""

App = Callable[[Request], Awaitable[AnyResponse]]
"""What the server serves: ``async def app(request) -> AnyResponse``."""


def json_response(content: Any, status: int = 200, headers: Headers | None = None) -> Response:
    """A JSON response encoded by msgspec (Structs, dicts, lists, ...)."""
    return Response(_json_encode(content), status, b"application/json", headers)
