"""Raw-socket exchanges with the server, judged by h11 (an independent HTTP/1.1 parser).

``reference_requests`` is what h11, as a server, makes of a byte stream: the requests it accepts
in order, and how the stream ends. ``exchange`` sends bytes (optionally in timed pieces) and
parses every response byte with an h11 client, failing on anything h11 cannot frame.
"""

from __future__ import annotations

import re
import socket
import time
from dataclasses import dataclass, field
from urllib.parse import unquote

import h11

HEAD_LIMIT = 8192
"""The test server's head limit (h11 reads with the same one)."""


@dataclass(frozen=True)
class Routed:
    """One request as routed: method, decoded path, query, body."""

    method: str
    path: str
    query: bytes
    body: bytes


@dataclass
class Reference:
    """What h11 accepts of a stream: complete requests, then ``ok``, ``error`` or ``partial``."""

    requests: list[Routed] = field(default_factory=list)
    end: str = "ok"
    expects_continue: list[bool] = field(default_factory=list)
    raw: list[bytes] = field(default_factory=list)


def _routed(method: bytes, target: bytes, body: bytes) -> Routed:
    # the server drops a fragment, as uvicorn's parse_url does
    path, _, query = target.partition(b"#")[0].partition(b"?")
    text = path.decode("latin-1")
    return Routed(method.decode("ascii"), unquote(text) if "%" in text else text, query, body)


def reference_requests(data: bytes) -> Reference:
    """h11's reading of ``data`` as a client's request stream (answering each with a 200).

    Two leniencies of llhttp's (thus uvicorn's and vLLM's) that h11 lacks: empty lines before a
    request line are skipped (RFC 9112 §2.2 allows it), and an HTTP/1.1 request without a Host
    header is read (h11 refuses both). So each request is read by a fresh h11 connection from
    the bytes the previous one left, less the line ends they start with, with a Host header
    added where an HTTP/1.1 head has none. ``Reference.raw`` holds each request's bytes as
    found in the stream, and then what follows the last one."""
    ref = Reference()
    rest = data
    while True:
        start = len(data) - len(rest)
        rest = rest.lstrip(b"\r\n")
        if not rest:
            ref.raw.append(data[start:])
            return ref
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=HEAD_LIMIT)
        conn.receive_data(_with_host(rest))
        end = _one_request(conn, ref)
        if end is not None:
            ref.end = end
            ref.raw.append(data[start:])
            return ref
        rest = conn.trailing_data[0]
        ref.raw.append(data[start : len(data) - len(rest)])
        if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
            return ref


_HOST_LINE = re.compile(rb"\r\nhost[ \t]*:", re.IGNORECASE)


def _with_host(data: bytes) -> bytes:
    # an HTTP/1.1 head without Host gets one (after its request line): it stays in the head,
    # so what follows the request is the same bytes
    line_end = data.find(b"\r\n")
    head_end = data.find(b"\r\n\r\n")
    if line_end < 0 or head_end < 0 or not data[:line_end].endswith(b" HTTP/1.1"):
        return data
    if _HOST_LINE.search(data, line_end, head_end + 2):
        return data
    return data[: line_end + 2] + b"Host: x\r\n" + data[line_end + 2 :]


def _one_request(conn: h11.Connection, ref: Reference) -> str | None:
    """Read one request into ``ref``; None when it is complete and the connection goes on,
    else how the stream ends (``ok``: closed; ``partial``: incomplete; ``error``)."""
    current: h11.Request | None = None
    body = b""
    try:
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                return "partial" if current is not None or conn.trailing_data[0] else "ok"
            if event is h11.PAUSED:
                conn.send(h11.Response(status_code=200, headers=[("content-length", "0")]))
                conn.send(h11.EndOfMessage())
                return None
            if isinstance(event, h11.Request):
                current, body = event, b""
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                assert current is not None
                ref.requests.append(_routed(current.method, current.target, body))
                expect = dict(current.headers).get(b"expect", b"").lower() == b"100-continue"
                ref.expects_continue.append(expect)
                current = None
            elif isinstance(event, h11.ConnectionClosed):
                return "ok"
    except h11.RemoteProtocolError:
        return "error"


@dataclass
class Answer:
    """One final response as h11 read it."""

    status: int
    headers: dict[bytes, bytes]
    body: bytes
    informational: list[int]


@dataclass
class Outcome:
    """Every response on one connection, and whether the server closed it."""

    answers: list[Answer]
    closed: bool


def exchange(
    port: int,
    pieces: list[bytes | float],
    methods: list[str],
    *,
    expected: int,
    timeout: float = 5.0,
) -> Outcome:
    """Send ``pieces`` (bytes, or a float to pause that long) and read responses with an h11
    client until the server closes, or ``expected`` responses came and nothing follows shortly.

    ``methods[i]`` is the method of the request the i-th response answers (HEAD changes framing;
    responses past the list are read as answers to GET)."""
    client = h11.Connection(h11.CLIENT)
    answers: list[Answer] = []
    closed = False
    deadline = time.monotonic() + timeout

    def start_request() -> None:
        method = methods[len(answers)] if len(answers) < len(methods) else "GET"
        client.send(h11.Request(method=method, target="/", headers=[("host", "x")]))
        client.send(h11.EndOfMessage())

    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        for piece in pieces:
            if isinstance(piece, float):
                time.sleep(piece)
            else:
                try:
                    sock.sendall(piece)
                except OSError:
                    break  # the server refused and closed while we were still sending
        start_request()
        status, headers, body, informational = 0, {}, b"", []
        while True:
            event = client.next_event()
            if event is h11.NEED_DATA:
                wait = deadline - time.monotonic()
                if len(answers) >= expected:
                    wait = min(wait, 0.05)
                if wait <= 0:
                    break
                sock.settimeout(wait)
                try:
                    data = sock.recv(65536)
                except TimeoutError:
                    if len(answers) >= expected:
                        break
                    raise AssertionError(f"no complete answer in time: got {answers}") from None
                except ConnectionResetError:
                    data = b""
                client.receive_data(data)
                if not data:
                    closed = True
                continue
            if isinstance(event, h11.InformationalResponse):
                informational.append(event.status_code)
            elif isinstance(event, h11.Response):
                status, headers = event.status_code, dict(event.headers)
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                answers.append(Answer(status, headers, body, informational))
                status, headers, body, informational = 0, {}, b"", []
                if client.our_state is h11.DONE and client.their_state is h11.DONE:
                    client.start_next_cycle()
                    start_request()
                else:  # MUST_CLOSE: nothing may follow but the close
                    rest = _read_to_close(sock, deadline)
                    assert rest == b"", f"bytes after a closing response: {rest[:200]!r}"
                    closed = True
                    break
            elif isinstance(event, h11.ConnectionClosed):
                closed = True
                break
    return Outcome(answers, closed)


def _read_to_close(sock: socket.socket, deadline: float) -> bytes:
    out = b""
    while True:
        sock.settimeout(max(deadline - time.monotonic(), 0.01))
        try:
            data = sock.recv(65536)
        except TimeoutError:
            raise AssertionError("the server did not close after Connection: close") from None
        except ConnectionResetError:
            return out
        if not data:
            return out
        out += data
