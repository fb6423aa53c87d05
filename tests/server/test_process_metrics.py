"""The ``process_*``, ``python_gc_*`` and ``python_info`` series are prometheus_client's default
collectors' series: run both in this process at the same moment, the pages are the same with the
values masked, and the values are equal (or close, for the ones that move between two reads)."""

from __future__ import annotations

import gc
import re

from prometheus_client import (
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

from vllm_frontend.metrics.exposition import render
from vllm_frontend.metrics.http_series import HttpMetrics
from vllm_frontend.metrics.process import default_collectors
from vllm_frontend.metrics.registry import MetricsRegistry, render_metrics

_SAMPLE = re.compile(r"^(\S+) (\S+)$", re.M)


def _values(page: bytes) -> dict[str, float]:
    return {key: float(value) for key, value in _SAMPLE.findall(page.decode())}


def _masked(page: bytes) -> str:
    return _SAMPLE.sub(r"\1 <v>", page.decode())


def _both() -> tuple[bytes, bytes]:
    """Our page and prometheus_client's, read back to back with the collector paused."""
    reference = CollectorRegistry()
    GCCollector(registry=reference)
    PlatformCollector(registry=reference)
    ProcessCollector(registry=reference)
    ours = default_collectors()
    gc.disable()
    try:
        return render(f for c in ours for f in c.collect()), generate_latest(reference)
    finally:
        gc.enable()


def test_process_and_gc_series_are_prometheus_clients_at_the_same_moment() -> None:
    mine, theirs = _both()
    assert _masked(mine) == _masked(theirs)
    got, expected = _values(mine), _values(theirs)
    assert got.keys() == expected.keys()
    moving = {
        "process_cpu_seconds_total": 0.1,
        "process_resident_memory_bytes": 16 << 20,
        "process_virtual_memory_bytes": 64 << 20,
        "process_open_fds": 2,
    }
    for name, value in expected.items():
        tolerance = moving.get(name, 0.0)
        assert abs(got[name] - value) <= tolerance, (name, got[name], value)
    # the page has every family vLLM's frontend exports from prometheus_client's defaults
    for name in ("process_virtual_memory_bytes", "process_resident_memory_bytes",
                 "process_start_time_seconds", "process_cpu_seconds_total", "process_open_fds",
                 "process_max_fds", 'python_gc_objects_collected_total{generation="0"}',
                 'python_gc_objects_uncollectable_total{generation="2"}',
                 'python_gc_collections_total{generation="1"}'):  # fmt: skip
        assert name in got
    assert any(key.startswith("python_info{implementation=") for key in got)


def test_the_process_series_count_what_happens_to_the_process() -> None:
    before = _values(_both()[0])
    held = [open(__file__, "rb") for _ in range(5)]  # noqa: SIM115
    try:
        gc.collect(0)
        after = _values(_both()[0])
    finally:
        for f in held:
            f.close()
    assert after["process_open_fds"] >= before["process_open_fds"] + 5
    key = 'python_gc_collections_total{generation="0"}'
    assert after[key] >= before[key] + 1


def test_a_single_process_registry_starts_with_them_and_never_loads_them_otherwise() -> None:
    single = MetricsRegistry(process_metrics=True)
    HttpMetrics(single)
    page = render_metrics(single)[0].decode()
    assert page.startswith("# HELP python_gc_objects_collected_total ")
    assert page.index("process_max_fds") < page.index("http_requests_total")
    sibling = MetricsRegistry()
    HttpMetrics(sibling)
    assert "process_" not in render_metrics(sibling)[0].decode()
