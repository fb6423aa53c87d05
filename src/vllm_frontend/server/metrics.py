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

Like the ``vllm:`` series (``vllm_frontend.llm.metrics``), these are the plain accumulators of
``vllm_frontend.series``, exported at scrape time sample for sample as prometheus_client's
``Counter``, ``Summary`` and ``Histogram`` would. prometheus_client itself is imported only by
the first scrape: its import (~40 ms, mostly the stdlib HTTP, email and URL modules its exposition
module pulls in) stays out of startup. :class:`MetricsRegistry` keeps the collectors until then.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vllm_frontend.series import (
    Counter,
    CounterChild,
    Histogram,
    HistogramChild,
    SeriesCollector,
    Summary,
    SummaryChild,
)

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

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

    def series(
        self, method: str, group: str, handler: str
    ) -> tuple[CounterChild, SummaryChild, SummaryChild, HistogramChild]:
        """The labelled series one exchange updates, created (in that order) when new."""
        return (
            self.total.child((method, group, handler)),
            self.request_size.child((handler,)),
            self.response_size.child((handler,)),
            self.lowr.child((method, handler)),
        )


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
            tuple[CounterChild, SummaryChild, SummaryChild, HistogramChild],
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
        req_size.observe(request_size)
        resp_size.observe(response_size)
        self._highr.observe(duration)
        lowr.observe(duration)
