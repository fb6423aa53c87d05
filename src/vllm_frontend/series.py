"""Prometheus series as plain accumulators, exported at scrape time as prometheus_client's own
``Counter``, ``Histogram`` and ``Summary`` would export them.

prometheus_client's metric classes take a lock per value and walk the buckets in Python on every
observation. All observations here happen on the process's one event-loop thread, so a float per
counter series, a count and sum per summary series, and per-bucket counts (found with ``bisect``)
plus a sum per histogram series suffice. :class:`SeriesCollector` turns them into metric families
at scrape time (``_total``, cumulative ``_bucket`` up to ``+Inf``, ``_count``, ``_sum``, and
``_created`` unless prometheus_client's created series are disabled). prometheus_client is
imported only then, not at startup. Used by the ``vllm:`` series (``llm/metrics.py``) and the
``http_*`` series (``server/metrics.py``).
"""

from __future__ import annotations

import math
import time
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prometheus_client.core import (
        CounterMetricFamily,
        HistogramMetricFamily,
        Metric,
        SummaryMetricFamily,
    )

__all__ = [
    "Counter",
    "CounterChild",
    "Family",
    "Histogram",
    "HistogramChild",
    "SeriesCollector",
    "Summary",
    "SummaryChild",
]


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


class Family:
    """What a counter and a histogram share: name, help, label names, and the labelled series in
    creation order (a series exists from its first ``labels()``, as prometheus_client's
    children do, and is exported from then on even at 0)."""

    __slots__ = ("documentation", "labelnames", "name")
    kind: str = ""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str]) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)

    def _check(self, values: tuple[object, ...]) -> tuple[str, ...]:
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, got {values!r}")
        return tuple(str(v) for v in values)

    def describe(self) -> Metric:
        """An empty family of the right type (the registry derives the sample names from it)."""
        from prometheus_client.core import Metric

        return Metric(self.name, self.documentation, self.kind)


class Counter(Family):
    """A labelled counter exported as prometheus_client's ``Counter`` would export it."""

    __slots__ = ("children",)
    kind = "counter"

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str]) -> None:
        super().__init__(name, documentation, labelnames)
        self.children: dict[tuple[str, ...], CounterChild] = {}

    def labels(self, *values: object) -> CounterChild:
        """The series of these label values (created at 0 on first use)."""
        return self.child(self._check(values))

    def child(self, key: tuple[str, ...]) -> CounterChild:
        """The series of ``key`` (label values as strings, in label order)."""
        child = self.children.get(key)
        if child is None:
            child = self.children[key] = CounterChild()
        return child

    def collect(self, with_created: bool) -> CounterMetricFamily:
        """``<name>_total`` (and ``<name>_created``) per series."""
        from prometheus_client.core import CounterMetricFamily

        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for key, child in self.children.items():
            family.add_metric(key, child.value, child.created if with_created else None)
        return family


class Histogram(Family):
    """A labelled histogram exported as prometheus_client's ``Histogram`` would export it."""

    __slots__ = ("_le", "bounds", "children")
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
        self._le: list[str] | None = None  # the ``le`` label values, made at the first scrape
        self.children: dict[tuple[str, ...], HistogramChild] = {}

    def labels(self, *values: object) -> HistogramChild:
        """The series of these label values (created empty on first use)."""
        return self.child(self._check(values))

    def child(self, key: tuple[str, ...]) -> HistogramChild:
        """The series of ``key`` (label values as strings, in label order)."""
        child = self.children.get(key)
        if child is None:
            child = self.children[key] = HistogramChild(self.bounds)
        return child

    def collect(self, with_created: bool) -> HistogramMetricFamily:
        """Cumulative ``_bucket`` samples up to ``le="+Inf"``, ``_count``, ``_sum`` (and
        ``_created``) per series, in prometheus_client's order."""
        from prometheus_client.core import HistogramMetricFamily

        if self._le is None:
            from prometheus_client.utils import floatToGoString

            self._le = [floatToGoString(b) for b in self.bounds]
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for key, child in self.children.items():
            buckets = []
            acc = 0.0
            for le, count in zip(self._le, child.counts, strict=True):
                acc += count
                buckets.append((le, acc))
            family.add_metric(key, buckets, child.sum)
            if with_created:
                family.add_sample(
                    self.name + "_created",
                    dict(zip(self.labelnames, key, strict=True)),
                    child.created,
                )
        return family


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


class Summary(Family):
    """A labelled summary (count and sum) exported as prometheus_client's ``Summary`` would."""

    __slots__ = ("children",)
    kind = "summary"

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str]) -> None:
        super().__init__(name, documentation, labelnames)
        self.children: dict[tuple[str, ...], SummaryChild] = {}

    def child(self, key: tuple[str, ...]) -> SummaryChild:
        """The series of ``key`` (label values as strings, in label order)."""
        child = self.children.get(key)
        if child is None:
            child = self.children[key] = SummaryChild()
        return child

    def collect(self, with_created: bool) -> SummaryMetricFamily:
        """``_count``, ``_sum`` (and ``_created``) per series."""
        from prometheus_client.core import SummaryMetricFamily

        family = SummaryMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for key, child in self.children.items():
            labels = dict(zip(self.labelnames, key, strict=True))
            # SummaryMetricFamily.add_metric's samples, with the count as the float that
            # prometheus_client's Summary keeps
            family.add_sample(self.name + "_count", labels, child.count)
            family.add_sample(self.name + "_sum", labels, child.sum)
            if with_created:
                family.add_sample(self.name + "_created", labels, child.created)
        return family


class SeriesCollector:
    """Exports the families at scrape time, in the order prometheus_client would have (the order
    they were created in)."""

    def __init__(self, families: Sequence[Counter | Histogram | Summary]) -> None:
        self._families = list(families)

    def collect(self) -> Iterator[Metric]:
        """Every family with its current values."""
        # prometheus_client's switch (PROMETHEUS_DISABLE_CREATED_SERIES, disable_created_metrics)
        # is read at each scrape by its own metrics too.
        from prometheus_client import metrics as prometheus_metrics

        with_created = bool(getattr(prometheus_metrics, "_use_created", True))
        for family in self._families:
            yield family.collect(with_created)

    def describe(self) -> Iterator[Metric]:
        """The family names, so that a second registration of the same names is refused."""
        for family in self._families:
            yield family.describe()
