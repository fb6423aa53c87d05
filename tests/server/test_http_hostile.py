"""A hostile client cannot confuse the HTTP transport: the class of inputs, not single cases.

A corpus of raw request streams (valid, edge, malformed, request-smuggling shapes, pipelined,
HEAD, 100-continue, HTTP/1.0, half-sent) and hypothesis-generated ones go over real sockets to a
server with a few routes. h11, an independent parser, judges both sides:

- as the reference *request* parser: what h11 refuses, our server must refuse (4xx) or close
  on, never route; what h11 accepts, our server must route identically (method, target, body),
  except where we are deliberately stricter (:func:`stricter_than_h11`), and then it refuses.
  One leniency: empty lines before a request line are skipped (RFC 9112 §2.2), h11 refuses;
- as the *response* parser: every byte the server sends must frame under h11, one final
  response per routed or refused request, in order, nothing after a closing one.

No input may crash the server (5xx), hang it (bounded waits), or leak a connection.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vllm_frontend.metrics.http_series import HttpMetrics
from vllm_frontend.metrics.registry import MetricsRegistry, render_metrics
from vllm_frontend.server import errors
from vllm_frontend.server.app import App, ServerSettings
from vllm_frontend.server.transport import (
    HttpLimits,
    PushedStreamingResponse,
    Request,
    Response,
    StreamingResponse,
    StreamSink,
    json_response,
)

from .support import RunningServer
from .wire import HEAD_LIMIT, Outcome, Routed, exchange, reference_requests

TIMEOUT = 0.4
"""The test server's head and body read timeouts."""
MAX_BODY = 4096

REFUSALS = {400, 408, 413, 414, 431}
LLHTTP_METHODS = {
    b"GET", b"HEAD", b"POST", b"PUT", b"DELETE", b"CONNECT", b"OPTIONS", b"TRACE", b"PATCH",
    b"COPY", b"LOCK", b"MKCOL", b"MOVE", b"PROPFIND", b"PROPPATCH", b"SEARCH", b"UNLOCK",
    b"BIND", b"REBIND", b"UNBIND", b"ACL", b"REPORT", b"MKACTIVITY", b"CHECKOUT", b"MERGE",
    b"M-SEARCH", b"NOTIFY", b"SUBSCRIBE", b"UNSUBSCRIBE", b"PURGE", b"MKCALENDAR", b"LINK",
    b"UNLINK", b"SOURCE", b"QUERY",
}  # fmt: skip


class Recorder:
    """The server's app: a few routes, and every routed request recorded."""

    def __init__(self) -> None:
        self.routed: list[Routed] = []
        self.registry = MetricsRegistry()
        self.app = App(ServerSettings(), HttpMetrics(self.registry))
        for method in ("GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"):
            self.app.route(method, "/echo", self.echo)
        for method in ("GET", "POST", "HEAD"):
            self.app.route(method, "/stream", self.stream)
            self.app.route(method, "/pushed", self.pushed)
        self.app.route("GET", "/error", self.error)
        self.app.route("GET", "/slow", self.slow)

    async def __call__(self, request: Request) -> Response | StreamingResponse:
        self.routed.append(Routed(request.method, request.path, request.query, request.body))
        return await self.app(request)  # type: ignore[return-value]

    async def echo(self, request: Request) -> Response:
        return json_response({"method": request.method, "body": request.body.hex()})

    async def stream(self, request: Request) -> StreamingResponse:
        async def events() -> AsyncIterator[bytes]:
            for i in range(3):
                yield b"data: %d\n\n" % i
                await asyncio.sleep(0)

        return StreamingResponse(events())

    async def pushed(self, request: Request) -> PushedStreamingResponse:
        async def produce(sink: StreamSink) -> None:
            sink.send(b"data: a\n\n")
            sink.send(b"data: b\n\n")

        return PushedStreamingResponse(produce)

    async def error(self, request: Request) -> Response:
        raise RuntimeError("kaboom")

    async def slow(self, request: Request) -> Response:
        await asyncio.sleep(0.2)
        return json_response({"slow": True})


@pytest.fixture(scope="module")
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture(scope="module")
def server(recorder: Recorder) -> Iterator[RunningServer]:
    limits = HttpLimits(
        max_head_size=HEAD_LIMIT,
        max_body_size=MAX_BODY,
        head_timeout=TIMEOUT,
        body_timeout=TIMEOUT,
        keep_alive_timeout=2.0,
    )
    srv = RunningServer(
        recorder,
        limits=limits,
        refusal=errors.refusal_response,
        on_refusal=recorder.app.record_refusal,
    )
    yield srv
    srv.stop()


# -- the judge ---------------------------------------------------------------------------------


def _head_of(request: bytes) -> bytes:
    end = re.search(rb"\r?\n\r?\n", request)
    return request if end is None else request[: end.start()]


def stricter_than_h11(request: bytes) -> bool:
    """Shapes h11 accepts that we refuse on purpose (each a smuggling or parsing hazard):
    Content-Length with Transfer-Encoding, a repeated or list-valued Content-Length, a method
    llhttp does not know (it parses a fixed list), bare LF line ends, obs-fold, NUL or CR in a
    value, a head near the size limit (h11 and we count it differently), HTTP/1.x versions
    other than 1.0 and 1.1, more than 256 headers, whitespace after a chunk size."""
    head = _head_of(request)
    end = re.search(rb"\r?\n\r?\n", request)
    framed = request if end is None else request[: end.end()]  # the head with its blank line
    lines = re.split(rb"\r?\n", head)
    method = lines[0].split(b" ", 1)[0]
    version = lines[0].rsplit(b" ", 1)[-1]
    names = [line.split(b":", 1)[0].strip().lower() for line in lines[1:] if b":" in line]
    lengths = [line for line in lines[1:] if line.lower().startswith(b"content-length")]
    return (
        (b"content-length" in names and b"transfer-encoding" in names)
        or len(lengths) > 1
        or any(b"," in line for line in lengths)
        or method not in LLHTTP_METHODS
        or re.search(rb"(?<!\r)\n", framed) is not None
        or any(line[:1] in (b" ", b"\t") for line in lines[1:])
        or b"\x00" in head
        or re.search(rb"\r(?!\n)", head) is not None
        or len(head) > HEAD_LIMIT // 2
        or version not in (b"HTTP/1.0", b"HTTP/1.1")
        or len(lines) > 256
        or re.search(rb"\r\n[0-9a-fA-F]+[ \t]+\r\n", request[len(head) :]) is not None
    )


@dataclass
class Case:
    """A raw stream: its requests one by one (for the stricter check), sent in ``pieces``."""

    requests: list[bytes]
    pieces: list[bytes | float] | None = None

    @property
    def data(self) -> bytes:
        return b"".join(self.requests)


def judge(server: RunningServer, recorder: Recorder, case: Case) -> Outcome:
    """Send ``case`` and hold the server to h11's reading of it."""
    ref = reference_requests(case.data)  # with llhttp's one leniency: empty lines skipped
    refusing = ref.end != "ok"
    methods = [r.method for r in ref.requests]
    recorder.routed.clear()
    pieces = case.pieces if case.pieces is not None else [case.data]
    outcome = exchange(
        server.port, pieces, methods, expected=len(ref.requests) + refusing, timeout=5.0
    )
    routed = list(recorder.routed)
    assert routed == ref.requests[: len(routed)], "routed differently from h11"
    answers = outcome.answers
    statuses = [a.status for a in answers]
    if len(routed) < len(ref.requests):
        # we refused a request h11 accepts: only on purpose, and then we said so and closed
        # the request as it stands in the stream (bytes a request leaves start the next one)
        assert stricter_than_h11(ref.raw[len(routed)].lstrip(b"\r\n")), (routed, ref, statuses)
        assert len(answers) == len(routed) + 1 and statuses[-1] in REFUSALS, statuses
        assert outcome.closed
    elif refusing:
        # h11 refuses (or waits for more): the requests before are answered, then a 4xx/close
        assert len(answers) in (len(routed), len(routed) + 1), statuses
        if len(answers) == len(routed) + 1:
            assert statuses[-1] in REFUSALS, statuses
        assert outcome.closed
    else:
        assert len(answers) == len(routed), statuses
    for request, answer in zip(routed, answers, strict=False):
        assert answer.status < 500 or request.path == "/error", (request, answer)
        if request.method == "HEAD":
            assert answer.body == b""
    _assert_no_connection_left(server)
    return outcome


def _assert_no_connection_left(server: RunningServer) -> None:
    deadline = time.monotonic() + 3.0
    while server.server.open_connections and time.monotonic() < deadline:
        time.sleep(0.005)
    assert server.server.open_connections == 0


# -- the corpus --------------------------------------------------------------------------------

H = b"Host: x\r\n"


def get(target: bytes = b"/echo", extra: bytes = b"", version: bytes = b"HTTP/1.1") -> bytes:
    return b"GET " + target + b" " + version + b"\r\n" + H + extra + b"\r\n"


def post(body: bytes, extra: bytes = b"", target: bytes = b"/echo") -> bytes:
    length = b"Content-Length: %d\r\n" % len(body)
    return b"POST " + target + b" HTTP/1.1\r\n" + H + length + extra + b"\r\n" + body


def chunked(body_chunks: bytes, extra: bytes = b"") -> bytes:
    te = b"Transfer-Encoding: chunked\r\n"
    return b"POST /echo HTTP/1.1\r\n" + H + te + extra + b"\r\n" + body_chunks


CORPUS: dict[str, Case] = {
    # valid and edge
    "get": Case([get()]),
    "get query": Case([get(b"/echo?a=1&b=%20")]),
    "percent path": Case([get(b"/ech%6F")]),
    "absolute form": Case([get(b"http://x/echo")]),
    "asterisk": Case([b"OPTIONS * HTTP/1.1\r\n" + H + b"\r\n"]),
    "post": Case([post(b'{"a": 1}')]),
    "post empty": Case([post(b"")]),
    "chunked": Case([chunked(b"3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\n\r\n")]),
    "chunked trailer": Case([chunked(b"1\r\nx\r\n0\r\nT: v\r\n\r\n")]),
    "chunked upper": Case([chunked(b"A\r\n0123456789\r\n0\r\n\r\n")]),
    "pipelined": Case([get(), post(b"xy"), chunked(b"1\r\nz\r\n0\r\n\r\n"), get(b"/nope")]),
    "head": Case([b"HEAD /echo HTTP/1.1\r\n" + H + b"\r\n", get()]),
    "head stream": Case([b"HEAD /stream HTTP/1.1\r\n" + H + b"\r\n", get()]),
    "head pushed": Case([b"HEAD /pushed HTTP/1.1\r\n" + H + b"\r\n", get()]),
    "head missing": Case([b"HEAD /nope HTTP/1.1\r\n" + H + b"\r\n", get()]),
    "stream then get": Case([get(b"/stream"), get(b"/pushed"), get()]),
    "http/1.0": Case([b"GET /echo HTTP/1.0\r\n\r\n"]),
    "bare LF ends only the head": Case([b"GET /echo HTTP/1.0\n\n"]),
    "http/1.0 stream": Case([b"GET /stream HTTP/1.0\r\n\r\n"]),
    "http/1.0 pushed": Case([b"GET /pushed HTTP/1.0\r\n\r\n"]),
    "http/1.0 keep-alive": Case(
        [b"GET /echo HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", b"GET /echo HTTP/1.0\r\n\r\n"]
    ),
    "connection close": Case([get(extra=b"Connection: close\r\n"), get()]),
    "expect": Case([post(b"hi", b"Expect: 100-continue\r\n")]),
    "expect after slow": Case([get(b"/slow"), post(b"hi", b"Expect: 100-continue\r\n")]),
    "upgrade": Case([get(extra=b"Connection: Upgrade\r\nUpgrade: h2c\r\n"), get()]),
    "error route": Case([get(b"/error"), get()]),
    "header case": Case([b"GET /echo HTTP/1.1\r\nhOsT: x\r\ncontent-LENGTH: 0\r\n\r\n"]),
    "tab value": Case([get(extra=b"X-A:\tv\t\r\n")]),
    "empty value": Case([get(extra=b"X-A:\r\n")]),
    "te chunked case": Case(
        [b"POST /echo HTTP/1.1\r\n" + H + b"Transfer-Encoding: Chunked\r\n\r\n0\r\n\r\n"]
    ),
    "wrong method": Case([b"DELETE /stream HTTP/1.1\r\n" + H + b"\r\n", get()]),
    # request smuggling shapes
    "CL.TE": Case([post(b"0\r\n\r\nG", b"Transfer-Encoding: chunked\r\n")]),
    "TE.CL": Case(
        [
            b"POST /echo HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\nContent-Length: 3\r\n"
            b"\r\n8\r\nSMUGGLED\r\n0\r\n\r\n"
        ]
    ),
    "TE.TE dup": Case([chunked(b"0\r\n\r\n", b"Transfer-Encoding: x\r\n")]),
    "TE xchunked": Case([b"POST /echo HTTP/1.1\r\n" + H + b"Transfer-Encoding: xchunked\r\n\r\n"]),
    "TE list": Case(
        [b"POST /echo HTTP/1.1\r\n" + H + b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"]
    ),
    "TE identity": Case([b"POST /echo HTTP/1.1\r\n" + H + b"Transfer-Encoding: identity\r\n\r\n"]),
    "TE space colon": Case(
        [b"POST /echo HTTP/1.1\r\n" + H + b"Transfer-Encoding : chunked\r\n\r\n0\r\n\r\n"]
    ),
    "TE obs-fold": Case(
        [b"POST /echo HTTP/1.1\r\n" + H + b"Transfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n"]
    ),
    "TE vertical tab": Case(
        [b"POST /echo HTTP/1.1\r\n" + H + b"Transfer-Encoding:\x0bchunked\r\n\r\n0\r\n\r\n"]
    ),
    "CL dup same": Case([post(b"a", b"Content-Length: 1\r\n")]),
    "CL dup same long": Case([post(b"a" * 12, b"Content-Length: 12\r\n")]),
    # one-byte values are shared objects in CPython: a repeat must be seen all the same
    "host dup same": Case([get(extra=b"Host: x\r\n"), get()]),
    "host dup after CL": Case([b"GET /echo HTTP/1.1\r\nContent-Length: 0\r\n" + H + H + b"\r\n"]),
    "host dup head": Case([b"HEAD /echo HTTP/1.1\r\nContent-Length: 0\r\n" + H + H + b"\r\n"]),
    "CL dup differ": Case([post(b"ab", b"Content-Length: 1\r\n")]),
    "CL list": Case([b"POST /echo HTTP/1.1\r\n" + H + b"Content-Length: 1, 1\r\n\r\na"]),
    "CL plus": Case([b"POST /echo HTTP/1.1\r\n" + H + b"Content-Length: +1\r\n\r\na"]),
    "CL negative": Case([b"POST /echo HTTP/1.1\r\n" + H + b"Content-Length: -1\r\n\r\na"]),
    "CL hex": Case([b"POST /echo HTTP/1.1\r\n" + H + b"Content-Length: 0x1\r\n\r\na"]),
    "CL huge": Case(
        [b"POST /echo HTTP/1.1\r\n" + H + b"Content-Length: 99999999999999999999999\r\n\r\n"]
    ),
    "CL over limit": Case(
        [b"POST /echo HTTP/1.1\r\n" + H + b"Content-Length: 100000\r\n\r\n" + b"x" * 5000]
    ),
    "chunk size huge": Case([chunked(b"fffffffffffffffffffff\r\nx\r\n0\r\n\r\n")]),
    "chunk over limit": Case([chunked(b"10000\r\n" + b"x" * 5000)]),
    "chunks over limit": Case(
        [chunked(b"800\r\n" + b"x" * 2048 + b"\r\n") * 1 + (b"800\r\n" + b"x" * 2048 + b"\r\n") * 3]
    ),
    "chunk size negative": Case([chunked(b"-1\r\nx\r\n0\r\n\r\n")]),
    "chunk size 0x": Case([chunked(b"0x1\r\nx\r\n0\r\n\r\n")]),
    "chunk size space": Case([chunked(b"1 \r\nx\r\n0\r\n\r\n")]),
    "chunk data overrun": Case([chunked(b"1\r\nxy\r\n0\r\n\r\n")]),
    "chunk no crlf": Case([chunked(b"1\r\nx0\r\n\r\n")]),
    # invalid heads
    "garbage": Case([b"NOT HTTP AT ALL\r\n\r\n"]),
    "lowercase method": Case([b"get /echo HTTP/1.1\r\n" + H + b"\r\n"]),
    "unknown method": Case([b"FOO /echo HTTP/1.1\r\n" + H + b"\r\n"]),
    "space in method": Case([b"G ET /echo HTTP/1.1\r\n" + H + b"\r\n"]),
    "NUL in method": Case([b"GE\x00T /echo HTTP/1.1\r\n" + H + b"\r\n"]),
    "http/2.0": Case([get(version=b"HTTP/2.0")]),
    "http/1.2": Case([get(version=b"HTTP/1.2")]),
    "http/0.9": Case([b"GET /echo\r\n\r\n"]),
    "lowercase version": Case([get(version=b"http/1.1")]),
    "no version": Case([b"GET /echo \r\n" + H + b"\r\n"]),
    "no host": Case([b"GET /echo HTTP/1.1\r\n\r\n"]),
    "two hosts": Case([get(extra=b"Host: y\r\n")]),
    "space in name": Case([get(extra=b"X A: v\r\n")]),
    "no colon": Case([get(extra=b"XAv\r\n")]),
    "NUL in value": Case([get(extra=b"X-A: a\x00b\r\n")]),
    "CR in value": Case([get(extra=b"X-A: a\rb\r\n")]),
    "obs-fold": Case([get(extra=b"X-A: a\r\n b\r\n")]),
    "bare LF": Case([b"GET /echo HTTP/1.1\n" + H.replace(b"\r", b"") + b"\n"]),
    "leading CRLF": Case([b"\r\n" + get()]),
    "space before head": Case([b" " + get()]),
    "control in target": Case([get(b"/ec\x01ho")]),
    "space in target": Case([get(b"/ec ho")]),
    "huge header": Case([get(extra=b"X-Big: " + b"a" * 20000 + b"\r\n")]),
    "huge target": Case([get(b"/echo?" + b"a" * 20000)]),
    "many headers": Case([get(extra=b"".join(b"X-%d: v\r\n" % i for i in range(300)))]),
    "valid then garbage": Case([get(), post(b"ok"), b"BAD REQUEST\r\n\r\n"]),
    # half-sent
    "half head": Case([b"GET /echo HTTP/1.1\r\n" + H]),
    "half body": Case([b"POST /echo HTTP/1.1\r\n" + H + b"Content-Length: 10\r\n\r\nabc"]),
    "half chunked": Case([chunked(b"5\r\nab")]),
    "valid then half": Case([get(), b"GET /echo HTTP/1.1\r\n"]),
}


@pytest.mark.parametrize("name", list(CORPUS))
def test_corpus_request_is_judged_like_h11(
    server: RunningServer, recorder: Recorder, name: str
) -> None:
    judge(server, recorder, CORPUS[name])


def test_slowloris_head_is_cut_off_by_the_head_timeout(
    server: RunningServer, recorder: Recorder
) -> None:
    # each byte well within the timeout, the whole head not
    head = get()
    pieces: list[bytes | float] = []
    for i in range(0, 24, 2):
        pieces += [head[i : i + 2], TIMEOUT / 6]
    outcome = judge(server, recorder, Case([head[:24]], pieces))
    assert [a.status for a in outcome.answers] == [408]


def test_trickled_body_within_the_timeout_is_served(
    server: RunningServer, recorder: Recorder
) -> None:
    request = post(b"abcdef")
    head_len = len(request) - 6
    pieces: list[bytes | float] = [request[:head_len]]
    for i in range(6):
        pieces += [TIMEOUT / 3, request[head_len + i : head_len + i + 1]]
    outcome = judge(server, recorder, Case([request], pieces))
    assert [a.status for a in outcome.answers] == [200]


# -- generated streams -------------------------------------------------------------------------

METHODS = [b"GET", b"POST", b"PUT", b"HEAD", b"DELETE", b"OPTIONS", b"get", b"FOO", b"G ET", b""]
TARGETS = [b"/echo", b"/echo?a=1", b"/ech%6F", b"/stream", b"/pushed", b"/nope", b"*",
           b"http://x/echo", b"/e\x00cho", b"", b"/error"]  # fmt: skip
VERSIONS = [b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2.0", b"http/1.1", b"HTTP/1.1 "]
TE_VALUES = [b"chunked", b"Chunked", b" chunked", b"chunked, identity", b"xchunked", b"identity"]
EXTRA_HEADERS = [
    b"Content-Type: application/json", b"Connection: close", b"Connection: keep-alive",
    b"Expect: 100-continue", b"X-Pad: " + b"p" * 300, b"Bad Name: x", b"X-A: a\r\n b",
    b"X-B: \x00", b"Host: y", b"X-C:", b"Content-Length: 1", b"Transfer-Encoding: chunked",
]  # fmt: skip


@st.composite
def raw_requests(draw: st.DrawFn) -> bytes:
    method = draw(st.sampled_from(METHODS[:4]) | st.sampled_from(METHODS))
    target = draw(st.sampled_from(TARGETS[:3]) | st.sampled_from(TARGETS))
    version = draw(st.sampled_from(VERSIONS[:1]) | st.sampled_from(VERSIONS))
    body = draw(st.binary(max_size=40))
    framing = draw(st.sampled_from(["length", "chunked", "none", "bad length"]))
    headers = [b"Host: x"] if draw(st.booleans()) or draw(st.booleans()) else []
    if framing == "length":
        headers.append(b"Content-Length: %d" % len(body))
    elif framing == "bad length":
        headers.append(b"Content-Length: %d" % (len(body) + draw(st.sampled_from([-1, 1, 5]))))
    elif framing == "chunked":
        headers.append(b"Transfer-Encoding: " + draw(st.sampled_from(TE_VALUES)))
    headers += draw(st.lists(st.sampled_from(EXTRA_HEADERS), max_size=2))
    headers = draw(st.permutations(headers))
    eol = draw(st.sampled_from([b"\r\n"] * 5 + [b"\n"]))
    head = b" ".join([method, target, version]) + eol + b"".join(h + eol for h in headers) + eol
    if framing == "chunked":
        cuts = sorted(draw(st.lists(st.integers(0, len(body)), max_size=3)))
        parts = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
        encoded = b"".join(b"%x\r\n%b\r\n" % (len(p), p) for p in parts if p)
        return head + encoded + b"0\r\n\r\n"
    return head + (body if framing != "none" else b"")


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(requests=st.lists(raw_requests(), min_size=1, max_size=3))
def test_generated_request_streams_are_judged_like_h11(
    server: RunningServer, recorder: Recorder, requests: list[bytes]
) -> None:
    judge(server, recorder, Case(requests))


# -- refusals are counted ----------------------------------------------------------------------


def test_refusals_are_counted_in_http_requests_total(
    server: RunningServer, recorder: Recorder
) -> None:
    # refusals never reach a route: counted as vLLM's instrumentator counts what matches none
    def count(method: str) -> float:
        text = render_metrics(recorder.registry)[0].decode()
        line = f'http_requests_total{{handler="none",method="{method}",status="4xx"}} '
        found = [ln for ln in text.splitlines() if ln.startswith(line)]
        return float(found[0].split()[-1]) if found else 0.0

    before = count("GET"), count("POST")
    judge(server, recorder, CORPUS["huge header"])
    judge(server, recorder, CORPUS["CL over limit"])
    assert (count("GET"), count("POST")) == (before[0] + 1, before[1] + 1)
