"""Prometheus series as plain accumulators, exported at scrape time sample for sample as
prometheus_client's own ``Counter``, ``Histogram`` and ``Summary`` would export them.

prometheus_client's metric classes take a lock per value and walk the buckets in Python on every
observation. All observations here happen on the process's one event-loop thread, so a float per
counter series, a count and sum per summary series, and per-bucket counts (found with ``bisect``)
plus a sum per histogram series suffice. :class:`SeriesCollector` turns them into
:class:`~vllm_frontend.metrics.exposition.MetricFamily` objects at scrape time (``_total``,
cumulative ``_bucket`` up to ``+Inf``, ``_count``, ``_sum``, and ``_created`` unless created series
are disabled as prometheus_client's are); prometheus_client is not imported. Used by the ``vllm:``
series (``metrics/frontend.py``) and the ``http_*`` series (``metrics/http_series.py``).
"""

from __future__ import annotations

import math
import time
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import reduce
from operator import add
from typing import Generic, TypeVar

from vllm_frontend.metrics.exposition import (
    Collector,
    MetricFamily,
    Sample,
    created_series_enabled,
    format_value,
)

__all__ = [
    "Counter",
    "CounterChild",
    "Family",
    "Gauge",
    "GaugeChild",
    "Histogram",
    "HistogramChild",
    "SeriesCollector",
    "Summary",
    "SummaryChild",
]

_Child = TypeVar("_Child")


def _reduce_sum(values: Sequence[float], start: float) -> float:
    return reduce(add, values, start)


# A series' sum is the float additions of its observations one by one, in order, as
# prometheus_client makes them. Python 3.11's ``sum`` adds floats that way (in C, ~5x faster
# than ``reduce``); from 3.12 it compensates the rounding, which the check below detects.
_sequential_sum: Callable[[Sequence[float], float], float] = (
    sum if sum([1e16, 1.0, -1e16], 0.0) == 0.0 else _reduce_sum
)
_FEW = 8  # below this many values, counting them one by one beats sorting them


def _count_into(counts: list[int], bounds: tuple[float, ...], values: Sequence[float]) -> None:
    """Add ``values`` to the per-bucket ``counts`` (bucket ``i``: the first bound ``>=`` the
    value; NaN in none), as observing them one by one would."""
    if len(values) < _FEW:
        for value in values:
            if value == value:
                counts[bisect_left(bounds, value)] += 1
        return
    ordered = sorted(values)
    total, below = len(ordered), 0
    for i, bound in enumerate(bounds):
        # values <= bound, i.e. the cumulative count up to this bucket
        upto = bisect_right(ordered, bound)
        if upto != below:
            counts[i] += upto - below
            below = upto
            if upto == total:
                return


class CounterChild:
    """One labelled series of a counter: its running total and its creation time."""

    __slots__ = ("created", "value")

    def __init__(self) -> None:
        self.value = 0.0
        self.created = time.time()

    def inc(self, amount: float = 1.0) -> None:
        """Add ``amount`` (counters only go up, as prometheus_client insists)."""
        if amount < 0:
            raise ValueError(f"a counter cannot be decreased (inc by {amount})")
        self.value += amount


class HistogramChild:
    """One labelled series of a histogram: per-bucket counts (not cumulative), sum, creation."""

    __slots__ = ("bounds", "counts", "created", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * len(bounds)
        self.sum = 0.0
        self.created = time.time()

    def observe(self, value: float) -> None:
        """Count ``value`` in the first bucket whose bound is ``>= value`` (prometheus_client's
        ``le`` rule; the last bound is +Inf) and add it to the sum."""
        if value == value:
            self.counts[bisect_left(self.bounds, value)] += 1
        # NaN falls in no bucket but poisons the sum, as in prometheus_client.
        self.sum += value

    def observe_many(self, values: Sequence[float]) -> None:
        """:meth:`observe` each of ``values`` in order (the same counts and, to the last bit,
        the same sum), at a fraction of the cost."""
        before = self.sum
        total = self.sum = _sequential_sum(values, before)
        if total != total and len(values) >= _FEW:
            # a NaN among them (or inf - inf): sorting needs them out
            values = [value for value in values if value == value]
        _count_into(self.counts, self.bounds, values)


class Family(Generic[_Child]):
    """What the metric kinds share: name, help, label names, and the labelled series in
    creation order (a series exists from its first ``labels()``, as prometheus_client's
    children do, and is exported from then on even at 0)."""

    __slots__ = ("children", "documentation", "labelnames", "name")
    kind: str = ""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str]) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.children: dict[tuple[str, ...], _Child] = {}

    def _new_child(self) -> _Child:
        raise NotImplementedError

    def labels(self, *values: object) -> _Child:
        """The series of these label values (created empty on first use)."""
        return self.child(self._check(values))

    def child(self, key: tuple[str, ...]) -> _Child:
        """The series of ``key`` (label values as strings, in label order)."""
        child = self.children.get(key)
        if child is None:
            child = self.children[key] = self._new_child()
        return child

    def _check(self, values: tuple[object, ...]) -> tuple[str, ...]:
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, got {values!r}")
        return tuple(str(v) for v in values)

    def describe(self) -> MetricFamily:
        """An empty family of the right type (a registry derives the sample names from it)."""
        return MetricFamily(self.name, self.kind, self.documentation)


class Counter(Family[CounterChild]):
    """A labelled counter exported as prometheus_client's ``Counter`` would export it."""

    __slots__ = ()
    kind = "counter"

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str]) -> None:
        """``name`` with or without ``_total`` (the family's name is without, as in
        prometheus_client)."""
        super().__init__(name.removesuffix("_total"), documentation, labelnames)

    def _new_child(self) -> CounterChild:
        return CounterChild()

    def collect(self, with_created: bool) -> MetricFamily:
        """``<name>_total`` (and ``<name>_created``) per series."""
        total, created, names = self.name + "_total", self.name + "_created", self.labelnames
        samples: list[Sample] = []
        append = samples.append
        for key, child in self.children.items():
            append(Sample(total, names, key, child.value))
            if with_created:
                append(Sample(created, names, key, child.created))
        return MetricFamily(self.name, "counter", self.documentation, samples)


class Histogram(Family[HistogramChild]):
    """A labelled histogram exported as prometheus_client's ``Histogram`` would export it."""

    __slots__ = ("_bucket_labels", "bounds")
    kind = "histogram"

    def __init__(
        self, name: str, documentation: str, labelnames: Sequence[str], buckets: Iterable[float]
    ) -> None:
        super().__init__(name, documentation, labelnames)
        bounds = [float(b) for b in buckets]
        if bounds != sorted(bounds) or not bounds:
            raise ValueError(f"{name}: bucket bounds must be sorted and not empty")
        if bounds[-1] != math.inf:
            bounds.append(math.inf)
        self.bounds = tuple(bounds)
        # per series: its label values with each ``le`` value appended, made at its first scrape
        self._bucket_labels: dict[tuple[str, ...], list[tuple[str, ...]]] = {}

    def _new_child(self) -> HistogramChild:
        return HistogramChild(self.bounds)

    def collect(self, with_created: bool) -> MetricFamily:
        """Cumulative ``_bucket`` samples up to ``le="+Inf"``, ``_count``, ``_sum`` (and
        ``_created``) per series, in prometheus_client's order."""
        name, names = self.name, self.labelnames
        bucket, count, total = name + "_bucket", name + "_count", name + "_sum"
        created, bucket_names = name + "_created", (*names, "le")
        samples: list[Sample] = []
        append = samples.append
        for key, child in self.children.items():
            keys = self._bucket_labels.get(key)
            if keys is None:
                keys = self._bucket_labels[key] = [(*key, format_value(b)) for b in self.bounds]
            acc = 0.0
            for values, n in zip(keys, child.counts, strict=True):
                acc += n
                append(Sample(bucket, bucket_names, values, acc))
            append(Sample(count, names, key, acc))
            append(Sample(total, names, key, child.sum))
            if with_created:
                append(Sample(created, names, key, child.created))
        return MetricFamily(name, "histogram", self.documentation, samples)


class GaugeChild:
    """One labelled series of a gauge: its current value."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        """Add ``amount``."""
        self.value += amount

    def dec(self, amount: float = 1.0) -> None:
        """Subtract ``amount``."""
        self.value -= amount


class Gauge(Family[GaugeChild]):
    """A labelled gauge exported as prometheus_client's ``Gauge`` would export it (no
    ``_created`` series)."""

    __slots__ = ()
    kind = "gauge"

    def _new_child(self) -> GaugeChild:
        return GaugeChild()

    def collect(self, with_created: bool) -> MetricFamily:
        """``<name>`` per series."""
        name, names = self.name, self.labelnames
        samples = [Sample(name, names, key, child.value) for key, child in self.children.items()]
        return MetricFamily(name, "gauge", self.documentation, samples)


class SummaryChild:
    """One labelled series of a summary without quantiles: count (a float, as prometheus_client
    keeps it), sum, creation."""

    __slots__ = ("count", "created", "sum")

    def __init__(self) -> None:
        self.count = 0.0
        self.sum = 0.0
        self.created = time.time()

    def observe(self, value: float) -> None:
        """Count ``value`` and add it to the sum."""
        self.count += 1.0
        self.sum += value

    def observe_many(self, values: Sequence[float]) -> None:
        """:meth:`observe` each of ``values`` in order (the same count and sum, to the last
        bit: the count stays an integral float)."""
        self.count += len(values)
        self.sum = _sequential_sum(values, self.sum)


class Summary(Family[SummaryChild]):
    """A labelled summary (count and sum) exported as prometheus_client's ``Summary`` would."""

    __slots__ = ()
    kind = "summary"

    def _new_child(self) -> SummaryChild:
        return SummaryChild()

    def collect(self, with_created: bool) -> MetricFamily:
        """``_count``, ``_sum`` (and ``_created``) per series."""
        count, total, created = (self.name + s for s in ("_count", "_sum", "_created"))
        names = self.labelnames
        samples: list[Sample] = []
        append = samples.append
        for key, child in self.children.items():
            # the count is the float prometheus_client's Summary keeps
            append(Sample(count, names, key, child.count))
            append(Sample(total, names, key, child.sum))
            if with_created:
                append(Sample(created, names, key, child.created))
        return MetricFamily(self.name, "summary", self.documentation, samples)


class SeriesCollector(Collector):
    """Exports the families at scrape time, in the order prometheus_client would have (the order
    they were created in)."""

    def __init__(
        self,
        families: Sequence[Counter | Gauge | Histogram | Summary],
        before_collect: Callable[[], None] | None = None,
    ) -> None:
        """``before_collect``: brings the families up to date (folds observations kept
        pending by their owner) before each collection."""
        self._families = list(families)
        self._before_collect = before_collect

    def collect(self) -> Iterator[MetricFamily]:
        """Every family with its current values."""
        if self._before_collect is not None:
            self._before_collect()
        # Read at each scrape, as prometheus_client's own metrics read their switch.
        with_created = created_series_enabled()
        for family in self._families:
            yield family.collect(with_created)

    def describe(self) -> Iterator[MetricFamily]:
        """The family names, so that a second registration of the same names is refused."""
        for family in self._families:
            yield family.describe()
