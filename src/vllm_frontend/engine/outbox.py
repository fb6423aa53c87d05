"""Sends on the engines' input socket, the requests of one loop iteration as one burst.

Each ZMQ send that finds libzmq's I/O thread asleep wakes it (an eventfd write from our thread,
a wake-up and a TCP ``sendmsg`` on its side, and a wake-up of the engine's input thread). When
many short requests arrive together, each reached the socket ~100-200 µs after the previous one,
after the I/O thread had already gone back to sleep: one wake-up chain per request. The
:class:`Outbox` sends the first message of a loop iteration at once (a lone request waits for
nothing) and queues the rest of that iteration's requests, which go out back to back from one
loop callback right after it: one wake-up for the burst, and the engine reads them together.

Every other message (aborts, utility calls) first sends what is queued, so the order the engines
see is the order of the calls.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import zmq

from vllm_frontend.engine.transport import send_parts

__all__ = ["Outbox"]

logger = logging.getLogger(__name__)


class Outbox:
    """The input socket's sender: :meth:`send` batches a loop iteration's requests,
    :meth:`send_now` keeps the order for everything else."""

    __slots__ = ("_burst", "_loop", "_queued", "_sock")

    def __init__(self, sock: zmq.Socket[bytes], loop: asyncio.AbstractEventLoop) -> None:
        self._sock = sock
        self._loop = loop
        self._queued: list[Sequence[Any]] = []
        self._burst = False  # a message went out in this loop iteration: queue the next ones

    def send(self, parts: Sequence[Any]) -> None:
        """Send ``parts`` (buffers) now if nothing went out since the loop last ran its
        callbacks, else right after the callbacks already scheduled (with the others queued)."""
        if self._burst:
            self._queued.append(parts)
            return
        send_parts(self._sock, parts)
        self._burst = True
        self._loop.call_soon(self._end_burst)

    def send_now(self, parts: Sequence[Any]) -> None:
        """Send ``parts`` now, after whatever is queued."""
        if self._queued:
            self.flush()
        send_parts(self._sock, parts)

    def flush(self) -> None:
        """Send what is queued."""
        queued, self._queued = self._queued, []
        sock = self._sock
        for parts in queued:
            send_parts(sock, parts)

    def _end_burst(self) -> None:
        self._burst = False
        if not self._queued:
            return
        try:
            self.flush()
        except zmq.ZMQError as exc:  # the socket was closed under us (shutdown)
            logger.debug("queued engine requests not sent: %s", exc)
