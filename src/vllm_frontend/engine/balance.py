"""Data-parallel engine choice (engine protocol §8.2) and the request waves (§8.5).

:class:`EngineBalancer` knows how busy each engine is: the requests this client has in flight
there, and what the engines report (the DP coordinator's published counts, else each engine's own
scheduler stats). New requests go to the least loaded engine, ties broken by a rotation that each
frontend starts at a different engine. With a coordinator it also mirrors the current wave and
whether the engines are running, and wakes them for the first request of a wave.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import msgspec
import zmq

from vllm_frontend.engine import codec
from vllm_frontend.engine.errors import ProtocolError
from vllm_frontend.engine.protocol import CoordinatorFirstRequest
from vllm_frontend.engine.scheduler_stats import StatsBoard
from vllm_frontend.engine.transport import recv_nowait, wait_readable

__all__ = ["EngineBalancer", "EngineLoad"]

logger = logging.getLogger(__name__)


class EngineLoad(msgspec.Struct, frozen=True, gc=False):
    """How busy one engine is, as far as this client knows."""

    engine_index: int
    in_flight: int
    """Requests this client sent to the engine that have not finished."""
    waiting: int
    """Engine-reported waiting requests (coordinator or scheduler stats; 0 if unknown)."""
    running: int
    """Engine-reported running requests (0 if unknown)."""
    kv_cache_usage: float
    """Engine-reported KV-cache usage in [0, 1] (0 if unknown)."""


class EngineBalancer:
    """Chooses the engine for each request and follows the coordinator's view of the engines."""

    __slots__ = (
        "_client_count",
        "_coord_counts",
        "_coordinator",
        "_engines",
        "_in_flight",
        "_rotation",
        "_stats",
        "current_wave",
        "engines_running",
    )

    def __init__(
        self,
        engines: list[int],
        in_flight: Mapping[int, int],
        stats: StatsBoard,
        coordinator: zmq.Socket[bytes] | None,
        *,
        client_index: int,
        client_count: int,
    ) -> None:
        """``in_flight`` is the live count per engine that the request table keeps."""
        self._engines = engines
        self._in_flight = in_flight
        self._stats = stats
        self._coordinator = coordinator
        self._client_count = client_count
        self._coord_counts: dict[int, list[float]] = {}
        # Frontends start their rotation at different engines so they do not all pick the same.
        self._rotation = len(engines) * client_index // client_count
        self.current_wave = 0
        """The wave stamped on new requests (mirrored from the coordinator)."""
        self.engines_running = False
        """Whether the engines are in a wave (a new request needs no wake-up)."""

    def counts(self, engine: int) -> tuple[float, float, float]:
        """The engine's reported (waiting, running, KV-cache usage); zeros if unknown."""
        coord = self._coord_counts.get(engine)
        if coord is not None:
            return coord[0], coord[1], coord[2]
        stats = self._stats.latest.get(engine)
        if stats is not None:
            return stats.num_waiting_reqs, stats.num_running_reqs, stats.kv_cache_usage
        return 0, 0, 0.0

    def choose(self) -> int:
        """The least loaded engine for a new request."""
        engines = self._engines
        n = len(engines)
        if n == 1:
            return engines[0]
        best = engines[0]
        best_score = float("inf")
        start = self._rotation
        for k in range(n):
            engine = engines[(start + k) % n]
            waiting, running, kv = self.counts(engine)
            score = max(self._client_count * self._in_flight[engine], waiting + running)
            if waiting > 0:
                score += waiting * 6 * max(0.0, kv - 0.5)
            if score < best_score:
                best, best_score = engine, score
        self._rotation = (start + 1) % n
        return best

    def sent(self, engine: int, chosen: bool) -> None:
        """Note a request sent to ``engine`` (``chosen``: by :meth:`choose`, not by rank)."""
        if chosen and engine in self._coord_counts:
            # As vLLM: count it waiting (once per frontend sharing the engine) until next publish.
            self._coord_counts[engine][0] += self._client_count
        if self._coordinator is not None and not self.engines_running:
            self.engines_running = True
            self._coordinator.send(
                codec.encode_coordinator_first_request(
                    CoordinatorFirstRequest(engine, self.current_wave)
                )
            )

    def wave_complete(self, wave: int) -> None:
        """An engine reported ``wave`` finished (only heeded without a coordinator)."""
        self.current_wave = max(self.current_wave, wave + 1)
        self.engines_running = False

    def load(self) -> list[EngineLoad]:
        """Current load of every engine, in index order."""
        out = []
        for i in self._engines:
            waiting, running, kv = self.counts(i)
            out.append(EngineLoad(i, self._in_flight[i], int(waiting), int(running), kv))
        return out

    async def follow_coordinator(self) -> None:
        """Mirror the coordinator's published counts, wave and running state (until cancelled)."""
        sock = self._coordinator
        assert sock is not None
        first = self._engines[0]
        count = len(self._engines)
        while True:
            frames = recv_nowait(sock)
            if frames is None:
                await wait_readable(sock)
                continue
            try:
                publish = codec.decode_coordinator_publish(frames[0].buffer)
            except ProtocolError as exc:
                logger.warning("ignoring undecodable coordinator message: %s", exc)
                continue
            if publish.counts is not None:
                # Counts are indexed by global engine index (§8.4).
                for i, entry in enumerate(publish.counts[first : first + count]):
                    self._coord_counts[first + i] = [float(x) for x in entry]
            self.current_wave = publish.current_wave
            self.engines_running = publish.engines_running
