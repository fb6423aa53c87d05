"""``vllm_frontend.metrics.negotiation`` picks what prometheus_client's ``make_asgi_app`` (vLLM's
``/metrics`` mount) picks: the same format, escaping, content type and compression for the same
``Accept`` and ``Accept-Encoding`` headers, checked against prometheus_client itself."""

from __future__ import annotations

import gzip
import random
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.exposition import gzip_accepted as reference_gzip_accepted

from vllm_frontend.metrics.exposition import MetricFamily, Sample
from vllm_frontend.metrics.negotiation import choose_format, encode_page, gzip_accepted

ACCEPTS = [
    "",
    "*/*",
    "text/plain",
    "text/plain; version=0.0.4",
    "text/plain;version=1.0.0",
    "text/plain; version=1.0.0; escaping=dots",
    "text/plain; version=2.0.0; escaping=values",
    "text/plain; version=1.0.0; escaping=nonsense",
    "application/openmetrics-text",
    "application/openmetrics-text; version=1.0.0",
    "application/openmetrics-text;version=0.0.1",
    "application/openmetrics-text; version=1.0.0; escaping=allow-utf-8",
    "application/openmetrics-text; version=1.0.0; escaping=underscores",
    "application/openmetrics-text; version=1.0.0; escaping=dots",
    "application/openmetrics-text; version=1.0.0; escaping=values",
    "application/openmetrics-text; escaping=dots",
    "application/openmetrics-text; version=2.0.0",
    "application/openmetrics-text; charset=utf-8; version=1.0.0",
    "application/json, text/html",
    # Prometheus 2's and 3's scrape headers
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
    "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
    "application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;"
    "escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2",
    "text/plain;version=0.0.4;q=1,application/openmetrics-text;version=1.0.0",
    "application/openmetrics-text;version=0.0.1,text/plain;version=1.0.0;escaping=dots",
]


def _accepts() -> Iterator[str]:
    yield from ACCEPTS
    rng = random.Random(7)
    pieces = [p for a in ACCEPTS for p in a.split(",") if p]
    for _ in range(300):
        yield ",".join(rng.choice(pieces) for _ in range(rng.randrange(1, 4)))


class _Collector:
    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        yield from self._families


def _families() -> list[Metric]:
    """Names every escaping writes differently."""
    counter = CounterMetricFamily("vllm:req.s", "Requests.", labels=["model.name"])
    counter.add_metric(["m"], 3, created=5.0)
    gauge = GaugeMetricFamily("plain_gauge", "Plain.", value=1.5)
    return [counter, gauge]


def _ours(metric: Metric) -> MetricFamily:
    samples = [Sample(s.name, tuple(s.labels), tuple(s.labels.values()), s.value)
               for s in metric.samples]  # fmt: skip
    return MetricFamily(metric.name, metric.type, metric.documentation, samples)


def test_the_format_and_content_type_are_prometheus_clients() -> None:
    reference = _Collector(_families())
    ours = [_ours(m) for m in _families()]
    seen = set()
    for accept in _accepts():
        encoder, content_type = choose_encoder(accept)
        chosen = choose_format(accept)
        assert chosen.content_type == content_type, accept
        page = encode_page(ours, accept, "")
        assert page.body == encoder(reference), accept  # format and escaping
        assert page.content_type == content_type and not page.gzipped
        seen.add((chosen.openmetrics, chosen.escaping))
    assert len(seen) == 8  # every format with every escaping was chosen by some header


def test_a_version_prometheus_client_cannot_compare_is_passed_over() -> None:
    accept = "application/openmetrics-text; version=1.0.x, text/plain; version=1.0.0"
    with pytest.raises(TypeError):
        choose_encoder(accept)  # prometheus_client's scrape fails; ours takes the next entry
    assert choose_format(accept).content_type.startswith("text/plain; version=1.0.0;")


@pytest.mark.parametrize(
    "accept_encoding",
    ["", "gzip", "GZIP", " gzip ;q=0", "deflate, gzip;q=1.0", "br", "x-gzip", "identity",
     "gzip, deflate, br, zstd", "*"],
)  # fmt: skip
def test_gzip_is_used_when_prometheus_client_uses_it(accept_encoding: str) -> None:
    expected = reference_gzip_accepted(accept_encoding)
    assert gzip_accepted(accept_encoding) == expected
    ours = [_ours(m) for m in _families()]
    page = encode_page(ours, "application/openmetrics-text", accept_encoding)
    plain = encode_page(ours, "application/openmetrics-text", "")
    assert page.gzipped == expected
    assert (gzip.decompress(page.body) if expected else page.body) == plain.body


def test_name_filters_keep_only_the_named_samples_as_prometheus_client_does() -> None:
    registry = CollectorRegistry(auto_describe=True)  # (names taken from collect())
    registry.register(_Collector(_families()))  # type: ignore[arg-type]
    ours = [_ours(m) for m in _families()]
    for names in (["vllm:req.s_total", "plain_gauge", "absent"], ["vllm:req.s_created"], ["x"]):
        for accept in ("", "application/openmetrics-text"):
            encoder, _ = choose_encoder(accept)
            expected = encoder(registry.restricted_registry(names))
            assert encode_page(ours, accept, "", names).body == expected
    assert b"plain_gauge 1.5" in encode_page(ours, "", "", ["plain_gauge"]).body
