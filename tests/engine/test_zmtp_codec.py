"""The sans-IO ZMTP codec against libzmq's bytes: what a pyzmq DEALER/PUSH writes on a raw
socket parses into the messages it sent, however the bytes are split, and what we write is
accepted by a pyzmq peer."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vllm_frontend.engine import zmtp

_SIZES = [0, 1, 254, 255, 256, 257, 65535, 65536, 70_000, 3 * 1024 * 1024]


def _read_exactly(conn: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        chunk = conn.recv(min(n, 1 << 20))
        assert chunk, "peer closed"
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _wire_size(parts: list[bytes]) -> int:
    # 23/ZMTP: a 1-byte size for bodies up to 255 bytes, else 8 bytes; one flags byte each.
    return sum((2 if len(p) <= 255 else 9) + len(p) for p in parts)


class _Peer:
    """A pyzmq socket connected to a raw listening socket that plays our side."""

    def __init__(self, kind: int, our_type: bytes, identity: bytes | None = None) -> None:
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen()
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(kind)
        self.sock.linger = 0
        if identity is not None:
            self.sock.setsockopt(zmq.IDENTITY, identity)
        self.sock.connect(f"tcp://127.0.0.1:{self.server.getsockname()[1]}")
        self.conn, _ = self.server.accept()
        self.conn.settimeout(10)
        self.conn.sendall(zmtp.greeting(as_server=True) + zmtp.ready(our_type))
        # libzmq sends its greeting, then its READY; read up to the READY's end.
        head = _read_exactly(self.conn, zmtp.GREETING_SIZE + 2)
        self.opening = head + _read_exactly(self.conn, head[-1])

    def exchange(self, parts: list[bytes]) -> bytes:
        """Send ``parts`` from the pyzmq socket; the bytes that reach the raw socket."""
        self.sock.send_multipart(parts)
        return _read_exactly(self.conn, _wire_size(parts))

    def close(self) -> None:
        self.conn.close()
        self.server.close()
        self.sock.close(0)
        self.ctx.term()


@pytest.fixture(scope="module")
def dealer() -> Iterator[_Peer]:
    peer = _Peer(zmq.DEALER, b"ROUTER", identity=b"\x00\x00")
    yield peer
    peer.close()


@pytest.fixture(scope="module")
def push() -> Iterator[_Peer]:
    peer = _Peer(zmq.PUSH, b"PULL")
    yield peer
    peer.close()


def _feed(session: zmtp.Session, data: bytes, cuts: list[int]) -> list[list[bytes]]:
    out: list[list[bytes]] = []
    prev = 0
    for cut in [*sorted(set(cuts)), len(data)]:
        for msg in session.receive(data[prev:cut]):
            out.append([bytes(f) for f in msg])
        prev = cut
    return out


def test_libzmq_dealer_handshake_gives_its_type_and_identity(dealer: _Peer) -> None:
    session = zmtp.Session(b"ROUTER")
    assert session.receive(dealer.opening) == []
    assert session.ready
    assert session.peer_socket_type == b"DEALER"
    assert session.peer_identity == b"\x00\x00"


def test_libzmq_push_handshake_has_no_identity(push: _Peer) -> None:
    session = zmtp.Session(b"PULL")
    session.receive(push.opening)
    assert session.ready
    assert session.peer_socket_type == b"PUSH"
    assert session.peer_identity == b""


@pytest.mark.parametrize("size", _SIZES)
def test_frames_at_every_size_class(push: _Peer, size: int) -> None:
    parts = [b"a", bytes(range(256)) * (size // 256) + b"z" * (size % 256), b""]
    data = push.exchange(parts)
    session = zmtp.Session(b"PULL")
    assert _feed(session, push.opening + data, []) == [parts]


def test_byte_at_a_time(dealer: _Peer) -> None:
    messages = [[b"x" * n, b"", b"y"] for n in (0, 1, 255, 256, 300)]
    data = b"".join(dealer.exchange(m) for m in messages)
    stream = dealer.opening + data
    session = zmtp.Session(b"ROUTER")
    assert _feed(session, stream, list(range(1, len(stream)))) == messages


def test_many_messages_in_one_read(push: _Peer) -> None:
    messages = [[str(i).encode() * (i % 7)] for i in range(500)]
    data = b"".join(push.exchange(m) for m in messages)
    session = zmtp.Session(b"PULL")
    assert _feed(session, push.opening + data, []) == messages


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    sizes=st.lists(
        st.lists(
            st.sampled_from([0, 1, 2, 254, 255, 256, 1000, 65535, 65536, 100_000]),
            min_size=1,
            max_size=4,
        ),
        min_size=1,
        max_size=4,
    ),
    data=st.data(),
)
def test_any_sizes_any_splits(push: _Peer, sizes: list[list[int]], data: st.DataObject) -> None:
    messages = [[bytes([i % 251]) * n for i, n in enumerate(msg)] for msg in sizes]
    wire = push.opening + b"".join(push.exchange(m) for m in messages)
    cuts = data.draw(st.lists(st.integers(0, len(wire)), max_size=12))
    assert _feed(zmtp.Session(b"PULL"), wire, cuts) == messages


def test_ping_is_answered_with_pong_carrying_its_context() -> None:
    session = zmtp.Session(b"PULL")
    session.receive(zmtp.greeting(as_server=False) + zmtp.ready(b"PUSH"))
    assert session.receive(zmtp.ping(30, b"ctx")) == []
    assert session.outgoing == [zmtp.command(b"PONG", b"ctx")]


_G = zmtp.greeting(as_server=False)
_R = zmtp.ready(b"PUSH")
# (what is sent first, what is sent once libzmq has answered): libzmq 4.3.5 drops a peer whose
# greeting, READY and a message all arrive before it has sent its own greeting.
_MALFORMED = {
    "bad signature": (b"GET / HTTP/1.1\r\n" + b"\0" * 64, b""),
    "PLAIN mechanism": (
        b"\xff" + b"\0" * 8 + b"\x7f\x03\x01" + b"PLAIN".ljust(20, b"\0") + b"\0" * 32,
        b"",
    ),
    "SUB peer": (_G + zmtp.ready(b"SUB"), b"\x00\x01a"),
    "message before READY": (_G, b"\x00\x01a" + _R),
    "PING before READY": (_G, zmtp.ping() + _R + b"\x00\x01a"),
    "ERROR before READY": (_G, zmtp.command(b"ERROR", b"\x03bad")),
    "READY without Socket-Type": (_G + zmtp.command(b"READY"), b"\x00\x01a"),
    "a command between a message's frames": (
        _G + _R,
        b"\x01\x01a" + zmtp.ping(0, b"c") + b"\x00\x01b",
    ),
    "a second READY": (_G + _R, _R + b"\x00\x01a"),
    "ERROR after READY": (_G + _R, zmtp.command(b"ERROR", b"\x03bad") + b"\x00\x01a"),
    "unknown command": (_G + _R, zmtp.command(b"HELLO", b"xx") + b"\x00\x01a"),
    "PING without its TTL": (_G + _R, zmtp.command(b"PING", b"\x00") + b"\x00\x01a"),
    "PING with 20 bytes of context": (_G + _R, zmtp.ping(0, b"c" * 20) + b"\x00\x01a"),
    "reserved flag bits": (_G + _R, b"\x09\x03abc\xf8\x03def"),
}


def _libzmq_reading(first: bytes, rest: bytes) -> tuple[list[list[bytes]], bytes, bool]:
    """What a libzmq PULL delivers from ``first`` then ``rest``, what it writes back after its
    greeting and READY, and whether it closed the connection."""
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    try:
        port = pull.bind_to_random_port("tcp://127.0.0.1")
        raw = socket.create_connection(("127.0.0.1", port))
        raw.settimeout(0.3)
        raw.sendall(first)
        time.sleep(0.1)
        with contextlib.suppress(OSError):  # it may have closed already
            raw.sendall(rest)
        got = []
        while pull.poll(300):
            got.append(pull.recv_multipart())
        back, closed = b"", False
        try:
            while chunk := raw.recv(65536):
                back += chunk
            closed = True
        except (TimeoutError, ConnectionResetError) as exc:
            closed = isinstance(exc, ConnectionResetError)
        raw.close()
    finally:
        pull.close(0)
        ctx.term()
    opening = zmtp.GREETING_SIZE + 2 + back[zmtp.GREETING_SIZE + 1] if len(back) > 65 else 0
    return got, back[opening:], closed


@pytest.mark.parametrize("case", list(_MALFORMED))
def test_odd_peers_are_read_or_dropped_as_libzmq_does(case: str) -> None:
    first, rest = _MALFORMED[case]
    stream = first + rest
    got, replies, closed = _libzmq_reading(first, rest)
    session = zmtp.Session(b"PULL")
    try:
        ours = [[bytes(f) for f in m] for m in session.receive(stream)]
    except zmtp.ZmtpError:
        assert closed and not got
        return
    assert not closed
    assert ours == got
    if case == "PING without its TTL":
        # libzmq's PONG then carries 16 bytes of its own stale buffer; ours carries none.
        assert replies.startswith(b"\x04\x15\x04PONG")
        assert session.outgoing == [zmtp.command(b"PONG")]
    else:
        assert b"".join(session.outgoing) == replies


def _raw_to(
    sock: zmq.Socket[bytes], our_type: bytes, identity: bytes | None = None
) -> socket.socket:
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    raw = socket.create_connection(("127.0.0.1", port))
    raw.settimeout(10)
    raw.sendall(zmtp.greeting(as_server=False) + zmtp.ready(our_type, identity))
    head = _read_exactly(raw, zmtp.GREETING_SIZE + 2)
    _read_exactly(raw, head[-1])
    return raw


@pytest.mark.parametrize("size", _SIZES)
def test_pyzmq_pull_accepts_our_frames(size: int) -> None:
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    try:
        raw = _raw_to(pull, b"PUSH")
        parts: list[Any] = [b"h", memoryview(b"q" * size), b""]
        raw.sendall(b"".join(bytes(p) for p in zmtp.message(parts)))
        assert pull.poll(10_000)
        assert pull.recv_multipart() == [b"h", b"q" * size, b""]
        raw.close()
    finally:
        pull.close(0)
        ctx.term()


def test_pyzmq_router_sees_our_identity_and_answers_our_ping() -> None:
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    try:
        raw = _raw_to(router, b"DEALER", b"\x01\x00")
        raw.sendall(zmtp.ping(0, b"hello") + b"".join(zmtp.message([b"reg"])))
        assert router.poll(10_000)
        assert router.recv_multipart() == [b"\x01\x00", b"reg"]
        pong = zmtp.command(b"PONG", b"hello")
        assert _read_exactly(raw, len(pong)) == pong
        raw.close()
    finally:
        router.close(0)
        ctx.term()


@settings(max_examples=300, deadline=None)
@given(
    prefix=st.sampled_from(
        [b"", zmtp.greeting(as_server=False), zmtp.greeting(as_server=False) + zmtp.ready(b"PUSH")]
    ),
    junk=st.lists(st.binary(max_size=40), max_size=8),
)
def test_arbitrary_bytes_only_ever_raise_zmtp_error(prefix: bytes, junk: list[bytes]) -> None:
    # A peer that breaks the protocol must be dropped, never crash the reader with another error.
    session = zmtp.Session(b"PULL")
    try:
        session.receive(prefix)
        for chunk in junk:
            for msg in session.receive(chunk):
                assert all(isinstance(f, memoryview) for f in msg)
    except zmtp.ZmtpError:
        pass


_frame = st.tuples(
    st.integers(0, 255),
    st.one_of(
        st.binary(max_size=30),
        st.binary(max_size=30).map(lambda b: b"\x05READY" + b),
        st.binary(max_size=30).map(lambda b: b"\x04PING" + b),
        st.binary(max_size=30).map(lambda b: b"\x05ERROR" + b),
    ),
).map(lambda fb: bytes([fb[0]]) + (_u64(len(fb[1])) if fb[0] & 2 else bytes([len(fb[1])])) + fb[1])


def _u64(n: int) -> bytes:
    return n.to_bytes(8, "big")


@settings(max_examples=300, deadline=None)
@given(
    ready_first=st.booleans(),
    frames=st.lists(_frame, max_size=8),
    cut=st.integers(0, 400),
)
def test_malformed_frames_and_commands_only_ever_raise_zmtp_error(
    ready_first: bool, frames: list[bytes], cut: int
) -> None:
    session = zmtp.Session(b"PULL")
    stream = zmtp.greeting(as_server=False)
    if ready_first:
        stream += zmtp.ready(b"PUSH")
    stream += b"".join(frames)
    try:
        session.receive(stream[:cut])
        session.receive(stream[cut:])
    except zmtp.ZmtpError:
        pass
