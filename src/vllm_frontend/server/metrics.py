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
``Counter``, ``Summary`` and ``Histogram`` would. :class:`MetricsRegistry` holds the collectors
and :func:`render_metrics` renders them with ``vllm_frontend.exposition``, byte for byte what
prometheus_client would write: the serving process never imports prometheus_client (~60 ms of
CPU, mostly the stdlib HTTP, email and URL modules its exposition module pulls in, that the
first scrape would pay on the event loop).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from vllm_frontend.exposition import CONTENT_TYPE, Collector, MetricFamily, render
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


# The sample names each family type adds to its name (prometheus_client's registry refuses a
# collector whose names, so derived, clash with a registered one's).
_TYPE_SUFFIXES = {
    "counter": ("_total", "_created"),
    "summary": ("_sum", "_count", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "gaugehistogram": ("_bucket", "_gsum", "_gcount"),
    "info": ("_info",),
}


def _described_names(collector: Collector) -> set[str]:
    names = set()
    for family in collector.describe():
        names.add(family.name)
        names.update(family.name + suffix for suffix in _TYPE_SUFFIXES.get(family.type, ()))
    return names


class MetricsRegistry(Collector):
    """The collectors ``/metrics`` renders, in registration order (collectors yielding
    ``vllm_frontend.exposition.MetricFamily`` objects, as prometheus_client's registry takes
    them; a collector whose described names clash with a registered one's is refused)."""

    __slots__ = ("_collectors", "_defaults", "_names", "_process_metrics")

    def __init__(self, process_metrics: bool = False) -> None:
        """``process_metrics`` adds the series of prometheus_client's default collectors first
        (``python_gc_*``, ``python_info``, ``process_*`` of this process), as vLLM's frontend
        exports them from prometheus_client's global registry when it runs as one process."""
        self._collectors: list[Collector] = []
        self._names: set[str] = set()
        self._defaults: list[Collector] | None = None
        self._process_metrics = process_metrics

    def register(self, collector: Collector) -> None:
        """Add ``collector`` (``collect()`` and ``describe()`` yielding metric families)."""
        names = _described_names(collector)
        clashing = names & self._names
        if clashing:
            raise ValueError(f"Duplicated timeseries in MetricsRegistry: {sorted(clashing)}")
        self._names |= names
        self._collectors.append(collector)

    @property
    def collectors(self) -> tuple[Collector, ...]:
        """What has been registered, in order (the process series aside)."""
        return tuple(self._collectors)

    def collect(self) -> Iterator[MetricFamily]:
        """Every collector's families, the process series first."""
        if self._defaults is None:
            # made at the first scrape (reading /proc/stat, importing platform)
            from .process_metrics import default_collectors

            self._defaults = default_collectors() if self._process_metrics else []
        for collector in self._defaults:
            yield from collector.collect()
        for collector in self._collectors:
            yield from collector.collect()

    def describe(self) -> Iterator[MetricFamily]:
        """The registered collectors' descriptions (so a prometheus_client registry takes this
        one as a collector)."""
        for collector in self._collectors:
            yield from collector.describe()


def render_metrics(registry: MetricsRegistry | CollectorRegistry | None) -> tuple[bytes, str]:
    """The ``/metrics`` body of ``registry`` in prometheus_client's text format, and its content
    type. A :class:`MetricsRegistry` is rendered here; prometheus_client's registries (None: its
    global one) by prometheus_client, imported then."""
    if isinstance(registry, MetricsRegistry):
        return render(registry.collect()), CONTENT_TYPE
    import prometheus_client

    target = prometheus_client.REGISTRY if registry is None else registry
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
            # prometheus_client's registry takes these families too, which its types do not say
            register: Callable[[Any], None] = registry.register
            register(families)
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
