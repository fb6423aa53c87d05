"""Reads an engine's outputs message into the per-step ``vllm:*`` series (the adapter between
the engine's messages and ``vllm_frontend.metrics``, which takes plain values)."""

from __future__ import annotations

from collections.abc import Container
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vllm_frontend.engine.protocol import EngineCoreOutputs
    from vllm_frontend.metrics.frontend import FrontendMetrics

__all__ = ["observe_step"]


def observe_step(
    metrics: FrontendMetrics, message: EngineCoreOutputs, tracked: Container[str]
) -> None:
    """Account one outputs message of an engine, as vLLM's ``output_handler`` does with the
    message's ``IterationStats`` and ``SchedulerStats`` (``vllm/v1/engine/async_llm.py``,
    ``vllm/v1/metrics/stats.py``, ``PrometheusStatLogger.record``).

    ``tracked`` holds the engine request ids still streamed to a caller: like vLLM's output
    processor, outputs of other requests (aborted here meanwhile) are not counted. A message
    with outputs is one engine step: ``vllm:iteration_tokens_total`` observes the prompt
    tokens it computed (first outputs' ``prefill_stats``) plus the tokens it generated.
    """
    engine = message.engine_index
    series = metrics.step_series(engine)
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
            if computed >= 0 and local >= 0 and external >= 0 and cached >= 0:
                # CounterChild.inc, inline (anything else takes inc's checks below)
                series.local_compute.value += computed
                series.local_cache_hit.value += local
                series.external_kv_transfer.value += external
                series.prompt_tokens_cached.value += cached
            else:
                series.local_compute.inc(computed)
                series.local_cache_hit.inc(local)
                series.external_kv_transfer.inc(external)
                series.prompt_tokens_cached.inc(cached)
    stats = message.scheduler_stats
    if stats is None:
        return
    if (lora_info := metrics.lora_info) is not None:
        lora_info.observe_step(stats.waiting_lora_adapters, stats.running_lora_adapters)
    prefix = stats.prefix_cache_stats
    if (stats_log := metrics.stats_log) is not None:
        stats_log.observe_prefix(engine, prefix, stats.connector_prefix_cache_stats)
    queries, hits = prefix.queries, prefix.hits
    if queries >= 0 and hits >= 0:  # CounterChild.inc, inline
        series.prefix_cache_queries.value += queries
        series.prefix_cache_hits.value += hits
        series.cached_on_device.value += hits
    else:
        series.prefix_cache_queries.inc(queries)
        series.prefix_cache_hits.inc(hits)
        series.cached_on_device.inc(hits)
    connector = stats.connector_prefix_cache_stats
    if connector is not None:
        metrics.observe_connector(
            engine, connector.queries, connector.hits, connector.hits_by_source
        )
    perf = stats.perf_stats
    if perf:
        metrics.observe_perf(
            engine,
            perf.get("num_flops_per_gpu") or 0,
            perf.get("num_read_bytes_per_gpu") or 0,
            perf.get("num_write_bytes_per_gpu") or 0,
        )
