"""What the connections of one server share: the app, the limits and refusal hooks, the set of
open connections, and the batch of output flushed once per loop iteration."""

from __future__ import annotations

import logging
from typing import Protocol

from .limits import HttpLimits, RefusalRecorder, RefusalRenderer
from .messages import App

logger = logging.getLogger(__name__)


class Flushable(Protocol):
    """A connection with framed output waiting."""

    def _flush(self) -> None: ...


class SharedState:
    """Owned by the server, read by each of its connections."""

    __slots__ = (
        "app",
        "closing",
        "connections",
        "dirty",
        "flush_pending",
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
        self.dirty: list[Flushable] = []
        """Connections with output waiting, flushed together once per loop iteration."""
        self.flush_pending = False

    def flush_dirty(self) -> None:
        """Flush every connection that queued output (scheduled by the first of them)."""
        self.flush_pending = False
        dirty, self.dirty = self.dirty, []
        for conn in dirty:
            try:
                conn._flush()
            except Exception:  # one broken connection must not hold back the others' output
                logger.exception("Error while writing to a connection")
