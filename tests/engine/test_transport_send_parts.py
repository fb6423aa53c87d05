"""``send_parts`` puts the same multipart message on the wire as pyzmq's ``send_multipart``."""

from __future__ import annotations

from collections.abc import Iterator

import msgspec
import pytest
import zmq

from vllm_frontend.engine.transport import recv_ready, send_parts


@pytest.fixture
def pair() -> Iterator[tuple[zmq.Socket[bytes], zmq.Socket[bytes]]]:
    ctx = zmq.Context()
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    a.bind("inproc://send-parts")
    b.connect("inproc://send-parts")
    try:
        yield a, b
    finally:
        a.close(0)
        b.close(0)
        ctx.term()


@pytest.mark.parametrize(
    "parts",
    [
        [b"only"],
        [b"id", b"\x00", b"x" * 70_000],  # above pyzmq's copy threshold: sent zero-copy
        [b"id", bytearray(b"ab"), memoryview(b"cd"), msgspec.msgpack.encode([1, "two"])],
        [b"", b""],
    ],
)
def test_same_frames_as_send_multipart(
    pair: tuple[zmq.Socket[bytes], zmq.Socket[bytes]], parts: list[object]
) -> None:
    a, b = pair
    a.send_multipart(parts, copy=False)  # type: ignore[arg-type]
    send_parts(a, parts)
    reference = b.recv_multipart()
    ours = b.recv_multipart()
    assert ours == reference == [bytes(p) for p in parts]  # type: ignore[call-overload]
    assert recv_ready(b) is None  # nothing more: the last part ended the message
