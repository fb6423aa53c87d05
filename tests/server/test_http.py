"""The HTTP transport: keep-alive, pipelining, chunked SSE framing, limits, disconnects, sockets."""

from __future__ import annotations

import asyncio
import email.utils
import json
import os
import socket
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from vllm_frontend.server.app import App, ServerSettings
from vllm_frontend.server.errors import refusal_response
from vllm_frontend.server.transport import (
    HttpLimits,
    PushedStreamingResponse,
    Request,
    Response,
    StreamingResponse,
    StreamSink,
    bind_unix,
    json_response,
    socket_from_fd,
    state,
)

from .support import HTTP, RunningServer, raw_exchange

EVENTS = [f'data: {{"i": {i}, "text": "é{i}"}}\n\n'.encode() for i in range(50)]


class Probe:
    """Thread-safe signals from handlers running on the server loop."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.cancelled = threading.Event()
        self.release: asyncio.Event | None = None
        self.pauses = 0


BIG_CHUNK = bytes(range(256)) * 256  # 64 KiB
BIG_CHUNKS = 512  # 32 MiB: more than loopback socket buffers hold


def make_app(probe: Probe) -> App:
    app = App(ServerSettings())

    async def echo(request: Request) -> Response:
        return json_response(
            {
                "method": request.method,
                "path": request.path,
                "query": request.query.decode(),
                "body": request.body.decode(),
                "ctype": request.header(b"content-type"),
            }
        )

    async def sse(request: Request) -> StreamingResponse:
        async def gen() -> AsyncIterator[bytes]:
            for i, ev in enumerate(EVENTS):
                if i % 7 == 0:
                    await asyncio.sleep(0)  # some events in their own loop iteration
                yield ev
            yield b"data: [DONE]\n\n"

        return StreamingResponse(gen())

    async def hang_stream(request: Request) -> StreamingResponse:
        async def gen() -> AsyncIterator[bytes]:
            try:
                yield b"data: first\n\n"
                probe.started.set()
                await asyncio.Event().wait()
                yield b"never"
            except asyncio.CancelledError:
                probe.cancelled.set()
                raise
            finally:
                probe.cancelled.set()

        return StreamingResponse(gen())

    async def hang(request: Request) -> Response:
        probe.started.set()
        try:
            await asyncio.Event().wait()
        finally:
            probe.cancelled.set()
        return Response()

    async def boom(request: Request) -> Response:
        raise RuntimeError("kaboom at /home/user/secret.py")

    app.route("POST", "/echo", echo)
    app.route("GET", "/echo", echo)
    app.route("GET", "/sse", sse)
    app.route("GET", "/hang_stream", hang_stream)
    app.route("POST", "/hang", hang)

    async def idle_stream(request: Request) -> StreamingResponse:
        probe.release = asyncio.Event()
        release = probe.release

        async def gen() -> AsyncIterator[bytes]:
            yield b"data: 1\n\n"
            await release.wait()
            yield b"data: 2\n\n"

        return StreamingResponse(gen(), keep_alive_interval=0.05)

    async def late_stream(request: Request) -> PushedStreamingResponse:
        # The first chunk waits for the test (as a first token waits for the engine).
        probe.release = asyncio.Event()
        release = probe.release

        async def produce(sink: StreamSink) -> None:
            await release.wait()
            sink.send(b"data: 1\n\n")

        return PushedStreamingResponse(produce)

    async def broken_stream(request: Request) -> StreamingResponse:
        async def gen() -> AsyncIterator[bytes]:
            yield b"data: 1\n\n"
            raise RuntimeError("engine exploded")

        return StreamingResponse(gen())

    async def pushed(request: Request) -> PushedStreamingResponse:
        # Events sent from loop callbacks, as engine notifications do; several per iteration.
        async def produce(sink: StreamSink) -> None:
            loop = asyncio.get_running_loop()
            done = loop.create_future()
            pending = iter(EVENTS)

            def step() -> None:
                for _ in range(3):
                    event = next(pending, None)
                    if event is None:
                        done.set_result(None)
                        return
                    sink.send(event)
                loop.call_soon(step)

            loop.call_soon(step)
            await done
            sink.send(b"data: [DONE]\n\n")

        return PushedStreamingResponse(produce)

    async def pushed_big(request: Request) -> PushedStreamingResponse:
        # Produces only while the client keeps up, like the generation routes.
        async def produce(sink: StreamSink) -> None:
            loop = asyncio.get_running_loop()
            done = loop.create_future()
            sent = 0

            def pump() -> None:
                nonlocal sent
                while sent < BIG_CHUNKS:
                    if sink.paused:
                        probe.pauses += 1
                        sink.on_resume(pump)
                        return
                    sink.send(BIG_CHUNK)
                    sent += 1
                    if sent % 8 == 0:
                        loop.call_soon(pump)  # let the loop flush and notice a full socket
                        return
                done.set_result(None)

            pump()
            await done

        return PushedStreamingResponse(produce)

    async def pushed_hang(request: Request) -> PushedStreamingResponse:
        async def produce(sink: StreamSink) -> None:
            sink.send(b"data: first\n\n")
            probe.started.set()
            try:
                await asyncio.Event().wait()
            finally:
                probe.cancelled.set()

        return PushedStreamingResponse(produce)

    app.route("GET", "/pushed", pushed)
    app.route("GET", "/pushed_big", pushed_big)
    app.route("GET", "/pushed_hang", pushed_hang)
    app.route("GET", "/boom", boom)
    app.route("GET", "/broken_stream", broken_stream)
    app.route("GET", "/idle_stream", idle_stream)
    app.route("GET", "/late_stream", late_stream)
    return app


@pytest.fixture
def probe() -> Probe:
    return Probe()


@pytest.fixture
def server(probe: Probe) -> Iterator[RunningServer]:
    srv = RunningServer(
        make_app(probe), limits=HttpLimits(max_body_size=4096), refusal=refusal_response
    )
    yield srv
    srv.stop()


def test_json_request_and_response_round_trip(server: RunningServer) -> None:
    r = HTTP.post(server.url + "/echo?x=1&y=%20", json={"a": "ü"})
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    assert r.json() == {
        "method": "POST",
        "path": "/echo",
        "query": "x=1&y=%20",
        "body": '{"a":"ü"}',
        "ctype": "application/json",
    }


def test_the_date_header_follows_the_clock_on_a_kept_connection(server: RunningServer) -> None:
    # (the header's presence and shape beside vLLM's: tests/mock/test_clients_match_vllm.py)
    with httpx.Client(base_url=server.url) as client:
        for _ in range(2):
            before = int(time.time())
            r = client.get("/echo")
            after = time.time()
            date = email.utils.parsedate_to_datetime(r.headers["date"]).timestamp()
            # (made on the loop's tick just after each second: up to a tick late, as uvicorn's)
            assert before - 1 <= date <= after and r.headers["server"] == "uvicorn"
            time.sleep(2.05)  # a date that stood still would now be over a second behind


def test_many_requests_reuse_one_keep_alive_connection(server: RunningServer) -> None:
    with httpx.Client(base_url=server.url) as client:
        for i in range(20):
            assert client.post("/echo", content=str(i)).json()["body"] == str(i)
        assert server.server.open_connections == 1


def test_pipelined_requests_are_answered_in_order(server: RunningServer) -> None:
    reqs = b"".join(
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%b" % (len(b), b)
        for b in (b"one", b"two", b"three")
    )
    out = raw_exchange(server.port, reqs, until=b'"three"')
    assert out.count(b"HTTP/1.1 200 OK") == 3
    assert out.index(b'"one"') < out.index(b'"two"') < out.index(b'"three"')


def test_sse_stream_delivers_every_event_in_order(server: RunningServer) -> None:
    with httpx.stream("GET", server.url + "/sse") as r:
        assert r.headers["content-type"] == "text/event-stream; charset=utf-8"
        assert r.headers["transfer-encoding"] == "chunked"
        body = b"".join(r.iter_bytes())
    assert body == b"".join(EVENTS) + b"data: [DONE]\n\n"


@pytest.mark.parametrize("path", ["/sse", "/pushed"])  # iterated and pushed bodies
def test_sse_stream_uses_valid_chunked_framing(server: RunningServer, path: str) -> None:
    request = b"GET %b HTTP/1.1\r\nHost: x\r\n\r\n" % path.encode()
    raw = raw_exchange(server.port, request, until=b"\r\n0\r\n\r\n")
    head, _, rest = raw.partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head.lower()
    assert b"content-type: text/event-stream" in head.lower()
    # decode the chunked body by hand
    decoded = b""
    while True:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            assert rest == b"\r\n"
            break
        decoded += rest[:size]
        assert rest[size : size + 2] == b"\r\n"
        rest = rest[size + 2 :]
    assert decoded == b"".join(EVENTS) + b"data: [DONE]\n\n"


@pytest.mark.parametrize("path", ["/hang_stream", "/pushed_hang"])  # iterated and pushed bodies
def test_client_disconnect_during_stream_cancels_the_handler(
    server: RunningServer, probe: Probe, path: str
) -> None:
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.sendall(b"GET %b HTTP/1.1\r\nHost: x\r\n\r\n" % path.encode())
        assert probe.started.wait(10)
        got = b""
        while b"data: first" not in got:
            got += s.recv(4096)
    assert probe.cancelled.wait(10)
    # the server is still healthy
    assert HTTP.get(server.url + "/echo").status_code == 200


def test_client_disconnect_before_a_response_cancels_the_handler(
    server: RunningServer, probe: Probe
) -> None:
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.sendall(b"POST /hang HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
        assert probe.started.wait(10)
    assert probe.cancelled.wait(10)


def test_oversized_body_gets_413_in_vllm_error_shape(server: RunningServer) -> None:
    r = HTTP.post(server.url + "/echo", content=b"x" * 5000)
    assert r.status_code == 413
    assert r.json() == {
        "error": {
            "message": "Request body too large.",
            "type": "Request Entity Too Large",
            "param": None,
            "code": 413,
        }
    }


def test_oversized_chunked_body_gets_413(server: RunningServer) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(10):
            yield b"y" * 1000

    r = HTTP.post(server.url + "/echo", content=chunks())
    assert r.status_code == 413


def test_garbage_request_line_gets_400_and_close(server: RunningServer) -> None:
    out = raw_exchange(server.port, b"NOT HTTP AT ALL\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 400 ")
    assert b"connection: close" in out.lower()


def test_unhandled_handler_error_is_a_500_without_paths(server: RunningServer) -> None:
    r = HTTP.get(server.url + "/boom")
    assert r.status_code == 500
    err = r.json()["error"]
    assert err["type"] == "InternalServerError" and err["code"] == 500
    assert "/home" not in err["message"] and "kaboom" in err["message"]


def test_idle_keep_alive_connection_is_closed_after_the_timeout(probe: Probe) -> None:
    srv = RunningServer(make_app(probe), limits=HttpLimits(keep_alive_timeout=0.2))
    try:
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
            s.sendall(b"GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")
            data = b""
            while True:  # the server closes the idle connection: recv returns b""
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
        assert data.startswith(b"HTTP/1.1 200 OK")
        assert b"connection: close" not in data.lower()
    finally:
        srv.stop()


def test_keep_alive_timeout_runs_from_the_last_response(probe: Probe) -> None:
    # A connection used again before its timeout stays open for a whole timeout after the last
    # response (the timer armed by the first response must not close it), then closes.
    srv = RunningServer(make_app(probe), limits=HttpLimits(keep_alive_timeout=1.0))
    try:
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
            for _ in range(3):  # 1.5 s in all: past the first response's deadline
                s.sendall(b"GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")
                assert s.recv(4096).startswith(b"HTTP/1.1 200 OK")
                time.sleep(0.5)
            t0 = time.monotonic()
            assert s.recv(4096) == b""  # closed by the server, once idle for its timeout
            waited = time.monotonic() - t0
        assert 0.2 < waited < 1.0
    finally:
        srv.stop()


def test_http_1_0_request_without_keep_alive_is_closed(server: RunningServer) -> None:
    out = raw_exchange(server.port, b"GET /echo HTTP/1.0\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 200 OK")
    assert b"connection: close" in out.lower()


def test_expect_100_continue_is_honoured(server: RunningServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(
            b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n"
        )
        assert s.recv(4096).startswith(b"HTTP/1.1 100 Continue")
        s.sendall(b"hi")
        out = b""
        while b'"hi"' not in out:
            out += s.recv(4096)
    assert b"HTTP/1.1 200 OK" in out


def test_serves_a_unix_socket(probe: Probe) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "api.sock")
        srv = RunningServer(make_app(probe), sockets=[bind_unix(path)])
        try:
            transport = httpx.HTTPTransport(uds=path)
            with httpx.Client(transport=transport) as client:
                r = client.get("http://localhost/echo")
            assert r.status_code == 200 and r.json()["path"] == "/echo"
        finally:
            srv.stop()


def test_serves_an_inherited_bound_socket_and_listens_on_it(probe: Probe) -> None:
    # what `vllm serve` hands over: a bound, not yet listening socket, by fd number
    parent = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    parent.bind(("127.0.0.1", 0))
    port = parent.getsockname()[1]
    fd = os.dup(parent.fileno())
    parent.close()
    sock = socket_from_fd(fd)
    srv = RunningServer(make_app(probe), sockets=[sock])
    try:
        assert HTTP.get(f"http://127.0.0.1:{port}/echo").json()["method"] == "GET"
    finally:
        srv.stop()


def test_shutdown_stops_accepting_and_cancels_streams_in_flight(probe: Probe) -> None:
    srv = RunningServer(make_app(probe))
    s = socket.create_connection(("127.0.0.1", srv.port))
    try:
        s.sendall(b"GET /hang_stream HTTP/1.1\r\nHost: x\r\n\r\n")
        assert probe.started.wait(10)
        srv.stop(timeout=0.0)
        assert probe.cancelled.wait(10)
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", srv.port), timeout=2).close()
    finally:
        s.close()


def test_shutdown_settles_what_is_left_then_lets_its_responses_out(probe: Probe) -> None:
    # (the runner's settle fails the engine requests left: tests/cmd/test_serve_shutdown.py)
    srv = RunningServer(make_app(probe))
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        s.sendall(b"GET /idle_stream HTTP/1.1\r\nHost: x\r\n\r\n")
        out = s.recv(4096)
        while b"data: 1" not in out:
            out += s.recv(4096)
        release = probe.release
        assert release is not None
        srv.call(srv.server.shutdown(0.0, settle=release.set))
        while chunk := s.recv(4096):  # until the server closes the connection
            out += chunk
    assert out.endswith(b"data: 2\n\n\r\n0\r\n\r\n")


def test_concurrent_streams_are_independent(server: RunningServer) -> None:
    async def one(client: httpx.AsyncClient) -> bytes:
        async with client.stream("GET", "/sse") as r:
            return b"".join([c async for c in r.aiter_bytes()])

    async def main() -> list[bytes]:
        async with httpx.AsyncClient(base_url=server.url) as client:
            return await asyncio.gather(*(one(client) for _ in range(16)))

    results = asyncio.run(main())
    expected = b"".join(EVENTS) + b"data: [DONE]\n\n"
    assert all(r == expected for r in results)
    assert json.loads(EVENTS[1][6:]) == {"i": 1, "text": "é1"}


def test_idle_stream_gets_sse_keep_alive_comments(server: RunningServer, probe: Probe) -> None:
    with HTTP.stream("GET", server.url + "/idle_stream") as r:
        received = b""
        chunks = r.iter_bytes()
        while received.count(b": keep-alive\n\n") < 2:
            received += next(chunks)
        assert probe.release is not None
        server.loop.call_soon_threadsafe(probe.release.set)
        received += b"".join(chunks)
    events = [e for e in received.split(b"\n\n") if e]
    assert events[0] == b"data: 1" and events[-1] == b"data: 2"
    assert set(events[1:-1]) == {b": keep-alive"}


def _late_stream_first_read(
    server: RunningServer, probe: Probe, wait: float
) -> tuple[bytes, bytes]:
    # What one recv() gets within ``wait`` seconds of the request (b"" if nothing), then the
    # rest of the response once the first chunk is released.
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(b"GET /late_stream HTTP/1.1\r\nHost: x\r\n\r\n")
        s.settimeout(wait)
        try:
            first = s.recv(65536)
        except TimeoutError:
            first = b""
        s.settimeout(10)
        assert probe.release is not None
        server.loop.call_soon_threadsafe(probe.release.set)
        rest = b""
        while not (first + rest).endswith(b"0\r\n\r\n"):
            rest += s.recv(65536)
    return first, rest


def test_a_streamed_head_leaves_with_the_first_chunk(
    server: RunningServer, probe: Probe, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(state, "HEAD_HOLD", 30.0)
    first, rest = _late_stream_first_read(server, probe, 0.3)
    assert first == b""  # the head waits for the body
    assert rest.startswith(b"HTTP/1.1 200 OK\r\n")
    _, _, body = rest.partition(b"\r\n\r\n")
    assert body == b"9\r\ndata: 1\n\n\r\n0\r\n\r\n"


def test_a_streamed_head_goes_out_alone_when_the_body_is_late(
    server: RunningServer, probe: Probe, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(state, "HEAD_HOLD", 0.02)
    first, rest = _late_stream_first_read(server, probe, 5.0)
    assert first.startswith(b"HTTP/1.1 200 OK\r\n") and first.endswith(b"\r\n\r\n")
    assert rest == b"9\r\ndata: 1\n\n\r\n0\r\n\r\n"


def test_a_held_head_is_not_released_by_an_earlier_streams_tick(
    server: RunningServer, probe: Probe, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two streams on one keep-alive connection: the first one's entry, released at the second
    # tick, must not release the second one's head, held for less than one period by then.
    hold = 0.6
    monkeypatch.setattr(state, "HEAD_HOLD", hold)
    request = b"GET /late_stream HTTP/1.1\r\nHost: x\r\n\r\n"
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        started = time.monotonic()
        s.sendall(request)  # held from here; the first tick comes at `hold`
        while probe.release is None:
            time.sleep(0.01)
        server.loop.call_soon_threadsafe(probe.release.set)
        first = b""
        while not first.endswith(b"0\r\n\r\n"):
            first += s.recv(65536)
        assert first.startswith(b"HTTP/1.1 200 OK\r\n")
        probe.release = None
        time.sleep(max(0.0, started + hold + 0.1 - time.monotonic()))
        s.sendall(request)  # after the first tick: its own release is due at the third
        s.settimeout(hold * 1.25)  # past the second tick (at 2 * hold), before the third
        try:
            early = s.recv(65536)
        except TimeoutError:
            early = b""
        assert early == b""
        s.settimeout(10)
        while probe.release is None:
            time.sleep(0.01)
        server.loop.call_soon_threadsafe(probe.release.set)
        second = b""
        while not second.endswith(b"0\r\n\r\n"):
            second += s.recv(65536)
    assert second.startswith(b"HTTP/1.1 200 OK\r\n")


def test_too_many_headers_get_431_and_close(server: RunningServer) -> None:
    headers = b"".join(b"X-H%d: v\r\n" % i for i in range(300))
    out = raw_exchange(server.port, b"GET /echo HTTP/1.1\r\nHost: x\r\n" + headers + b"\r\n")
    assert out.startswith(b"HTTP/1.1 431 ")
    assert HTTP.get(server.url + "/echo").status_code == 200


def test_a_stream_that_fails_midway_is_cut_off_and_the_server_stays_up(
    server: RunningServer,
) -> None:
    out = raw_exchange(server.port, b"GET /broken_stream HTTP/1.1\r\nHost: x\r\n\r\n")
    assert b"data: 1" in out
    assert not out.endswith(b"0\r\n\r\n")  # no terminating chunk: the client sees truncation
    assert HTTP.get(server.url + "/echo").status_code == 200


def test_an_h2c_upgrade_request_is_answered_over_http_1_1(server: RunningServer) -> None:
    out = raw_exchange(
        server.port,
        b"GET /echo HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\n"
        b"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n",
        until=b'"path":"/echo"',
    )
    assert out.startswith(b"HTTP/1.1 200 OK")


def test_pushed_stream_waits_for_a_slow_client_and_loses_nothing(
    server: RunningServer, probe: Probe
) -> None:
    with httpx.stream("GET", server.url + "/pushed_big", timeout=60) as r:
        threading.Event().wait(0.5)  # not reading: the socket fills and the producer must pause
        body = b"".join(r.iter_bytes())
    assert probe.pauses > 0
    assert len(body) == len(BIG_CHUNK) * BIG_CHUNKS
    assert body == BIG_CHUNK * BIG_CHUNKS
