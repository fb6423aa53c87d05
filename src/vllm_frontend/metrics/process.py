"""The process, gc and platform series vLLM's frontend exports when it runs as one process.

vLLM's ``/metrics`` renders prometheus_client's global registry, which holds prometheus_client's
default collectors, in their registration order: ``GCCollector`` (``python_gc_*``),
``PlatformCollector`` (``python_info``) and ``ProcessCollector`` (``process_*``). These are the
same families, names, help texts, label sets and values, computed from the same sources (see
prometheus_client's ``gc_collector.py``, ``platform_collector.py``, ``process_collector.py``):
``gc.get_stats()``; the ``platform`` module; ``/proc/self/stat`` (virtual size, resident pages
times the page size, start time in clock ticks after the boot time, ``btime`` of ``/proc/stat``,
user plus system CPU ticks), ``/proc/self/limits`` (the soft "Max open files") and the entries of
``/proc/self/fd``. As there, the ``process_*`` series are left out where ``/proc`` cannot be
read, and the ``python_gc_*`` ones on interpreters other than CPython.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Iterator

from vllm_frontend.metrics.exposition import Collector, MetricFamily, Sample

__all__ = ["GcSeries", "PlatformSeries", "ProcessSeries", "default_collectors"]

_GENERATION = ("generation",)


class GcSeries(Collector):
    """``python_gc_objects_collected_total``, ``…_uncollectable_total`` and
    ``python_gc_collections_total`` per generation."""

    def collect(self) -> Iterator[MetricFamily]:
        """The three counters from ``gc.get_stats()`` (no ``_created`` series)."""
        families = (
            ("python_gc_objects_collected", "Objects collected during gc", "collected"),
            ("python_gc_objects_uncollectable", "Uncollectable objects found during GC",
             "uncollectable"),
            ("python_gc_collections", "Number of times this generation was collected",
             "collections"),
        )  # fmt: skip
        stats = gc.get_stats()
        for name, documentation, key in families:
            total = name + "_total"
            samples = [
                Sample(total, _GENERATION, (str(generation),), float(stat[key]))
                for generation, stat in enumerate(stats)
            ]
            yield MetricFamily(name, "counter", documentation, samples)


class PlatformSeries(Collector):
    """``python_info``: the interpreter's version and implementation as labels, value 1."""

    def __init__(self) -> None:
        import platform

        major, minor, patchlevel = platform.python_version_tuple()
        labels = {
            "version": platform.python_version(),
            "implementation": platform.python_implementation(),
            "major": major,
            "minor": minor,
            "patchlevel": patchlevel,
        }
        self._family = MetricFamily(
            "python_info",
            "gauge",
            "Python platform information",
            [Sample("python_info", tuple(labels), tuple(labels.values()), 1.0)],
        )

    def collect(self) -> Iterator[MetricFamily]:
        """The one family (fixed at construction)."""
        yield self._family


def _gauge(name: str, documentation: str, value: float) -> MetricFamily:
    return MetricFamily(name, "gauge", documentation, [Sample(name, (), (), value)])


class ProcessSeries(Collector):
    """The ``process_*`` series of this process, from ``/proc``."""

    def __init__(self, proc: str = "/proc") -> None:
        """``proc``: where procfs is mounted."""
        import resource

        self._proc = proc
        self._self = os.path.join(proc, "self")
        try:
            self._ticks = float(os.sysconf("SC_CLK_TCK"))
        except (ValueError, TypeError, AttributeError, OSError):
            self._ticks = 100.0
        self._page_size = resource.getpagesize()
        self._boot_time = 0.0
        try:
            with open(os.path.join(proc, "stat"), "rb") as stat:
                for line in stat:
                    if line.startswith(b"btime "):
                        self._boot_time = float(line.split()[1])
                        break
        except OSError:
            pass  # no /proc: no process series

    def collect(self) -> Iterator[MetricFamily]:
        """Memory, start time and CPU time (from ``stat``), then open and maximum file
        descriptors; each group left out when its files cannot be read."""
        if not self._boot_time:
            return
        try:
            with open(os.path.join(self._self, "stat"), "rb") as stat:
                # the fields after the command name (which may hold spaces and parentheses)
                fields = stat.read().rpartition(b")")[2].split()
        except OSError:
            fields = []
        if fields:
            ticks = self._ticks
            yield _gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.",
                         float(fields[20]))  # fmt: skip
            yield _gauge("process_resident_memory_bytes", "Resident memory size in bytes.",
                         float(fields[21]) * self._page_size)  # fmt: skip
            yield _gauge(
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                float(fields[19]) / ticks + self._boot_time,
            )
            cpu = float(fields[11]) / ticks + float(fields[12]) / ticks
            yield MetricFamily(
                "process_cpu_seconds",
                "counter",
                "Total user and system CPU time spent in seconds.",
                [Sample("process_cpu_seconds_total", (), (), cpu)],
            )
        try:
            max_fds = None
            with open(os.path.join(self._self, "limits"), "rb") as limits:
                for line in limits:
                    if line.startswith(b"Max open file"):
                        max_fds = float(line.split()[3])
                        break
            open_fds = float(len(os.listdir(os.path.join(self._self, "fd"))))
        except OSError:
            return
        yield _gauge("process_open_fds", "Number of open file descriptors.", open_fds)
        if max_fds is not None:
            yield _gauge("process_max_fds", "Maximum number of open file descriptors.", max_fds)


def default_collectors() -> list[Collector]:
    """prometheus_client's default collectors' series, in the global registry's order."""
    collectors: list[Collector] = []
    if hasattr(gc, "get_stats") and sys.implementation.name == "cpython":
        collectors.append(GcSeries())
    collectors.append(PlatformSeries())
    collectors.append(ProcessSeries())
    return collectors
