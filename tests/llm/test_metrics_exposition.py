"""/metrics shows, byte for byte, what prometheus_client's own Counter and Histogram would show.

FrontendMetrics keeps its ``vllm:*`` counters and histograms in plain Python accumulators; the
reference here is built the way vLLM (``vllm/v1/metrics/loggers.py``) and our earlier code build
them, with ``prometheus_client.Counter``/``Histogram``, and both get the same random sequence of
observations. Only the ``_created`` timestamps may differ (each side stamps its own series).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram
from tests.support.exposition import assert_same_exposition, prometheus_view

from vllm_frontend.engine.protocol import (
    EngineCoreOutput,
    EngineCoreOutputs,
    PrefillStats,
    PrefixCacheStats,
    SchedulerStats,
)
from vllm_frontend.llm.step_metrics import observe_step
from vllm_frontend.metrics.frontend import FrontendMetrics
from vllm_frontend.metrics.registry import MetricsRegistry
from vllm_frontend.metrics.request_stats import RequestStats
from vllm_frontend.metrics.vllm_families import FINISH_REASON_LABELS

MODEL = "org/tiny-model"
LABELS = ["model_name", "engine"]

# vLLM's bucket bounds (vllm/v1/metrics/buckets.py).
REQUEST_LATENCY = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                   60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip
TTFT = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
        10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
ITL = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
       20.0, 40.0, 80.0)  # fmt: skip
PARAMS_N = (1, 2, 5, 10, 20)
ITERATION_TOKENS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
NUM_PREEMPTIONS = (1, 2, 3, 4, 5, 10, 20)
PROMPT_SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")
CACHE_TIERS = ("device", "host", "p2p", "disk", "external_unspecified")


def one_two_five(max_value: int) -> list[int]:
    """vLLM's ``build_1_2_5_buckets``: 1, 2, 5, 10, 20, 50, … not above ``max_value``."""
    out = []
    for exponent in range(20):
        for mantissa in (1, 2, 5):
            if mantissa * 10**exponent <= max_value:
                out.append(mantissa * 10**exponent)
    return out


class Event(NamedTuple):
    type: int
    timestamp: float


class PrometheusReference:
    """The same observation API over prometheus_client's metrics, as vLLM defines them."""

    def __init__(
        self, max_model_len: int, engine_indexes: Sequence[int], registry: CollectorRegistry
    ) -> None:
        tokens = one_two_five(max_model_len)

        def counter(name: str, doc: str, extra: Sequence[str] = ()) -> Counter:
            return Counter(name, doc, [*LABELS, *extra], registry=registry)

        def histogram(name: str, doc: str, buckets: Sequence[float]) -> Histogram:
            return Histogram(name, doc, LABELS, buckets=buckets, registry=registry)

        mfu = " (for Model Flops Utilization calculations)."
        self.flops = counter(
            "vllm:estimated_flops_per_gpu_total",
            "Estimated number of floating point operations per GPU" + mfu,
        )
        self.read_bytes = counter(
            "vllm:estimated_read_bytes_per_gpu_total",
            "Estimated number of bytes read from memory per GPU" + mfu,
        )
        self.write_bytes = counter(
            "vllm:estimated_write_bytes_per_gpu_total",
            "Estimated number of bytes written to memory per GPU" + mfu,
        )
        self.prefix_queries = counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
        )
        self.prefix_hits = counter(
            "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens."
        )
        self.external_queries = counter(
            "vllm:external_prefix_cache_queries",
            "External prefix cache queries from KV connector cross-instance cache sharing, "
            "in terms of number of queried tokens.",
        )
        self.external_hits = counter(
            "vllm:external_prefix_cache_hits",
            "External prefix cache hits from KV connector cross-instance cache sharing, "
            "in terms of number of cached tokens.",
        )
        self.mm_queries = counter(
            "vllm:mm_cache_queries",
            "Multi-modal cache queries, in terms of number of queried items.",
        )
        self.mm_hits = counter(
            "vllm:mm_cache_hits", "Multi-modal cache hits, in terms of number of cached items."
        )
        self.preemptions = counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine."
        )
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.by_source = counter(
            "vllm:prompt_tokens_by_source", "Number of prompt tokens by source.", ["source"]
        )
        self.cached = counter(
            "vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external)."
        )
        self.cached_by_source = counter(
            "vllm:prompt_tokens_cached_by_source",
            "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), "
            "host (offloaded to DRAM), disk, p2p (transferred from another vLLM instance) or "
            "external_unspecified. Counted at admission; sums to vllm:prefix_cache_hits + "
            "vllm:external_prefix_cache_hits.",
            ["source"],
        )
        self.generation_tokens = counter(
            "vllm:generation_tokens", "Number of generation tokens processed."
        )
        self.success = counter(
            "vllm:request_success", "Count of successfully processed requests.",
            ["finished_reason"],
        )  # fmt: skip
        self.admission = Counter(
            "vllm:admission_rejections",
            "Number of admission attempts rejected by a queue limit, by reason.",
            ["model_name", "reason"],
            registry=registry,
        )
        self.prompt_len = histogram(
            "vllm:request_prompt_tokens", "Number of prefill tokens processed.", tokens
        )
        self.generation_len = histogram(
            "vllm:request_generation_tokens", "Number of generation tokens processed.", tokens
        )
        self.iteration_tokens = histogram(
            "vllm:iteration_tokens_total",
            "Histogram of number of tokens per engine_step.",
            ITERATION_TOKENS,
        )
        self.max_generation_len = histogram(
            "vllm:request_max_num_generation_tokens",
            "Histogram of maximum number of requested generation tokens.",
            tokens,
        )
        self.n = histogram(
            "vllm:request_params_n", "Histogram of the n request parameter.", PARAMS_N
        )
        self.max_tokens = histogram(
            "vllm:request_params_max_tokens",
            "Histogram of the max_tokens request parameter.",
            tokens,
        )
        self.ttft = histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            TTFT,
        )
        self.itl = histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            ITL,
        )
        self.tpot = histogram(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            ITL,
        )
        self.e2e = histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            REQUEST_LATENCY,
        )
        self.queue = histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            REQUEST_LATENCY,
        )
        self.inference = histogram(
            "vllm:request_inference_time_seconds",
            "Histogram of time spent in RUNNING phase for request.",
            REQUEST_LATENCY,
        )
        self.prefill = histogram(
            "vllm:request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase for request.",
            REQUEST_LATENCY,
        )
        self.decode = histogram(
            "vllm:request_decode_time_seconds",
            "Histogram of time spent in DECODE phase for request.",
            REQUEST_LATENCY,
        )
        self.request_preemptions = histogram(
            "vllm:request_num_preemptions",
            "Histogram of the number of times a request was preempted.",
            NUM_PREEMPTIONS,
        )
        self.kv_computed = histogram(
            "vllm:request_prefill_kv_computed_tokens",
            "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
            tokens,
        )
        # Children in the order vLLM's PrometheusStatLogger.__init__ creates them.
        per_engine = [
            self.flops, self.read_bytes, self.write_bytes, self.prefix_queries,
            self.prefix_hits, self.external_queries, self.external_hits, self.mm_queries,
            self.mm_hits, self.preemptions, self.prompt_tokens, self.cached,
            self.generation_tokens, self.prompt_len, self.generation_len,
            self.iteration_tokens, self.max_generation_len, self.n, self.max_tokens, self.ttft,
            self.itl, self.tpot, self.e2e, self.queue, self.inference, self.prefill,
            self.decode, self.request_preemptions, self.kv_computed,
        ]  # fmt: skip
        for metric in per_engine:
            for engine in engine_indexes:
                metric.labels(MODEL, str(engine))
        for labelled, values in ((self.by_source, PROMPT_SOURCES),
                                 (self.cached_by_source, CACHE_TIERS),
                                 (self.success, FINISH_REASON_LABELS)):  # fmt: skip
            for value in values:
                for engine in engine_indexes:
                    labelled.labels(MODEL, str(engine), value)
        for reason in ("max_num_queued_reqs", "max_num_queued_tokens"):
            self.admission.labels(MODEL, reason)

    def observe_step(self, message: EngineCoreOutputs, tracked: set[str]) -> None:
        """vLLM's output_handler for one message: an IterationStats over the tracked requests'
        outputs, then PrometheusStatLogger.record with the message's scheduler stats."""
        engine = str(message.engine_index)
        if message.outputs:
            outputs = [o for o in message.outputs if o.request_id in tracked]
            firsts = [o.prefill_stats for o in outputs if o.prefill_stats is not None]
            generated = sum(len(o.new_token_ids) for o in outputs)
            computed = sum(p.num_computed_tokens for p in firsts)
            for source, total in (
                ("local_compute", computed),
                ("local_cache_hit", sum(p.num_local_cached_tokens for p in firsts)),
                ("external_kv_transfer", sum(p.num_external_cached_tokens for p in firsts)),
            ):
                self.by_source.labels(MODEL, engine, source).inc(total)
            self.cached.labels(MODEL, engine).inc(sum(p.num_cached_tokens for p in firsts))
            self.iteration_tokens.labels(MODEL, engine).observe(computed + generated)
        stats = message.scheduler_stats
        if stats is None:
            return
        self.prefix_queries.labels(MODEL, engine).inc(stats.prefix_cache_stats.queries)
        self.prefix_hits.labels(MODEL, engine).inc(stats.prefix_cache_stats.hits)
        self.cached_by_source.labels(MODEL, engine, "device").inc(stats.prefix_cache_stats.hits)
        connector = stats.connector_prefix_cache_stats
        if connector is not None:
            self.external_queries.labels(MODEL, engine).inc(connector.queries)
            self.external_hits.labels(MODEL, engine).inc(connector.hits)
            for tier, count in connector.hits_by_source.items():
                self.cached_by_source.labels(MODEL, engine, tier).inc(count)
        perf = stats.perf_stats
        if perf is not None:
            values = [perf.get(k, 0) for k in ("num_flops_per_gpu", "num_read_bytes_per_gpu",
                                               "num_write_bytes_per_gpu")]  # fmt: skip
            if any(values):
                for metric, value in zip(
                    (self.flops, self.read_bytes, self.write_bytes), values, strict=True
                ):
                    metric.labels(MODEL, engine).inc(value)

    def observe_prefill(self, stats: RequestStats, num_prompt_tokens: int) -> None:
        self.prompt_tokens.labels(MODEL, str(stats.engine_index)).inc(num_prompt_tokens)

    def observe_output(
        self,
        stats: RequestStats,
        num_new_tokens: int,
        events: Sequence[Event],
        now: float,
        num_cached_tokens: int | None = None,
    ) -> None:
        if stats.finished:
            return
        if num_cached_tokens is not None:
            stats.num_cached_tokens = num_cached_tokens
        for event in events:
            if event.type == 1:
                stats.queued_ts = event.timestamp
            elif event.type == 2 and stats.scheduled_ts == 0.0:
                stats.scheduled_ts = event.timestamp
            elif event.type == 3:
                stats.num_preemptions += 1
                self.preemptions.labels(MODEL, str(stats.engine_index)).inc()
        if num_new_tokens <= 0:
            return
        engine = str(stats.engine_index)
        # vLLM resolves the three per-token children together, at a request's first token.
        ttft, itl = self.ttft.labels(MODEL, engine), self.itl.labels(MODEL, engine)
        self.generation_tokens.labels(MODEL, engine).inc(num_new_tokens)
        if stats.num_generation_tokens == 0:
            ttft.observe(now - stats.arrival_monotonic)
            stats.first_token_ts = now
        else:
            itl.observe(now - stats.last_token_ts)
        stats.last_token_ts = now
        stats.num_generation_tokens += num_new_tokens

    def observe_finished(
        self,
        stats: RequestStats,
        finish_reason: str,
        num_prompt_tokens: int,
        max_tokens: int | None,
        now: float,
    ) -> None:
        if stats.finished:
            return
        stats.finished = True
        labels = (MODEL, str(stats.engine_index))
        reason = finish_reason if finish_reason in FINISH_REASON_LABELS else "abort"
        self.success.labels(*labels, reason).inc()
        self.e2e.labels(*labels).observe(now - stats.arrival_monotonic)
        self.prompt_len.labels(*labels).observe(num_prompt_tokens)
        self.generation_len.labels(*labels).observe(stats.num_generation_tokens)
        if max_tokens:
            self.max_tokens.labels(*labels).observe(max_tokens)
        first, last, n_gen = stats.first_token_ts, stats.last_token_ts, stats.num_generation_tokens
        decode = last - first if first else 0.0
        self.tpot.labels(*labels).observe(decode / (n_gen - 1) if n_gen > 1 else 0)
        self.decode.labels(*labels).observe(decode)
        self.request_preemptions.labels(*labels).observe(stats.num_preemptions)
        self.kv_computed.labels(*labels).observe(
            num_prompt_tokens - max(stats.num_cached_tokens, 0)
        )
        if stats.scheduled_ts:
            self.queue.labels(*labels).observe(max(0.0, stats.scheduled_ts - stats.queued_ts))
            if first:
                self.prefill.labels(*labels).observe(max(0.0, first - stats.scheduled_ts))
                self.inference.labels(*labels).observe(max(0.0, last - stats.scheduled_ts))

    def observe_parent_finished(self, n: int, max_generation_tokens: int, engine: int) -> None:
        self.n.labels(MODEL, str(engine)).observe(n)
        self.max_generation_len.labels(MODEL, str(engine)).observe(max_generation_tokens)


class Pair(NamedTuple):
    ours: FrontendMetrics
    ours_registry: MetricsRegistry
    reference: PrometheusReference
    reference_registry: CollectorRegistry


def make_pair(max_model_len: int, engines: Sequence[int]) -> Pair:
    ours_registry, reference_registry = MetricsRegistry(), CollectorRegistry()
    return Pair(
        FrontendMetrics(MODEL, max_model_len, engines, ours_registry),
        ours_registry,
        PrometheusReference(max_model_len, engines, reference_registry),
        reference_registry,
    )


def interesting_time(rng: random.Random) -> float:
    """Often exactly a bucket bound (``le`` is inclusive), else anything from 0 to beyond +Inf."""
    pick = rng.random()
    if pick < 0.4:
        return float(rng.choice(TTFT + ITL + REQUEST_LATENCY))
    if pick < 0.5:
        return rng.choice([0.0, 1e-9, 9000.0, 1e6])
    return rng.expovariate(rng.choice([100.0, 10.0, 0.5]))


def drive(
    rng: random.Random, pair: Pair, engines: Sequence[int], steps: int, stray_steps: bool = True
) -> None:
    """Interleaved requests over ``engines`` (plus sometimes an engine not configured), each side
    getting the same calls with the same arguments (``stray_steps``: engine messages from the
    unconfigured engine too, whose step series ours creates all at once, on the first)."""
    # One RequestStats per side: the observe calls update them.
    active: list[tuple[RequestStats, RequestStats, int]] = []
    for _ in range(steps):
        action = rng.random()
        if action < 0.2 or not active:
            engine = rng.choice(engines) if rng.random() < 0.9 else 7
            # Arrival at 0 makes TTFT and e2e latency exactly the `now` given.
            arrival = 0.0 if rng.random() < 0.5 else rng.uniform(0, 3)
            prompt_len = rng.choice([1, 2, 5, 7, 100, 999, 1000, 3000])
            ours = RequestStats(1.7e9 + arrival, arrival, engine)
            ref = RequestStats(1.7e9 + arrival, arrival, engine)
            active.append((ours, ref, prompt_len))
            continue
        ours, ref, prompt_len = rng.choice(active)
        now = interesting_time(rng) if rng.random() < 0.5 else ref.last_token_ts + rng.random()
        if action < 0.8:
            tokens = rng.choice([0, 1, 1, 1, 2, 5])
            events = [
                Event(rng.choice([1, 2, 2, 3]), interesting_time(rng))
                for _ in range(rng.choice([0, 0, 0, 1, 2]))
            ]
            cached = None
            if ref.num_generation_tokens == 0 and tokens and not ref.finished:
                pair.ours.observe_prefill(ours, prompt_len)
                pair.reference.observe_prefill(ref, prompt_len)
                cached = rng.choice([None, 0, prompt_len // 2, prompt_len])
            pair.ours.observe_output(ours, tokens, events, now, num_cached_tokens=cached)
            pair.reference.observe_output(ref, tokens, events, now, num_cached_tokens=cached)
            if rng.random() < 0.5:
                message, tracked = random_message(rng, engines, stray_steps)
                observe_step(pair.ours, message, tracked)
                pair.reference.observe_step(message, tracked)
            continue
        reason = rng.choice([*FINISH_REASON_LABELS, "timeout"])
        max_tokens = rng.choice([None, 0, 1, 16, 100, 5000])
        pair.ours.observe_finished(ours, reason, prompt_len, max_tokens, now)
        pair.reference.observe_finished(ref, reason, prompt_len, max_tokens, now)
        if rng.random() < 0.8:
            active.remove((ours, ref, prompt_len))
            n = rng.choice([1, 2, 3, 20, 21])
            pair.ours.observe_parent_finished(n, ref.num_generation_tokens, ref.engine_index)
            pair.reference.observe_parent_finished(n, ref.num_generation_tokens, ref.engine_index)
        # else: the request stays and gets later outputs / finishes, which must be ignored.


def random_message(
    rng: random.Random, engines: Sequence[int], stray: bool = True
) -> tuple[EngineCoreOutputs, set[str]]:
    """An engine's outputs message: some requests' outputs (first ones with prefill stats),
    often scheduler stats, sometimes a KV connector's and performance estimates; and which of
    its requests the frontend still tracks."""
    outputs = []
    for i in range(rng.choice([0, 1, 3, 40])):
        prefill = None
        if rng.random() < 0.3:
            prompt, local, external = rng.choice([1, 17, 300]), rng.randrange(9), rng.randrange(5)
            prefill = PrefillStats(
                num_prompt_tokens=prompt + local + external,
                num_computed_tokens=prompt,
                num_cached_tokens=local + external,
                num_local_cached_tokens=local,
                num_external_cached_tokens=external,
            )
        tokens = list(range(rng.choice([0, 1, 1, 4])))
        outputs.append(EngineCoreOutput(f"r{i}", tokens, prefill_stats=prefill))
    stats = None
    if rng.random() < 0.7:
        stats = SchedulerStats(
            prefix_cache_stats=PrefixCacheStats(queries=rng.randrange(500), hits=rng.randrange(200))
        )
        if rng.random() < 0.3:
            stats.connector_prefix_cache_stats = PrefixCacheStats(
                queries=rng.randrange(99),
                hits=5,
                hits_by_source=rng.choice([{}, {"host": 3, "disk": 2}, {"p2p": 5}]),
            )
        if rng.random() < 0.3:
            perf: list[dict[str, Any]] = [
                {"num_flops_per_gpu": 10**12, "num_read_bytes_per_gpu": 7,
                 "num_write_bytes_per_gpu": 0, "debug_stats": None},
                {"num_flops_per_gpu": 0, "num_read_bytes_per_gpu": 0,
                 "num_write_bytes_per_gpu": 0},
            ]  # fmt: skip
            stats.perf_stats = rng.choice(perf)
    engine = rng.choice(engines) if rng.random() < 0.9 or not stray else 7
    tracked = {o.request_id for o in outputs if rng.random() < 0.8}
    return EngineCoreOutputs(engine, outputs, stats), tracked


@pytest.mark.parametrize("seed", range(6))
def test_metrics_page_matches_prometheus_client_for_random_traffic(
    seed: int, created_series: Callable[[bool], None]
) -> None:
    rng = random.Random(seed)
    engines = rng.choice([(0,), (0, 1), (2, 5, 3)])
    pair = make_pair(rng.choice([1, 128, 4096, 131072]), engines)
    assert_same_exposition(pair, created_series)  # every series present at 0 from the start
    drive(rng, pair, engines, steps=400)
    assert_same_exposition(pair, created_series)
    drive(rng, pair, engines, steps=400)
    assert_same_exposition(pair, created_series)


def test_values_on_and_around_bucket_bounds_land_in_prometheus_clients_buckets(
    created_series: Callable[[bool], None],
) -> None:
    pair = make_pair(4096, (0,))
    ours, ref = pair.ours, pair.reference
    families: list[tuple[Any, Histogram, Sequence[float]]] = [
        (ours.time_to_first_token, ref.ttft, TTFT),
        (ours.inter_token_latency, ref.itl, ITL),
        (ours.e2e_latency, ref.e2e, REQUEST_LATENCY),
        (ours.request_params_n, ref.n, PARAMS_N),
        (ours.request_prompt_tokens, ref.prompt_len, one_two_five(4096)),
    ]
    for mine, theirs, bounds in families:
        values: list[float] = [0.0, -0.0, -1.0, math.inf, -math.inf, 1e300]
        for b in bounds:
            values += [b, float(b), math.nextafter(b, -math.inf), math.nextafter(b, math.inf)]
        for engine in ("0", "1"):  # "1" was not configured: created on first use
            for v in values:
                mine.labels(MODEL, engine).observe(v)
                theirs.labels(MODEL, engine).observe(v)
    for amount in (0, 1, 2.5, 1e-9, 7):
        ours.prompt_tokens.labels(MODEL, 0).inc(amount)
        ref.prompt_tokens.labels(MODEL, 0).inc(amount)
    ours.request_success.labels(MODEL, "3", "stop").inc()
    ref.success.labels(MODEL, "3", "stop").inc()
    for counter in (ours.prompt_tokens, ref.prompt_tokens):
        with pytest.raises(ValueError):
            counter.labels(MODEL, 0).inc(-1)
    assert_same_exposition(pair, created_series)


def test_a_nan_observation_spoils_only_the_sum_as_in_prometheus_client(
    created_series: Callable[[bool], None],
) -> None:
    pair = make_pair(16, (0,))
    for v in (0.2, math.nan, 3.0):
        pair.ours.e2e_latency.labels(MODEL, "0").observe(v)
        pair.reference.e2e.labels(MODEL, "0").observe(v)
    assert_same_exposition(pair, created_series)


def test_metrics_read_back_through_the_registry() -> None:
    pair = make_pair(64, (0,))
    stats = RequestStats(0.0, 0.0, 0)
    pair.ours.observe_prefill(stats, 12)
    pair.ours.observe_output(stats, 1, None, 0.05)
    pair.ours.observe_output(stats, 2, None, 0.08)
    pair.ours.observe_finished(stats, "length", 12, 3, 0.1)
    got = prometheus_view(pair.ours_registry).get_sample_value
    labels = {"model_name": MODEL, "engine": "0"}
    assert got("vllm:prompt_tokens_total", labels) == 12
    assert got("vllm:generation_tokens_total", labels) == 3
    assert got("vllm:request_success_total", {**labels, "finished_reason": "length"}) == 1
    assert got("vllm:time_to_first_token_seconds_bucket", {**labels, "le": "0.04"}) == 0
    assert got("vllm:time_to_first_token_seconds_bucket", {**labels, "le": "0.06"}) == 1
    assert got("vllm:inter_token_latency_seconds_sum", labels) == pytest.approx(0.03)
    assert got("vllm:request_generation_tokens_count", labels) == 1


def test_a_second_frontend_metrics_in_one_registry_is_refused() -> None:
    ours = MetricsRegistry()
    FrontendMetrics(MODEL, 64, (0,), ours)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        FrontendMetrics(MODEL, 64, (0,), ours)
    registry = CollectorRegistry()
    FrontendMetrics(MODEL, 64, (0,), registry)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        FrontendMetrics(MODEL, 64, (0,), registry)
    # prometheus_client refuses the same names for its own metrics too.
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        Counter("vllm:generation_tokens", "x", LABELS, registry=registry)
