"""``vllm_frontend.metrics.exposition`` writes what prometheus_client's ``generate_latest`` writes:
the same values, escaping, names and family layout, checked against prometheus_client itself."""

from __future__ import annotations

import math
import os
import random
import subprocess
import sys
from collections.abc import Iterable, Iterator

import pytest
from prometheus_client import generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeHistogramMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
    StateSetMetricFamily,
    SummaryMetricFamily,
    UnknownMetricFamily,
)
from prometheus_client.openmetrics import exposition as openmetrics
from prometheus_client.utils import floatToGoString

from vllm_frontend.metrics.exposition import MetricFamily, Sample, format_value, render
from vllm_frontend.metrics.names import ESCAPINGS
from vllm_frontend.metrics.openmetrics import render_openmetrics
from vllm_frontend.metrics.text_parse import parse_text


class _Families:
    """A prometheus_client collector yielding fixed families."""

    def __init__(self, families: Iterable[Metric | MetricFamily]) -> None:
        self._families = list(families)

    def collect(self) -> Iterator[Metric | MetricFamily]:
        yield from self._families


def _ours(metric: Metric) -> MetricFamily:
    """prometheus_client's family as ours, sample for sample."""
    samples = [
        Sample(s.name, tuple(s.labels), tuple(s.labels.values()), s.value) for s in metric.samples
    ]
    return MetricFamily(metric.name, metric.type, metric.documentation, samples)


def test_values_are_written_as_prometheus_client_writes_them() -> None:
    rng = random.Random(0)
    values: list[float] = [0.0, -0.0, 1.0, -1.0, math.inf, -math.inf, math.nan, 5e-324, 0.1,
                           1e6, 1e7, 999999.0, 9999999.0, 1234567.0, 1234567.5, 1e15, 1e16,
                           1e22, 1.7e308, -1e7, -1234567.5, 2**53, 10**6 + 1]  # fmt: skip
    values += [rng.uniform(-1, 1) * 10 ** rng.randrange(-12, 25) for _ in range(5000)]
    values += [float(rng.randrange(10 ** rng.randrange(1, 19))) for _ in range(5000)]
    for value in values:
        assert format_value(value) == floatToGoString(value), value
    for whole in (0, 7, 10**6, 10**7, 123456789):
        assert format_value(whole) == floatToGoString(whole)


AWKWARD = ["plain", 'say "hi"', "back\\slash", "new\nline", "\\n literal", "ünïcode ✓", "", "a}b"]


def _reference_families() -> list[Metric]:
    """One family of every type prometheus_client has, with awkward names, labels and help."""
    counter = CounterMetricFamily("c_total", "Counter\\help\nwith lines.", labels=["b", "a"])
    counter.add_metric(["x", "y"], 3, created=1700000000.25)
    counter.add_metric(['q"', "z\n"], 1e7, created=1.5)
    gauge = GaugeMetricFamily("g", "Gauge.", labels=["le_not", "zz", "aa"])
    for i, value in enumerate(AWKWARD):
        gauge.add_metric([value, str(i), value[::-1]], i / 3)
    histogram = HistogramMetricFamily("h_seconds", "", labels=["m"])
    histogram.add_metric(["a"], [("0.1", 1), ("1e+06", 3), ("+Inf", 4)], 12.5)
    histogram.add_sample("h_seconds_created", {"m": "a"}, 1e9)
    summary = SummaryMetricFamily("s", "Summary.", count_value=4, sum_value=2.5)
    summary.add_sample("s_created", {}, 3.0)
    gauge_histogram = GaugeHistogramMetricFamily(
        "gh", "GH.", buckets=[("1.0", 2), ("+Inf", 5)], gsum_value=7.0
    )
    info = InfoMetricFamily("build", "Build.", value={"version": "1.2", "commit": "abc"})
    stateset = StateSetMetricFamily("st", "States.", {"on": True, "off": False})
    unknown = UnknownMetricFamily("u", "Unknown.", value=float("nan"))
    # names outside the legacy character set: prometheus_client writes them with underscores
    odd_names = GaugeMetricFamily("vllm:odd.name-x", "Odd.", labels=["label.dot", "0lead"])
    odd_names.add_metric(["v", "w"], 1)
    return [counter, gauge, histogram, summary, gauge_histogram, info, stateset, unknown,
            odd_names]  # fmt: skip


def test_every_family_type_is_laid_out_as_prometheus_client_lays_it_out() -> None:
    reference = _reference_families()
    ours = [_ours(m) for m in reference]
    expected = generate_latest(_Families(reference))  # type: ignore[arg-type]
    assert render(ours) == expected
    # and prometheus_client takes our families as its own
    assert generate_latest(_Families(ours)) == expected  # type: ignore[arg-type]
    assert b"c_created" in expected and b"gh_gsum" in expected  # the moved samples are there


def _odd_names() -> list[Metric]:
    """Names in and out of the legacy character sets, one escaping rule each."""
    out = []
    for i, name in enumerate(["vllm:colon", "under_score", "dot.ted", "9lead", "ünï", "a-b:c_d.e"]):
        gauge = GaugeMetricFamily(name, f"Odd {i}.", labels=["le.x", "_ok", "0z", "ä", "a:b"])
        gauge.add_metric(["1", "2", "3", "4", "5"], i)
        out.append(gauge)
        counter = CounterMetricFamily(name + "_c", "Counted.", labels=["k_k"])
        counter.add_metric(["v"], i, created=12.5)
        out.append(counter)
    return out


@pytest.mark.parametrize("escaping", ESCAPINGS)
def test_both_formats_escape_names_as_prometheus_client_does(escaping: str) -> None:
    reference = [*_reference_families(), *_odd_names()]
    ours = [_ours(m) for m in reference]
    families = _Families(reference)
    assert render(ours, escaping) == generate_latest(families, escaping)  # type: ignore[arg-type]
    expected = openmetrics.generate_latest(families, escaping)
    assert render_openmetrics(ours, escaping) == expected


def test_openmetrics_is_laid_out_as_prometheus_clients_openmetrics_exposition() -> None:
    reference = _reference_families()
    ours = [_ours(m) for m in reference]
    expected = openmetrics.generate_latest(_Families(reference))
    assert render_openmetrics(ours) == expected
    # counters keep their names and _created samples, the page ends with # EOF
    assert b"# TYPE c counter\nc_total{" in expected and expected.endswith(b"\n# EOF\n")
    assert render_openmetrics([]) == b"# EOF\n"


def test_a_text_page_reads_back_into_the_families_it_was_rendered_from() -> None:
    # What the text format cannot tell apart (info, stateset and gauge histogram) aside, and
    # names outside the legacy sets (escaped, they may sort differently): ours have none.
    kept = ("counter", "gauge", "histogram", "summary", "unknown")
    reference = [m for m in _reference_families() if m.type in kept and "." not in m.name]
    ours = [_ours(m) for m in reference]
    for m in ours:  # more than one series, _created after each (as the series collectors have)
        if m.type == "counter":
            m.samples = [*m.samples, Sample(m.name + "_total", ("k",), ("2",), 4.0),
                         Sample(m.name + "_created", ("k",), ("2",), 1.0)]  # fmt: skip
    page = render(ours)
    assert render(parse_text(page)) == page
    assert render_openmetrics(parse_text(page)) == render_openmetrics(ours)
    assert render_openmetrics(parse_text(page)) == openmetrics.generate_latest(_Families(ours))


def test_an_empty_family_has_only_its_help_and_type_lines() -> None:
    family = MetricFamily("nothing", "counter", "Nothing yet.")
    assert render([family]) == b"# HELP nothing_total Nothing yet.\n# TYPE nothing_total counter\n"
    assert render([]) == b""


@pytest.mark.parametrize("setting", [None, "true", "TRUE", "1", "t", "T", "false", "0", "yes", ""])
def test_created_series_follow_prometheus_clients_environment_switch(setting: str | None) -> None:
    env = dict(os.environ)
    env.pop("PROMETHEUS_DISABLE_CREATED_SERIES", None)
    if setting is not None:
        env["PROMETHEUS_DISABLE_CREATED_SERIES"] = setting
    code = (
        "import sys\n"
        "from vllm_frontend.metrics.exposition import created_series_enabled\n"
        "ours = created_series_enabled()\n"
        "assert 'prometheus_client' not in sys.modules\n"
        "import prometheus_client.metrics\n"
        "print(ours, prometheus_client.metrics._use_created)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    assert out[0] == out[1]


def test_created_series_follow_prometheus_clients_switch_once_it_is_loaded() -> None:
    code = (
        "import prometheus_client.metrics as m\n"
        "from vllm_frontend.metrics.exposition import created_series_enabled as on\n"
        "m.disable_created_metrics(); a = on()\n"
        "m.enable_created_metrics(); b = on()\n"
        "print(a, b)\n"
    )
    env = {**os.environ, "PROMETHEUS_DISABLE_CREATED_SERIES": "true"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["False", "True"]
