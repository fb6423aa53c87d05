"""The transport's framing fixes and limits, one raw-socket exchange each: HEAD without a body,
``100 Continue`` in its turn, close-delimited streams for HTTP/1.0, read timeouts, the head
and body size limits, and the framing checks the reader makes itself (not left to httptools'
strictness)."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Iterator

import httptools
import pytest

from vllm_frontend.server import errors
from vllm_frontend.server.app import App, ServerSettings
from vllm_frontend.server.transport import (
    HttpLimits,
    Request,
    Response,
    StreamingResponse,
    json_response,
)
from vllm_frontend.server.transport.reader import RequestReader

from .support import RunningServer
from .wire import exchange

TIMEOUT = 0.3
# uvloop's clock is libuv's loop time: whole milliseconds, read when the loop iteration began, so
# the server times a read up to a few milliseconds before the client's own clock saw it sent.
CLOCK_SLACK = 0.005


def make_app() -> App:
    app = App(ServerSettings())

    async def echo(request: Request) -> Response:
        return json_response({"body": request.body.decode("latin-1")})

    async def stream(request: Request) -> StreamingResponse:
        async def events() -> AsyncIterator[bytes]:
            for i in range(3):
                yield b"data: %d\n\n" % i
                await asyncio.sleep(0.01)

        return StreamingResponse(events())

    async def slow(request: Request) -> Response:
        await asyncio.sleep(0.3)
        return json_response({"slow": True})

    for method in ("GET", "POST", "HEAD"):
        app.route(method, "/echo", echo)
        app.route(method, "/stream", stream)
    app.route("GET", "/slow", slow)
    return app


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    limits = HttpLimits(head_timeout=TIMEOUT, body_timeout=TIMEOUT, max_body_size=1000)
    srv = RunningServer(make_app(), limits=limits, refusal=errors.refusal_response)
    yield srv
    srv.stop()


def read_all(sock: socket.socket, timeout: float = 5.0) -> bytes:
    sock.settimeout(timeout)
    out = b""
    while chunk := sock.recv(65536):
        out += chunk
    return out


def read_until(sock: socket.socket, out: bytes, marker: bytes) -> bytes:
    while marker not in out:
        chunk = sock.recv(65536)
        assert chunk, f"closed before {marker!r}: {out!r}"
        out += chunk
    return out


def test_head_gets_the_get_head_and_no_body(server: RunningServer) -> None:
    # a body after the head would be read as the start of the next response
    get = exchange(server.port, [b"GET /echo HTTP/1.1\r\nHost: x\r\n\r\n"], ["GET"], expected=1)
    outcome = exchange(
        server.port,
        [b"HEAD /echo HTTP/1.1\r\nHost: x\r\n\r\nGET /echo HTTP/1.1\r\nHost: x\r\n\r\n"],
        ["HEAD", "GET"],
        expected=2,
    )
    head, after = outcome.answers
    assert head.status == 200 and head.body == b""
    assert head.headers[b"content-length"] == get.answers[0].headers[b"content-length"]
    assert after.status == 200 and after.body == get.answers[0].body


def test_head_of_a_stream_sends_no_chunks(server: RunningServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
        s.sendall(b"HEAD /stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        out = read_all(s)
    head, _, rest = out.partition(b"\r\n\r\n")
    # nor framing headers: uvicorn adds Transfer-Encoding to a streamed answer but to HEAD's
    assert head.startswith(b"HTTP/1.1 200 ") and b"transfer-encoding" not in head
    assert rest == b""


def test_100_continue_waits_for_the_earlier_pipelined_response(server: RunningServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
        s.sendall(
            b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"
            b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n"
        )
        out = read_until(s, b"", b"100 Continue")
        assert out.index(b'{"slow":true}') < out.index(b"HTTP/1.1 100 Continue")
        time.sleep(TIMEOUT / 2)  # timed from the 100, not from the head
        s.sendall(b"hi")
        read_until(s, out, b'"hi"')


def test_100_continue_is_skipped_when_the_body_came_anyway(server: RunningServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
        s.sendall(
            b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"
            b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue\r\n"
            b"Connection: close\r\n\r\nhi"
        )
        out = read_all(s)
    assert b"100 Continue" not in out and out.count(b"HTTP/1.1 200 OK") == 2


def test_http_1_0_stream_is_close_delimited(server: RunningServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
        s.sendall(b"GET /stream HTTP/1.0\r\n\r\n")
        out = read_all(s)
    head, _, body = out.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ")
    assert b"transfer-encoding" not in head.lower() and b"content-length" not in head.lower()
    assert b"connection: close" in head.lower()
    assert body == b"data: 0\n\ndata: 1\n\ndata: 2\n\n"


@pytest.mark.parametrize(
    "partial",
    [
        b"GET /echo HTTP/1.1\r\nHost: x\r\n",
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nab",
        b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
    ],
    ids=["head", "body", "chunked body"],
)
def test_a_stalled_request_gets_408_and_close(server: RunningServer, partial: bytes) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
        start = time.monotonic()
        s.sendall(partial)
        out = read_all(s)
    assert out.startswith(b"HTTP/1.1 408 ") and b"connection: close" in out
    assert TIMEOUT - CLOCK_SLACK <= time.monotonic() - start < TIMEOUT + 2


def test_stalled_request_behind_a_slow_one_gets_408_after_its_response(
    server: RunningServer,
) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
        s.sendall(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\nGET /echo HTTP/1.1\r\n")
        out = read_all(s)
    assert out.startswith(b"HTTP/1.1 200 ") and out.count(b"HTTP/1.1 408 ") == 1


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GET /echo HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (1 << 20) + b"\r\n\r\n", 431),
        (b"GET /echo HTTP/1.1\r\nHost: x\r\nX-Pad:" + b" " * (1 << 20) + b"a\r\n\r\n", 431),
        (b"GET /echo HTTP/1.1\r\nHost: x\r\n" + b"X-A: b\r\n" * 300 + b"\r\n", 431),
        (b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414),
        (b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1001\r\n\r\n" + b"x" * 1001, 413),
        (
            b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"3e9\r\n" + b"x" * 1001 + b"\r\n0\r\n\r\n",
            413,
        ),
    ],
    ids=["1 MiB header", "1 MiB of padding", "300 headers", "70 KB target", "CL", "chunked"],
)
def test_over_the_limits_is_refused(
    server: RunningServer, request_bytes: bytes, status: int
) -> None:
    outcome = exchange(server.port, [request_bytes], ["GET"], expected=1)
    assert [a.status for a in outcome.answers] == [status] and outcome.closed
    if status != 400:  # worded by the app layer in vLLM's error shape
        error = outcome.answers[0]
        assert error.headers[b"content-type"] == b"application/json"
        assert f'"code":{status}'.encode() in error.body


def test_endless_chunk_extensions_are_refused(server: RunningServer) -> None:
    # a body of 1-byte chunks with 5 KB extensions: the bytes read, not the body, hit the limit
    head = b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    chunks: list[bytes | float] = [b"1;e=" + b"e" * 5000 + b"\r\nx\r\n" for _ in range(30)]
    outcome = exchange(server.port, [head, 0.05, *chunks], ["POST"], expected=1)
    assert [a.status for a in outcome.answers] == [413] and outcome.closed


def test_a_head_under_the_default_limit_is_served() -> None:
    srv = RunningServer(make_app())
    try:
        big = b"GET /echo HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 60_000 + b"\r\n\r\n"
        assert exchange(srv.port, [big], ["GET"], expected=1).answers[0].status == 200
        bigger = b"GET /echo HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n"
        assert exchange(srv.port, [bigger], ["GET"], expected=1).answers[0].status == 431
    finally:
        srv.stop()


# -- the reader's own framing checks, under a lenient parser --------------------------------


class _Reader(RequestReader):
    """A reader whose parser is as lenient as llhttp gets: what is refused, we refused."""

    __slots__ = ("dispatched", "refused")

    def __init__(self) -> None:
        self._init_writer(None)  # type: ignore[arg-type]
        self._init_reader(HttpLimits())
        self._parser.set_dangerous_leniencies(
            lenient_headers=True,
            lenient_chunked_length=True,
            lenient_transfer_encoding=True,
        )
        self.dispatched: list[Request] = []
        self.refused: list[int] = []

    def _dispatch(self, request: Request, keep_alive: bool, http11: bool) -> None:
        self.dispatched.append(request)

    def _refuse(self, status: int, message: str) -> None:
        self.refused.append(status)
        self._refusal = (status, message)

    def _idle(self) -> bool:
        return True


@pytest.mark.parametrize(
    "head",
    [
        b"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n",
        b"Transfer-Encoding: chunked\r\nContent-Length: 3\r\n",
        b"Content-Length: 3\r\nContent-Length: 3\r\n",
        b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
        b"Transfer-Encoding: gzip, chunked\r\n",
        b"Transfer-Encoding: identity\r\n",
        b"Host: y\r\n",
    ],
    ids=["CL.TE", "TE.CL", "CL twice", "TE twice", "TE list", "TE identity", "Host twice"],
)
def test_ambiguous_framing_is_refused_by_the_reader_itself(head: bytes) -> None:
    async def feed() -> _Reader:
        reader = _Reader()
        reader.data_received(
            b"POST / HTTP/1.1\r\nHost: x\r\n" + head + b"\r\n3\r\nabc\r\n0\r\n\r\n"
        )
        return reader

    reader = asyncio.run(feed())
    assert reader.refused == [400] and reader.dispatched == []


def test_the_lenient_reader_still_takes_a_plain_request() -> None:
    async def feed() -> _Reader:
        reader = _Reader()
        reader.data_received(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
        return reader

    reader = asyncio.run(feed())
    assert reader.refused == [] and [r.body for r in reader.dispatched] == [b"abc"]


def test_httptools_is_strict_about_framing_too() -> None:
    # the reader's checks are a second line: httptools (llhttp) refuses these by default
    class Sink:
        pass

    parser = httptools.HttpRequestParser(Sink())
    with pytest.raises(httptools.HttpParserError):
        parser.feed_data(
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
