"""Sends on the engines' input socket, the requests of one loop iteration as one burst.

Each ZMQ send that finds libzmq's I/O thread asleep wakes it (an eventfd write from our thread,
a wake-up and a TCP ``sendmsg`` on its side, and a wake-up of the engine's input thread). When
many short requests arrive together, each reached the socket ~100-200 µs after the previous one,
after the I/O thread had already gone back to sleep: one wake-up chain per request. The
:class:`Outbox` sends the first message of a loop iteration at once (a lone request waits for
nothing) and queues the rest of that iteration's requests, which go out back to back from one
loop callback right after it: one wake-up for the burst, and the engine reads them together.

A burst is also cut short once it has been open for :data:`BURST_WINDOW_S`: what is queued goes
out with the message that finds the window passed. A loop iteration that handles many requests
(c32 short requests: 30+ of ~130 µs each) would otherwise hold its first requests back for the
whole iteration, and they would miss engine steps that began meanwhile (non-streamed short
completions, c32, 1 ms mock steps: requests/s 0.89-0.92 of vllm-rs without the window, 0.96-0.98
with 150-300 µs, at ~5% more CPU per request; BENCHMARKS.md).

With our own ZMTP input socket (the default, ``engine/zmtp_sockets.py``) there is no I/O thread
to wake, but each send is a ``writev`` on the event loop's thread and a wake-up of the engine's
input thread; a burst goes out as one ``writev`` per engine. Measured against sending each
request at once (non-streamed short requests, c32, 1 ms steps, 5 interleaved rounds): 0.92-0.94
of the CPU per request and 1.00-1.11 of the requests/s, so the burst stays.

Every other message (aborts, utility calls) first sends what is queued, so the order the engines
see is the order of the calls.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import zmq

from vllm_frontend.engine.transport import InputSocket, send_parts
from vllm_frontend.engine.zmtp_sockets import ZmtpRouter

__all__ = ["BURST_WINDOW_S", "Outbox"]

logger = logging.getLogger(__name__)

BURST_WINDOW_S = 200e-6
"""How long a burst may hold requests back: a request queued later than this after the burst
began sends the queue (itself included) at once."""


class Outbox:
    """The input socket's sender: :meth:`send` batches a loop iteration's requests,
    :meth:`send_now` keeps the order for everything else."""

    __slots__ = ("_burst", "_loop", "_opened", "_queued", "_send", "_send_many")

    def __init__(self, sock: InputSocket, loop: asyncio.AbstractEventLoop) -> None:
        self._send: Callable[[Sequence[Any]], None]
        self._send_many: Callable[[Sequence[Sequence[Any]]], None]
        if isinstance(sock, ZmtpRouter):
            self._send, self._send_many = sock.send_parts, sock.send_many
        else:
            self._send = partial(send_parts, sock)
            self._send_many = partial(_send_each, sock)
        self._loop = loop
        self._queued: list[Sequence[Any]] = []
        self._burst = False  # a message went out in this loop iteration: queue the next ones
        self._opened = 0.0  # perf_counter() when the burst last sent

    def send(self, parts: Sequence[Any]) -> None:
        """Send ``parts`` (buffers) now if nothing went out since the loop last ran its
        callbacks, else right after the callbacks already scheduled (with the others queued),
        or now with the queue once the burst has held requests for :data:`BURST_WINDOW_S`."""
        if self._burst:
            self._queued.append(parts)
            now = time.perf_counter()
            if now - self._opened >= BURST_WINDOW_S:
                self._opened = now
                self.flush()
            return
        self._send(parts)
        self._burst = True
        self._opened = time.perf_counter()
        self._loop.call_soon(self._end_burst)

    def send_now(self, parts: Sequence[Any]) -> None:
        """Send ``parts`` now, after whatever is queued."""
        if self._queued:
            self.flush()
        self._send(parts)

    def flush(self) -> None:
        """Send what is queued."""
        queued, self._queued = self._queued, []
        self._send_many(queued)

    def _end_burst(self) -> None:
        self._burst = False
        if not self._queued:
            return
        try:
            self.flush()
        except zmq.ZMQError as exc:  # the socket was closed under us (shutdown)
            logger.debug("queued engine requests not sent: %s", exc)


def _send_each(sock: zmq.Socket[bytes], messages: Sequence[Sequence[Any]]) -> None:
    for parts in messages:
        send_parts(sock, parts)
