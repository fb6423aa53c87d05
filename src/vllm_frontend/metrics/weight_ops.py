"""vLLM 0.32's metrics of the RL weight-transfer operations (vllm/entrypoints/rl/online/metrics.py):
``vllm:rl_weight_update_operation_duration_seconds`` (a histogram) and
``vllm:rl_weight_update_operations_in_flight`` (a gauge), both by ``operation``. As in vLLM they
exist from the first operation on (each operation's series from its first use), registered
after every other family."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from time import perf_counter

from vllm_frontend.metrics.registry import MetricsRegistry
from vllm_frontend.metrics.series import Gauge, Histogram, SeriesCollector

__all__ = ["WeightOperationMetrics"]

_BUCKETS = (0.01, 0.1, 1, 10, 30, 60, 120, 300, 600)


class WeightOperationMetrics:
    """Records the operations in ``registry``, whose families it registers on the first one."""

    def __init__(self, registry: MetricsRegistry | None) -> None:
        self._registry = registry
        self._duration: Histogram | None = None
        self._in_flight: Gauge | None = None

    def _families(self) -> tuple[Histogram, Gauge]:
        if self._duration is None or self._in_flight is None:
            self._duration = Histogram(
                "vllm:rl_weight_update_operation_duration_seconds",
                "Duration of one weight-transfer operation.",
                ("operation",),
                _BUCKETS,
            )
            self._in_flight = Gauge(
                "vllm:rl_weight_update_operations_in_flight",
                "Weight-transfer operations currently awaited.",
                ("operation",),
            )
            if self._registry is not None:
                self._registry.register(SeriesCollector([self._duration, self._in_flight]))
        return self._duration, self._in_flight

    @contextmanager
    def record(self, operation: str) -> Iterator[None]:
        """Count ``operation`` in flight while the block runs, then observe its duration
        (also when it fails)."""
        duration, in_flight = self._families()
        gauge = in_flight.labels(operation)
        gauge.inc()
        started = perf_counter()
        try:
            yield
        finally:
            gauge.dec()
            duration.labels(operation).observe(perf_counter() - started)
