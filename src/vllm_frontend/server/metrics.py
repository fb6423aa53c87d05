"""HTTP-level Prometheus series, as vLLM's Python frontend exposes them, and the registry that
``/metrics`` renders.

vLLM wraps its app in prometheus-fastapi-instrumentator's default metrics
(vllm/entrypoints/serve/instrumentator/metrics.py): ``http_requests_total{method,status,handler}``,
``http_request_size_bytes{handler}`` and ``http_response_size_bytes{handler}`` (summaries of
the Content-Length headers, 0 when absent), ``http_request_duration_highr_seconds`` (no labels)
and ``http_request_duration_seconds{method,handler}``. ``handler`` is the route path, or
``"none"`` for unknown paths; ``status`` is grouped (``2xx``); durations run until the response
(stream included) has been sent. Paths containing /health, /metrics, /load, /version, ... are
not recorded.

Like the ``vllm:`` series (``vllm_frontend.llm.metrics``), these are plain accumulators updated
on the event loop's thread (no lock, a ``bisect`` per histogram), turned into metric families at
scrape time, sample for sample what prometheus_client's ``Counter``, ``Summary`` and
``Histogram`` would expose for the same observations (``_created`` included unless
prometheus_client's created series are disabled). prometheus_client itself is imported only by
the first scrape: its import (~40 ms, mostly the stdlib HTTP, email and URL modules its exposition
module pulls in) stays out of startup. :class:`MetricsRegistry` keeps the collectors until then.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import Metric

__all__ = [
    "EXCLUDED_HANDLERS",
    "HttpMetrics",
    "MetricsRegistry",
    "metrics_excluded",
    "render_metrics",
]

EXCLUDED_HANDLERS = ("/metrics", "/health", "/load", "/ping", "/version", "/server_info")
"""vLLM's excluded-handler patterns; the instrumentator *searches* them in the path, so e.g.
``/v1/load_lora_adapter`` is excluded too."""


def metrics_excluded(path: str) -> bool:
    """Whether requests to ``path`` stay out of the ``http_*`` series (as in vLLM)."""
    return any(pattern in path for pattern in EXCLUDED_HANDLERS)


class MetricsRegistry:
    """The collectors ``/metrics`` renders, in registration order; prometheus_client's
    ``CollectorRegistry`` is built from them (and prometheus_client imported) on the first
    scrape."""

    __slots__ = ("_collectors", "_process_metrics", "_registry")

    def __init__(self, process_metrics: bool = False) -> None:
        """``process_metrics`` adds prometheus_client's default collectors first (``python_gc_*``,
        ``python_info``, ``process_*`` of this process), as vLLM's frontend exports them from
        prometheus_client's global registry when it runs as one process."""
        self._collectors: list[Any] = []
        self._registry: CollectorRegistry | None = None
        self._process_metrics = process_metrics

    def register(self, collector: Any) -> None:
        """Add ``collector`` (an object with prometheus_client's ``collect``/``describe``)."""
        if self._registry is not None:
            self._registry.register(collector)
        self._collectors.append(collector)

    @property
    def collectors(self) -> tuple[Any, ...]:
        """What has been registered, in order."""
        return tuple(self._collectors)

    def prometheus_registry(self) -> CollectorRegistry:
        """prometheus_client's registry holding these collectors (built on the first call; it
        refuses clashing names then, as it would have at registration)."""
        if self._registry is None:
            from prometheus_client import (
                CollectorRegistry,
                GCCollector,
                PlatformCollector,
                ProcessCollector,
            )

            registry = CollectorRegistry()
            if self._process_metrics:  # in the global registry's order
                GCCollector(registry=registry)
                PlatformCollector(registry=registry)
                ProcessCollector(registry=registry)
            for collector in self._collectors:
                registry.register(collector)
            self._registry = registry
        return self._registry


def render_metrics(registry: MetricsRegistry | CollectorRegistry | None) -> tuple[bytes, str]:
    """The ``/metrics`` body of ``registry`` (None: prometheus_client's global registry) in
    prometheus_client's text format, and its content type."""
    import prometheus_client

    if registry is None:
        target = prometheus_client.REGISTRY
    elif isinstance(registry, MetricsRegistry):
        target = registry.prometheus_registry()
    else:
        target = registry
    return prometheus_client.generate_latest(target), prometheus_client.CONTENT_TYPE_LATEST


_HIGHR_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5, 7.5, 10,
    30, 60, float("inf"),
)  # fmt: skip
_LOWR_BUCKETS = (0.1, 0.5, 1, float("inf"))
_HIGHR_BOUNDS = tuple(float(b) for b in _HIGHR_BUCKETS)
_LOWR_BOUNDS = tuple(float(b) for b in _LOWR_BUCKETS)

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


class _CounterSeries:
    __slots__ = ("created", "value")

    def __init__(self) -> None:
        self.value = 0.0
        self.created = time.time()


class _SummarySeries:
    __slots__ = ("count", "created", "sum")

    def __init__(self) -> None:
        self.count = 0.0
        self.sum = 0.0
        self.created = time.time()


class _HistogramSeries:
    """Per-bucket counts (not cumulative; bucket ``i`` holds values in ``(b[i-1], b[i]]``)."""

    __slots__ = ("counts", "created", "sum")

    def __init__(self, num_buckets: int) -> None:
        self.counts = [0] * num_buckets
        self.sum = 0.0
        self.created = time.time()


class _HttpFamilies:
    """The five families' series, each family's in creation order (as prometheus_client keeps a
    metric's children), and the collector that exports them in vLLM's registration order."""

    def __init__(self) -> None:
        self.total: dict[tuple[str, str, str], _CounterSeries] = {}
        self.request_size: dict[str, _SummarySeries] = {}
        self.response_size: dict[str, _SummarySeries] = {}
        # Unlabelled: prometheus_client creates its one series with the metric (at startup).
        self.highr = _HistogramSeries(len(_HIGHR_BOUNDS))
        self.lowr: dict[tuple[str, str], _HistogramSeries] = {}

    def series(
        self, method: str, group: str, handler: str
    ) -> tuple[_CounterSeries, _SummarySeries, _SummarySeries, _HistogramSeries]:
        """The labelled series one exchange updates, created (in that order) when new."""
        total = self.total.get((method, group, handler))
        if total is None:
            total = self.total[(method, group, handler)] = _CounterSeries()
        req = self.request_size.get(handler)
        if req is None:
            req = self.request_size[handler] = _SummarySeries()
        resp = self.response_size.get(handler)
        if resp is None:
            resp = self.response_size[handler] = _SummarySeries()
        lowr = self.lowr.get((method, handler))
        if lowr is None:
            lowr = self.lowr[(method, handler)] = _HistogramSeries(len(_LOWR_BOUNDS))
        return total, req, resp, lowr

    def collect(self) -> Iterator[Metric]:
        """The families with their current values."""
        from prometheus_client import metrics as prometheus_metrics
        from prometheus_client.core import CounterMetricFamily, SummaryMetricFamily

        # prometheus_client's switch (PROMETHEUS_DISABLE_CREATED_SERIES, disable_created_metrics),
        # read at each scrape as its own metrics do.
        with_created = bool(getattr(prometheus_metrics, "_use_created", True))
        total = CounterMetricFamily(*_TOTAL, labels=("method", "status", "handler"))
        for key, series in self.total.items():
            total.add_metric(key, series.value, series.created if with_created else None)
        yield total
        for (name, doc), by_handler in (
            (_REQUEST_SIZE, self.request_size),
            (_RESPONSE_SIZE, self.response_size),
        ):
            summary = SummaryMetricFamily(name, doc, labels=("handler",))
            for handler, s in by_handler.items():
                # SummaryMetricFamily.add_metric's samples, with the count as the float that
                # prometheus_client's Summary keeps
                summary.add_sample(name + "_count", {"handler": handler}, s.count)
                summary.add_sample(name + "_sum", {"handler": handler}, s.sum)
                if with_created:
                    summary.add_sample(name + "_created", {"handler": handler}, s.created)
            yield summary
        yield _histogram(*_HIGHR, (), {(): self.highr}, _HIGHR_BOUNDS, with_created)
        yield _histogram(*_LOWR, ("method", "handler"), self.lowr, _LOWR_BOUNDS, with_created)

    def describe(self) -> Iterator[Metric]:
        """The families' names and types, so that a registry refuses clashing names."""
        from prometheus_client.core import Metric

        yield Metric(_TOTAL[0].removesuffix("_total"), _TOTAL[1], "counter")
        yield Metric(*_REQUEST_SIZE, "summary")
        yield Metric(*_RESPONSE_SIZE, "summary")
        yield Metric(*_HIGHR, "histogram")
        yield Metric(*_LOWR, "histogram")


def _histogram(
    name: str,
    doc: str,
    labelnames: tuple[str, ...],
    children: dict[Any, _HistogramSeries],
    bounds: tuple[float, ...],
    with_created: bool,
) -> Metric:
    """Cumulative ``_bucket`` samples up to ``le="+Inf"``, ``_count``, ``_sum`` (and
    ``_created``) per series, in prometheus_client's order."""
    from prometheus_client.core import HistogramMetricFamily
    from prometheus_client.utils import floatToGoString

    family = HistogramMetricFamily(name, doc, labels=labelnames)
    les = [floatToGoString(b) for b in bounds]
    for key, series in children.items():
        buckets = []
        acc = 0.0
        for le, count in zip(les, series.counts, strict=True):
            acc += count
            buckets.append((le, acc))
        family.add_metric(key, buckets, series.sum)
        if with_created:
            labels = dict(zip(labelnames, key, strict=True))
            family.add_sample(name + "_created", labels, series.created)
    return family


def _registered(registry: MetricsRegistry | CollectorRegistry) -> _HttpFamilies | None:
    """The ``http_*`` families already in ``registry`` (one process may build several apps on
    one registry: tests, reloads)."""
    if isinstance(registry, MetricsRegistry):
        found = [c for c in registry.collectors if isinstance(c, _HttpFamilies)]
        return found[0] if found else None
    existing = getattr(registry, "_names_to_collectors", {}).get("http_requests")
    return existing if isinstance(existing, _HttpFamilies) else None


class HttpMetrics:
    """Records one finished HTTP exchange into vLLM's ``http_*`` series."""

    def __init__(self, registry: MetricsRegistry | CollectorRegistry | None = None) -> None:
        """The series in ``registry`` (None: prometheus_client's global registry), registered
        there unless they already are."""
        if registry is None:
            from prometheus_client import REGISTRY

            registry = REGISTRY
        families = _registered(registry)
        if families is None:
            families = _HttpFamilies()
            registry.register(families)
        self._families = families
        self._highr = families.highr
        # per (method, status code, handler): the labelled series it updates, resolved once
        self._series: dict[
            tuple[str, int, str],
            tuple[_CounterSeries, _SummarySeries, _SummarySeries, _HistogramSeries],
        ] = {}

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
        total, req_size, resp_size, lowr = series
        total.value += 1.0
        req_size.count += 1.0
        req_size.sum += request_size
        resp_size.count += 1.0
        resp_size.sum += response_size
        highr = self._highr
        # prometheus_client's Histogram.observe: the first bucket whose bound is >= the value
        # (the last is +Inf); NaN falls in none but still poisons the sum.
        if duration == duration:
            highr.counts[bisect_left(_HIGHR_BOUNDS, duration)] += 1
            lowr.counts[bisect_left(_LOWR_BOUNDS, duration)] += 1
        highr.sum += duration
        lowr.sum += duration
