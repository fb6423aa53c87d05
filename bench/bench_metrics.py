"""Micro-benchmark of the request metrics (vllm_frontend.llm.metrics.FrontendMetrics).

Measures what the frontend does per engine output and per request, as ``llm/generate.py`` calls
it (no explicit ``now``: the monotonic clock is read inside, as in production):

* ``observe_output`` of a decode step (one new token, no events): the per-token path;
* ``observe_output`` of a first token with QUEUED/SCHEDULED events: once per request;
* ``observe_prefill``, ``observe_finished`` and ``observe_parent_finished``: once per request;
* a whole 100-token request (prefill, 100 outputs, finish) per request and per token;
* one ``/metrics`` scrape (``generate_latest``) after 10,000 requests on 2 engines.

Run: ``.venv/bin/python bench/bench_metrics.py``. Prints the best and the median of 200 short
repeats (the best is the least disturbed by other processes); no thresholds.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import statistics
import time
from collections.abc import Callable
from typing import NamedTuple

import prometheus_client

from vllm_frontend.llm.metrics import FrontendMetrics, RequestStats

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
    return FrontendMetrics(
        "bench-model", MAX_MODEL_LEN, ENGINES, registry=prometheus_client.CollectorRegistry()
    )


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

    registry = prometheus_client.CollectorRegistry()
    scraped = FrontendMetrics("bench-model", MAX_MODEL_LEN, ENGINES, registry=registry)
    for i in range(10_000):
        stats = RequestStats.start(engine_index=i % 2)
        scraped.observe_prefill(stats, 1 + i % 500)
        for _ in range(3):
            scraped.observe_output(stats, 1)
        scraped.observe_finished(stats, "stop", 1 + i % 500, 16)
        scraped.observe_parent_finished(1, 3, i % 2)
    size = len(prometheus_client.generate_latest(registry))
    report(
        f"generate_latest ({size} B exposition)",
        measure(lambda: prometheus_client.generate_latest(registry), 5, repeats=50),
        "scrape",
    )


if __name__ == "__main__":
    main()
