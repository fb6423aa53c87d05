"""HTTP-level Prometheus series, as vLLM's Python frontend exposes them.

vLLM wraps its app in prometheus-fastapi-instrumentator's default metrics
(vllm/entrypoints/serve/instrumentator/metrics.py): ``http_requests_total{method,status,handler}``,
``http_request_size_bytes{handler}`` and ``http_response_size_bytes{handler}`` (summaries of
the Content-Length headers, 0 when absent), ``http_request_duration_highr_seconds`` (no labels)
and ``http_request_duration_seconds{method,handler}``. ``handler`` is the route path, or
``"none"`` for unknown paths; ``status`` is grouped (``2xx``); durations run until the response
(stream included) has been sent. Paths containing /health, /metrics, /load, /version, ... are
not recorded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram, Summary

EXCLUDED_HANDLERS = ("/metrics", "/health", "/load", "/ping", "/version", "/server_info")
"""vLLM's excluded-handler patterns; the instrumentator *searches* them in the path, so e.g.
``/v1/load_lora_adapter`` is excluded too."""


def metrics_excluded(path: str) -> bool:
    """Whether requests to ``path`` stay out of the ``http_*`` series (as in vLLM)."""
    return any(pattern in path for pattern in EXCLUDED_HANDLERS)


_HIGHR_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5, 7.5, 10,
    30, 60, float("inf"),
)  # fmt: skip
_LOWR_BUCKETS = (0.1, 0.5, 1, float("inf"))

C = TypeVar("C")


def _get_or_create(registry: CollectorRegistry, name: str, make: Callable[[], C]) -> C:
    # One process may build several apps on one registry (tests, reloads): reuse the collector.
    existing = getattr(registry, "_names_to_collectors", {}).get(name)
    return existing if existing is not None else make()


class HttpMetrics:
    """Records one finished HTTP exchange into vLLM's ``http_*`` series."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        reg = REGISTRY if registry is None else registry
        self.total = _get_or_create(
            reg,
            "http_requests",
            lambda: Counter(
                "http_requests_total",
                "Total number of requests by method, status and handler.",
                ("method", "status", "handler"),
                registry=reg,
            ),
        )
        self.request_size = _get_or_create(
            reg,
            "http_request_size_bytes",
            lambda: Summary(
                "http_request_size_bytes",
                "Content length of incoming requests by handler. Only value of header is "
                "respected. Otherwise ignored. No percentile calculated. ",
                ("handler",),
                registry=reg,
            ),
        )
        self.response_size = _get_or_create(
            reg,
            "http_response_size_bytes",
            lambda: Summary(
                "http_response_size_bytes",
                "Content length of outgoing responses by handler. Only value of header is "
                "respected. Otherwise ignored. No percentile calculated. ",
                ("handler",),
                registry=reg,
            ),
        )
        self.latency_highr = _get_or_create(
            reg,
            "http_request_duration_highr_seconds",
            lambda: Histogram(
                "http_request_duration_highr_seconds",
                "Latency with many buckets but no API specific labels. Made for more accurate "
                "percentile calculations. ",
                buckets=_HIGHR_BUCKETS,
                registry=reg,
            ),
        )
        self.latency_lowr = _get_or_create(
            reg,
            "http_request_duration_seconds",
            lambda: Histogram(
                "http_request_duration_seconds",
                "Latency with only few buckets by handler. Made to be only used if aggregation "
                "by handler is important. ",
                ("method", "handler"),
                buckets=_LOWR_BUCKETS,
                registry=reg,
            ),
        )
        # labelled children, cached: prometheus_client's labels() takes a lock and builds keys
        self._children: dict[tuple[str, str, str], Sequence[Any]] = {}

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
        group = f"{status // 100}xx"
        key = (method, group, handler)
        children = self._children.get(key)
        if children is None:
            children = (
                self.total.labels(method, group, handler),
                self.request_size.labels(handler),
                self.response_size.labels(handler),
                self.latency_lowr.labels(method, handler),
            )
            self._children[key] = children
        total, req_size, resp_size, lowr = children
        total.inc()
        req_size.observe(request_size)
        resp_size.observe(response_size)
        self.latency_highr.observe(duration)
        lowr.observe(duration)
