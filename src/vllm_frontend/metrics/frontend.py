"""Per-request ``vllm:*`` series fed from the same events as vLLM's frontend feeds them.

vLLM computes these in its frontend's output processor (``vllm/v1/metrics/stats.py``). We feed the
same quantities from the same events: arrival, every engine output (first token, inter-token
gaps), and the finish. Times are taken with the frontend's monotonic clock when the output
arrives; the engine's QUEUED/SCHEDULED events (monotonic clock of the same machine) give the
queue, prefill and inference phases when the engine logs stats. What vLLM computes per engine
message (one ``IterationStats`` per message with outputs, and the message's ``SchedulerStats``)
goes through :meth:`FrontendMetrics.step_series`, :meth:`~FrontendMetrics.observe_connector`
and :meth:`~FrontendMetrics.observe_perf`, which the llm layer's adapter
(``vllm_frontend.llm.step_metrics``) calls with the values it reads from each outputs message.

The counters and histograms are the plain accumulators of ``vllm_frontend.metrics.series`` rather
than prometheus_client's ``Counter``/``Histogram``: those take a lock per value and walk the
buckets in Python on every observation, which showed as ~5-8% of the frontend's CPU since
``observe_output`` runs for every engine output. They are exported at scrape time, sample for
sample as prometheus_client's own metrics would be. The histograms a request's finish observes
and the first-token and inter-token latencies are kept pending (one record per finished request,
``metrics/finish_records.py``; a float per latency) and folded in bulk, in observation order,
before every collection and when they pass a bound: per request that is a fraction of a dozen
observations, and every reader of the series sees what eager observation would have shown.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from vllm_frontend.metrics.finish_records import FIELDS, FinishSeries, fold_finished
from vllm_frontend.metrics.lora_info import LoraInfo
from vllm_frontend.metrics.request_stats import RequestStats
from vllm_frontend.metrics.series import CounterChild, HistogramChild
from vllm_frontend.metrics.vllm_families import FINISH_REASON_LABELS, Registry, VllmFamilies

__all__ = ["FrontendMetrics", "StatsLogSink", "StepSeries"]

# EngineCoreEvent types (engine-protocol.md §5.5).
_QUEUED, _SCHEDULED, _PREEMPTED = 1, 2, 3

_FOLD_VALUES = 1024
"""Time-to-first-token or inter-token latencies kept pending per engine before they are folded
into their histogram."""

_FOLD_AT = 256
"""Finished requests (and parent requests) kept pending before they are folded into their
series: a fold of this many costs ~0.12 ms on the event loop, and memory stays flat without
scrapes."""


class FrontendMetrics(VllmFamilies):
    """The request-level ``vllm:*`` series and what updates them."""

    def __init__(
        self,
        model_name: str,
        max_model_len: int,
        engine_indexes: Sequence[int] = (0,),
        registry: Registry | None = None,
    ) -> None:
        """Register the families in ``registry`` (None: a registry of their own)."""
        super().__init__(model_name, max_model_len, engine_indexes, registry)
        # Label tuples per engine index, and the series the per-token path touches: resolved once
        # so that a token costs an attribute update and an append.
        self._keys: dict[int, tuple[str, str]] = {}
        self._series: dict[int, _EngineSeries] = {}
        self._steps: dict[int, StepSeries] = {}
        self._finished: dict[int, FinishSeries] = {}
        self._prompt: dict[int, CounterChild] = {}
        self._parent: dict[int, tuple[HistogramChild, HistogramChild]] = {}
        # What finished since the last fold (see metrics/finish_records.py): FIELDS values per
        # request, three (series, n, longest sample) per parent request, in finish order.
        self._pending: list[Any] = []
        self._pending_parents: list[Any] = []  # flat: series, n, longest, series, ...
        self.stats_log: StatsLogSink | None = None
        """The periodic stats log (``--disable-log-stats`` off), told each step's cache stats."""
        self.lora_info: LoraInfo | None = None
        """``vllm:lora_requests_info`` (engines serving LoRA), told each step's adapters."""

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

    def _new_step_series(self, engine_index: int) -> StepSeries:
        key = self._labels(engine_index)
        by_source = self.prompt_tokens_by_source
        series = self._steps[engine_index] = StepSeries(
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

    def step_series(self, engine_index: int) -> StepSeries:
        """The series one outputs message of engine ``engine_index`` updates (an engine step)."""
        return self._steps.get(engine_index) or self._new_step_series(engine_index)

    def observe_connector(
        self, engine_index: int, queries: int, hits: int, hits_by_source: Mapping[str, int]
    ) -> None:
        """Account a step's KV-connector prefix-cache queries and hits (by cache tier)."""
        key = self._labels(engine_index)
        self.external_prefix_cache_queries.child(key).inc(queries)
        self.external_prefix_cache_hits.child(key).inc(hits)
        for tier, num_tokens in hits_by_source.items():
            self.prompt_tokens_cached_by_source.child((*key, str(tier))).inc(num_tokens)

    def observe_perf(self, engine_index: int, flops: float, read: float, write: float) -> None:
        """Account a step's performance estimates (``PerfMetricsProm.observe`` in
        ``vllm/v1/metrics/perf.py``: all three or none)."""
        if flops or read or write:
            key = self._labels(engine_index)
            self.estimated_flops.child(key).inc(flops)
            self.estimated_read_bytes.child(key).inc(read)
            self.estimated_write_bytes.child(key).inc(write)

    def record_admission_rejection(self, reason: str) -> None:
        """Count a request refused by a frontend queue limit (one of :data:`ADMISSION_REASONS`)."""
        self.admission_rejections.child((self._model_name, reason)).inc()

    def observe_prefill(self, stats: RequestStats, num_prompt_tokens: int) -> None:
        """Account a finished prefill (vLLM counts prompt tokens when the prefill completes)."""
        child = self._prompt.get(stats.engine_index)
        if child is None:
            key = self._labels(stats.engine_index)
            child = self._prompt[stats.engine_index] = self.prompt_tokens.child(key)
        child.value += num_prompt_tokens

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
            self._observe_events(stats, events)
        if num_new_tokens <= 0:
            return
        series = self._series.get(stats.engine_index) or self._engine(stats.engine_index)
        series.generation_tokens.value += num_new_tokens
        if stats.num_generation_tokens:
            pending = series.itl  # folded by fold()
            pending.append(now - stats.last_token_ts)
        else:
            pending = series.ttft
            pending.append(now - stats.arrival_monotonic)
            stats.first_token_ts = now
        if len(pending) >= _FOLD_VALUES:
            series.fold()
        stats.last_token_ts = now
        stats.num_generation_tokens += num_new_tokens

    def _observe_events(self, stats: RequestStats, events: Sequence[object]) -> None:
        """The engine's QUEUED/SCHEDULED/PREEMPTED events of a request."""
        lora = self.lora_info if stats.lora_name is not None else None
        for event in events:
            try:  # the engine's EngineCoreEvent (attribute reads ~5x cheaper than getattr's)
                kind, ts = event.type, event.timestamp  # type: ignore[attr-defined]
            except AttributeError:
                kind = getattr(event, "type", None)
                ts = getattr(event, "timestamp", 0.0)
            ts = float(ts or 0.0)
            if kind == _QUEUED:
                stats.queued_ts = ts
            elif kind == _SCHEDULED and stats.scheduled_ts == 0.0:
                stats.scheduled_ts = ts
            elif kind == _PREEMPTED:
                stats.num_preemptions += 1
                self.num_preemptions.child(self._labels(stats.engine_index)).value += 1
            if lora is not None:
                lora.request_event(stats, kind == _SCHEDULED)

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
        # kept pending, folded by fold(): this runs per streamed token
        pending = series.itl
        pending.append(now - stats.last_token_ts)
        if len(pending) >= _FOLD_VALUES:
            series.fold()
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
        if stats.lora_name is not None and self.lora_info is not None:
            self.lora_info.request_finished(stats)
        if now is None:
            now = time.monotonic()
        series = self._finished.get(stats.engine_index)
        if series is None:
            if str(stats.engine_index) not in self._engines:
                # An engine not configured up front: its series are created as they are used.
                self._observe_finished_unconfigured(stats, finish_reason, num_prompt_tokens,
                                                    max_tokens, now)  # fmt: skip
                return
            series = self._finish_series(stats.engine_index)
        pending = self._pending
        pending.extend((
            series, finish_reason, now - stats.arrival_monotonic, num_prompt_tokens, max_tokens,
            stats.num_generation_tokens, stats.first_token_ts, stats.last_token_ts,
            stats.num_preemptions, stats.num_cached_tokens, stats.queued_ts, stats.scheduled_ts,
        ))  # fmt: skip
        if len(pending) >= _FOLD_AT * FIELDS:
            self.fold()

    def fold(self) -> None:
        """Observe the finished requests kept pending in their series (before the series are
        read: each collection, and every :data:`_FOLD_AT` requests)."""
        if self._pending:
            records, self._pending = self._pending, []
            fold_finished(records)
        for series in self._series.values():
            series.fold()
        if self._pending_parents:
            parents, self._pending_parents = self._pending_parents, []
            _fold_parents(parents)

    def _observe_finished_unconfigured(
        self,
        stats: RequestStats,
        finish_reason: str,
        num_prompt_tokens: int,
        max_tokens: int | None,
        now: float,
    ) -> None:
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

    def _finish_series(self, engine_index: int) -> FinishSeries:
        key = self._labels(engine_index)
        series = self._finished[engine_index] = FinishSeries(
            {reason: self.request_success.child((*key, reason)) for reason in FINISH_REASON_LABELS},
            self.e2e_latency.child(key),
            self.request_prompt_tokens.child(key),
            self.request_generation_tokens.child(key),
            self.request_params_max_tokens.child(key),
            self.time_per_output_token.child(key),
            self.decode_time.child(key),
            self.request_num_preemptions.child(key),
            self.request_prefill_kv_computed_tokens.child(key),
            self.queue_time.child(key),
            self.prefill_time.child(key),
            self.inference_time.child(key),
        )
        return series

    def observe_parent_finished(
        self, n: int, max_generation_tokens: int, engine_index: int = 0
    ) -> None:
        """Account a whole request once all its samples finished (``n`` and the longest sample)."""
        series = self._parent.get(engine_index)
        if series is None:
            key = self._labels(engine_index)
            series = self._parent[engine_index] = (
                self.request_params_n.child(key),
                self.request_max_num_generation_tokens.child(key),
            )
        pending = self._pending_parents
        pending.extend((series, n, max_generation_tokens))
        if len(pending) >= _FOLD_AT * 3:
            self.fold()


class StatsLogSink(Protocol):
    """What an engine step tells the periodic stats log (``metrics.stats_log.StatsLog``)."""

    def observe_prefix(self, engine: int, stats: Any, connector: Any | None) -> None:
        """Account one step's prefix-cache stats (and the KV connector's)."""
        ...


class _EngineSeries:
    """The series a request's token outputs update, with the time-to-first-token and
    inter-token latencies observed since the last fold (appending a float costs a third of an
    observation; the fold observes them in order)."""

    __slots__ = ("generation_tokens", "inter_token_latency", "itl", "time_to_first_token", "ttft")

    def __init__(
        self,
        generation_tokens: CounterChild,
        time_to_first_token: HistogramChild,
        inter_token_latency: HistogramChild,
    ) -> None:
        self.generation_tokens = generation_tokens
        self.time_to_first_token = time_to_first_token
        self.inter_token_latency = inter_token_latency
        self.ttft: list[float] = []
        self.itl: list[float] = []

    def fold(self) -> None:
        """Observe the pending latencies."""
        if self.ttft:
            values, self.ttft = self.ttft, []
            self.time_to_first_token.observe_many(values)
        if self.itl:
            values, self.itl = self.itl, []
            self.inter_token_latency.observe_many(values)


class StepSeries(NamedTuple):
    """The series one engine step (outputs message) updates."""

    iteration_tokens: HistogramChild
    local_compute: CounterChild
    local_cache_hit: CounterChild
    external_kv_transfer: CounterChild
    prompt_tokens_cached: CounterChild
    prefix_cache_queries: CounterChild
    prefix_cache_hits: CounterChild
    cached_on_device: CounterChild


def _fold_parents(parents: list[Any]) -> None:
    """Observe finished parent requests' ``n`` and longest sample (flat: series, n, longest per
    parent request), per engine in finish order."""
    engines = parents[::3]
    first = engines[0]
    if engines.count(first) == len(engines):  # one engine: the usual
        groups = [(first, parents)]
    else:
        by_engine: dict[int, list[Any]] = {}
        for i, series in enumerate(engines):
            by_engine.setdefault(id(series), []).extend(parents[3 * i : 3 * i + 3])
        groups = [(group[0], group) for group in by_engine.values()]
    for (n_series, longest_series), group in groups:
        n_series.observe_many(group[1::3])
        longest_series.observe_many(group[2::3])
