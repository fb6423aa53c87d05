"""The ``vllm:`` families computed per engine message and per request, against sums worked out
here from vLLM's definitions (``vllm/v1/metrics/stats.py``, ``vllm/v1/metrics/loggers.py``,
``vllm/v1/engine/async_llm.py``), fed with messages encoded as a vLLM engine writes them."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from prometheus_client import CollectorRegistry

from vllm_frontend.engine.codec import decode_outputs
from vllm_frontend.engine.protocol import EngineCoreOutputs, SchedulerStats
from vllm_frontend.llm.generate import LLM
from vllm_frontend.llm.step_metrics import observe_step
from vllm_frontend.metrics.engine_gauges import EngineGauges
from vllm_frontend.metrics.frontend import FrontendMetrics
from vllm_frontend.metrics.request_stats import RequestStats

MODEL = "tiny"


def engine_message(
    engine: int, outputs: list[dict[str, Any]], stats: dict[str, Any] | None = None
) -> EngineCoreOutputs:
    """An outputs message as vLLM's engine encodes it (array structs with trailing defaults
    left out, dataclasses as maps), decoded by the engine client's decoder."""
    wire_outputs = []
    for out in outputs:
        fields: list[Any] = [out["id"], out.get("tokens", [])]
        if "prefill" in out:
            # new_logprobs … trace_headers at their defaults, then prefill_stats (index 11).
            fields += [None, None, None, None, None, None, None, None, None, out["prefill"]]
        wire_outputs.append(fields)
    payload = msgspec.msgpack.encode([engine, wire_outputs, stats, 12.5])
    return decode_outputs([payload])


def prefill(prompt: int, local: int = 0, external: int = 0) -> dict[str, int]:
    """vLLM's PrefillStats.set + finalize for a prompt with cached tokens."""
    cached = local + external
    return {
        "num_prompt_tokens": prompt,
        "num_computed_tokens": prompt - cached,
        "num_cached_tokens": cached,
        "num_local_cached_tokens": local,
        "num_external_cached_tokens": external,
        "num_cache_creation_tokens": 0,
    }


def scheduler_stats(queries: int, hits: int, **extra: Any) -> dict[str, Any]:
    prefix = {"reset": False, "requests": 1, "queries": queries, "hits": hits,
              "preempted_requests": 0, "preempted_queries": 0, "preempted_hits": 0,
              "hits_by_source": {}}  # fmt: skip
    return {"num_running_reqs": 1, "num_waiting_reqs": 0, "prefix_cache_stats": prefix, **extra}


@pytest.fixture
def metrics() -> tuple[FrontendMetrics, CollectorRegistry]:
    registry = CollectorRegistry()
    return FrontendMetrics(MODEL, 1024, (0, 1), registry), registry


def value(registry: CollectorRegistry, name: str, engine: str = "0", **labels: str) -> float:
    got = registry.get_sample_value(name, {"model_name": MODEL, "engine": engine, **labels})
    assert got is not None, (name, labels)
    return got


def test_iteration_tokens_are_the_steps_computed_prompt_tokens_plus_generated_tokens(
    metrics: tuple[FrontendMetrics, CollectorRegistry],
) -> None:
    m, registry = metrics
    tracked = {"a", "b"}
    # Step 1: a's prefill (300 prompt tokens, 128 found in the prefix cache) and b's (20).
    observe_step(m, engine_message(0, [
        {"id": "a", "tokens": [5], "prefill": prefill(300, local=128)},
        {"id": "b", "tokens": [6], "prefill": prefill(20)},
    ]), tracked)  # fmt: skip
    # Step 2: one decode token each; c is no longer tracked (aborted here): not counted.
    observe_step(m, engine_message(0, [
        {"id": "a", "tokens": [7]}, {"id": "b", "tokens": [8]}, {"id": "c", "tokens": [9]},
    ]), tracked)  # fmt: skip
    # Step 3: only an untracked output: vLLM still observes the step, with 0 tokens.
    observe_step(m, engine_message(0, [{"id": "c", "tokens": [1, 2]}]), tracked)
    # Stats only, no outputs: no step observed.
    observe_step(m, engine_message(0, [], scheduler_stats(0, 0)), tracked)

    steps = [(300 - 128) + 20 + 2, 2, 0]
    assert value(registry, "vllm:iteration_tokens_total_count") == len(steps)
    assert value(registry, "vllm:iteration_tokens_total_sum") == sum(steps)
    for bound in ("1.0", "8.0", "128.0", "256.0"):
        expected = sum(1 for s in steps if s <= float(bound))
        assert value(registry, "vllm:iteration_tokens_total_bucket", le=bound) == expected
    by_source = "vllm:prompt_tokens_by_source_total"
    assert value(registry, by_source, source="local_compute") == 172 + 20
    assert value(registry, by_source, source="local_cache_hit") == 128
    assert value(registry, by_source, source="external_kv_transfer") == 0
    assert value(registry, "vllm:prompt_tokens_cached_total") == 128
    # Engine 1 saw nothing: its series exist at 0.
    assert value(registry, "vllm:iteration_tokens_total_count", engine="1") == 0


def test_prefix_cache_counters_add_up_every_messages_scheduler_stats(
    metrics: tuple[FrontendMetrics, CollectorRegistry],
) -> None:
    m, registry = metrics
    connector = {"reset": False, "requests": 1, "queries": 64, "hits": 48,
                 "preempted_requests": 0, "preempted_queries": 0, "preempted_hits": 0,
                 "hits_by_source": {"host": 32, "disk": 16}}  # fmt: skip
    observe_step(m, engine_message(1, [], scheduler_stats(200, 128)), set())
    observe_step(m, engine_message(1, [], scheduler_stats(50, 0)), set())
    observe_step(
        m,
        engine_message(1, [], scheduler_stats(10, 0, connector_prefix_cache_stats=connector)),
        set(),
    )
    assert value(registry, "vllm:prefix_cache_queries_total", "1") == 260
    assert value(registry, "vllm:prefix_cache_hits_total", "1") == 128
    assert value(registry, "vllm:external_prefix_cache_queries_total", "1") == 64
    assert value(registry, "vllm:external_prefix_cache_hits_total", "1") == 48
    cached = "vllm:prompt_tokens_cached_by_source_total"
    tiers = {tier: value(registry, cached, "1", source=tier)
             for tier in ("device", "host", "p2p", "disk", "external_unspecified")}  # fmt: skip
    assert tiers == {"device": 128, "host": 32, "p2p": 0, "disk": 16, "external_unspecified": 0}
    # "sums to vllm:prefix_cache_hits + vllm:external_prefix_cache_hits" (vLLM's help text).
    assert sum(tiers.values()) == 128 + 48
    assert value(registry, "vllm:prefix_cache_queries_total", "0") == 0


def test_performance_estimates_count_only_messages_that_carry_them(
    metrics: tuple[FrontendMetrics, CollectorRegistry],
) -> None:
    m, registry = metrics
    perf = {"num_flops_per_gpu": 3 * 10**12, "num_read_bytes_per_gpu": 4096,
            "num_write_bytes_per_gpu": 1024, "debug_stats": None}  # fmt: skip
    zero = {"num_flops_per_gpu": 0, "num_read_bytes_per_gpu": 0, "num_write_bytes_per_gpu": 0}
    for stats in (perf, zero, perf, None):
        observe_step(m, engine_message(0, [], scheduler_stats(0, 0, perf_stats=stats)), set())
    assert value(registry, "vllm:estimated_flops_per_gpu_total") == 6 * 10**12
    assert value(registry, "vllm:estimated_read_bytes_per_gpu_total") == 8192
    assert value(registry, "vllm:estimated_write_bytes_per_gpu_total") == 2048


class _Event:
    def __init__(self, type: int, timestamp: float) -> None:
        self.type, self.timestamp = type, timestamp


def test_preemptions_and_prefill_kv_computed_tokens_per_finished_request(
    metrics: tuple[FrontendMetrics, CollectorRegistry],
) -> None:
    m, registry = metrics
    queued, scheduled, preempted = 1, 2, 3
    requests = [  # (prompt tokens, cached tokens, preemptions)
        (300, 128, 0),
        (40, 0, 2),
        (500, 256, 7),
    ]
    for prompt, cached, preemptions in requests:
        stats = RequestStats(1.7e9, 0.0, 0)
        m.observe_prefill(stats, prompt)
        m.observe_output(stats, 1, [_Event(queued, 1.0), _Event(scheduled, 1.1)], 0.5, cached)
        for i in range(preemptions):
            m.observe_output(stats, 1, [_Event(preempted, 2.0 + i), _Event(scheduled, 3.0)], 1.0)
        m.observe_finished(stats, "length", prompt, 16, 2.0)
    assert value(registry, "vllm:num_preemptions_total") == 9
    assert value(registry, "vllm:request_num_preemptions_count") == 3
    assert value(registry, "vllm:request_num_preemptions_sum") == 9
    buckets = {"1.0": 1, "2.0": 2, "5.0": 2, "10.0": 3, "+Inf": 3}
    for bound, count in buckets.items():
        assert value(registry, "vllm:request_num_preemptions_bucket", le=bound) == count
    computed = [172, 40, 244]
    assert value(registry, "vllm:request_prefill_kv_computed_tokens_sum") == sum(computed)
    for bound, count in {"50.0": 1, "100.0": 1, "200.0": 2, "500.0": 3}.items():
        assert value(registry, "vllm:request_prefill_kv_computed_tokens_bucket", le=bound) == count


def test_fixed_families_show_what_this_frontend_never_does(
    metrics: tuple[FrontendMetrics, CollectorRegistry],
) -> None:
    m, registry = metrics
    for reason in ("max_num_queued_reqs", "max_num_queued_tokens"):
        labels = {"model_name": MODEL, "reason": reason}
        assert registry.get_sample_value("vllm:admission_rejections_total", labels) == 0
    m.record_admission_rejection("max_num_queued_reqs")
    labels = {"model_name": MODEL, "reason": "max_num_queued_reqs"}
    assert registry.get_sample_value("vllm:admission_rejections_total", labels) == 1
    for engine in ("0", "1"):
        assert value(registry, "vllm:mm_cache_queries_total", engine) == 0
        assert value(registry, "vllm:mm_cache_hits_total", engine) == 0


def test_scheduler_gauges_split_waiting_requests_by_reason() -> None:
    registry = CollectorRegistry()
    latest = {
        0: SchedulerStats(num_running_reqs=3, num_waiting_reqs=4, num_skipped_waiting_reqs=2,
                          kv_cache_usage=0.25),
    }  # fmt: skip
    registry.register(EngineGauges(MODEL, [0, 1], lambda: latest))
    assert value(registry, "vllm:num_requests_running") == 3
    # vLLM's vllm:num_requests_waiting is the sum of both reasons.
    assert value(registry, "vllm:num_requests_waiting") == 4 + 2
    assert value(registry, "vllm:num_requests_waiting_by_reason", reason="capacity") == 4
    assert value(registry, "vllm:num_requests_waiting_by_reason", reason="deferred") == 2
    assert value(registry, "vllm:kv_cache_usage_perc") == 0.25
    for engine in ("0", "1"):
        states = {state: value(registry, "vllm:engine_sleep_state", engine, sleep_state=state)
                  for state in ("awake", "weights_offloaded", "discard_all")}  # fmt: skip
        assert states == {"awake": 1, "weights_offloaded": 0, "discard_all": 0}
    assert value(registry, "vllm:num_requests_waiting_by_reason", "1", reason="deferred") == 0


def test_the_llm_has_the_engine_client_report_each_message_to_the_metrics(
    metrics: tuple[FrontendMetrics, CollectorRegistry],
) -> None:
    m, registry = metrics

    class Client:
        observer: Any = None

        def observe_steps(self, observer: Any) -> None:
            self.observer = observer

    client = Client()
    LLM(client, dict, m)
    client.observer(engine_message(0, [{"id": "x", "tokens": [1, 2, 3]}]), {"x"})
    assert value(registry, "vllm:iteration_tokens_total_sum") == 3
