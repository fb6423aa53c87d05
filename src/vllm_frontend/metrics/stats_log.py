"""The periodic stats log line per engine that vLLM's ``LoggingStatLogger`` writes every
``VLLM_LOG_STATS_INTERVAL`` seconds (vllm/v1/metrics/loggers.py), unless ``--disable-log-stats``:

    Engine 000: Avg prompt throughput: 12.3 tokens/s, Avg generation throughput: 45.6 tokens/s,
    Running: 2 reqs, Waiting: 0 reqs, CPU KV cache usage: 1.2%, Prefix cache hit rate: 50.0%

Throughputs come from the counters the ``vllm:*`` series already keep (prompt tokens computed
by the engine, generation tokens: nothing is added to the per-token path); queue
lengths and KV-cache usage from the engine's latest scheduler stats; hit rates over the most
recent 1000 requests, as vLLM's ``CachingMetrics``. An idle engine's line goes to DEBUG.
Not written: speculative-decoding, KV-connector, CUDA-graph, MFU and multimodal-cache lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from vllm_frontend.metrics.frontend import FrontendMetrics

__all__ = ["CachingWindow", "StatsLog", "log_stats_interval"]

logger = logging.getLogger(__name__)

_KV_FETCH_STAGES = ("waiting_to_start", "in_progress", "completed_waiting")


def log_stats_interval() -> float:
    """``VLLM_LOG_STATS_INTERVAL`` as vLLM reads it (seconds; not positive means 10)."""
    value = float(os.environ.get("VLLM_LOG_STATS_INTERVAL", "10."))
    return value if value > 0.0 else 10.0


def kv_cache_device() -> str:
    """The device the line names: the engines' (``VLLM_TARGET_DEVICE``; vLLM says GPU for
    CUDA)."""
    device = os.environ.get("VLLM_TARGET_DEVICE", "cuda").strip().lower()
    return "GPU" if device in ("", "cuda") else device.upper()


class CachingWindow:
    """A cache hit rate over the most recent requests (vLLM's ``CachingMetrics``)."""

    __slots__ = ("hits", "max_requests", "queries", "recent", "requests")

    def __init__(self, max_requests: int = 1000) -> None:
        self.max_requests = max_requests
        self.recent: deque[tuple[int, int, int]] = deque()
        self.requests = self.queries = self.hits = 0

    def observe(self, requests: int, queries: int, hits: int, reset: bool = False) -> None:
        """Add one step's counts (``reset``: the cache was reset before them)."""
        if reset:
            self.recent.clear()
            self.requests = self.queries = self.hits = 0
        if requests == 0:
            return
        self.recent.append((requests, queries, hits))
        self.requests += requests
        self.queries += queries
        self.hits += hits
        while len(self.recent) > 1 and self.requests > self.max_requests:
            old_requests, old_queries, old_hits = self.recent.popleft()
            self.requests -= old_requests
            self.queries -= old_queries
            self.hits -= old_hits

    @property
    def empty(self) -> bool:
        """No request observed (since the last reset)."""
        return self.requests == 0

    @property
    def hit_rate(self) -> float:
        """Hits per queried token."""
        return 0.0 if self.queries == 0 else self.hits / self.queries


class _Engine:
    __slots__ = (
        "connector",
        "generation",
        "last_generation_rate",
        "last_prompt_rate",
        "prefix",
        "prompt",
    )

    def __init__(self) -> None:
        self.prefix = CachingWindow()
        self.connector = CachingWindow()
        self.prompt = self.generation = 0.0
        self.last_prompt_rate = self.last_generation_rate = 0.0


class StatsLog:
    """Writes each engine's stats line every interval (see the module docstring)."""

    def __init__(
        self,
        metrics: FrontendMetrics,
        scheduler_stats: Callable[[], Mapping[int, Any]],
        engine_indexes: Sequence[int],
        *,
        device: str | None = None,
    ) -> None:
        self._metrics = metrics
        self._scheduler_stats = scheduler_stats
        self._engines = {i: _Engine() for i in engine_indexes}
        self._device = device if device is not None else kv_cache_device()
        self._last = time.monotonic()
        self._task: asyncio.Task[None] | None = None
        for index, engine in self._engines.items():
            engine.prompt, engine.generation = self._counts(index)

    def observe_prefix(
        self, engine: int, stats: Any, connector: Any | None
    ) -> None:  # fmt: skip
        """Account one step's prefix-cache stats (and the KV connector's) of ``engine``."""
        state = self._engines.get(engine)
        if state is None:
            return
        state.prefix.observe(stats.requests, stats.queries, stats.hits, stats.reset)
        if connector is not None:
            state.connector.observe(
                connector.requests, connector.queries, connector.hits, connector.reset
            )

    def _counts(self, engine: int) -> tuple[float, float]:
        metrics = self._metrics
        key = (metrics.model_name, str(engine))
        return (
            metrics.step_series(engine).local_compute.value,
            metrics.generation_tokens.child(key).value,
        )

    def log(self, now: float | None = None) -> None:
        """Write every engine's line for the interval since the last one."""
        now = time.monotonic() if now is None else now
        elapsed = now - self._last
        self._last = now
        latest = self._scheduler_stats()
        for index, state in self._engines.items():
            prompt, generation = self._counts(index)
            prompt_rate = (prompt - state.prompt) / elapsed if elapsed > 0 else 0.0
            generation_rate = (generation - state.generation) / elapsed if elapsed > 0 else 0.0
            state.prompt, state.generation = prompt, generation
            idle = not (
                prompt_rate or generation_rate or state.last_prompt_rate
                or state.last_generation_rate
            )  # fmt: skip
            state.last_prompt_rate, state.last_generation_rate = prompt_rate, generation_rate
            self._write(index, state, latest.get(index), prompt_rate, generation_rate, idle)

    def _write(
        self,
        index: int,
        state: _Engine,
        stats: Any,
        prompt_rate: float,
        generation_rate: float,
        idle: bool,
    ) -> None:
        parts = [
            "Avg prompt throughput: %.1f tokens/s",
            "Avg generation throughput: %.1f tokens/s",
            "Running: %d reqs",
            "Waiting: %d reqs",
        ]
        running = getattr(stats, "num_running_reqs", 0)
        skipped = getattr(stats, "num_skipped_waiting_reqs", 0)
        waiting = getattr(stats, "num_waiting_reqs", 0) + skipped
        args: list[Any] = [prompt_rate, generation_rate, running, waiting]
        if skipped > 0:
            parts.append("Deferred: %d reqs")
            args.append(skipped)
        kv_fetch = getattr(stats, "num_kv_fetch_reqs_by_stage", None) or {}
        if any(kv_fetch.values()):
            parts.append("KV fetch: %d waiting to start, %d in progress, %d completed waiting")
            args.extend(kv_fetch.get(stage, 0) for stage in _KV_FETCH_STAGES)
        # vLLM's line has a "Preemptions: %d" part, but it reads the interval's count after
        # resetting it, so it never appears: nor here.
        parts.append("%s KV cache usage: %.1f%%")
        args.extend([self._device, getattr(stats, "kv_cache_usage", 0.0) * 100])
        if not state.prefix.empty:
            parts.append("Prefix cache hit rate: %.1f%%")
            args.append(state.prefix.hit_rate * 100)
        if not state.connector.empty:
            parts.append("External prefix cache hit rate: %.1f%%")
            args.append(state.connector.hit_rate * 100)
        log = logger.debug if idle else logger.info
        log(f"Engine {index:03d}: " + ", ".join(parts), *args)

    def start(self, interval: float | None = None) -> None:
        """Log every ``interval`` seconds (default ``VLLM_LOG_STATS_INTERVAL``) on this loop."""
        if self._task is None:
            period = log_stats_interval() if interval is None else interval
            self._task = asyncio.get_running_loop().create_task(self._run(period))

    async def _run(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                self.log()
            except Exception:  # a log line is never worth the server
                logger.debug("stats log failed", exc_info=True)

    async def stop(self) -> None:
        """Stop logging."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
