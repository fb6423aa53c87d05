"""The writing half of a connection: response bytes out, streamed bodies framed and batched.

A streamed chunk is one ``<hex len>\\r\\n<bytes>\\r\\n`` appended to a per-connection buffer;
the server flushes every connection that produced output once per loop iteration, so chunks
made without an await in between (e.g. every SSE event of one engine step) leave in one send().
A streamed response's head waits for its body's first chunk (for a bounded while), so that the
two leave in one send() too: the client is woken once, not twice.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable

from .framing import KEEP_ALIVE_CHUNK, LAST_CHUNK, SSE_KEEP_ALIVE_COMMENT, response_head
from .messages import PushedStreamingResponse, StreamingResponse, StreamSink
from .state import SharedState


class ResponseWriter(StreamSink):
    """Output state and methods of a connection; the connection is its streams' sink itself
    (one call per chunk, not two)."""

    __slots__ = (
        "_chunk_interval",
        "_closed",
        "_drain_waiter",
        "_fd",
        "_flush_scheduled",
        "_idle_chunk",
        "_idle_timer",
        "_last_chunk_at",
        "_loop",
        "_out",
        "_resume_callback",
        "_server",
        "_transport",
        "_write_paused",
    )

    def _init_writer(self, server: SharedState) -> None:
        self._server = server
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._fd = -1
        self._closed = False
        self._write_paused = False
        self._drain_waiter: asyncio.Future[None] | None = None
        self._out: list[bytes] = []
        self._flush_scheduled = False
        self._idle_timer: asyncio.TimerHandle | None = None
        self._idle_chunk = KEEP_ALIVE_CHUNK
        self._last_chunk_at = 0.0
        self._chunk_interval = 0.0
        self._resume_callback: Callable[[], None] | None = None

    async def _stream(
        self,
        transport: asyncio.Transport,
        response: StreamingResponse | PushedStreamingResponse,
        keep_alive: bool,
        chunked: bool,
    ) -> None:
        # Without chunked framing (an HTTP/1.0 client) the body is close-delimited: the caller
        # closes the connection after it, and chunks go out as they are.
        # The head waits for the body's first chunk (a bounded while: see ``SharedState.hold``):
        # one write, and one wake-up of the client, where the head alone would be a second.
        head = response_head(response, keep_alive, self._server.default_lines, chunked)
        self._out.append(head)
        self._server.hold(self, head)
        sink: StreamSink = self if chunked else _CloseDelimitedSink(self)
        self._idle_chunk = KEEP_ALIVE_CHUNK if chunked else SSE_KEEP_ALIVE_COMMENT
        interval = response.keep_alive_interval
        self._chunk_interval = interval
        if interval > 0:
            self._last_chunk_at = self._loop.time()
            self._idle_timer = self._loop.call_at(
                self._last_chunk_at + interval, self._idle_tick, interval
            )
        body = response.body if isinstance(response, StreamingResponse) else None
        try:
            if isinstance(response, StreamingResponse):
                await _iterate_into(response.body, sink)
            else:
                await response.produce(sink)
            self._cancel_idle_timer()
            if chunked:
                self._out.append(LAST_CHUNK)
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

    def _send_unframed(self, chunk: bytes) -> None:
        if not chunk or self._closed:
            return
        self._out.append(chunk)
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
                self._out.append(self._idle_chunk)
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
        server.dirty.append(self)
        if not server.flush_pending:
            server.flush_pending = True
            self._loop.call_soon(server.flush_dirty)

    def _release_head(self, head: bytes) -> None:
        # ``head`` (this very object: not a later stream's head on this connection, held for
        # less long) goes out with this iteration's output if it is still held.
        out = self._out
        if out and out[0] is head and not self._flush_scheduled:
            self._schedule_flush()

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


class _CloseDelimitedSink(StreamSink):
    """A stream's sink for an HTTP/1.0 client: chunks go out unframed (the body ends when the
    connection closes)."""

    __slots__ = ("_writer",)

    def __init__(self, writer: ResponseWriter) -> None:
        self._writer = writer

    def send(self, chunk: bytes) -> None:
        """Queue ``chunk`` as it is."""
        self._writer._send_unframed(chunk)

    @property
    def paused(self) -> bool:
        """The connection's writing is paused."""
        return self._writer.paused

    def on_resume(self, callback: Callable[[], None]) -> None:
        """As the connection's."""
        self._writer.on_resume(callback)

    async def drain(self) -> None:
        """As the connection's."""
        await self._writer.drain()


async def _iterate_into(body: AsyncIterator[bytes], sink: StreamSink) -> None:
    # An iterated body: each chunk into the sink, waiting out the client's backlog.
    async for chunk in body:
        sink.send(chunk)
        if sink.paused:
            await sink.drain()
