"""Per-request Prometheus metrics under vLLM's names and label sets.

vLLM computes these in its frontend's output processor (``vllm/v1/metrics/stats.py``) and exports
them from ``vllm/v1/metrics/loggers.py`` (``PrometheusStatLogger``): every series carries the
labels ``model_name`` (the first served name) and ``engine`` (the data-parallel index), and
``vllm:request_success`` adds ``finished_reason``. Buckets follow ``vllm/v1/metrics/buckets.py``.
We feed the same quantities from the same events: arrival, every engine output (first token,
inter-token gaps), and the finish. Times are taken with the frontend's monotonic clock when the
output arrives; the engine's QUEUED/SCHEDULED events (monotonic clock of the same machine) give the
queue, prefill and inference phases when the engine logs stats.

What vLLM computes per engine message (``vllm/v1/engine/async_llm.py`` ``output_handler``: one
``IterationStats`` per message with outputs, then ``PrometheusStatLogger.record`` with the
message's ``SchedulerStats``) comes from :meth:`FrontendMetrics.observe_step`, which the engine
client calls once per outputs message: tokens per step, prompt tokens by source (the requests'
``prefill_stats``), prefix-cache queries and hits, the engine's performance estimates. The
scheduler gauges are read from each engine's latest stats at scrape time (:class:`EngineGauges`).

Not exported: ``vllm:cache_config_info``, whose labels are vLLM's whole ``CacheConfig`` (~37
fields): the engine reports a few of them when it registers (``block_size``, ``num_gpu_blocks``,
``kv_cache_size_tokens`` …), the rest are engine arguments and platform defaults
(``gpu_memory_utilization``, ``cache_dtype``, ``kv_cache_memory_bytes`` …) that the frontend's
configuration does not keep (and that a frontend joining engines started elsewhere never sees),
and an info metric with guessed labels would mislead. Families vLLM registers
only with features off by default here (speculative decoding, KV connectors, LoRA,
``--kv-cache-metrics``, ``VLLM_COMPUTE_NANS_IN_LOGITS``, watermarking) are not exported either.

The counters and histograms are the plain accumulators of ``vllm_frontend.series`` rather than
prometheus_client's ``Counter``/``Histogram``: those take a lock per value and walk the buckets
in Python on every observation, which showed as ~5-8% of the frontend's CPU since
``observe_output`` runs for every engine output. They are exported at scrape time, sample for
sample as prometheus_client's own metrics would be, as ``vllm_frontend.exposition`` families that
the server renders itself (importing prometheus_client costs ~60 ms): the registry the families
go into is anything with ``register()`` (:class:`Registry`).
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from vllm_frontend.exposition import Collector, MetricFamily
from vllm_frontend.series import (
    Counter,
    CounterChild,
    Histogram,
    HistogramChild,
    SeriesCollector,
)

if TYPE_CHECKING:
    from collections.abc import Container

    from vllm_frontend.engine.protocol import EngineCoreOutputs

__all__ = [
    "ADMISSION_REASONS",
    "CACHE_HIT_SOURCES",
    "FINISH_REASON_LABELS",
    "PROMPT_TOKEN_SOURCES",
    "EngineGauges",
    "FrontendMetrics",
    "Registry",
    "RequestStats",
]

#: vLLM's FinishReason values as their label strings (``str(FinishReason.X)``).
FINISH_REASON_LABELS: tuple[str, ...] = ("stop", "length", "abort", "error", "repetition")

_REQUEST_LATENCY_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
    120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
_TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
_ITL_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
_N_BUCKETS = (1, 2, 5, 10, 20)
_ITERATION_TOKENS_BUCKETS = (
    1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384,
)  # fmt: skip
_NUM_PREEMPTIONS_BUCKETS = (1, 2, 3, 4, 5, 10, 20)

#: ``source`` values of ``vllm:prompt_tokens_by_source`` (vLLM's ``PromptTokenStats.ALL_SOURCES``).
PROMPT_TOKEN_SOURCES: tuple[str, ...] = ("local_compute", "local_cache_hit", "external_kv_transfer")
#: ``source`` values of ``vllm:prompt_tokens_cached_by_source`` (vLLM's ``CacheHitSource``).
CACHE_HIT_SOURCES: tuple[str, ...] = ("device", "host", "p2p", "disk", "external_unspecified")
#: ``reason`` values of ``vllm:admission_rejections`` (``vllm/v1/metrics/loggers.py``).
ADMISSION_REASONS: tuple[str, ...] = ("max_num_queued_reqs", "max_num_queued_tokens")

# EngineCoreEvent types (engine-protocol.md §5.5).
_QUEUED, _SCHEDULED, _PREEMPTED = 1, 2, 3


class Registry(Protocol):
    """Where :class:`FrontendMetrics` and :class:`EngineGauges` are registered: the server's
    ``MetricsRegistry``, or prometheus_client's ``CollectorRegistry`` (which takes these
    collectors' families too)."""

    def register(self, collector: Any) -> None:
        """Add a collector (``collect()`` and ``describe()`` yielding
        ``vllm_frontend.exposition.MetricFamily`` objects)."""
        ...


def _global_registry() -> Registry:
    """prometheus_client's global registry (which takes these collectors too)."""
    from prometheus_client import REGISTRY

    return REGISTRY


def _one_two_five_buckets(max_value: int) -> list[float]:
    """1, 2, 5, 10, 20, 50, … up to ``max_value`` (vLLM's ``build_1_2_5_buckets``)."""
    out: list[float] = []
    scale = 1
    while True:
        for m in (1, 2, 5):
            if m * scale > max_value:
                return out
            out.append(float(m * scale))
        scale *= 10


class RequestStats:
    """Timestamps and counters of one engine request (one sample of an ``n > 1`` request).

    A plain class with slots: its fields are written for every streamed token, which costs a
    third of what a ``msgspec.Struct``'s (checked) attribute writes do, and defining it costs
    less than a dataclass at import.
    """

    __slots__ = (
        "arrival_monotonic",
        "arrival_time",
        "engine_index",
        "finished",
        "first_token_ts",
        "last_token_ts",
        "num_cached_tokens",
        "num_generation_tokens",
        "num_preemptions",
        "queued_ts",
        "scheduled_ts",
    )

    def __init__(
        self, arrival_time: float, arrival_monotonic: float, engine_index: int = 0
    ) -> None:
        """``arrival_time``: wall-clock seconds at arrival (also sent to the engine)."""
        self.arrival_time = arrival_time
        self.arrival_monotonic = arrival_monotonic
        self.engine_index = engine_index
        self.first_token_ts = 0.0
        self.last_token_ts = 0.0
        self.queued_ts = 0.0
        self.scheduled_ts = 0.0
        self.num_generation_tokens = 0
        self.num_preemptions = 0
        self.num_cached_tokens = 0
        """Prompt tokens the engine did not compute (its ``prefill_stats.num_cached_tokens``)."""
        self.finished = False

    @classmethod
    def start(cls, engine_index: int = 0) -> RequestStats:
        """Stats for a request arriving now."""
        return cls(arrival_time=time.time(), arrival_monotonic=time.monotonic(),
                   engine_index=engine_index)  # fmt: skip


class FrontendMetrics:
    """The request-level ``vllm:*`` series, registered once per process.

    Each family attribute (``prompt_tokens``, ``time_to_first_token``, …) also takes
    prometheus_client's ``labels(model_name, engine).inc()`` / ``.observe()`` calls.
    """

    def __init__(
        self,
        model_name: str,
        max_model_len: int,
        engine_indexes: Sequence[int] = (0,),
        registry: Registry | None = None,
    ) -> None:
        """Register the families in ``registry`` (None: prometheus_client's global registry)."""
        if registry is None:
            registry = _global_registry()
        labels = ("model_name", "engine")
        self._model_name = model_name
        self._engines = [str(i) for i in engine_indexes]
        token_buckets = _one_two_five_buckets(max(1, max_model_len))

        def counter(name: str, doc: str, extra: Sequence[str] = ()) -> Counter:
            return Counter(name, doc, (*labels, *extra))

        def histogram(name: str, doc: str, buckets: Iterable[float]) -> Histogram:
            return Histogram(name, doc, labels, buckets)

        # Names, help texts, labels and buckets as vLLM's PrometheusStatLogger and
        # PerfMetricsProm (vllm/v1/metrics/perf.py) define them.
        mfu = " (for Model Flops Utilization calculations)."
        self.estimated_flops = counter(
            "vllm:estimated_flops_per_gpu_total",
            "Estimated number of floating point operations per GPU" + mfu,
        )
        self.estimated_read_bytes = counter(
            "vllm:estimated_read_bytes_per_gpu_total",
            "Estimated number of bytes read from memory per GPU" + mfu,
        )
        self.estimated_write_bytes = counter(
            "vllm:estimated_write_bytes_per_gpu_total",
            "Estimated number of bytes written to memory per GPU" + mfu,
        )
        self.prefix_cache_queries = counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
        )
        self.prefix_cache_hits = counter(
            "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens."
        )
        self.external_prefix_cache_queries = counter(
            "vllm:external_prefix_cache_queries",
            "External prefix cache queries from KV connector cross-instance cache sharing, "
            "in terms of number of queried tokens.",
        )
        self.external_prefix_cache_hits = counter(
            "vllm:external_prefix_cache_hits",
            "External prefix cache hits from KV connector cross-instance cache sharing, "
            "in terms of number of cached tokens.",
        )
        # This frontend has no multi-modal processor cache (it sends no multi-modal inputs):
        # vLLM's stays at 0 too for a text-only model (renderer.stat_mm_cache() is None).
        self.mm_cache_queries = counter(
            "vllm:mm_cache_queries",
            "Multi-modal cache queries, in terms of number of queried items.",
        )
        self.mm_cache_hits = counter(
            "vllm:mm_cache_hits", "Multi-modal cache hits, in terms of number of cached items."
        )
        self.num_preemptions = counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine."
        )
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.prompt_tokens_by_source = counter(
            "vllm:prompt_tokens_by_source", "Number of prompt tokens by source.", ("source",)
        )
        self.prompt_tokens_cached = counter(
            "vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external)."
        )
        self.prompt_tokens_cached_by_source = counter(
            "vllm:prompt_tokens_cached_by_source",
            "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), "
            "host (offloaded to DRAM), disk, p2p (transferred from another vLLM instance) or "
            "external_unspecified. Counted at admission; sums to vllm:prefix_cache_hits + "
            "vllm:external_prefix_cache_hits.",
            ("source",),
        )
        self.generation_tokens = counter(
            "vllm:generation_tokens", "Number of generation tokens processed."
        )
        self.request_success = counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            ("finished_reason",),
        )
        # Refusals by the frontend's queue limits (llm/admission.py), counted through
        # record_admission_rejection; both reasons are exported from the start, at 0.
        self.admission_rejections = Counter(
            "vllm:admission_rejections",
            "Number of admission attempts rejected by a queue limit, by reason.",
            ("model_name", "reason"),
        )
        self.request_prompt_tokens = histogram(
            "vllm:request_prompt_tokens", "Number of prefill tokens processed.", token_buckets
        )
        self.request_generation_tokens = histogram(
            "vllm:request_generation_tokens",
            "Number of generation tokens processed.",
            token_buckets,
        )
        self.iteration_tokens = histogram(
            "vllm:iteration_tokens_total",
            "Histogram of number of tokens per engine_step.",
            _ITERATION_TOKENS_BUCKETS,
        )
        self.request_max_num_generation_tokens = histogram(
            "vllm:request_max_num_generation_tokens",
            "Histogram of maximum number of requested generation tokens.",
            token_buckets,
        )
        self.request_params_n = histogram(
            "vllm:request_params_n", "Histogram of the n request parameter.", _N_BUCKETS
        )
        self.request_params_max_tokens = histogram(
            "vllm:request_params_max_tokens",
            "Histogram of the max_tokens request parameter.",
            token_buckets,
        )
        self.time_to_first_token = histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            _TTFT_BUCKETS,
        )
        self.inter_token_latency = histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            _ITL_BUCKETS,
        )
        self.time_per_output_token = histogram(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            _ITL_BUCKETS,
        )
        self.e2e_latency = histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            _REQUEST_LATENCY_BUCKETS,
        )
        self.queue_time = histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            _REQUEST_LATENCY_BUCKETS,
        )
        self.inference_time = histogram(
            "vllm:request_inference_time_seconds",
            "Histogram of time spent in RUNNING phase for request.",
            _REQUEST_LATENCY_BUCKETS,
        )
        self.prefill_time = histogram(
            "vllm:request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase for request.",
            _REQUEST_LATENCY_BUCKETS,
        )
        self.decode_time = histogram(
            "vllm:request_decode_time_seconds",
            "Histogram of time spent in DECODE phase for request.",
            _REQUEST_LATENCY_BUCKETS,
        )
        self.request_num_preemptions = histogram(
            "vllm:request_num_preemptions",
            "Histogram of the number of times a request was preempted.",
            _NUM_PREEMPTIONS_BUCKETS,
        )
        self.request_prefill_kv_computed_tokens = histogram(
            "vllm:request_prefill_kv_computed_tokens",
            "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
            token_buckets,
        )
        # Exported in this order, which is the order vLLM registers them in (its scheduler
        # gauges, between the estimates and the prefix cache, are EngineGauges').
        families: list[Counter | Histogram] = [
            self.estimated_flops, self.estimated_read_bytes, self.estimated_write_bytes,
            self.prefix_cache_queries, self.prefix_cache_hits,
            self.external_prefix_cache_queries, self.external_prefix_cache_hits,
            self.mm_cache_queries, self.mm_cache_hits, self.num_preemptions,
            self.prompt_tokens, self.prompt_tokens_by_source, self.prompt_tokens_cached,
            self.prompt_tokens_cached_by_source, self.generation_tokens, self.request_success,
            self.admission_rejections, self.request_prompt_tokens,
            self.request_generation_tokens, self.iteration_tokens,
            self.request_max_num_generation_tokens, self.request_params_n,
            self.request_params_max_tokens, self.time_to_first_token, self.inter_token_latency,
            self.time_per_output_token, self.e2e_latency, self.queue_time, self.inference_time,
            self.prefill_time, self.decode_time, self.request_num_preemptions,
            self.request_prefill_kv_computed_tokens,
        ]  # fmt: skip
        registry.register(SeriesCollector(families))
        # vLLM creates every per-engine child up front so the series exist (at 0) from startup.
        # Its labelled families create theirs label value by label value (source by source):
        # the same order here.
        extra_labels = {
            id(self.prompt_tokens_by_source): PROMPT_TOKEN_SOURCES,
            id(self.request_success): FINISH_REASON_LABELS,
        }
        for family in families:
            if family is self.admission_rejections or family is self.prompt_tokens_cached_by_source:
                continue
            values = extra_labels.get(id(family))
            if values is None:
                for engine in self._engines:
                    family.child((model_name, engine))
            else:
                for value in values:
                    for engine in self._engines:
                        family.child((model_name, engine, value))
        for source in CACHE_HIT_SOURCES:
            for engine in self._engines:
                self.prompt_tokens_cached_by_source.child((model_name, engine, source))
        for reason in ADMISSION_REASONS:
            self.admission_rejections.child((model_name, reason))
        # Label tuples per engine index, and the series the per-token path touches: resolved once
        # so that a token costs two attribute updates and a bisect.
        self._keys: dict[int, tuple[str, str]] = {}
        self._series: dict[int, _EngineSeries] = {}
        self._steps: dict[int, _StepSeries] = {}

    def _labels(self, engine_index: int) -> tuple[str, str]:
        key = self._keys.get(engine_index)
        if key is None:
            key = self._keys[engine_index] = (self._model_name, str(engine_index))
        return key

    def _engine(self, engine_index: int) -> _EngineSeries:
        series = self._series.get(engine_index)
        if series is None:
            key = self._labels(engine_index)
            series = self._series[engine_index] = _EngineSeries(
                self.generation_tokens.child(key),
                self.time_to_first_token.child(key),
                self.inter_token_latency.child(key),
            )
        return series

    def _step_engine(self, engine_index: int) -> _StepSeries:
        key = self._labels(engine_index)
        by_source = self.prompt_tokens_by_source
        series = self._steps[engine_index] = _StepSeries(
            self.iteration_tokens.child(key),
            by_source.child((*key, "local_compute")),
            by_source.child((*key, "local_cache_hit")),
            by_source.child((*key, "external_kv_transfer")),
            self.prompt_tokens_cached.child(key),
            self.prefix_cache_queries.child(key),
            self.prefix_cache_hits.child(key),
            self.prompt_tokens_cached_by_source.child((*key, "device")),
        )
        return series

    def observe_step(self, message: EngineCoreOutputs, tracked: Container[str]) -> None:
        """Account one outputs message of an engine, as vLLM's ``output_handler`` does with the
        message's ``IterationStats`` and ``SchedulerStats`` (``vllm/v1/engine/async_llm.py``,
        ``vllm/v1/metrics/stats.py``, ``PrometheusStatLogger.record``).

        ``tracked`` holds the engine request ids still streamed to a caller: like vLLM's output
        processor, outputs of other requests (aborted here meanwhile) are not counted. A message
        with outputs is one engine step: ``vllm:iteration_tokens_total`` observes the prompt
        tokens it computed (first outputs' ``prefill_stats``) plus the tokens it generated.
        """
        engine = message.engine_index
        series = self._steps.get(engine) or self._step_engine(engine)
        outputs = message.outputs
        if outputs:
            generated = computed = local = external = cached = 0
            for output in outputs:
                if output.request_id not in tracked:
                    continue
                generated += len(output.new_token_ids)
                prefill = output.prefill_stats
                if prefill is not None:  # a request's first output only
                    computed += prefill.num_computed_tokens
                    local += prefill.num_local_cached_tokens
                    external += prefill.num_external_cached_tokens
                    cached += prefill.num_cached_tokens
            series.iteration_tokens.observe(computed + generated)
            if computed or local or external or cached:
                series.local_compute.inc(computed)
                series.local_cache_hit.inc(local)
                series.external_kv_transfer.inc(external)
                series.prompt_tokens_cached.inc(cached)
        stats = message.scheduler_stats
        if stats is None:
            return
        prefix = stats.prefix_cache_stats
        series.prefix_cache_queries.inc(prefix.queries)
        series.prefix_cache_hits.inc(prefix.hits)
        series.cached_on_device.inc(prefix.hits)
        connector = stats.connector_prefix_cache_stats
        if connector is not None:
            key = self._labels(engine)
            self.external_prefix_cache_queries.child(key).inc(connector.queries)
            self.external_prefix_cache_hits.child(key).inc(connector.hits)
            for tier, num_tokens in connector.hits_by_source.items():
                self.prompt_tokens_cached_by_source.child((*key, str(tier))).inc(num_tokens)
        perf = stats.perf_stats
        if perf:
            # PerfMetricsProm.observe (vllm/v1/metrics/perf.py): all three or none.
            flops = perf.get("num_flops_per_gpu") or 0
            read = perf.get("num_read_bytes_per_gpu") or 0
            write = perf.get("num_write_bytes_per_gpu") or 0
            if flops or read or write:
                key = self._labels(engine)
                self.estimated_flops.child(key).inc(flops)
                self.estimated_read_bytes.child(key).inc(read)
                self.estimated_write_bytes.child(key).inc(write)

    def record_admission_rejection(self, reason: str) -> None:
        """Count a request refused by a frontend queue limit (one of :data:`ADMISSION_REASONS`)."""
        self.admission_rejections.child((self._model_name, reason)).inc()

    def observe_prefill(self, stats: RequestStats, num_prompt_tokens: int) -> None:
        """Account a finished prefill (vLLM counts prompt tokens when the prefill completes)."""
        self.prompt_tokens.child(self._labels(stats.engine_index)).value += num_prompt_tokens

    def observe_output(
        self,
        stats: RequestStats,
        num_new_tokens: int,
        events: Sequence[object] | None = None,
        now: float | None = None,
        num_cached_tokens: int | None = None,
    ) -> None:
        """Account one engine output of a request: first token / inter-token latency, events,
        and the prompt tokens the engine found cached (``prefill_stats``, first output only)."""
        if stats.finished:
            return
        if now is None:
            now = time.monotonic()
        if num_cached_tokens is not None:
            stats.num_cached_tokens = num_cached_tokens
        if events:
            for event in events:
                kind = getattr(event, "type", None)
                ts = float(getattr(event, "timestamp", 0.0) or 0.0)
                if kind == _QUEUED:
                    stats.queued_ts = ts
                elif kind == _SCHEDULED and stats.scheduled_ts == 0.0:
                    stats.scheduled_ts = ts
                elif kind == _PREEMPTED:
                    stats.num_preemptions += 1
                    self.num_preemptions.child(self._labels(stats.engine_index)).value += 1
        if num_new_tokens <= 0:
            return
        if stats.num_generation_tokens:
            self.observe_tokens(stats, num_new_tokens, now)
            return
        series = self._series.get(stats.engine_index) or self._engine(stats.engine_index)
        series.generation_tokens.value += num_new_tokens
        series.time_to_first_token.observe(now - stats.arrival_monotonic)
        stats.first_token_ts = now
        stats.last_token_ts = now
        stats.num_generation_tokens += num_new_tokens

    def observe_tokens(
        self, stats: RequestStats, num_new_tokens: int, now: float | None = None
    ) -> None:
        """:meth:`observe_output` for an output without events of a request that already has
        its first token (the common output: one per token when streaming): generation tokens
        and inter-token latency."""
        if stats.finished:
            return
        if now is None:
            now = time.monotonic()
        series = self._series.get(stats.engine_index) or self._engine(stats.engine_index)
        series.generation_tokens.value += num_new_tokens
        # HistogramChild.observe, inline: this runs per streamed token.
        itl = series.inter_token_latency
        value = now - stats.last_token_ts
        if value == value:
            itl.counts[bisect_left(itl.bounds, value)] += 1
        itl.sum += value
        stats.last_token_ts = now
        stats.num_generation_tokens += num_new_tokens

    def observe_finished(
        self,
        stats: RequestStats,
        finish_reason: str,
        num_prompt_tokens: int,
        max_tokens: int | None,
        now: float | None = None,
    ) -> None:
        """Account a finished engine request (once; later calls are ignored)."""
        if stats.finished:
            return
        stats.finished = True
        if now is None:
            now = time.monotonic()
        key = self._labels(stats.engine_index)
        reason = finish_reason if finish_reason in FINISH_REASON_LABELS else "abort"
        self.request_success.child((*key, reason)).value += 1
        self.e2e_latency.child(key).observe(now - stats.arrival_monotonic)
        self.request_prompt_tokens.child(key).observe(num_prompt_tokens)
        self.request_generation_tokens.child(key).observe(stats.num_generation_tokens)
        if max_tokens:
            self.request_params_max_tokens.child(key).observe(max_tokens)
        decode = stats.last_token_ts - stats.first_token_ts if stats.first_token_ts else 0.0
        tpot = decode / (stats.num_generation_tokens - 1) if stats.num_generation_tokens > 1 else 0
        self.time_per_output_token.child(key).observe(tpot)
        self.decode_time.child(key).observe(decode)
        self.request_num_preemptions.child(key).observe(stats.num_preemptions)
        self.request_prefill_kv_computed_tokens.child(key).observe(
            num_prompt_tokens - max(stats.num_cached_tokens, 0)
        )
        if stats.scheduled_ts:
            self.queue_time.child(key).observe(max(0.0, stats.scheduled_ts - stats.queued_ts))
            if stats.first_token_ts:
                self.prefill_time.child(key).observe(
                    max(0.0, stats.first_token_ts - stats.scheduled_ts)
                )
                self.inference_time.child(key).observe(
                    max(0.0, stats.last_token_ts - stats.scheduled_ts)
                )

    def observe_parent_finished(
        self, n: int, max_generation_tokens: int, engine_index: int = 0
    ) -> None:
        """Account a whole request once all its samples finished (``n`` and the longest sample)."""
        key = self._labels(engine_index)
        self.request_params_n.child(key).observe(n)
        self.request_max_num_generation_tokens.child(key).observe(max_generation_tokens)


class _EngineSeries(NamedTuple):
    generation_tokens: CounterChild
    time_to_first_token: HistogramChild
    inter_token_latency: HistogramChild


class _StepSeries(NamedTuple):
    iteration_tokens: HistogramChild
    local_compute: CounterChild
    local_cache_hit: CounterChild
    external_kv_transfer: CounterChild
    prompt_tokens_cached: CounterChild
    prefix_cache_queries: CounterChild
    prefix_cache_hits: CounterChild
    cached_on_device: CounterChild


class EngineGauges(Collector):
    """The scheduler gauges vLLM exports (``vllm:num_requests_running``, ``…_waiting``,
    ``…_waiting_by_reason``, ``vllm:engine_sleep_state``, ``vllm:kv_cache_usage_perc``), read at
    scrape time from the latest stats each engine sent."""

    def __init__(
        self,
        model_name: str,
        engine_indexes: Sequence[int],
        latest_stats: Callable[[], Mapping[int, Any]],
    ) -> None:
        self._model_name = model_name
        self._engines = list(engine_indexes)
        self._latest = latest_stats

    def collect(self) -> Iterator[MetricFamily]:
        """One sample per engine (and reason, state) in vLLM's order; 0 until an engine has
        reported."""
        stats = self._latest()
        running = MetricFamily(
            "vllm:num_requests_running", "gauge", "Number of requests in model execution batches."
        )
        waiting = MetricFamily(
            "vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed."
        )
        by_reason = MetricFamily(
            "vllm:num_requests_waiting_by_reason",
            "gauge",
            "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for "
            "scheduling capacity; 'deferred' = deferred by transient constraints (LoRA budget, "
            "KV transfer, blocked status). Sum of all reasons equals vllm:num_requests_waiting.",
        )
        sleep_state = MetricFamily(
            "vllm:engine_sleep_state",
            "gauge",
            "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is "
            "awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep "
            "level 2.",
        )
        kv = MetricFamily(
            "vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage."
        )
        labels = ("model_name", "engine")
        by_reason_labels = (*labels, "reason")
        sleep_labels = (*labels, "sleep_state")
        capacity: list[float] = []
        deferred: list[float] = []
        for engine in self._engines:
            s = stats.get(engine)
            values = (self._model_name, str(engine))
            num_waiting = float(getattr(s, "num_waiting_reqs", 0) or 0)
            num_deferred = float(getattr(s, "num_skipped_waiting_reqs", 0) or 0)
            capacity.append(num_waiting)
            deferred.append(num_deferred)
            running.add(running.name, labels, values,
                        float(getattr(s, "num_running_reqs", 0) or 0))  # fmt: skip
            # vLLM's total counts the deferred (skipped) waiting requests too.
            waiting.add(waiting.name, labels, values, num_waiting + num_deferred)
            kv.add(kv.name, labels, values, float(getattr(s, "kv_cache_usage", 0.0) or 0.0))
        for reason, counts in (("capacity", capacity), ("deferred", deferred)):
            for engine, count in zip(self._engines, counts, strict=True):
                by_reason.add(by_reason.name, by_reason_labels,
                              (self._model_name, str(engine), reason), count)  # fmt: skip
        # This frontend never puts its engines to sleep (vLLM does from its dev-mode /sleep
        # route): they stay at vLLM's initial state, awake.
        for state, value in (("awake", 1.0), ("weights_offloaded", 0.0), ("discard_all", 0.0)):
            for engine in self._engines:
                sleep_state.add(sleep_state.name, sleep_labels,
                                (self._model_name, str(engine), state), value)  # fmt: skip
        yield running
        yield waiting
        yield by_reason
        yield sleep_state
        yield kv

    def describe(self) -> Iterator[MetricFamily]:
        """No up-front description (the gauges are produced at collect time)."""
        return iter(())
