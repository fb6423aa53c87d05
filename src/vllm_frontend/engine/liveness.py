"""Whether the engines are still there, and what happens at once when they are not.

Engine death is noticed three ways (engine protocol §9.1): the ``ENGINE_CORE_DEAD`` sentinel (the
output router reports it), a closed engine connection (SIGKILL, a crashed input thread, a lost host
via ZMTP heartbeats; seen by our own ZMTP sockets or libzmq's socket monitors;
:meth:`Liveness.watch_connections`) and a caller-supplied
process watcher (:meth:`Liveness.watch_process`). The first of them makes :class:`Liveness` dead
and runs every death hook, which fail the streams, utility calls and stats waiters; like vLLM, one
dead engine makes the whole client dead.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from vllm_frontend.engine.errors import EngineDeadError
from vllm_frontend.engine.transport import EngineSockets

__all__ = ["Liveness", "ProcessWatcher"]

logger = logging.getLogger(__name__)

ProcessWatcher = Callable[[], Awaitable[str]]
"""An async function that returns (with a description) when a managed engine process exits."""


class Liveness:
    """The client's dead or closed state, and the hooks that fail everything when it dies."""

    __slots__ = ("_hooks", "closed", "dead")

    def __init__(self) -> None:
        self.dead: EngineDeadError | None = None
        """Why the engines are considered dead, or None while healthy."""
        self.closed = False
        """The client was closed (it is dead too, silently)."""
        self._hooks: list[Callable[[EngineDeadError], None]] = []

    def on_death(self, hook: Callable[[EngineDeadError], None]) -> None:
        """Call ``hook(error)`` once, when the engines die or the client closes."""
        self._hooks.append(hook)

    def raise_if_dead(self) -> None:
        """Raise EngineDeadError if the engines are dead or the client is closed."""
        if self.dead is not None:
            # A fresh instance each time: re-raising one object would grow its traceback.
            raise EngineDeadError(str(self.dead)) from None
        if self.closed:
            raise EngineDeadError("the engine client is closed")

    def die(self, error: EngineDeadError, *, closing: bool = False) -> None:
        """Mark the engines dead with ``error`` (first call only) and run the death hooks."""
        if self.dead is not None or self.closed:
            return
        self.dead = error
        if not closing:
            logger.error("engine core client is dead: %s", error)
        for hook in self._hooks:
            hook(error)

    def close(self) -> None:
        """Fail what is still running (without logging a death) and mark the client closed."""
        self.die(EngineDeadError("the engine client was closed"), closing=True)
        self.closed = True

    async def watch_connections(self, sockets: EngineSockets) -> None:
        """Die as soon as an engine connection is reported closed (until cancelled)."""
        try:
            # Keeps draining after a death too, so monitor events never pile up until close().
            while True:
                gone = sockets.disconnected_engines()
                if gone and self.dead is None:
                    index, channel = gone[0]
                    self.die(
                        EngineDeadError(
                            f"engine {index} disconnected ({channel} connection closed): "
                            "the engine process exited or its host is unreachable"
                        )
                    )
                await sockets.wait_connection_events()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.exception("engine liveness monitor failed")
            self.die(EngineDeadError(f"engine liveness monitor failed: {exc!r}"))

    async def watch_process(self, watcher: ProcessWatcher) -> None:
        """Die when ``watcher`` returns (a managed engine process exited) or fails."""
        try:
            reason = await watcher()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a broken watcher must not hide a dead engine silently
            reason = f"the process watcher failed: {exc!r}"
        self.die(EngineDeadError(f"engine process exited: {reason}"))
