"""The ``http_*`` Prometheus series: vLLM's names and labels, and counts that match the traffic."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from vllm_frontend.metrics.registry import MetricsRegistry
from vllm_frontend.server.app import ServerSettings
from vllm_frontend.server.protocol import parse_completion_request
from vllm_frontend.server.routes import Services, build_app
from vllm_frontend.server.transport import Request, Response

from .support import HTTP, RunningServer

pytestmark = pytest.mark.oracle  # imports vLLM or transformers as the reference

pytest.importorskip("vllm")

TRAFFIC: list[tuple[str, str, bytes]] = [
    ("POST", "/v1/completions", b"{bad json"),
    ("POST", "/v1/completions", b"{bad json"),
    ("GET", "/nope", b""),
    ("GET", "/nope/health", b""),
    ("PUT", "/v1/models", b""),
    ("POST", "/health", b""),
    ("GET", "/v1/models", b""),
    ("GET", "/health", b""),
    ("GET", "/version", b""),
]
EXPECTED_TOTALS = {
    ("POST", "4xx", "/v1/completions"): 2,
    ("GET", "4xx", "none"): 1,
    ("PUT", "4xx", "none"): 1,
    ("GET", "2xx", "/v1/models"): 1,
}


def samples(text: str, prefix: str = "http_") -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.startswith(prefix):
                out.setdefault(s.name, []).append(s)
    return out


@pytest.fixture
def server() -> Iterator[RunningServer]:
    async def completions(request: Request) -> Response:
        parse_completion_request(request.body)
        return Response()

    app = build_app(
        ServerSettings(),
        Services(metrics_registry=MetricsRegistry()),
        {("POST", "/v1/completions"): completions},
    )
    srv = RunningServer(app)
    yield srv
    srv.stop()


def send(request: Any) -> None:
    for method, path, body in TRAFFIC:
        request(method, path, content=body, headers={"content-type": "application/json"})


def test_http_request_counts_follow_the_traffic(server: RunningServer) -> None:
    send(lambda m, p, **kw: HTTP.request(m, server.url + p, **kw))
    ours = samples(HTTP.get(server.url + "/metrics").text)
    totals = {
        (s.labels["method"], s.labels["status"], s.labels["handler"]): s.value
        for s in ours["http_requests_total"]
    }
    assert totals == EXPECTED_TOTALS
    sizes = {s.labels["handler"]: s.value for s in ours["http_request_size_bytes_sum"]}
    assert sizes["/v1/completions"] == 2 * len(b"{bad json")
    (count,) = [s.value for s in ours["http_request_duration_highr_seconds_count"]]
    assert count == sum(EXPECTED_TOTALS.values())


def test_http_series_have_vllms_names_and_labels(
    server: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    import warnings

    import vllm.entrypoints.serve.instrumentator.metrics as vllm_metrics
    from prometheus_client import generate_latest
    from starlette.testclient import TestClient
    from vllm.entrypoints.launchers.app import build_app as vllm_build_app
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    # a vLLM app of its own whose instrumentator records into a fresh registry
    registry = CollectorRegistry()
    monkeypatch.setattr(vllm_metrics, "get_prometheus_registry", lambda: registry)
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(["--model", "m"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        client = TestClient(
            vllm_build_app(args, supported_tasks=("generate",)), raise_server_exceptions=False
        )
    send(client.request)
    theirs = samples(generate_latest(registry).decode())
    send(lambda m, p, **kw: HTTP.request(m, server.url + p, **kw))
    ours = samples(HTTP.get(server.url + "/metrics").text)

    def shape(series: dict[str, list[Any]]) -> dict[str, set[tuple[str, ...]]]:
        return {name: {tuple(sorted(s.labels)) for s in ss} for name, ss in series.items()}

    assert shape(ours) == shape(theirs)
    totals = {
        (s.labels["method"], s.labels["status"], s.labels["handler"]): s.value
        for s in theirs["http_requests_total"]
    }
    # without an engine vLLM's /v1/models handler fails (5xx); everything else is identical
    assert totals.pop(("GET", "5xx", "/v1/models")) == 1
    expected = dict(EXPECTED_TOTALS)
    del expected[("GET", "2xx", "/v1/models")]
    assert totals == expected
