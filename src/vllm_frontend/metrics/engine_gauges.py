"""vLLM's scheduler gauges, read at scrape time from the latest stats each engine sent.

vLLM exports them from ``vllm/v1/metrics/loggers.py`` (``PrometheusStatLogger``) with the
``SchedulerStats`` of each engine; the stats objects are read here by attribute only, so any
object with ``num_running_reqs``, ``num_waiting_reqs``, ``num_skipped_waiting_reqs`` and
``kv_cache_usage`` serves.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from vllm_frontend.metrics.exposition import Collector, MetricFamily

__all__ = ["EngineGauges"]


class EngineGauges(Collector):
    """The scheduler gauges vLLM exports (``vllm:num_requests_running``, ``…_waiting``,
    ``…_waiting_by_reason``, ``vllm:engine_sleep_state``, ``vllm:kv_cache_usage_perc``), read at
    scrape time from the latest stats each engine sent."""

    def __init__(
        self,
        model_name: str,
        engine_indexes: Sequence[int],
        latest_stats: Callable[[], Mapping[int, Any]],
    ) -> None:
        self._model_name = model_name
        self._engines = list(engine_indexes)
        self._latest = latest_stats

    def collect(self) -> Iterator[MetricFamily]:
        """One sample per engine (and reason, state) in vLLM's order; 0 until an engine has
        reported."""
        stats = self._latest()
        running = MetricFamily(
            "vllm:num_requests_running", "gauge", "Number of requests in model execution batches."
        )
        waiting = MetricFamily(
            "vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed."
        )
        by_reason = MetricFamily(
            "vllm:num_requests_waiting_by_reason",
            "gauge",
            "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for "
            "scheduling capacity; 'deferred' = deferred by transient constraints (LoRA budget, "
            "KV transfer, blocked status). Sum of all reasons equals vllm:num_requests_waiting.",
        )
        sleep_state = MetricFamily(
            "vllm:engine_sleep_state",
            "gauge",
            "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is "
            "awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep "
            "level 2.",
        )
        kv = MetricFamily(
            "vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage."
        )
        labels = ("model_name", "engine")
        by_reason_labels = (*labels, "reason")
        sleep_labels = (*labels, "sleep_state")
        capacity: list[float] = []
        deferred: list[float] = []
        for engine in self._engines:
            s = stats.get(engine)
            values = (self._model_name, str(engine))
            num_waiting = float(getattr(s, "num_waiting_reqs", 0) or 0)
            num_deferred = float(getattr(s, "num_skipped_waiting_reqs", 0) or 0)
            capacity.append(num_waiting)
            deferred.append(num_deferred)
            running.add(running.name, labels, values,
                        float(getattr(s, "num_running_reqs", 0) or 0))  # fmt: skip
            # vLLM's total counts the deferred (skipped) waiting requests too.
            waiting.add(waiting.name, labels, values, num_waiting + num_deferred)
            kv.add(kv.name, labels, values, float(getattr(s, "kv_cache_usage", 0.0) or 0.0))
        for reason, counts in (("capacity", capacity), ("deferred", deferred)):
            for engine, count in zip(self._engines, counts, strict=True):
                by_reason.add(by_reason.name, by_reason_labels,
                              (self._model_name, str(engine), reason), count)  # fmt: skip
        # This frontend never puts its engines to sleep (vLLM does from its dev-mode /sleep
        # route): they stay at vLLM's initial state, awake.
        for state, value in (("awake", 1.0), ("weights_offloaded", 0.0), ("discard_all", 0.0)):
            for engine in self._engines:
                sleep_state.add(sleep_state.name, sleep_labels,
                                (self._model_name, str(engine), state), value)  # fmt: skip
        yield running
        yield waiting
        yield by_reason
        yield sleep_state
        yield kv

    def describe(self) -> Iterator[MetricFamily]:
        """No up-front description (the gauges are produced at collect time)."""
        return iter(())
