"""Finished requests kept as one record each and folded into their ``vllm:*`` series in bulk.

A request's finish observes a dozen histograms (``vllm/v1/metrics/loggers.py``,
``PrometheusStatLogger.record`` with ``FinishedRequestStats``): e2e latency, prompt and
generation tokens, ``max_tokens``, time per output token, decode, preemptions, KV tokens
computed, and queue/prefill/inference time when the engine reported its events. Observed one by
one that is ~2.8 µs per request on the event loop; a record (the request's figures appended to
a flat list) is ~0.3 µs, and folding a few hundred records column by column
(``HistogramChild.observe_many``) costs a fraction of observing them.
:class:`~vllm_frontend.metrics.frontend.FrontendMetrics` keeps the records and folds them before
its series are read and when they grow past a bound; the values each series receives, and their
order, are those of observing at the finish.
"""

from __future__ import annotations

from collections import Counter
from operator import sub
from typing import Any, NamedTuple

from vllm_frontend.metrics.series import CounterChild, HistogramChild

__all__ = ["FIELDS", "FinishSeries", "fold_finished"]


class FinishSeries(NamedTuple):
    """The series a request's finish updates, for one engine (resolved once per engine)."""

    success: dict[str, CounterChild]  # by finish reason (FINISH_REASON_LABELS)
    e2e_latency: HistogramChild
    prompt_tokens: HistogramChild
    generation_tokens: HistogramChild
    max_tokens: HistogramChild
    time_per_output_token: HistogramChild
    decode_time: HistogramChild
    num_preemptions: HistogramChild
    prefill_kv_computed_tokens: HistogramChild
    queue_time: HistogramChild
    prefill_time: HistogramChild
    inference_time: HistogramChild


FIELDS = 12
"""Values per finished request in the flat list of records :func:`fold_finished` takes: its
engine's :class:`FinishSeries`, finish reason, e2e latency, prompt tokens, ``max_tokens``,
generation tokens, first and last token times, preemptions, cached prompt tokens, queued and
scheduled times (the fields of its ``RequestStats`` at the finish). A flat list (extended by a
request's values) costs no tuple per request, and its columns are slices."""


def fold_finished(records: list[Any]) -> None:
    """Observe ``records`` (:data:`FIELDS` values per request, in finish order) in their series,
    as observing each at its finish would have."""
    engines = records[::FIELDS]
    first = engines[0]
    if engines.count(first) == len(engines):  # one engine: the usual
        _fold_engine(first, records)
        return
    by_engine: dict[int, list[Any]] = {}
    for i, series in enumerate(engines):
        by_engine.setdefault(id(series), []).extend(records[i * FIELDS : (i + 1) * FIELDS])
    for group in by_engine.values():
        _fold_engine(group[0], group)


def _fold_engine(series: FinishSeries, records: list[Any]) -> None:
    (_, reasons, e2e, prompt, max_tokens, generated, firsts, lasts, preemptions, cached,
     queued, scheduled) = [records[i::FIELDS] for i in range(FIELDS)]  # fmt: skip
    success = series.success
    for reason, count in Counter(reasons).items():
        # an integral float plus a count: exactly ``count`` additions of 1
        (success.get(reason) or success["abort"]).value += count
    series.e2e_latency.observe_many(e2e)
    series.prompt_tokens.observe_many(prompt)
    series.generation_tokens.observe_many(generated)
    series.max_tokens.observe_many(list(filter(None, max_tokens)))
    # decode: last - first token time, 0.0 without a first token
    if 0.0 in firsts:
        decode = [last - first if first else 0.0 for first, last in zip(firsts, lasts, strict=True)]
    else:
        decode = list(map(sub, lasts, firsts))
    series.time_per_output_token.observe_many(
        [d / (n - 1) if n > 1 else 0 for d, n in zip(decode, generated, strict=True)]
    )
    series.decode_time.observe_many(decode)
    series.num_preemptions.observe_many(preemptions)
    # prompt - max(cached, 0), spelled out: the builtin max costs ~3x this
    series.prefill_kv_computed_tokens.observe_many(
        [p - (0 if c < 0 else c) for p, c in zip(prompt, cached, strict=True)]
    )
    # queue, prefill and inference time: only with the engine's SCHEDULED event (and prefill
    # only with a first token); never below 0 (max(0.0, d), spelled out)
    if 0.0 not in scheduled and 0.0 not in firsts:
        series.queue_time.observe_many([d if d > 0.0 else 0.0 for d in map(sub, scheduled, queued)])
        series.prefill_time.observe_many(
            [d if d > 0.0 else 0.0 for d in map(sub, firsts, scheduled)]
        )
        series.inference_time.observe_many(
            [d if d > 0.0 else 0.0 for d in map(sub, lasts, scheduled)]
        )
        return
    queue, prefill, inference = [], [], []
    for first, last, queued_ts, scheduled_ts in zip(firsts, lasts, queued, scheduled, strict=True):
        if scheduled_ts:
            queue.append(max(0.0, scheduled_ts - queued_ts))
            if first:
                prefill.append(max(0.0, first - scheduled_ts))
                inference.append(max(0.0, last - scheduled_ts))
    series.queue_time.observe_many(queue)
    series.prefill_time.observe_many(prefill)
    series.inference_time.observe_many(inference)
