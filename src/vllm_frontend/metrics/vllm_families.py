"""The request-level ``vllm:*`` families under vLLM's names, help texts, label sets and buckets.

vLLM defines them in ``vllm/v1/metrics/loggers.py`` (``PrometheusStatLogger``) and
``vllm/v1/metrics/perf.py`` (``PerfMetricsProm``), with buckets from ``vllm/v1/metrics/buckets.py``:
every series carries the labels ``model_name`` (the first served name) and ``engine`` (the
data-parallel index), and ``vllm:request_success`` adds ``finished_reason``.
:class:`VllmFamilies` creates them, registers them in vLLM's order and creates every per-engine
series up front (at 0), as vLLM does; :class:`~vllm_frontend.metrics.frontend.FrontendMetrics`
feeds them.

Not exported: ``vllm:cache_config_info``, whose labels are vLLM's whole ``CacheConfig`` (~37
fields): the engine reports a few of them when it registers (``block_size``, ``num_gpu_blocks``,
``kv_cache_size_tokens`` …), the rest are engine arguments and platform defaults
(``gpu_memory_utilization``, ``cache_dtype``, ``kv_cache_memory_bytes`` …) that the frontend's
configuration does not keep (and that a frontend joining engines started elsewhere never sees),
and an info metric with guessed labels would mislead. Families vLLM registers
only with features off by default here (speculative decoding, KV connectors, LoRA,
``--kv-cache-metrics``, ``VLLM_COMPUTE_NANS_IN_LOGITS``, watermarking) are not exported either.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from vllm_frontend.metrics.series import Counter, Histogram, SeriesCollector

__all__ = [
    "ADMISSION_REASONS",
    "CACHE_HIT_SOURCES",
    "FINISH_REASON_LABELS",
    "PROMPT_TOKEN_SOURCES",
    "Registry",
    "VllmFamilies",
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


class Registry(Protocol):
    """Where the families are registered: a ``MetricsRegistry``, or (in tests) prometheus_client's
    ``CollectorRegistry``, which takes these collectors' families too."""

    def register(self, collector: Any) -> None:
        """Add a collector (``collect()`` and ``describe()`` yielding
        ``vllm_frontend.metrics.exposition.MetricFamily`` objects)."""
        ...


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


class VllmFamilies:
    """The families, as attributes (``prompt_tokens``, ``time_to_first_token``, …), registered
    once per process."""

    def __init__(
        self,
        model_name: str,
        max_model_len: int,
        engine_indexes: Sequence[int] = (0,),
        registry: Registry | None = None,
    ) -> None:
        """Register the families in ``registry`` (None: a ``MetricsRegistry`` of their own, for
        callers that only observe)."""
        if registry is None:
            from vllm_frontend.metrics.registry import MetricsRegistry

            registry = MetricsRegistry()
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
        registry.register(SeriesCollector(families, self.fold))
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

    def fold(self) -> None:
        """Bring every series up to date with what was observed (read before each collection;
        :class:`~vllm_frontend.metrics.frontend.FrontendMetrics` keeps observations pending)."""

    @property
    def model_name(self) -> str:
        """The ``model_name`` label of every series."""
        return self._model_name
