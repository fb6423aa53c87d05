"""One client connection: requests in (``reader``), the app run for each in order, responses
out (``writer``); keep-alive, pipelining, refusals and disconnects.

Pipelined requests are queued and served one at a time (HTTP/1.1 requires in-order replies).
A refusal (a request that cannot be parsed, is too large or too slow) stops reading; it is sent
after the responses to the requests before it, with ``Connection: close``, and the connection
then closes once the client has seen it (or after a short linger).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections import deque
from typing import cast

from .framing import CONTINUE, response_head
from .messages import AnyResponse, Request, Response, StreamingResponse
from .reader import DETACHED_PARSER, RequestReader
from .state import SharedState

logger = logging.getLogger(__name__)

MAX_PIPELINED = 16
"""Pipelined requests buffered per connection before we stop reading from it."""

_CLOCK_SLACK = 0.001  # uvloop's timers and clock count whole milliseconds


class HttpConnection(RequestReader, asyncio.Protocol):
    """The asyncio protocol of one client connection."""

    __slots__ = ("_pending", "_reading_paused", "_task")

    def __init__(self, server: SharedState) -> None:
        self._init_writer(server)
        self._init_reader(server.limits)
        self._task: asyncio.Task[None] | None = None
        self._pending: deque[tuple[Request, bool, bool]] = deque()
        self._reading_paused = False

    # -- asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport; they implement its interface
        self._transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        # Write-through needs the plain socket (never under TLS, whose bytes are not ours).
        plain = sock is not None and transport.get_extra_info("sslcontext") is None
        self._fd = sock.fileno() if plain else -1
        self._local_address = _local_address(sock)
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._server.connections.add(self)
        self._arm_keep_alive()

    def eof_received(self) -> bool | None:
        # The client half-closed: treat as a disconnect (returning None closes the transport).
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._fd = -1
        self._server.connections.discard(self)
        self._cancel_keep_alive()
        self._cancel_read_timer()
        self._pending.clear()
        # Nothing is parsed any more: let go of the last request's body and headers, and of the
        # parser, which holds this connection's callbacks (a reference cycle otherwise, left
        # to the cyclic GC with the transport and socket it reaches).
        self._body = []
        self._headers = {}
        self._parser = DETACHED_PARSER
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

    # -- requests in -----------------------------------------------------------------------------

    def _idle(self) -> bool:
        """No response is being produced or waiting to be."""
        return self._task is None

    def _dispatch(self, request: Request, keep_alive: bool, http11: bool) -> None:
        if self._task is None:
            self._task = self._loop.create_task(self._handle(request, keep_alive, http11))
            return
        self._pending.append((request, keep_alive, http11))
        if len(self._pending) >= MAX_PIPELINED and not self._reading_paused:
            self._reading_paused = True
            assert self._transport is not None
            self._transport.pause_reading()

    def _refuse(self, status: int, message: str) -> None:
        """Stop reading; answer ``status`` once the responses before it are out, then close."""
        self._cancel_read_timer()
        self._in_message = False
        if self._refusal is not None or self._closed or self._transport is None:
            return
        self._refusal = (status, message)
        if self._task is None:
            self._send_refusal()

    def _send_refusal(self) -> None:
        assert self._refusal is not None and self._transport is not None
        status, message = self._refusal
        server = self._server
        response = server.refusal(status, message)
        self._write(
            self._transport, response_head(response, False, server.default_lines) + response.body
        )
        if server.on_refusal is not None:
            try:
                method = self._parser.get_method().decode("ascii", "replace")
            except Exception:  # the request line itself was refused
                method = ""
            started = self._message_started
            elapsed = self._loop.time() - started if started else 0.0
            try:
                server.on_refusal(method, status, elapsed)
            except Exception:
                logger.exception("Error while recording a refused request")
        self._linger()

    def _linger(self) -> None:
        # Closing with unread input would reset the connection and could destroy the response
        # before the client reads it: send FIN, keep discarding input until the client closes,
        # and close anyway after the keep-alive timeout.
        transport = self._transport
        assert transport is not None
        if self._reading_paused:
            self._reading_paused = False
            transport.resume_reading()
        if transport.can_write_eof():
            with contextlib.suppress(OSError, RuntimeError):
                transport.write_eof()
            self._cancel_keep_alive()
            self._keep_alive_handle = self._loop.call_later(
                self._server.limits.keep_alive_timeout, transport.close
            )
        else:
            transport.close()

    # -- request handling ----------------------------------------------------------------------

    async def _handle(self, request: Request, keep_alive: bool, http11: bool) -> None:
        transport = self._transport
        assert transport is not None
        response: AnyResponse | None = None
        try:
            try:
                response = await self._server.app(request)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("Unhandled error in the HTTP app")
                response = Response(b"Internal Server Error", 500, b"text/plain; charset=utf-8")
            if self._server.closing:
                keep_alive = False
            if request.method == "HEAD":
                # the head the GET would have, and no body (which would misframe what follows);
                # a streamed one without Transfer-Encoding, as uvicorn frames it (httptools_impl)
                if not isinstance(response, Response):
                    await _discard_body(response)
                defaults = self._server.default_lines
                self._write(transport, response_head(response, keep_alive, defaults, False))
            elif isinstance(response, Response):
                defaults = self._server.default_lines
                self._write(
                    transport, response_head(response, keep_alive, defaults) + response.body
                )
            else:
                if not http11:
                    keep_alive = False  # HTTP/1.0 has no chunked framing: close-delimited body
                await self._stream(transport, response, keep_alive, http11)
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
        elif self._pending:
            next_request, next_keep_alive, next_http11 = self._pending.popleft()
            if self._reading_paused and len(self._pending) < MAX_PIPELINED // 2:
                self._reading_paused = False
                transport.resume_reading()
            self._task = self._loop.create_task(
                self._handle(next_request, next_keep_alive, next_http11)
            )
        elif self._refusal is not None:
            self._send_refusal()
        elif self._in_message:
            # the next request is on its way: it is this one's turn for "100 Continue" now
            if self._continue_due:
                self._continue_due = False
                self._write(transport, CONTINUE)
            self._watch_read()
        else:
            self._arm_keep_alive()

    # -- connection management -----------------------------------------------------------------

    def _arm_keep_alive(self) -> None:
        if self._server.closing:
            if self._transport is not None:
                self._transport.close()
            return
        self._idle_since = now = self._loop.time()
        if self._keep_alive_handle is None:  # else the pending one re-arms itself from now
            self._keep_alive_handle = self._loop.call_at(
                now + self._server.limits.keep_alive_timeout, self._keep_alive_expired
            )

    def _cancel_keep_alive(self) -> None:
        if self._keep_alive_handle is not None:
            self._keep_alive_handle.cancel()
            self._keep_alive_handle = None

    def _keep_alive_expired(self) -> None:
        self._keep_alive_handle = None
        since = self._idle_since
        if not since or self._task is not None or self._transport is None or self._in_message:
            return  # busy since it was armed: the end of the next response arms it again
        deadline = since + self._server.limits.keep_alive_timeout
        if self._loop.time() + _CLOCK_SLACK >= deadline:
            self._transport.close()
        else:  # idle again, from later on
            self._keep_alive_handle = self._loop.call_at(deadline, self._keep_alive_expired)

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


async def _discard_body(response: AnyResponse) -> None:
    # A HEAD request's streamed body is never produced: close an iterated one.
    if isinstance(response, StreamingResponse):
        aclose = getattr(response.body, "aclose", None)
        if aclose is not None:
            await aclose()


def _local_address(sock: socket.socket | None) -> tuple[str, int | None] | None:
    # what uvicorn puts in scope["server"] (protocols/utils.py get_local_addr)
    if sock is None:
        return None
    with contextlib.suppress(OSError):
        name = sock.getsockname()
        if isinstance(name, tuple):
            return str(name[0]), int(name[1])
        if isinstance(name, str):
            return name, None
    return None
