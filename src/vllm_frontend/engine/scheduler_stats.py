"""The latest scheduler stats each engine sent, and the coroutines waiting for them to change."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

from vllm_frontend.engine.errors import EngineDeadError
from vllm_frontend.engine.liveness import Liveness
from vllm_frontend.engine.protocol import SchedulerStats

__all__ = ["StatsBoard"]


class StatsBoard:
    """Per engine: the newest :class:`SchedulerStats` and when the engine made them."""

    __slots__ = ("_liveness", "_loop", "_waiters", "latest", "times")

    def __init__(self, loop: asyncio.AbstractEventLoop, liveness: Liveness) -> None:
        self.latest: dict[int, SchedulerStats] = {}
        """Engine index -> the stats of its latest outputs message that carried some."""
        self.times: dict[int, float] = {}
        """Engine index -> that message's ``timestamp`` (the engine's monotonic clock)."""
        self._waiters: list[asyncio.Future[None]] = []
        self._loop = loop
        self._liveness = liveness

    def record(self, engine_index: int, stats: SchedulerStats, timestamp: float) -> None:
        """Keep ``stats`` as the engine's newest and wake the waiters."""
        self.latest[engine_index] = stats
        self.times[engine_index] = timestamp
        if self._waiters:
            self.wake()

    def wake(self, _error: EngineDeadError | None = None) -> None:
        """Wake the waiters so they see a change of state (the engines died)."""
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    async def wait_for(
        self,
        predicate: Callable[[Mapping[int, SchedulerStats]], bool],
        timeout: float | None = None,
    ) -> Mapping[int, SchedulerStats]:
        """Wait until the latest stats satisfy ``predicate`` (checked now and on each update)."""

        async def wait() -> Mapping[int, SchedulerStats]:
            while True:
                self._liveness.raise_if_dead()
                if predicate(self.latest):
                    return dict(self.latest)
                fut: asyncio.Future[None] = self._loop.create_future()
                self._waiters.append(fut)
                await fut

        return await asyncio.wait_for(wait(), timeout)
