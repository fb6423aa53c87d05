"""The ``http_*`` series show, byte for byte, what prometheus_client's own Counter, Summary and
Histogram show for the same exchanges; and ``/metrics`` renders its registry's collectors in
order, without prometheus_client.

The reference is what this module used before its accumulators: vLLM's instrumentator series
defined with prometheus_client's metric classes in a registry of their own, fed the same
observations. Only the ``_created`` timestamps may differ (each side stamps its own series).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

import prometheus_client
import prometheus_client.metrics
import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, Summary

from tests.support.exposition import assert_same_exposition, prometheus_view
from vllm_frontend.metrics import series
from vllm_frontend.metrics.http_series import HttpMetrics
from vllm_frontend.metrics.registry import MetricsRegistry, render_metrics

HIGHR = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5, 7.5, 10,
    30, 60, float("inf"),
)  # fmt: skip
LOWR = (0.1, 0.5, 1, float("inf"))
SIZE_HELP = (
    " by handler. Only value of header is respected. Otherwise ignored. No percentile calculated. "
)


class ReferenceHttpMetrics:
    """vLLM's instrumentator series as prometheus_client metrics (the previous implementation)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.total = Counter(
            "http_requests_total",
            "Total number of requests by method, status and handler.",
            ("method", "status", "handler"),
            registry=registry,
        )
        self.request_size = Summary(
            "http_request_size_bytes",
            "Content length of incoming requests" + SIZE_HELP,
            ("handler",),
            registry=registry,
        )
        self.response_size = Summary(
            "http_response_size_bytes",
            "Content length of outgoing responses" + SIZE_HELP,
            ("handler",),
            registry=registry,
        )
        self.highr = Histogram(
            "http_request_duration_highr_seconds",
            "Latency with many buckets but no API specific labels. Made for more accurate "
            "percentile calculations. ",
            buckets=HIGHR,
            registry=registry,
        )
        self.lowr = Histogram(
            "http_request_duration_seconds",
            "Latency with only few buckets by handler. Made to be only used if aggregation by "
            "handler is important. ",
            ("method", "handler"),
            buckets=LOWR,
            registry=registry,
        )

    def observe(
        self, method: str, handler: str, status: int, req: int, resp: int, duration: float
    ) -> None:
        self.total.labels(method, f"{status // 100}xx", handler).inc()
        self.request_size.labels(handler).observe(req)
        self.response_size.labels(handler).observe(resp)
        self.highr.observe(duration)
        self.lowr.labels(method, handler).observe(duration)


@dataclass
class Pair:
    ours: HttpMetrics
    reference: ReferenceHttpMetrics
    ours_registry: MetricsRegistry
    reference_registry: CollectorRegistry

    def observe(
        self, method: str, handler: str, status: int, req: int, resp: int, duration: float
    ) -> None:
        self.ours.observe(method, handler, status, req, resp, duration)
        self.reference.observe(method, handler, status, req, resp, duration)


def make_pair() -> Pair:
    ours_registry, reference_registry = MetricsRegistry(), CollectorRegistry()
    return Pair(
        HttpMetrics(ours_registry),
        ReferenceHttpMetrics(reference_registry),
        ours_registry,
        reference_registry,
    )


@pytest.mark.parametrize("seed", range(4))
def test_http_series_match_prometheus_clients_metrics_for_random_traffic(
    seed: int, created_series: Callable[[bool], None]
) -> None:
    rng = random.Random(seed)
    pair = make_pair()
    assert_same_exposition(pair, created_series)  # the unlabelled histogram exists at 0
    handlers = ["/v1/completions", "/v1/chat/completions", "/v1/models", "none", "/tokenize"]
    for _ in range(500):
        pair.observe(
            rng.choice(["GET", "POST", "PUT"]),
            rng.choice(handlers),
            rng.choice([200, 200, 201, 400, 404, 422, 500, 503]),
            rng.choice([0, rng.randrange(0, 1 << 20)]),
            rng.randrange(0, 1 << 22),
            rng.choice([rng.random() * 0.2, rng.random() * 3, rng.random() * 90]),
        )
        if rng.random() < 0.02:
            assert_same_exposition(pair, created_series)
    assert_same_exposition(pair, created_series)


def test_durations_on_and_around_bucket_bounds_land_in_prometheus_clients_buckets(
    created_series: Callable[[bool], None],
) -> None:
    pair = make_pair()
    values = [0.0, -0.0, 1e-12, 1e300, math.inf, math.nan]
    for b in HIGHR + LOWR:
        values += [b, float(b), math.nextafter(b, -math.inf), math.nextafter(b, math.inf)]
    for i, v in enumerate(values):
        pair.observe("POST", "/v1/completions", 200 + i % 3, i, 2 * i, v)
    assert_same_exposition(pair, created_series)


def test_apps_built_on_one_registry_share_the_http_series() -> None:
    registry = MetricsRegistry()
    first, second = HttpMetrics(registry), HttpMetrics(registry)
    first.observe("GET", "/v1/models", 200, 0, 10, 0.01)
    second.observe("GET", "/v1/models", 204, 0, 10, 0.01)
    assert len(registry.collectors) == 1
    labels = {"method": "GET", "status": "2xx", "handler": "/v1/models"}
    assert prometheus_view(registry).get_sample_value("http_requests_total", labels) == 2


def test_the_metrics_registry_renders_its_collectors_in_order_and_refuses_clashing_names() -> None:
    registry = MetricsRegistry()
    registry.register(series.SeriesCollector([series.Counter("a_first", "a", ())]))
    registry.register(series.SeriesCollector([series.Counter("b_second", "b", ())]))
    body, content_type = render_metrics(registry)
    text = body.decode()
    assert content_type == prometheus_client.CONTENT_TYPE_LATEST
    assert text.index("a_first_total") < text.index("b_second_total")
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        registry.register(series.SeriesCollector([series.Histogram("b_second", "", (), [1])]))
    assert len(registry.collectors) == 2

    clashing = MetricsRegistry()
    HttpMetrics(clashing)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        clashing.register(series.SeriesCollector([series.Counter("http_requests", "not ours", ())]))


def _family_heads(page: bytes) -> list[str]:
    return [line for line in page.decode().splitlines() if line.startswith("# TYPE")]


def test_process_metrics_are_prometheus_clients_defaults_first() -> None:
    import subprocess
    import sys

    # The reference: prometheus_client's global registry in a fresh interpreter (this one's may
    # hold test series).
    fresh = subprocess.run(
        [sys.executable, "-c", "import prometheus_client, sys; "
         "sys.stdout.buffer.write(prometheus_client.generate_latest())"],
        check=True, capture_output=True,
    ).stdout  # fmt: skip
    registry = MetricsRegistry(process_metrics=True)
    HttpMetrics(registry)
    heads = _family_heads(render_metrics(registry)[0])
    defaults = _family_heads(fresh)
    assert defaults and heads[: len(defaults)] == defaults
    assert any("http_requests_total" in h for h in heads[len(defaults) :])
    plain = MetricsRegistry()
    HttpMetrics(plain)
    assert _family_heads(render_metrics(plain)[0]) == heads[len(defaults) :]
