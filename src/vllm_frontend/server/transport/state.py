"""What the connections of one server share: the app, the limits and refusal hooks, the set of
open connections, the header lines every response starts with (``date`` kept current), the
batch of output flushed once per loop iteration, and the streamed responses' heads held for
their first chunk."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Protocol

from .framing import default_lines
from .limits import HttpLimits, RefusalRecorder, RefusalRenderer
from .messages import App

logger = logging.getLogger(__name__)


HEAD_HOLD = 0.025
"""Seconds per generation of held response heads: a streamed response's head waits at least
this long, and at most twice this, for its body's first chunk before it goes out alone."""


class Flushable(Protocol):
    """A connection with framed output waiting."""

    def _flush(self) -> None: ...

    def _release_head(self, head: bytes) -> None: ...


class SharedState:
    """Owned by the server, read by each of its connections."""

    __slots__ = (
        "_clock",
        "app",
        "closing",
        "connections",
        "default_lines",
        "dirty",
        "flush_pending",
        "held",
        "held_before",
        "limits",
        "on_refusal",
        "refusal",
    )

    def __init__(
        self,
        app: App,
        limits: HttpLimits,
        refusal: RefusalRenderer,
        on_refusal: RefusalRecorder | None,
    ) -> None:
        self.app = app
        self.limits = limits
        self.refusal = refusal
        self.on_refusal = on_refusal
        self.closing = False
        """Shutting down: connections close once idle."""
        self.connections: set[object] = set()
        """The open connections."""
        self.default_lines = default_lines(time.time())
        """The ``date`` and ``server`` lines of every response head, made again each second
        while the clock runs (as uvicorn's server makes them on its tick)."""
        self._clock: asyncio.TimerHandle | None = None
        self.dirty: list[Flushable] = []
        """Connections with output waiting, flushed together once per loop iteration."""
        self.flush_pending = False
        self.held: list[tuple[Flushable, bytes]] = []
        """Connections that held a streamed response's head since the last release tick."""
        self.held_before: list[tuple[Flushable, bytes]] = []
        """Those held before it: released (if still held) at the next tick."""

    def start_clock(self) -> None:
        """Keep ``default_lines``' date current: remade just after each whole second."""
        if self._clock is None:
            self._tick()

    def stop_clock(self) -> None:
        """Stop remaking ``default_lines``."""
        if self._clock is not None:
            self._clock.cancel()
            self._clock = None

    def _tick(self) -> None:
        now = time.time()
        self.default_lines = default_lines(now)
        loop = asyncio.get_running_loop()
        self._clock = loop.call_later(1.0 - now % 1.0, self._tick)

    def flush_dirty(self) -> None:
        """Flush every connection that queued output (scheduled by the first of them)."""
        self.flush_pending = False
        dirty, self.dirty = self.dirty, []
        for conn in dirty:
            try:
                conn._flush()
            except Exception:  # one broken connection must not hold back the others' output
                logger.exception("Error while writing to a connection")

    def hold(self, conn: Flushable, head: bytes) -> None:
        """Let ``head``, queued on ``conn``, wait for its body's first chunk (which flushes
        it), for one to two ``HEAD_HOLD`` periods at most: then it goes out alone."""
        held = self.held
        if not held and not self.held_before:
            asyncio.get_running_loop().call_later(HEAD_HOLD, self._release_held)
        held.append((conn, head))

    def _release_held(self) -> None:
        # Two generations: a head held during the last period is released at the next tick.
        released, self.held_before, self.held = self.held_before, self.held, []
        for conn, head in released:
            conn._release_head(head)
        if self.held_before:
            asyncio.get_running_loop().call_later(HEAD_HOLD, self._release_held)
