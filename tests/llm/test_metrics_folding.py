"""Observations kept pending and folded in bulk show exactly what observing them eagerly shows.

Finished requests (``metrics/finish_records.py``), time-to-first-token and inter-token latencies
(``metrics/frontend.py``) and HTTP exchanges (``metrics/http_series.py``) are kept pending and
folded into their series when the page is rendered and whenever they pass a bound; the folds go
through ``HistogramChild.observe_many`` and ``SummaryChild.observe_many``. prometheus_client's
own metrics, observed one value at a time, are the oracle: whatever the bound and wherever the
scrapes fall, the pages are the same byte for byte (a histogram's ``_sum`` is the float
additions in observation order, to the last bit).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from contextlib import contextmanager

import prometheus_client
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import Histogram, Summary
from tests.llm.test_metrics_exposition import drive, make_pair
from tests.server.test_http_metrics_exposition import make_pair as make_http_pair
from tests.support.exposition import created_series_switch

from vllm_frontend.metrics import frontend, http_series
from vllm_frontend.metrics.exposition import render
from vllm_frontend.metrics.series import HistogramChild, SummaryChild, _sequential_sum

pytestmark = pytest.mark.oracle

BOUNDS = (0.001, 0.01, 0.1, 0.3, 1.0, 2.5, 10.0, 7680.0)

values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([*BOUNDS, 0.0, -0.0, 1e16, -1e16, 1.0]),
    st.integers(min_value=-(2**60), max_value=2**60),
)


@contextmanager
def fold_bound(n: int) -> Iterator[None]:
    """Pending records folded every ``n`` (instead of the production bound)."""
    before = frontend._FOLD_AT, frontend._FOLD_VALUES, http_series._FOLD_AT
    frontend._FOLD_AT = frontend._FOLD_VALUES = http_series._FOLD_AT = n
    try:
        yield
    finally:
        frontend._FOLD_AT, frontend._FOLD_VALUES, http_series._FOLD_AT = before


def same_page(pair: object) -> None:
    """Our page and prometheus_client's, ``_created`` series off (byte for byte)."""
    ours = render(pair.ours_registry.collect())  # type: ignore[attr-defined]
    theirs = prometheus_client.generate_latest(pair.reference_registry)  # type: ignore[attr-defined]
    assert ours.decode() == theirs.decode()


@settings(max_examples=60, deadline=None)
@given(st.lists(values, max_size=40), st.lists(values, max_size=40))
def test_observe_many_is_observing_one_by_one(first: list[float], second: list[float]) -> None:
    """Counts and the sum (bit for bit, NaN included) of two batches observed in bulk equal
    prometheus_client's after the same values one at a time."""
    ours, summary = HistogramChild((*BOUNDS, math.inf)), SummaryChild()
    reference = Histogram("h", "h", buckets=BOUNDS, registry=None)
    reference_summary = Summary("s", "s", registry=None)
    for batch in (first, second):
        ours.observe_many(batch)
        summary.observe_many(batch)
        for value in batch:
            reference.observe(value)
            reference_summary.observe(value)
    samples = {s.name + s.labels.get("le", ""): s.value for s in reference.collect()[0].samples}
    cumulative = 0
    for bound, count in zip((*BOUNDS, math.inf), ours.counts, strict=True):
        cumulative += count
        le = "+Inf" if bound == math.inf else repr(float(bound))
        assert samples[f"h_bucket{le}"] == cumulative
    assert repr(samples["h_sum"]) == repr(ours.sum)
    summary_samples = {s.name: s.value for s in reference_summary.collect()[0].samples}
    assert repr(summary_samples["s_sum"]) == repr(summary.sum)
    assert summary_samples["s_count"] == summary.count


@given(st.lists(st.floats(allow_nan=False, allow_infinity=False), max_size=50))
def test_the_bulk_sum_adds_in_order(batch: list[float]) -> None:
    """The bulk sum is the left-to-right float additions, never a compensated or pairwise sum."""
    expected = 0.0
    for value in batch:
        expected += value
    assert repr(_sequential_sum(batch, 0.0)) == repr(expected)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    bound=st.integers(1, 40),
    chunks=st.lists(st.integers(1, 120), min_size=1, max_size=5),
)
def test_finished_requests_folded_anywhere_show_the_eager_page(
    seed: int, bound: int, chunks: list[int]
) -> None:
    """Random traffic (requests on several engines, an unconfigured one, finishes with and
    without tokens and engine events, parent requests), scraped between random stretches and
    folded every ``bound`` finishes (or latencies): the page equals prometheus_client's observed
    eagerly."""
    rng = random.Random(seed)
    engines = rng.choice([(0,), (0, 1), (2, 5, 3)])
    with fold_bound(bound), created_series_switch() as switch:
        switch(False)
        pair = make_pair(rng.choice([1, 128, 4096]), engines)
        for steps in chunks:
            drive(rng, pair, engines, steps, stray_steps=False)
            same_page(pair)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    bound=st.integers(1, 40),
    chunks=st.lists(st.integers(1, 120), min_size=1, max_size=5),
)
def test_http_exchanges_folded_anywhere_show_the_eager_page(
    seed: int, bound: int, chunks: list[int]
) -> None:
    """Exchanges over several routes, methods and statuses (a route's size summaries shared by
    its statuses), scraped between random stretches and folded every ``bound`` exchanges."""
    rng = random.Random(seed)
    handlers = ["/v1/completions", "/v1/chat/completions", "none"]
    with fold_bound(bound), created_series_switch() as switch:
        switch(False)
        pair = make_http_pair()
        for steps in chunks:
            for _ in range(steps):
                pair.observe(
                    rng.choice(["GET", "POST"]),
                    rng.choice(handlers),
                    rng.choice([200, 200, 400, 503]),
                    rng.choice([0, rng.randrange(0, 1 << 20)]),
                    rng.randrange(0, 1 << 22),
                    rng.choice([rng.random() * 0.2, rng.random() * 90, 0.1, 0.5]),
                )
            same_page(pair)
