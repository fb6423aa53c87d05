"""``/metrics`` negotiates as vLLM's does, checked against vLLM's own app over HTTP.

vLLM answers ``GET /metrics`` from prometheus-fastapi-instrumentator's route (the text format,
never compressed) and everything else under ``/metrics`` from the prometheus_client app it
mounts there (OpenMetrics on ``Accept``, name escaping, gzip on ``Accept-Encoding``, ``name[]``
filters). Both apps here expose the same series (one collector registered in both registries);
each case must get the same status, content type, content encoding and (decoded) body, the
``http_*`` families aside (each app has its own traffic).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Sample as PrometheusSample

from vllm_frontend.metrics.exposition import MetricFamily
from vllm_frontend.metrics.registry import MetricsRegistry
from vllm_frontend.metrics.series import Counter, Histogram, SeriesCollector
from vllm_frontend.server.app import ServerSettings
from vllm_frontend.server.routes import Services, build_app

from .support import HTTP, RunningServer

pytestmark = pytest.mark.oracle  # imports vLLM as the reference

OPENMETRICS = "application/openmetrics-text; version=1.0.0"
PROMETHEUS_3 = (
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
    "application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;"
    "escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
)
CASES: list[tuple[str, str, str, str]] = [
    # method, path (and query), Accept, Accept-Encoding
    ("GET", "/metrics", "*/*", "identity"),
    ("GET", "/metrics", OPENMETRICS, "gzip"),  # the instrumentator's route: neither
    ("GET", "/metrics?name[]=vllm:things_total", PROMETHEUS_3, "gzip, deflate"),
    ("GET", "/metrics/", "*/*", "identity"),
    ("GET", "/metrics/", OPENMETRICS, "gzip"),
    ("GET", "/metrics/", PROMETHEUS_3, "identity"),
    ("GET", "/metrics/x", "text/plain; version=1.0.0; escaping=dots", "br, gzip;q=0.5"),
    ("GET", "/metricsfoo", "application/openmetrics-text; escaping=values", "identity"),
    ("POST", "/metrics", OPENMETRICS, "gzip"),
    ("HEAD", "/metrics", "*/*", "gzip"),
    ("GET", "/metrics/?name[]=vllm:things_total&name[]=vllm:latency_seconds_count", "", "gzip"),
    ("GET", "/metrics/?name[]=vllm:things_created", OPENMETRICS, "identity"),
]


def _shared_series() -> SeriesCollector:
    things = Counter("vllm:things", "Things counted.", ("model_name", "engine"))
    things.child(("m", "0")).inc(3)
    things.child(("m", "1")).inc(1e7)
    latency = Histogram("vllm:latency_seconds", "Latency.", ("model_name",), (0.1, 1.0))
    for value in (0.05, 0.5, 5.0):
        latency.child(("m",)).observe(value)
    return SeriesCollector([things, latency])


class _AsPrometheus:
    """The same families as prometheus_client's own ``Metric`` objects (its ``name[]`` filter
    needs their methods)."""

    def __init__(self, collector: SeriesCollector) -> None:
        self._collector = collector

    def _convert(self, families: Iterable[MetricFamily]) -> Iterator[Metric]:
        for family in families:
            metric = Metric(family.name, family.documentation, family.type)
            metric.samples = [PrometheusSample(s.name, s.labels, s.value) for s in family.samples]
            yield metric

    def collect(self) -> Iterator[Metric]:
        return self._convert(self._collector.collect())

    def describe(self) -> Iterator[Metric]:
        return self._convert(self._collector.describe())


def _without_http_families(page: bytes) -> bytes:
    blocks: list[list[bytes]] = []
    for line in page.splitlines(keepends=True):
        if line.startswith(b"# HELP ") or not blocks:
            blocks.append([])
        blocks[-1].append(line)
    return b"".join(b"".join(block) for block in blocks if not block[0].startswith(b"# HELP http_"))


@pytest.fixture(scope="module")
def apps() -> Iterator[tuple[Any, RunningServer]]:
    import vllm.entrypoints.serve.instrumentator.metrics as vllm_metrics
    from starlette.testclient import TestClient
    from vllm.entrypoints.launchers.app import build_app as vllm_build_app
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    shared = _shared_series()
    theirs = CollectorRegistry()
    theirs.register(_AsPrometheus(shared))  # type: ignore[arg-type]
    ours = MetricsRegistry()
    ours.register(shared)
    patch = pytest.MonkeyPatch()
    patch.setattr(vllm_metrics, "get_prometheus_registry", lambda: theirs)
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(["--model", "m"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        client = TestClient(vllm_build_app(args, supported_tasks=("generate",)))
    patch.undo()
    server = RunningServer(build_app(ServerSettings(), Services(metrics_registry=ours)))
    yield client, server
    server.stop()


@pytest.mark.parametrize(("method", "path", "accept", "accept_encoding"), CASES)
def test_metrics_answers_as_vllms(
    apps: tuple[Any, RunningServer], method: str, path: str, accept: str, accept_encoding: str
) -> None:
    client, server = apps
    headers = {"accept": accept, "accept-encoding": accept_encoding}
    theirs = client.request(method, path, headers=headers, follow_redirects=False)
    ours = HTTP.request(method, server.url + path, headers=headers)
    assert ours.status_code == theirs.status_code == 200
    for header in ("content-type", "content-encoding"):
        assert ours.headers.get(header) == theirs.headers.get(header), header
    # (decoded: gzip's header has the compression time in it)
    assert _without_http_families(ours.content) == _without_http_families(theirs.content)
    if method != "HEAD":
        assert b"vllm:things" in ours.content


def test_the_gzip_body_is_gzip(apps: tuple[Any, RunningServer]) -> None:
    import gzip

    _, server = apps
    headers = {"accept": OPENMETRICS, "accept-encoding": "gzip"}
    with HTTP.stream("GET", server.url + "/metrics/", headers=headers) as response:
        raw = b"".join(response.iter_raw())
    assert response.headers["content-encoding"] == "gzip"
    # prometheus_client's ASGI app sets no Content-Length: uvicorn sends the body chunked
    assert "content-length" not in response.headers
    assert response.headers["transfer-encoding"] == "chunked"
    assert gzip.decompress(raw).endswith(b"# EOF\n")
