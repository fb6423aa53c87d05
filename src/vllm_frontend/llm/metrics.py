"""Per-request Prometheus metrics under vLLM's names and label sets.

vLLM computes these in its frontend's output processor (``vllm/v1/metrics/stats.py``) and exports
them from ``vllm/v1/metrics/loggers.py`` (``PrometheusStatLogger``): every series carries the
labels ``model_name`` (the first served name) and ``engine`` (the data-parallel index), and
``vllm:request_success`` adds ``finished_reason``. Buckets follow ``vllm/v1/metrics/buckets.py``.
We feed the same quantities from the same events: arrival, every engine output (first token,
inter-token gaps), and the finish. Times are taken with the frontend's monotonic clock when the
output arrives; the engine's QUEUED/SCHEDULED events (monotonic clock of the same machine) give the
queue, prefill and inference phases when the engine logs stats.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = ["FINISH_REASON_LABELS", "EngineGauges", "FrontendMetrics", "RequestStats"]

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

# EngineCoreEvent types (engine-protocol.md §5.5).
_QUEUED, _SCHEDULED, _PREEMPTED = 1, 2, 3


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


@dataclass(slots=True)
class RequestStats:
    """Timestamps and counters of one engine request (one sample of an ``n > 1`` request)."""

    arrival_time: float
    """Wall-clock seconds at arrival (also sent to the engine)."""
    arrival_monotonic: float
    engine_index: int = 0
    first_token_ts: float = 0.0
    last_token_ts: float = 0.0
    queued_ts: float = 0.0
    scheduled_ts: float = 0.0
    num_generation_tokens: int = 0
    num_preemptions: int = 0
    finished: bool = False

    @classmethod
    def start(cls, engine_index: int = 0) -> RequestStats:
        """Stats for a request arriving now."""
        return cls(arrival_time=time.time(), arrival_monotonic=time.monotonic(),
                   engine_index=engine_index)  # fmt: skip


class FrontendMetrics:
    """The request-level ``vllm:*`` series, registered once per process."""

    def __init__(
        self,
        model_name: str,
        max_model_len: int,
        engine_indexes: Sequence[int] = (0,),
        registry: CollectorRegistry | None = None,
    ) -> None:
        reg = REGISTRY if registry is None else registry
        labels = ["model_name", "engine"]
        self._model_name = model_name
        self._engines = [str(i) for i in engine_indexes]
        token_buckets = _one_two_five_buckets(max(1, max_model_len))

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, labels, registry=reg)

        def histogram(name: str, doc: str, buckets: Iterable[float]) -> Histogram:
            return Histogram(name, doc, labels, buckets=tuple(buckets), registry=reg)

        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = counter(
            "vllm:generation_tokens", "Number of generation tokens processed."
        )
        self.request_success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            [*labels, "finished_reason"],
            registry=reg,
        )
        self.request_prompt_tokens = histogram(
            "vllm:request_prompt_tokens", "Number of prefill tokens processed.", token_buckets
        )
        self.request_generation_tokens = histogram(
            "vllm:request_generation_tokens",
            "Number of generation tokens processed.",
            token_buckets,
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
        # vLLM creates every per-engine child up front so the series exist (at 0) from startup.
        for engine in self._engines:
            for metric in (
                self.prompt_tokens, self.generation_tokens, self.request_prompt_tokens,
                self.request_generation_tokens, self.request_max_num_generation_tokens,
                self.request_params_n, self.request_params_max_tokens, self.time_to_first_token,
                self.inter_token_latency, self.time_per_output_token, self.e2e_latency,
                self.queue_time, self.inference_time, self.prefill_time, self.decode_time,
            ):  # fmt: skip
                metric.labels(model_name, engine)
            for reason in FINISH_REASON_LABELS:
                self.request_success.labels(model_name, engine, reason)
        # Per-token paths use these resolved children: `labels()` costs ~1 µs per call
        # (a lock, a tuple and a dict lookup), twice per token otherwise.
        self._series: dict[int, _EngineSeries] = {}

    def _labels(self, engine_index: int) -> tuple[str, str]:
        return (self._model_name, str(engine_index))

    def _engine(self, engine_index: int) -> _EngineSeries:
        series = self._series.get(engine_index)
        if series is None:
            labels = self._labels(engine_index)
            series = self._series[engine_index] = _EngineSeries(
                self.generation_tokens.labels(*labels),
                self.time_to_first_token.labels(*labels),
                self.inter_token_latency.labels(*labels),
            )
        return series

    def observe_prefill(self, stats: RequestStats, num_prompt_tokens: int) -> None:
        """Account a finished prefill (vLLM counts prompt tokens when the prefill completes)."""
        self.prompt_tokens.labels(*self._labels(stats.engine_index)).inc(num_prompt_tokens)

    def observe_output(
        self,
        stats: RequestStats,
        num_new_tokens: int,
        events: Sequence[object] | None = None,
        now: float | None = None,
    ) -> None:
        """Account one engine output of a request: first token / inter-token latency, events."""
        if stats.finished:
            return
        now = time.monotonic() if now is None else now
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
        if num_new_tokens <= 0:
            return
        series = self._engine(stats.engine_index)
        series.generation_tokens.inc(num_new_tokens)
        if stats.num_generation_tokens == 0:
            series.time_to_first_token.observe(now - stats.arrival_monotonic)
            stats.first_token_ts = now
        else:
            series.inter_token_latency.observe(now - stats.last_token_ts)
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
        now = time.monotonic() if now is None else now
        labels = self._labels(stats.engine_index)
        reason = finish_reason if finish_reason in FINISH_REASON_LABELS else "abort"
        self.request_success.labels(*labels, reason).inc()
        self.e2e_latency.labels(*labels).observe(now - stats.arrival_monotonic)
        self.request_prompt_tokens.labels(*labels).observe(num_prompt_tokens)
        self.request_generation_tokens.labels(*labels).observe(stats.num_generation_tokens)
        if max_tokens:
            self.request_params_max_tokens.labels(*labels).observe(max_tokens)
        decode = stats.last_token_ts - stats.first_token_ts if stats.first_token_ts else 0.0
        tpot = decode / (stats.num_generation_tokens - 1) if stats.num_generation_tokens > 1 else 0
        self.time_per_output_token.labels(*labels).observe(tpot)
        self.decode_time.labels(*labels).observe(decode)
        if stats.scheduled_ts:
            self.queue_time.labels(*labels).observe(max(0.0, stats.scheduled_ts - stats.queued_ts))
            if stats.first_token_ts:
                self.prefill_time.labels(*labels).observe(
                    max(0.0, stats.first_token_ts - stats.scheduled_ts)
                )
                self.inference_time.labels(*labels).observe(
                    max(0.0, stats.last_token_ts - stats.scheduled_ts)
                )

    def observe_parent_finished(
        self, n: int, max_generation_tokens: int, engine_index: int = 0
    ) -> None:
        """Account a whole request once all its samples finished (``n`` and the longest sample)."""
        labels = self._labels(engine_index)
        self.request_params_n.labels(*labels).observe(n)
        self.request_max_num_generation_tokens.labels(*labels).observe(max_generation_tokens)


class _EngineSeries(NamedTuple):
    generation_tokens: Counter
    time_to_first_token: Histogram
    inter_token_latency: Histogram


class EngineGauges(Collector):
    """The scheduler gauges vLLM exports (``vllm:num_requests_running``, ``…_waiting``,
    ``vllm:kv_cache_usage_perc``), read at scrape time from the latest stats each engine sent."""

    def __init__(
        self,
        model_name: str,
        engine_indexes: Sequence[int],
        latest_stats: Callable[[], Mapping[int, Any]],
    ) -> None:
        self._model_name = model_name
        self._engines = list(engine_indexes)
        self._latest = latest_stats

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """One sample per engine (0 until the engine has reported)."""
        stats = self._latest()
        labels = ["model_name", "engine"]
        running = GaugeMetricFamily(
            "vllm:num_requests_running", "Number of requests in model execution batches.",
            labels=labels,
        )  # fmt: skip
        waiting = GaugeMetricFamily(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed.",
            labels=labels,
        )  # fmt: skip
        kv = GaugeMetricFamily(
            "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
            labels=labels,
        )  # fmt: skip
        for engine in self._engines:
            s = stats.get(engine)
            values = [self._model_name, str(engine)]
            running.add_metric(values, float(getattr(s, "num_running_reqs", 0) or 0))
            waiting.add_metric(values, float(getattr(s, "num_waiting_reqs", 0) or 0))
            kv.add_metric(values, float(getattr(s, "kv_cache_usage", 0.0) or 0.0))
        yield running
        yield waiting
        yield kv

    def describe(self) -> Iterator[GaugeMetricFamily]:
        """No up-front description (the gauges are produced at collect time)."""
        return iter(())
