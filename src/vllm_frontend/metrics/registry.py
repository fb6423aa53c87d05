"""The registry ``/metrics`` renders: collectors in registration order, names kept apart.

:class:`MetricsRegistry` holds the collectors (``vllm:`` series, ``http_*`` series, scheduler
gauges) and, for a single-process server, the process series first; :func:`render_metrics`
renders them with ``vllm_frontend.metrics.exposition``, byte for byte what prometheus_client
would write. The serving process never imports prometheus_client (~60 ms of CPU, mostly the
stdlib HTTP, email and URL modules its exposition module pulls in, that the first scrape would
pay on the event loop).
"""

from __future__ import annotations

from collections.abc import Iterator

from vllm_frontend.metrics.exposition import CONTENT_TYPE, Collector, MetricFamily, render

__all__ = ["MetricsRegistry", "render_metrics"]


# The sample names each family type adds to its name (prometheus_client's registry refuses a
# collector whose names, so derived, clash with a registered one's).
_TYPE_SUFFIXES = {
    "counter": ("_total", "_created"),
    "summary": ("_sum", "_count", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "gaugehistogram": ("_bucket", "_gsum", "_gcount"),
    "info": ("_info",),
}


def _described_names(collector: Collector) -> set[str]:
    names = set()
    for family in collector.describe():
        names.add(family.name)
        names.update(family.name + suffix for suffix in _TYPE_SUFFIXES.get(family.type, ()))
    return names


class MetricsRegistry(Collector):
    """The collectors ``/metrics`` renders, in registration order (collectors yielding
    ``vllm_frontend.metrics.exposition.MetricFamily`` objects, as prometheus_client's registry takes
    them; a collector whose described names clash with a registered one's is refused)."""

    __slots__ = ("_collectors", "_defaults", "_names", "_process_metrics")

    def __init__(self, process_metrics: bool = False) -> None:
        """``process_metrics`` adds the series of prometheus_client's default collectors first
        (``python_gc_*``, ``python_info``, ``process_*`` of this process), as vLLM's frontend
        exports them from prometheus_client's global registry when it runs as one process."""
        self._collectors: list[Collector] = []
        self._names: set[str] = set()
        self._defaults: list[Collector] | None = None
        self._process_metrics = process_metrics

    def register(self, collector: Collector) -> None:
        """Add ``collector`` (``collect()`` and ``describe()`` yielding metric families)."""
        names = _described_names(collector)
        clashing = names & self._names
        if clashing:
            raise ValueError(f"Duplicated timeseries in MetricsRegistry: {sorted(clashing)}")
        self._names |= names
        self._collectors.append(collector)

    @property
    def collectors(self) -> tuple[Collector, ...]:
        """What has been registered, in order (the process series aside)."""
        return tuple(self._collectors)

    def collect(self) -> Iterator[MetricFamily]:
        """Every collector's families, the process series first."""
        if self._defaults is None:
            # made at the first scrape (reading /proc/stat, importing platform)
            from vllm_frontend.metrics.process import default_collectors

            self._defaults = default_collectors() if self._process_metrics else []
        for collector in self._defaults:
            yield from collector.collect()
        for collector in self._collectors:
            yield from collector.collect()

    def describe(self) -> Iterator[MetricFamily]:
        """The registered collectors' descriptions (so that another registry, prometheus_client's
        in the tests, takes this one as a collector)."""
        for collector in self._collectors:
            yield from collector.describe()


def render_metrics(registry: MetricsRegistry) -> tuple[bytes, str]:
    """The ``/metrics`` body of ``registry`` in prometheus_client's text format, and its content
    type."""
    return render(registry.collect()), CONTENT_TYPE
