"""Micro-benchmark of the request metrics (vllm_frontend.metrics.frontend.FrontendMetrics).

Measures what the frontend does per engine output and per request, as ``llm/generate.py`` calls
it (no explicit ``now``: the monotonic clock is read inside, as in production):

* ``observe_output`` of a decode step (one new token, no events): the per-token path;
* ``observe_output`` of a first token with QUEUED/SCHEDULED events: once per request;
* ``observe_prefill``, ``observe_finished`` and ``observe_parent_finished``: once per request;
* a whole 100-token request (prefill, 100 outputs, finish) per request and per token;
* one ``/metrics`` scrape after 10,000 requests on 2 engines, with the process series, as the
  server renders it (``render_metrics``: ``vllm_frontend.metrics.exposition``) and as
  prometheus_client's ``generate_latest`` renders the same families;
* the CPU time of the first scrape in a fresh interpreter (imports included), as ``serve`` pays
  it on its event loop.

Run: ``.venv/bin/python bench/bench_metrics.py``. Prints the best and the median of 200 short
repeats (the best is the least disturbed by other processes); no thresholds.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import NamedTuple

import prometheus_client

from vllm_frontend.metrics.frontend import FrontendMetrics
from vllm_frontend.metrics.http_series import HttpMetrics
from vllm_frontend.metrics.openmetrics import render_openmetrics
from vllm_frontend.metrics.registry import MetricsRegistry, render_metrics
from vllm_frontend.metrics.request_stats import RequestStats

MAX_MODEL_LEN = 4096
ENGINES = (0, 1)


class Event(NamedTuple):
    type: int
    timestamp: float


def measure(fn: Callable[[], object], inner: int, repeats: int = 200) -> tuple[float, float]:
    """(best, median) seconds per call of ``fn`` over ``repeats`` batches of ``inner`` calls."""
    for _ in range(inner):
        fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        samples.append((time.perf_counter() - start) / inner)
    return min(samples), statistics.median(samples)


def report(label: str, timing: tuple[float, float], per: str = "call") -> None:
    best, median = timing
    print(f"{label:<52} {best * 1e9:9.0f} ns/{per} (median {median * 1e9:.0f})")


def fresh_metrics() -> FrontendMetrics:
    return FrontendMetrics("bench-model", MAX_MODEL_LEN, ENGINES, registry=MetricsRegistry())


def decoding_stats() -> RequestStats:
    stats = RequestStats.start(engine_index=1)
    stats.num_generation_tokens = 5
    stats.first_token_ts = stats.last_token_ts = time.monotonic()
    return stats


def main() -> None:
    print(
        f"python {platform.python_version()}, "
        f"prometheus_client {importlib.metadata.version('prometheus_client')}, pid {os.getpid()}"
    )
    metrics = fresh_metrics()

    decoding = decoding_stats()
    report(
        "observe_output, decode token", measure(lambda: metrics.observe_output(decoding, 1), 2000)
    )

    events = [Event(1, time.monotonic()), Event(2, time.monotonic())]
    first = RequestStats.start(engine_index=1)

    def first_token() -> None:
        first.num_generation_tokens = 0
        first.scheduled_ts = 0.0
        metrics.observe_output(first, 1, events)

    report("observe_output, first token + 2 events", measure(first_token, 2000))

    prefill = RequestStats.start(engine_index=1)
    report("observe_prefill", measure(lambda: metrics.observe_prefill(prefill, 300), 2000))

    done = decoding_stats()
    done.queued_ts, done.scheduled_ts = done.arrival_monotonic, done.arrival_monotonic + 0.01

    def finished() -> None:
        done.finished = False
        metrics.observe_finished(done, "stop", 300, 256)

    report("observe_finished", measure(finished, 1000))
    report(
        "observe_parent_finished",
        measure(lambda: metrics.observe_parent_finished(1, 100, engine_index=1), 2000),
    )

    def whole_request() -> None:
        stats = RequestStats.start(engine_index=1)
        metrics.observe_prefill(stats, 300)
        metrics.observe_output(stats, 1, events)
        for _ in range(99):
            metrics.observe_output(stats, 1)
        metrics.observe_finished(stats, "length", 300, 100)
        metrics.observe_parent_finished(1, stats.num_generation_tokens, 1)

    best, median = measure(whole_request, 20)
    report("100-token request (prefill, outputs, finish)", (best, median), "request")
    report("  the same, per token", (best / 100, median / 100), "token")

    registry = MetricsRegistry(process_metrics=True)
    fill(registry)
    size = len(render_metrics(registry)[0])
    report(
        f"render_metrics ({size} B exposition)",
        measure(lambda: render_metrics(registry), 5, repeats=50),
        "scrape",
    )
    report(
        "  the same families as OpenMetrics",
        measure(lambda: render_openmetrics(registry.collect()), 5, repeats=50),
        "scrape",
    )
    report(
        "  prometheus_client.generate_latest, same families",
        measure(lambda: prometheus_client.generate_latest(registry), 5, repeats=50),  # type: ignore[arg-type]
        "scrape",
    )
    firsts = [first_scrape_cpu() for _ in range(5)]
    report("first scrape in a fresh process (CPU)", (min(firsts), statistics.median(firsts)))


def fill(registry: MetricsRegistry) -> None:
    """The series of 10,000 finished requests on 2 engines, and their HTTP exchanges."""
    scraped = FrontendMetrics("bench-model", MAX_MODEL_LEN, ENGINES, registry=registry)
    http = HttpMetrics(registry)
    for i in range(10_000):
        stats = RequestStats.start(engine_index=i % 2)
        scraped.observe_prefill(stats, 1 + i % 500)
        for _ in range(3):
            scraped.observe_output(stats, 1)
        scraped.observe_finished(stats, "stop", 1 + i % 500, 16)
        scraped.observe_parent_finished(1, 3, i % 2)
        http.observe("POST", "/v1/completions", 200, 100 + i % 50, 900, 0.01 * (i % 40))


_FIRST_SCRAPE = """
import sys, time
sys.path.insert(0, {bench!r})
from bench_metrics import fill
from vllm_frontend.metrics.registry import MetricsRegistry, render_metrics
registry = MetricsRegistry(process_metrics=True)
fill(registry)
start = time.process_time()
render_metrics(registry)
print(time.process_time() - start)
"""


def first_scrape_cpu() -> float:
    """CPU seconds of the first ``render_metrics`` call in a fresh interpreter."""
    code = _FIRST_SCRAPE.format(bench=os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout)


if __name__ == "__main__":
    main()
