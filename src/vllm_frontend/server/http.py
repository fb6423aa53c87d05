"""A small HTTP/1.1 server on asyncio + httptools: the transport under the OpenAI routes.

Why our own: SSE streaming is the hot path of the frontend, and an ASGI stack costs several
Python calls, dicts and awaits per chunk (see bench/bench_http.py and BENCHMARKS.md). Here a
streamed chunk is one ``transport.write`` of ``<hex len>\\r\\n<bytes>\\r\\n``.

The surface: :class:`Request` (what a handler gets); :class:`Response`,
:class:`StreamingResponse` (an iterated body) and :class:`PushedStreamingResponse` (a body pushed
into a :class:`StreamSink` from callbacks) for what it returns; and :class:`HttpServer`, which
serves an ``async def app(request) -> AnyResponse`` on any listening socket (inherited fd, TCP or
Unix). The app must turn its own exceptions into responses; anything that escapes it is
answered with a plain 500 here (a last resort, logged).

Client disconnect cancels the task running the app for that request (and closes a streaming body
iterator), so the generation code's cancellation path aborts the engine request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from http import HTTPStatus
from typing import Any, cast
from urllib.parse import unquote

import httptools
import msgspec

logger = logging.getLogger(__name__)

LISTEN_BACKLOG = 2048
"""Backlog for listening sockets; vLLM's Python server uses 2048 (vllm-rs' 128 drops bursts)."""

DEFAULT_MAX_BODY_SIZE = 64 * 1024 * 1024
"""Largest request body accepted (bytes) before answering 413."""

_MAX_PIPELINED = 16

MAX_HEAD_SIZE = 4 * 1024 * 1024
"""Most bytes of request line + headers (vLLM's h11_max_incomplete_event_size default)."""
MAX_HEADER_COUNT = 256
"""Most request headers (vLLM's h11_max_header_count default)."""
"""Pipelined requests buffered per connection before we stop reading from it."""

Headers = list[tuple[bytes, bytes]]
BackgroundCallback = Callable[[], None]

_json_encode = msgspec.json.Encoder().encode


def _status_line(status: int) -> bytes:
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    return f"HTTP/1.1 {status} {phrase}\r\n".encode("latin-1")


_STATUS_LINES: dict[int, bytes] = {s.value: _status_line(s.value) for s in HTTPStatus}


class Request:
    """One parsed HTTP request with its whole body.

    Header names are lower-case bytes; values are raw bytes (use :meth:`header` for a ``str``).
    ``state`` is a free slot for the app (e.g. the request id chosen by middleware).
    """

    __slots__ = ("body", "headers", "method", "path", "query", "state")

    def __init__(
        self, method: str, path: str, query: bytes, headers: dict[bytes, bytes], body: bytes
    ) -> None:
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
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
    """A response whose body is produced by an async iterator of byte chunks (chunked encoding).

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


def json_response(content: Any, status: int = 200, headers: Headers | None = None) -> Response:
    """A JSON response encoded by msgspec (Structs, dicts, lists, ...)."""
    return Response(_json_encode(content), status, b"application/json", headers)


# ---------------------------------------------------------------------------------------------
# Sockets


def bind_tcp(host: str | None, port: int, *, reuse_port: bool = False) -> socket.socket:
    """A bound (not yet listening) TCP socket, as vLLM's ``create_server_socket`` makes it:
    IPv4 unless ``host`` is an IPv6 literal; host None or "" means all interfaces."""
    host = host or ""
    family = socket.AF_INET
    if host:
        try:
            socket.inet_pton(socket.AF_INET6, host)
            family = socket.AF_INET6
        except OSError:
            pass
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


def bind_unix(path: str) -> socket.socket:
    """A bound Unix-domain socket at ``path`` (fails if the path exists, as in vLLM)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    return sock


def socket_from_fd(fd: int) -> socket.socket:
    """Adopt an inherited socket fd (family and type are read from the fd)."""
    return socket.socket(fileno=fd)


# ---------------------------------------------------------------------------------------------
# Server


class HttpServer:
    """Serves one app on one or more listening sockets, with graceful shutdown."""

    def __init__(
        self,
        app: App,
        *,
        keep_alive_timeout: float = 5.0,
        max_body_size: int = DEFAULT_MAX_BODY_SIZE,
    ) -> None:
        self.app = app
        self.keep_alive_timeout = keep_alive_timeout
        self.max_body_size = max_body_size
        self._servers: list[asyncio.AbstractServer] = []
        self._connections: set[_HttpConnection] = set()
        self._closing = False
        # Connections with framed output waiting: flushed together once per loop iteration.
        self._dirty: list[_HttpConnection] = []
        self._flush_pending = False

    def _flush_dirty(self) -> None:
        # Scheduled by the first connection that queued output in this loop iteration.
        self._flush_pending = False
        dirty, self._dirty = self._dirty, []
        for conn in dirty:
            try:
                conn._flush()
            except Exception:  # one broken connection must not hold back the others' output
                logger.exception("Error while writing to a connection")

    async def start(self, sock: socket.socket) -> None:
        """Start accepting on a bound socket; calls ``listen(LISTEN_BACKLOG)`` on it."""
        loop = asyncio.get_running_loop()
        sock.listen(LISTEN_BACKLOG)
        sock.setblocking(False)
        server: asyncio.AbstractServer
        if sock.family == socket.AF_UNIX:
            server = await loop.create_unix_server(
                lambda: _HttpConnection(self), sock=sock, backlog=LISTEN_BACKLOG
            )
        else:
            server = await loop.create_server(
                lambda: _HttpConnection(self), sock=sock, backlog=LISTEN_BACKLOG
            )
        self._servers.append(server)

    @property
    def open_connections(self) -> int:
        """Number of client connections currently open."""
        return len(self._connections)

    async def shutdown(self, timeout: float = 0.0) -> None:
        """Stop accepting, let in-flight requests finish for up to ``timeout`` seconds, then
        cancel what is left (which aborts its engine requests) and close every connection."""
        self._closing = True
        for server in self._servers:
            server.close()
        for conn in list(self._connections):
            conn.close_if_idle()
        if timeout > 0:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            while self._connections and loop.time() < deadline:
                await asyncio.sleep(0.05)
        tasks = [t for conn in list(self._connections) if (t := conn.abort()) is not None]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        for server in self._servers:
            with contextlib.suppress(Exception):
                await server.wait_closed()
        self._servers.clear()


class _HttpConnection(asyncio.Protocol, StreamSink):
    """One client connection: parses requests, runs the app for each in order, writes responses.

    Pipelined requests are queued and served one at a time (HTTP/1.1 requires in-order replies).
    """

    __slots__ = (
        "_body",
        "_body_size",
        "_chunk_interval",
        "_closed",
        "_drain_waiter",
        "_fd",
        "_flush_scheduled",
        "_head_size",
        "_header_count",
        "_headers",
        "_idle_timer",
        "_keep_alive_handle",
        "_last_chunk_at",
        "_loop",
        "_out",
        "_parser",
        "_pending",
        "_reading_paused",
        "_resume_callback",
        "_server",
        "_task",
        "_too_large",
        "_transport",
        "_url",
        "_write_paused",
    )

    def __init__(self, server: HttpServer) -> None:
        self._server = server
        self._loop = asyncio.get_running_loop()
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._fd = -1
        self._closed = False
        self._task: asyncio.Task[None] | None = None
        self._pending: deque[tuple[Request, bool]] = deque()
        self._keep_alive_handle: asyncio.TimerHandle | None = None
        self._write_paused = False
        self._drain_waiter: asyncio.Future[None] | None = None
        self._reading_paused = False
        self._out: list[bytes] = []
        self._flush_scheduled = False
        self._idle_timer: asyncio.TimerHandle | None = None
        self._last_chunk_at = 0.0
        self._chunk_interval = 0.0
        self._resume_callback: Callable[[], None] | None = None
        # per-message parse state
        self._url = b""
        self._headers: dict[bytes, bytes] = {}
        self._body: list[bytes] = []
        self._body_size = 0
        self._too_large = False

    # -- asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport; they implement its interface
        self._transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        # Write-through needs the plain socket (never under TLS, whose bytes are not ours).
        plain = sock is not None and transport.get_extra_info("sslcontext") is None
        self._fd = sock.fileno() if plain else -1
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._server._connections.add(self)
        self._arm_keep_alive()

    def data_received(self, data: bytes) -> None:
        self._cancel_keep_alive()
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            # e.g. "Upgrade: h2c" or a WebSocket handshake: like uvicorn, ignore the upgrade and
            # answer the request (already dispatched by on_message_complete) over HTTP/1.1
            logger.debug("Unsupported upgrade request ignored")
        except httptools.HttpParserError:
            self._reject(400, b"Invalid HTTP request received.")

    def eof_received(self) -> bool | None:
        # The client half-closed: treat as a disconnect (returning None closes the transport).
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._fd = -1
        self._server._connections.discard(self)
        self._cancel_keep_alive()
        self._pending.clear()
        if self._task is not None and not self._task.done():
            self._task.cancel()
        if self._drain_waiter is not None and not self._drain_waiter.done():
            self._drain_waiter.set_exception(ConnectionResetError("client disconnected"))
            # the task is being cancelled anyway; avoid "exception never retrieved"
            self._drain_waiter.exception()

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._drain_waiter is not None and not self._drain_waiter.done():
            self._drain_waiter.set_result(None)
        callback, self._resume_callback = self._resume_callback, None
        if callback is not None:
            self._loop.call_soon(callback)

    # -- httptools callbacks -------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._url = b""
        self._headers = {}
        self._body = []
        self._body_size = 0
        self._too_large = False
        self._head_size = 0
        self._header_count = 0

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._head_size += len(url)
        if self._head_size > MAX_HEAD_SIZE:
            raise httptools.HttpParserError("request line too long")

    def on_header(self, name: bytes, value: bytes) -> None:
        # httptools may deliver one header in pieces; counting calls over-counts only then
        self._header_count += 1
        self._head_size += len(name) + len(value)
        if self._head_size > MAX_HEAD_SIZE or self._header_count > MAX_HEADER_COUNT:
            raise httptools.HttpParserError("request head too large")
        self._headers[name.lower()] = value

    def on_headers_complete(self) -> None:
        length = self._headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self._server.max_body_size:
            self._too_large = True
        elif (
            self._headers.get(b"expect", b"").lower() == b"100-continue"
            and self._transport is not None
        ):
            self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        if self._too_large:
            return
        self._body_size += len(body)
        if self._body_size > self._server.max_body_size:
            self._too_large = True
            self._body = []
            return
        self._body.append(body)

    def on_message_complete(self) -> None:
        url = self._url
        qpos = url.find(b"?")
        if qpos >= 0:
            raw_path, query = url[:qpos], url[qpos + 1 :]
        else:
            raw_path, query = url, b""
        path = raw_path.decode("latin-1")
        if "%" in path:
            path = unquote(path)
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        request = Request(
            self._parser.get_method().decode("ascii"), path, query, self._headers, body
        )
        keep_alive = self._parser.should_keep_alive()
        if self._too_large:
            request.state = _TOO_LARGE
            keep_alive = False  # the rest of an oversized body may still be in flight
        if self._task is None:
            self._start(request, keep_alive)
        else:
            self._pending.append((request, keep_alive))
            if len(self._pending) >= _MAX_PIPELINED and not self._reading_paused:
                self._reading_paused = True
                assert self._transport is not None
                self._transport.pause_reading()

    # -- request handling ----------------------------------------------------------------------

    def _start(self, request: Request, keep_alive: bool) -> None:
        self._task = self._loop.create_task(self._handle(request, keep_alive))

    async def _handle(self, request: Request, keep_alive: bool) -> None:
        transport = self._transport
        assert transport is not None
        response: AnyResponse | None = None
        try:
            if request.state is _TOO_LARGE:
                response = _too_large_response()
            else:
                try:
                    response = await self._server.app(request)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    logger.exception("Unhandled error in the HTTP app")
                    response = Response(b"Internal Server Error", 500, b"text/plain; charset=utf-8")
            if self._server._closing:
                keep_alive = False
            if isinstance(response, Response):
                self._write(transport, _head(response, keep_alive) + response.body)
            else:
                await self._stream(transport, response, keep_alive)
        except (asyncio.CancelledError, ConnectionError):
            # client went away (or shutdown): the body iterator has been closed; stop here
            keep_alive = False
            self._out.clear()
        except Exception:
            # a streaming body failed after the head went out: nothing valid can follow, so
            # end the connection (the client sees a truncated chunked body, as with uvicorn)
            logger.exception("Error while streaming a response body")
            keep_alive = False
            self._flush()  # what was produced before the failure still goes out
        finally:
            if response is not None and response.background is not None:
                try:
                    response.background()
                except Exception:
                    logger.exception("Error in a response's completion callback")
            self._task = None
        if self._closed:
            return
        if not keep_alive:
            transport.close()
            return
        if self._pending:
            next_request, next_keep_alive = self._pending.popleft()
            if self._reading_paused and len(self._pending) < _MAX_PIPELINED // 2:
                self._reading_paused = False
                transport.resume_reading()
            self._start(next_request, next_keep_alive)
        else:
            self._arm_keep_alive()

    async def _stream(
        self,
        transport: asyncio.Transport,
        response: StreamingResponse | PushedStreamingResponse,
        keep_alive: bool,
    ) -> None:
        # Chunks are framed into a per-connection buffer that is flushed once the event loop gets
        # to run its callbacks: chunks produced without an intervening await (e.g. every SSE event
        # of one engine step) leave in one send() instead of one each.
        self._out.append(_head(response, keep_alive))
        self._schedule_flush()
        interval = response.keep_alive_interval
        self._chunk_interval = interval
        if interval > 0:
            self._last_chunk_at = self._loop.time()
            self._idle_timer = self._loop.call_at(
                self._last_chunk_at + interval, self._idle_tick, interval
            )
        # The connection is the body's sink itself: one call per chunk, not two.
        body = response.body if isinstance(response, StreamingResponse) else None
        try:
            if isinstance(response, StreamingResponse):
                await _iterate_into(response.body, self)
            else:
                await response.produce(self)
            self._cancel_idle_timer()
            self._out.append(b"0\r\n\r\n")
            self._flush()
        finally:
            self._cancel_idle_timer()
            self._resume_callback = None
            aclose = getattr(body, "aclose", None)
            if aclose is not None:
                await aclose()

    # -- the response body's sink (StreamSink) ---------------------------------------------------

    def send(self, chunk: bytes) -> None:
        """Frame ``chunk`` into this connection's buffer (skipped when empty or disconnected)."""
        if not chunk or self._closed:
            return
        self._out.append(b"%x\r\n%b\r\n" % (len(chunk), chunk))
        if not self._flush_scheduled:
            self._schedule_flush()
        if self._chunk_interval > 0:
            self._last_chunk_at = self._loop.time()

    @property
    def paused(self) -> bool:
        """The transport asked us to stop writing."""
        return self._write_paused

    def on_resume(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` when the transport resumes writing."""
        self._resume_callback = callback

    async def drain(self) -> None:
        """Flush, then wait for the transport to resume writing."""
        self._flush()
        if self._write_paused:
            await self._drain()

    def _idle_tick(self, interval: float) -> None:
        """SSE keep-alive: a comment event when no chunk went out for ``interval`` seconds
        (vLLM's ``with_sse_keep_alive``, without a task per chunk)."""
        if self._closed:
            self._idle_timer = None
            return
        now = self._loop.time()
        due = self._last_chunk_at + interval
        if now >= due - 0.001:
            if not self._write_paused:
                self._out.append(_KEEP_ALIVE_CHUNK)
                self._flush()
            self._last_chunk_at = now
            due = now + interval
        self._idle_timer = self._loop.call_at(due, self._idle_tick, interval)

    def _cancel_idle_timer(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None

    def _schedule_flush(self) -> None:
        # One server callback per loop iteration flushes every connection that produced output
        # in it (one engine step reaches many streams), instead of one callback per connection.
        self._flush_scheduled = True
        server = self._server
        server._dirty.append(self)
        if not server._flush_pending:
            server._flush_pending = True
            self._loop.call_soon(server._flush_dirty)

    def _flush(self) -> None:
        self._flush_scheduled = False
        out = self._out
        if out and not self._closed and self._transport is not None:
            self._write(self._transport, out[0] if len(out) == 1 else b"".join(out))
        out.clear()

    def _write(self, transport: asyncio.Transport, data: bytes) -> None:
        # Write-through while the transport holds nothing: one send() now, as asyncio's own
        # socket transport does. uvloop's write() queues the data for the end of the loop
        # iteration instead, which costs ~1.5 µs more per write (BENCHMARKS.md) and buys
        # nothing here: our writes are already batched per iteration. What the socket does not
        # take, and every failure, goes through the transport, which reports and closes.
        fd = self._fd  # -1 once the connection is lost: the number may belong to another socket
        if fd >= 0 and not transport.get_write_buffer_size() and not transport.is_closing():
            try:
                sent = os.write(fd, data)
            except OSError:  # EAGAIN/EINTR, or a broken connection for the transport to see
                sent = 0
            if sent == len(data):
                return
            data = data[sent:]
        transport.write(data)

    async def _drain(self) -> None:
        if self._closed:
            raise ConnectionResetError("client disconnected")
        self._drain_waiter = self._loop.create_future()
        try:
            await self._drain_waiter
        finally:
            self._drain_waiter = None

    # -- connection management -----------------------------------------------------------------

    def _reject(self, status: int, message: bytes) -> None:
        """Answer an unparsable request and close (no app involved)."""
        if self._transport is None or self._closed:
            return
        if self._task is None:
            response = Response(message, status, b"text/plain; charset=utf-8")
            self._transport.write(_head(response, False) + response.body)
        self._transport.close()

    def _arm_keep_alive(self) -> None:
        if self._server._closing:
            if self._transport is not None:
                self._transport.close()
            return
        self._keep_alive_handle = self._loop.call_later(
            self._server.keep_alive_timeout, self._keep_alive_expired
        )

    def _cancel_keep_alive(self) -> None:
        if self._keep_alive_handle is not None:
            self._keep_alive_handle.cancel()
            self._keep_alive_handle = None

    def _keep_alive_expired(self) -> None:
        self._keep_alive_handle = None
        if self._task is None and self._transport is not None:
            self._transport.close()

    def close_if_idle(self) -> None:
        """Close now if no request is in progress (used by shutdown)."""
        if self._task is None and self._transport is not None:
            self._transport.close()

    def abort(self) -> asyncio.Task[None] | None:
        """Cancel the in-flight request (if any) and close; returns the task to await."""
        task = self._task
        if task is not None and not task.done():
            task.cancel()
        if self._transport is not None:
            self._transport.close()
        return task


async def _iterate_into(body: AsyncIterator[bytes], sink: StreamSink) -> None:
    # An iterated body: each chunk into the sink, waiting out the client's backlog.
    async for chunk in body:
        sink.send(chunk)
        if sink.paused:
            await sink.drain()


_TOO_LARGE = object()

SSE_KEEP_ALIVE_COMMENT = b": keep-alive\n\n"
"""What an idle SSE stream sends every ``keep_alive_interval`` seconds (vLLM's comment)."""
_KEEP_ALIVE_CHUNK = b"%x\r\n%b\r\n" % (len(SSE_KEEP_ALIVE_COMMENT), SSE_KEEP_ALIVE_COMMENT)


def _too_large_response() -> Response:
    # vLLM's error shape for framework-level HTTP errors: type is the status phrase.
    from .errors import error_json

    return Response(
        error_json("Request body too large.", HTTPStatus.REQUEST_ENTITY_TOO_LARGE.phrase, 413),
        413,
    )


def _head(response: AnyResponse, keep_alive: bool) -> bytes:
    status = response.status
    line = _STATUS_LINES.get(status) or _status_line(status)
    parts = [line]
    for name, value in response.headers:
        parts.append(b"%b: %b\r\n" % (name, value))
    if isinstance(response, Response):
        parts.append(b"content-length: %d\r\n" % len(response.body))
    else:
        parts.append(b"transfer-encoding: chunked\r\n")
    if not keep_alive:
        parts.append(b"connection: close\r\n")
    parts.append(b"\r\n")
    return b"".join(parts)
