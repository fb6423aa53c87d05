"""The input socket's :class:`Outbox`: a loop iteration's requests go out as one burst, and
nothing overtakes what is queued."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import zmq

from vllm_frontend.engine.outbox import BURST_WINDOW_S, Outbox
from vllm_frontend.engine.transport import recv_ready


@pytest.fixture
def pair() -> Iterator[tuple[zmq.Socket[bytes], zmq.Socket[bytes]]]:
    ctx = zmq.Context()
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    a.bind("inproc://outbox")
    b.connect("inproc://outbox")
    try:
        yield a, b
    finally:
        a.close(0)
        b.close(0)
        ctx.term()


def _received(sock: zmq.Socket[bytes]) -> list[list[bytes]]:
    out = []
    while (frames := recv_ready(sock)) is not None:
        out.append([f.bytes for f in frames])
    return out


def test_first_send_goes_at_once_the_rest_of_the_iteration_after_it(
    pair: tuple[zmq.Socket[bytes], zmq.Socket[bytes]],
) -> None:
    a, b = pair

    async def main() -> list[list[list[bytes]]]:
        outbox = Outbox(a, asyncio.get_running_loop())
        seen = []
        outbox.send([b"e", b"1"])
        outbox.send([b"e", b"2"])
        outbox.send([b"e", b"3"])
        seen.append(_received(b))  # only the first, before the loop has run again
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        seen.append(_received(b))  # the queued ones, in order
        outbox.send([b"e", b"4"])  # a new iteration: at once again
        seen.append(_received(b))
        await asyncio.sleep(0)
        return seen

    first, queued, later = asyncio.run(main())
    assert first == [[b"e", b"1"]]
    assert queued == [[b"e", b"2"], [b"e", b"3"]]
    assert later == [[b"e", b"4"]]


def test_send_now_goes_after_what_is_queued(
    pair: tuple[zmq.Socket[bytes], zmq.Socket[bytes]],
) -> None:
    a, b = pair

    async def main() -> list[list[bytes]]:
        outbox = Outbox(a, asyncio.get_running_loop())
        outbox.send([b"add", b"1"])
        outbox.send([b"add", b"2"])
        outbox.send_now([b"abort", b"2"])  # an abort must not reach the engine before its add
        received = _received(b)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert _received(b) == []  # nothing left queued to send twice
        return received

    assert asyncio.run(main()) == [[b"add", b"1"], [b"add", b"2"], [b"abort", b"2"]]


def test_a_burst_held_past_its_window_sends_the_queue_with_the_late_request(
    pair: tuple[zmq.Socket[bytes], zmq.Socket[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = pair
    clock = [100.0]
    monkeypatch.setattr("vllm_frontend.engine.outbox.time.perf_counter", lambda: clock[0])

    async def main() -> list[list[list[bytes]]]:
        outbox = Outbox(a, asyncio.get_running_loop())
        seen = []
        outbox.send([b"e", b"1"])  # opens the burst at t=100
        clock[0] += BURST_WINDOW_S / 2
        outbox.send([b"e", b"2"])  # within the window: held
        seen.append(_received(b))
        clock[0] += BURST_WINDOW_S / 2
        outbox.send([b"e", b"3"])  # the window has passed: 2 and 3 go now, in order
        seen.append(_received(b))
        clock[0] += BURST_WINDOW_S / 4
        outbox.send([b"e", b"4"])  # a new window began with that send: held again
        seen.append(_received(b))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        seen.append(_received(b))  # the end of the burst sends it
        return seen

    first, late, held, end = asyncio.run(main())
    assert first == [[b"e", b"1"]]
    assert late == [[b"e", b"2"], [b"e", b"3"]]
    assert held == []
    assert end == [[b"e", b"4"]]
