"""The periodic stats log line is vLLM's ``LoggingStatLogger`` line: both are fed the same
engine steps (tokens computed and generated, preemptions, scheduler and prefix-cache stats) over
the same intervals, and must write the same lines at the same levels."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest

from vllm_frontend.engine.protocol import PrefixCacheStats, SchedulerStats
from vllm_frontend.metrics.frontend import FrontendMetrics
from vllm_frontend.metrics.stats_log import StatsLog

pytestmark = pytest.mark.oracle

# One interval's steps: (computed prompt tokens, generated tokens, preempted requests,
# scheduler stats fields, prefix (requests, queries, hits, reset), connector prefix or None)
Step = tuple[int, int, int, dict[str, Any], tuple[int, int, int, bool], Any]

INTERVALS: list[tuple[float, list[Step]]] = [
    (10.0, [(40, 3, 0, {"num_running_reqs": 2, "num_waiting_reqs": 1, "kv_cache_usage": 0.125},
             (2, 40, 16, False), None),
            (0, 7, 1, {"num_running_reqs": 2, "num_skipped_waiting_reqs": 3,
                       "kv_cache_usage": 0.25}, (0, 0, 0, False), (1, 10, 5, False))]),
    (10.0, []),  # nothing this interval, something the last: still INFO
    (10.0, []),  # idle: DEBUG
    (4.0, [(0, 1, 0, {"num_kv_fetch_reqs_by_stage": {"in_progress": 2}},
            (1, 8, 8, True), None)]),
]  # fmt: skip


def _vllm_lines(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    from vllm.v1.metrics import loggers
    from vllm.v1.metrics import stats as vstats

    clock = [1000.0]
    monkeypatch.setattr(loggers.time, "monotonic", lambda: clock[0])
    config = SimpleNamespace(
        device_config=SimpleNamespace(device_type="cpu"),
        model_config=None,
        kv_transfer_config=None,
        ec_transfer_config=None,
        observability_config=SimpleNamespace(cudagraph_metrics=False, enable_mfu_metrics=False),
    )
    logger = loggers.LoggingStatLogger(config, engine_index=0)  # type: ignore[arg-type]
    caplog.clear()
    for seconds, steps in INTERVALS:
        for computed, generated, preempted, sched, prefix, connector in steps:
            iteration = vstats.IterationStats()
            iteration.prompt_token_stats.computed = computed
            iteration.num_generation_tokens = generated
            iteration.num_preempted_reqs = preempted
            stats = vstats.SchedulerStats(**sched)
            r, q, h, reset = prefix
            stats.prefix_cache_stats = vstats.PrefixCacheStats(reset=reset, requests=r,
                                                               queries=q, hits=h)  # fmt: skip
            if connector is not None:
                r, q, h, reset = connector
                stats.connector_prefix_cache_stats = vstats.PrefixCacheStats(
                    reset=reset, requests=r, queries=q, hits=h
                )
            logger.record(stats, iteration)
        clock[0] += seconds
        logger.log()
    return [(r.levelno, r.getMessage()) for r in caplog.records if "Engine 000" in r.getMessage()]


def _our_lines(caplog: pytest.LogCaptureFixture) -> list[Any]:
    metrics = FrontendMetrics("m", 128, [0])
    latest: dict[int, SchedulerStats] = {}
    log = StatsLog(metrics, lambda: latest, [0], device="CPU")
    now = 1000.0
    log.log(now)  # sets the interval's start, as vLLM's logger does when made
    caplog.clear()
    key = ("m", "0")
    for seconds, steps in INTERVALS:
        for computed, generated, preempted, sched, prefix, connector in steps:
            metrics.step_series(0).local_compute.inc(computed)
            metrics.generation_tokens.child(key).value += generated
            metrics.num_preemptions.child(key).value += preempted
            r, q, h, reset = prefix
            stats = SchedulerStats(**sched)
            stats.prefix_cache_stats = PrefixCacheStats(reset=reset, requests=r, queries=q, hits=h)
            ext = None
            if connector is not None:
                r, q, h, reset = connector
                ext = PrefixCacheStats(reset=reset, requests=r, queries=q, hits=h)
            log.observe_prefix(0, stats.prefix_cache_stats, ext)
            latest[0] = stats
        now += seconds
        log.log(now)
    return [(r.levelno, r.getMessage()) for r in caplog.records if "Engine 000" in r.getMessage()]


def test_lines_are_vllms(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    caplog.set_level(logging.DEBUG)
    theirs = _vllm_lines(caplog, monkeypatch)
    ours = _our_lines(caplog)
    assert len(theirs) == len(INTERVALS)
    assert ours == theirs
    assert theirs[2][0] == logging.DEBUG and theirs[1][0] == logging.INFO
