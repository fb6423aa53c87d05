"""Our asyncio ROUTER and PULL against libzmq peers (pyzmq DEALER with an identity, PUSH) over
ipc, tcp and tcp6: messages arrive whole and in order, replies reach the right peer, and a peer
that breaks the protocol, goes silent or disconnects mid-message is dropped while the others are
still served."""

from __future__ import annotations

import asyncio
import os
import socket
import tempfile
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import zmq

from vllm_frontend.engine import zmtp, zmtp_sockets
from vllm_frontend.engine.zmtp_sockets import ConnectionEvents, ZmtpPull, ZmtpRouter, ZmtpSocket


def _has_ipv6() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


_TRANSPORTS = [
    "ipc",
    "tcp",
    pytest.param("tcp6", marks=pytest.mark.skipif(not _has_ipv6(), reason="no IPv6 loopback")),
]


Runner = Callable[[Coroutine[Any, Any, None]], None]


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Runner:
    """Each test under asyncio's loop and uvloop's (the server's)."""
    if request.param == "uvloop":
        import uvloop

        return uvloop.run
    return asyncio.run


@pytest.fixture
def ctx() -> Iterator[zmq.Context[zmq.Socket[bytes]]]:
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    yield context
    context.destroy(linger=0)


@pytest.fixture(params=_TRANSPORTS)
def endpoint(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "ipc":
        with tempfile.TemporaryDirectory() as tmp:
            yield f"ipc://{tmp}/sock"
    elif request.param == "tcp":
        yield "tcp://127.0.0.1:*"
    else:
        yield "tcp://[::1]:*"


def _peer(
    ctx: zmq.Context[zmq.Socket[bytes]], kind: int, endpoint: str, **options: Any
) -> zmq.Socket[bytes]:
    sock = ctx.socket(kind)
    sock.linger = 0
    for name, value in options.items():
        sock.setsockopt(getattr(zmq, name), value)
    if endpoint.startswith("tcp://["):
        sock.setsockopt(zmq.IPV6, 1)
    sock.connect(endpoint)
    return sock


@asynccontextmanager
async def _serving(sock: ZmtpSocket, endpoint: str) -> AsyncIterator[str]:
    sock.bind(endpoint)
    await sock.start()
    try:
        yield sock.last_endpoint
    finally:
        sock.close()


async def _until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.005)


async def _recv(sock: ZmtpPull | ZmtpRouter, n: int) -> list[list[bytes]]:
    out: list[list[bytes]] = []
    while len(out) < n:
        await asyncio.wait_for(sock.wait_readable(), 10)
        while (frames := sock.recv_nowait()) is not None:
            out.append([bytes(f) for f in frames])
    return out


async def _zrecv(sock: zmq.Socket[bytes]) -> list[bytes]:
    for _ in range(2000):
        try:
            return sock.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            await asyncio.sleep(0.005)
    raise AssertionError("timed out")


_MESSAGES = [
    [b"one"],
    [b"", b"", b""],
    [b"a" * 255, b"b" * 256],
    [os.urandom(5 * 1024 * 1024), b"tail"],
    [bytes(range(256)) * 3],
]


def test_pull_gets_every_push_message_whole_and_in_order(
    run: Runner, ctx: zmq.Context[zmq.Socket[bytes]], endpoint: str
) -> None:
    async def main() -> None:
        pull = ZmtpPull("output")
        async with _serving(pull, endpoint) as bound:
            push = _peer(ctx, zmq.PUSH, bound)
            for parts in _MESSAGES:
                push.send_multipart(parts)
            assert await _recv(pull, len(_MESSAGES)) == _MESSAGES

    run(main())


def test_pull_takes_messages_from_several_pushes_each_in_its_order(
    run: Runner, ctx: zmq.Context[zmq.Socket[bytes]], endpoint: str
) -> None:
    async def main() -> None:
        pull = ZmtpPull("output")
        async with _serving(pull, endpoint) as bound:
            pushes = [_peer(ctx, zmq.PUSH, bound) for _ in range(3)]
            for i in range(200):
                for k, push in enumerate(pushes):
                    push.send_multipart([b"%d" % k, b"%d" % i])
            got = await _recv(pull, 600)
            for k in range(3):
                assert [int(m[1]) for m in got if m[0] == b"%d" % k] == list(range(200))

    run(main())


def test_router_routes_by_identity_and_prefixes_what_it_receives(
    run: Runner, ctx: zmq.Context[zmq.Socket[bytes]], endpoint: str
) -> None:
    async def main() -> None:
        router = ZmtpRouter("input")
        async with _serving(router, endpoint) as bound:
            dealers = {i: _peer(ctx, zmq.DEALER, bound, IDENTITY=i) for i in (b"\0\0", b"\1\0")}
            for identity, dealer in dealers.items():
                dealer.send_multipart([b"hello", identity])
            got = await _recv(router, 2)
            assert sorted(got) == sorted([[i, b"hello", i] for i in dealers])
            for parts in _MESSAGES:
                router.send_parts([b"\1\0", *parts])
            router.send_parts([b"\7\7", b"nobody"])  # dropped, as libzmq's ROUTER does
            router.send_many([[b"\0\0", b"x"], [b"\1\0", b"y"], [b"\0\0", memoryview(b"z")]])
            assert [await _zrecv(dealers[b"\1\0"]) for _ in _MESSAGES] == _MESSAGES
            assert await _zrecv(dealers[b"\1\0"]) == [b"y"]
            assert [await _zrecv(dealers[b"\0\0"]) for _ in range(2)] == [[b"x"], [b"z"]]

    run(main())


def test_router_sends_tensor_buffers_as_they_are(
    run: Runner, ctx: zmq.Context[zmq.Socket[bytes]]
) -> None:
    # Multimodal requests carry numpy buffers as parts; they go out without a copy (uvloop keeps
    # a view of what it cannot write at once) and arrive byte for byte.
    np = pytest.importorskip("numpy")
    pixels = np.arange(3 * 448 * 448, dtype=np.float32).reshape(3, 448, 448)

    async def main() -> None:
        router = ZmtpRouter("input")
        async with _serving(router, "tcp://127.0.0.1:*") as bound:
            dealer = _peer(ctx, zmq.DEALER, bound, IDENTITY=b"e")
            dealer.send(b"hi")
            await _recv(router, 1)
            router.send_parts([b"e", b"\x00", pixels, memoryview(pixels).cast("B")[:10]])
            got = await _zrecv(dealer)
            assert got == [b"\x00", pixels.tobytes(), pixels.tobytes()[:10]]

    run(main())


def _duplicate_identity_story(
    send: Callable[[list[bytes]], None],
    received: Callable[[], list[list[bytes]]],
    settle: Callable[[], None],
    ctx: zmq.Context[zmq.Socket[bytes]],
    bound: str,
) -> list[object]:
    """What a ROUTER does with a second connection claiming an identity already held."""
    seen: list[object] = []

    def got(sock: zmq.Socket[bytes]) -> list[bytes] | None:
        return sock.recv_multipart() if sock.poll(300) else None

    first = _peer(ctx, zmq.DEALER, bound, IDENTITY=b"e0")
    first.send(b"first")
    settle()
    seen.append(received())
    second = _peer(ctx, zmq.DEALER, bound, IDENTITY=b"e0")
    second.send(b"second")
    settle()
    seen.append(received())
    send([b"e0", b"to e0"])
    seen += [got(first), got(second)]
    first.close(0)
    settle()
    second.send(b"second again")
    settle()
    seen.append(received())
    send([b"e0", b"to e0 again"])
    seen.append(got(second))
    second.close(0)
    return seen


def test_a_duplicate_identity_is_ignored_as_libzmq_ignores_it(
    ctx: zmq.Context[zmq.Socket[bytes]],
) -> None:
    libzmq = ctx.socket(zmq.ROUTER)
    libzmq.linger = 0
    port = libzmq.bind_to_random_port("tcp://127.0.0.1")

    def drain() -> list[list[bytes]]:
        out = []
        while libzmq.poll(200):
            out.append(libzmq.recv_multipart())
        return out

    expected = _duplicate_identity_story(
        libzmq.send_multipart, drain, lambda: None, ctx, f"tcp://127.0.0.1:{port}"
    )
    libzmq.close(0)

    async def main() -> list[object]:
        router = ZmtpRouter("input")
        async with _serving(router, "tcp://127.0.0.1:*") as bound:
            loop = asyncio.get_running_loop()

            def ours_drain() -> list[list[bytes]]:
                out = []
                while (frames := router.recv_nowait()) is not None:
                    out.append([bytes(f) for f in frames])
                return out

            # The story blocks (pyzmq polls), so it runs in a thread; the router's own calls
            # go back to the loop, each after a pause that lets the step's I/O happen.
            def call(fn: Callable[[], Any]) -> Any:
                async def wrapped() -> Any:
                    await asyncio.sleep(0.2)
                    return fn()

                return asyncio.run_coroutine_threadsafe(wrapped(), loop).result()

            return await loop.run_in_executor(
                None,
                lambda: _duplicate_identity_story(
                    lambda parts: call(lambda: router.send_parts(parts)),
                    lambda: call(ours_drain),
                    lambda: call(lambda: None),
                    ctx,
                    bound,
                ),
            )

    seen: list[object] = []

    async def outer() -> None:
        seen.extend(await main())

    asyncio.run(outer())
    assert expected == [
        [[b"e0", b"first"]],
        [],
        [b"to e0"],
        None,
        [],
        None,
    ]  # libzmq 4.3.5, without ROUTER_HANDOVER
    assert seen == expected


def _raw_connect(bound: str) -> socket.socket:
    if bound.startswith("ipc://"):
        raw = socket.socket(socket.AF_UNIX)
        raw.connect(bound[len("ipc://") :])
    else:
        host, _, port = bound[len("tcp://") :].rpartition(":")
        raw = socket.create_connection((host.strip("[]"), int(port)))
    raw.settimeout(10)
    return raw


def test_garbage_and_a_half_sent_message_drop_that_peer_only(
    run: Runner, ctx: zmq.Context[zmq.Socket[bytes]], endpoint: str
) -> None:
    async def main() -> None:
        pull = ZmtpPull("output")
        events = ConnectionEvents(pull, "output")
        async with _serving(pull, endpoint) as bound:
            push = _peer(ctx, zmq.PUSH, bound)
            push.send(b"before")
            assert await _recv(pull, 1) == [[b"before"]]
            garbage = _raw_connect(bound)
            garbage.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + b"\0" * 64)
            await _until(lambda: events.unmapped_closed == 1)
            assert garbage.recv(4096)[:1] == b"\xff"  # our greeting, then EOF
            half = _raw_connect(bound)
            half.sendall(zmtp.greeting(as_server=False) + zmtp.ready(b"PUSH") + b"\x01\x03ab")
            await asyncio.sleep(0.05)
            half.close()
            await _until(lambda: events.unmapped_closed == 2)
            push.send_multipart([b"after", b"!"])
            assert await _recv(pull, 1) == [[b"after", b"!"]]
            garbage.close()

    run(main())


def test_a_closed_connection_reports_its_engine(
    run: Runner, ctx: zmq.Context[zmq.Socket[bytes]]
) -> None:
    async def main() -> None:
        pull = ZmtpPull("output")
        events = ConnectionEvents(pull, "output")
        async with _serving(pull, "tcp://127.0.0.1:*") as bound:
            push = _peer(ctx, zmq.PUSH, bound)
            push.send(b"engine 3")
            await _recv(pull, 1)
            events.note(None, 3)
            assert events.is_mapped(3) and events.poll() == []
            push.close(0)
            await asyncio.wait_for(events.wait(), 10)
            assert events.poll() == [3]

    run(main())


def test_a_libzmq_peer_pinging_us_gets_pongs_and_stays(
    run: Runner,
    ctx: zmq.Context[zmq.Socket[bytes]],
) -> None:
    async def main() -> None:
        pull = ZmtpPull("output", heartbeat_interval_s=0, heartbeat_timeout_s=0)
        events = ConnectionEvents(pull, "output")
        async with _serving(pull, "tcp://127.0.0.1:*") as bound:
            # Without PONGs libzmq would drop the connection after 150 ms of silence from us;
            # its PINGs ask for a 1 s TTL, which each next PING renews.
            push = _peer(
                ctx, zmq.PUSH, bound, HEARTBEAT_IVL=30, HEARTBEAT_TIMEOUT=150, HEARTBEAT_TTL=1000
            )
            push.send(b"a")
            await _recv(pull, 1)
            await asyncio.sleep(1.0)
            push.send(b"b")
            assert await _recv(pull, 1) == [[b"b"]]
            assert events.unmapped_closed == 0

    run(main())


def test_we_ping_libzmq_and_drop_a_silent_peer(
    run: Runner, ctx: zmq.Context[zmq.Socket[bytes]]
) -> None:
    async def main() -> None:
        router = ZmtpRouter("input", heartbeat_interval_s=0.05, heartbeat_timeout_s=0.3)
        events = ConnectionEvents(router, "input")
        async with _serving(router, "tcp://127.0.0.1:*") as bound:
            dealer = _peer(ctx, zmq.DEALER, bound, IDENTITY=b"e")  # libzmq answers our PINGs
            dealer.send(b"hi")
            await _recv(router, 1)
            silent = _raw_connect(bound)
            silent.sendall(zmtp.greeting(as_server=False) + zmtp.ready(b"DEALER", b"s"))
            loop = asyncio.get_running_loop()
            start = loop.time()
            await _until(lambda: events.unmapped_closed == 1, timeout=5)
            assert 0.25 <= loop.time() - start < 2.0
            received = b""
            while chunk := await loop.run_in_executor(None, silent.recv, 65536):
                received += chunk
            assert zmtp.ping() in received
            await asyncio.sleep(0.5)
            assert events.unmapped_closed == 1  # the libzmq peer answered and stays
            router.send_parts([b"e", b"still here"])
            assert await _zrecv(dealer) == [b"still here"]
            silent.close()

    run(main())


def test_a_peer_silent_past_its_pings_ttl_is_dropped(run: Runner) -> None:
    async def main() -> None:
        pull = ZmtpPull("output", heartbeat_interval_s=0)  # our own heartbeats off
        events = ConnectionEvents(pull, "output")
        async with _serving(pull, "tcp://127.0.0.1:*") as bound:
            raw = _raw_connect(bound)
            raw.sendall(zmtp.greeting(as_server=False) + zmtp.ready(b"PUSH"))
            await asyncio.sleep(0.1)
            loop = asyncio.get_running_loop()
            start = loop.time()
            raw.sendall(zmtp.ping(3, b"c"))  # TTL 0.3 s
            await _until(lambda: events.unmapped_closed == 1, timeout=5)
            assert 0.25 <= loop.time() - start < 2.0
            raw.close()

    run(main())


def test_a_peer_that_never_completes_the_handshake_is_dropped(
    run: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    # libzmq's ZMQ_HANDSHAKE_IVL (30 s by default) bounds a handshake; shortened here.
    monkeypatch.setattr(zmtp_sockets, "_HANDSHAKE_S", 0.2)

    async def main() -> None:
        pull = ZmtpPull("output", heartbeat_interval_s=0.05, heartbeat_timeout_s=10)
        events = ConnectionEvents(pull, "output")
        async with _serving(pull, "tcp://127.0.0.1:*") as bound:
            raw = _raw_connect(bound)
            raw.sendall(zmtp.greeting(as_server=False))  # and no READY
            loop = asyncio.get_running_loop()
            start = loop.time()
            await _until(lambda: events.unmapped_closed == 1, timeout=5)
            assert 0.15 <= loop.time() - start < 2.0
            raw.close()

    run(main())


def test_adopted_listener_serves_like_a_bound_one(
    run: Runner, ctx: zmq.Context[zmq.Socket[bytes]]
) -> None:
    async def main() -> None:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        pull = ZmtpPull("output")
        pull.adopt(listener.detach())
        await pull.start()
        try:
            push = _peer(ctx, zmq.PUSH, pull.last_endpoint)
            push.send(b"x")
            assert await _recv(pull, 1) == [[b"x"]]
        finally:
            pull.close()

    run(main())
