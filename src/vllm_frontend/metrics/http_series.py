"""HTTP-level Prometheus series, as vLLM's Python frontend exposes them.

vLLM wraps its app in prometheus-fastapi-instrumentator's default metrics
(vllm/entrypoints/serve/instrumentator/metrics.py): ``http_requests_total{method,status,handler}``,
``http_request_size_bytes{handler}`` and ``http_response_size_bytes{handler}`` (summaries of
the Content-Length headers, 0 when absent), ``http_request_duration_highr_seconds`` (no labels)
and ``http_request_duration_seconds{method,handler}``. ``handler`` is the route path, or
``"none"`` for unknown paths; ``status`` is grouped (``2xx``); durations run until the response
(stream included) has been sent. Paths containing /health, /metrics, /load, /version, ... are
not recorded.

Like the ``vllm:`` series (``vllm_frontend.metrics.frontend``), these are the plain accumulators
of ``vllm_frontend.metrics.series``, exported at scrape time sample for sample as
prometheus_client's ``Counter``, ``Summary`` and ``Histogram`` would. An exchange is kept as one
record (its series, sizes and duration, appended to a flat list) and the records are folded into
the series in bulk, in order, before the series are read and every :data:`_FOLD_AT` exchanges:
observing five series one by one per request cost ~1 µs of the event loop.
"""

from __future__ import annotations

import time
from collections import Counter as _Tally
from collections.abc import Iterator, Sequence
from typing import Any

from vllm_frontend.metrics.exposition import MetricFamily
from vllm_frontend.metrics.registry import MetricsRegistry
from vllm_frontend.metrics.series import (
    Counter,
    CounterChild,
    Histogram,
    HistogramChild,
    SeriesCollector,
    Summary,
    SummaryChild,
)

__all__ = ["EXCLUDED_HANDLERS", "HttpMetrics", "metrics_excluded"]

EXCLUDED_HANDLERS = ("/metrics", "/health", "/load", "/ping", "/version", "/server_info")
"""vLLM's excluded-handler patterns; the instrumentator *searches* them in the path, so e.g.
``/v1/load_lora_adapter`` is excluded too."""


def metrics_excluded(path: str) -> bool:
    """Whether requests to ``path`` stay out of the ``http_*`` series (as in vLLM)."""
    return any(pattern in path for pattern in EXCLUDED_HANDLERS)


_FOLD_AT = 256
"""Exchanges kept pending before they are folded into the series."""

_Series = tuple[CounterChild, SummaryChild, SummaryChild, HistogramChild]
_FIELDS = 4
"""Values per exchange in the flat list of records: series, request size, response size and
duration."""

_HIGHR_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5, 7.5, 10,
    30, 60, float("inf"),
)  # fmt: skip
_LOWR_BUCKETS = (0.1, 0.5, 1, float("inf"))

_TOTAL = ("http_requests_total", "Total number of requests by method, status and handler.")
_REQUEST_SIZE = (
    "http_request_size_bytes",
    "Content length of incoming requests by handler. Only value of header is respected. "
    "Otherwise ignored. No percentile calculated. ",
)
_RESPONSE_SIZE = (
    "http_response_size_bytes",
    "Content length of outgoing responses by handler. Only value of header is respected. "
    "Otherwise ignored. No percentile calculated. ",
)
_HIGHR = (
    "http_request_duration_highr_seconds",
    "Latency with many buckets but no API specific labels. Made for more accurate percentile "
    "calculations. ",
)
_LOWR = (
    "http_request_duration_seconds",
    "Latency with only few buckets by handler. Made to be only used if aggregation by handler "
    "is important. ",
)


class _HttpFamilies(SeriesCollector):
    """The five families (each one's series in creation order, as prometheus_client keeps a
    metric's children), exported in vLLM's registration order."""

    def __init__(self) -> None:
        self.total = Counter(_TOTAL[0].removesuffix("_total"), _TOTAL[1],
                             ("method", "status", "handler"))  # fmt: skip
        self.request_size = Summary(*_REQUEST_SIZE, ("handler",))
        self.response_size = Summary(*_RESPONSE_SIZE, ("handler",))
        self.highr_family = Histogram(*_HIGHR, (), _HIGHR_BUCKETS)
        # Unlabelled: prometheus_client creates its one series with the metric (at startup).
        self.highr = self.highr_family.child(())
        self.lowr = Histogram(*_LOWR, ("method", "handler"), _LOWR_BUCKETS)
        super().__init__(
            [self.total, self.request_size, self.response_size, self.highr_family, self.lowr]
        )
        self.pending: list[Any] = []
        """Exchanges not yet folded into the series, in the order they finished (flat: series,
        request size, response size, duration of each)."""

    def collect(self) -> Iterator[MetricFamily]:
        """Every family with its current values (the pending exchanges folded in first)."""
        self.fold()
        return super().collect()

    def fold(self) -> None:
        """Observe the pending exchanges in their series, as observing each at its end would."""
        if not self.pending:
            return
        records, self.pending = self.pending, []
        series, request_sizes, response_sizes, durations = (
            records[i::_FIELDS] for i in range(_FIELDS)
        )
        self.highr.observe_many(durations)
        first = series[0]
        if series.count(first) == len(series):  # one route and status: the usual
            total, request_size, response_size, lowr = first
            total.value += len(series)  # an integral float: exactly len() additions of 1
            request_size.observe_many(request_sizes)
            response_size.observe_many(response_sizes)
            lowr.observe_many(durations)
            return
        for child, count in _Tally(s[0] for s in series).items():
            child.value += count
        _observe_by_child([s[1] for s in series], request_sizes)
        _observe_by_child([s[2] for s in series], response_sizes)
        _observe_by_child([s[3] for s in series], durations)

    def series(self, method: str, group: str, handler: str) -> _Series:
        """The labelled series one exchange updates, created (in that order) when new."""
        return (
            self.total.child((method, group, handler)),
            self.request_size.child((handler,)),
            self.response_size.child((handler,)),
            self.lowr.child((method, handler)),
        )


def _observe_by_child(
    children: Sequence[SummaryChild | HistogramChild], values: Sequence[float]
) -> None:
    """Observe ``values[i]`` in ``children[i]``, each child's values in their order."""
    by_child: dict[int, tuple[SummaryChild | HistogramChild, list[float]]] = {}
    for child, value in zip(children, values, strict=True):
        entry = by_child.get(id(child))
        if entry is None:
            entry = by_child[id(child)] = (child, [])
        entry[1].append(value)
    for child, observed in by_child.values():
        child.observe_many(observed)


def _registered(registry: MetricsRegistry) -> _HttpFamilies | None:
    """The ``http_*`` families already in ``registry`` (one process may build several apps on
    one registry: tests, reloads)."""
    found = [c for c in registry.collectors if isinstance(c, _HttpFamilies)]
    return found[0] if found else None


class HttpMetrics:
    """Records one finished HTTP exchange into vLLM's ``http_*`` series."""

    def __init__(self, registry: MetricsRegistry) -> None:
        """The series in ``registry``, registered there unless they already are."""
        families = _registered(registry)
        if families is None:
            families = _HttpFamilies()
            registry.register(families)
        self._families = families
        # per (method, status code, handler): the labelled series it updates, resolved once
        self._series: dict[tuple[str, int, str], _Series] = {}

    def observe(
        self,
        method: str,
        handler: str,
        status: int,
        request_size: int,
        response_size: int,
        duration: float,
    ) -> None:
        """Record one exchange (``handler`` is the route path or ``"none"``)."""
        key = (method, status, handler)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = self._families.series(
                method, f"{status // 100}xx", handler
            )
        pending = self._families.pending
        pending.extend((series, request_size, response_size, duration))
        if len(pending) >= _FOLD_AT * _FIELDS:
            self._families.fold()

    def observe_since(
        self,
        method: str,
        handler: str,
        status: int,
        request_size: int,
        response_size: int,
        start: float,
    ) -> None:
        """:meth:`observe` an exchange that started at ``start`` (``time.perf_counter()``)
        and ends now (the same, inline: this runs once per request)."""
        duration = time.perf_counter() - start
        series = self._series.get((method, status, handler))
        if series is None:
            self.observe(method, handler, status, request_size, response_size, duration)
            return
        pending = self._families.pending
        pending.extend((series, request_size, response_size, duration))
        if len(pending) >= _FOLD_AT * _FIELDS:
            self._families.fold()
