"""Metric families and their Prometheus text exposition, rendered here, not by prometheus_client.

``/metrics`` is rendered in the text format prometheus_client's ``generate_latest`` writes (format
0.0.4), byte for byte for the same families: ``# HELP`` (backslashes and newlines escaped) and
``# TYPE`` lines under the name the format wants (a counter's ``_total``, an info's ``_info``),
labels sorted by name with their values escaped, values as Go prints floats (``+Inf``, ``1.0``,
``1e+06``), and a counter's, histogram's or summary's ``_created`` samples moved into a gauge
family of their own after the family. Importing prometheus_client costs ~60 ms of CPU (its
exposition module pulls in the stdlib HTTP and email packages), which the first scrape would pay
on the event loop; a scrape rendered here costs a fraction of one rendered by it.

A :class:`MetricFamily` has the attributes prometheus_client's ``Metric`` has (``name``, ``type``,
``documentation``, ``samples`` whose items have ``name``, ``labels``, ``value``, ``timestamp``),
so prometheus_client's registry and renderers take these families too (the tests compare both
renderings).
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Iterable
from functools import lru_cache
from typing import NamedTuple

from vllm_frontend.metrics.names import (
    ALLOW_UTF8,
    UNDERSCORES,
    escape_label_name,
    escape_metric_name,
    quote,
)

__all__ = [
    "CONTENT_TYPE",
    "Collector",
    "MetricFamily",
    "Sample",
    "created_series_enabled",
    "format_value",
    "label_set",
    "render",
]

CONTENT_TYPE = "text/plain; version=1.0.0; charset=utf-8"
"""The content type prometheus_client (0.26: ``CONTENT_TYPE_LATEST``) sends with this format."""

_INF = math.inf
# Sample suffixes the text format does not have: their samples go into a gauge family of their
# own after the family they belong to, in this (sorted) order.
_MOVED_SUFFIXES = ("_created", "_gcount", "_gsum")
# Family types the text format names differently.
_TEXT_TYPE = {"info": "gauge", "stateset": "gauge", "gaugehistogram": "histogram",
              "unknown": "untyped"}  # fmt: skip


class Sample(NamedTuple):
    """One sample line: sample name, label names and values (in the same order), value."""

    name: str
    labelnames: tuple[str, ...]
    labelvalues: tuple[str, ...]
    value: float

    @property
    def labels(self) -> dict[str, str]:
        """The labels as a mapping (as prometheus_client's ``Sample`` has them)."""
        return dict(zip(self.labelnames, self.labelvalues, strict=True))

    @property
    def timestamp(self) -> None:
        """No sample here carries a timestamp."""
        return None

    @property
    def exemplar(self) -> None:
        """No sample here carries an exemplar."""
        return None

    @property
    def native_histogram(self) -> None:
        """No sample here is a native histogram."""
        return None


class MetricFamily:
    """A metric family: its name (a counter's without ``_total``), type (``counter``, ``gauge``,
    ``histogram``, ``summary``, ``info``, ``unknown`` …), help text and samples."""

    __slots__ = ("documentation", "name", "samples", "type")
    unit = ""
    """No family here declares a unit (OpenMetrics renderers read it)."""

    def __init__(
        self, name: str, type: str, documentation: str, samples: list[Sample] | None = None
    ) -> None:
        """An empty family unless ``samples`` is given."""
        self.name = name
        self.type = type
        self.documentation = documentation
        self.samples: list[Sample] = [] if samples is None else samples

    def add(
        self, name: str, labelnames: tuple[str, ...], labelvalues: tuple[str, ...], value: float
    ) -> None:
        """Append a sample."""
        self.samples.append(Sample(name, labelnames, labelvalues, value))

    def __repr__(self) -> str:
        return f"MetricFamily({self.name!r}, {self.type!r}, {len(self.samples)} samples)"


class Collector:
    """What a registry renders: families produced at scrape time (``describe`` names them up
    front so that a registry can refuse clashing names; it may yield nothing)."""

    __slots__ = ()

    def collect(self) -> Iterable[MetricFamily]:
        """The families with their current samples."""
        raise NotImplementedError

    def describe(self) -> Iterable[MetricFamily]:
        """The families without samples (only names and types are read)."""
        return ()


def created_series_enabled() -> bool:
    """Whether counters, histograms and summaries export ``_created`` samples: prometheus_client's
    switch (``disable_created_metrics()``) when it is loaded, else the environment variable it
    reads at its import (``PROMETHEUS_DISABLE_CREATED_SERIES``, true for ``true``/``1``/``t``)."""
    module = sys.modules.get("prometheus_client.metrics")
    if module is not None:
        return bool(getattr(module, "_use_created", True))
    disabled = os.environ.get("PROMETHEUS_DISABLE_CREATED_SERIES", "False").lower()
    return disabled not in ("true", "1", "t")


def format_value(value: float) -> str:
    """``value`` as Go's ``strconv.FormatFloat(v, 'g', -1, 64)`` writes it, as Prometheus' text
    format has it: ``+Inf``, ``-Inf``, ``NaN``, whole numbers with ``.0``, and positive values of
    10 million and more in exponent form (``1e+07``; Python's repr switches only at 1e16)."""
    value = float(value)
    if value != value:
        return "NaN"
    if value == _INF:
        return "+Inf"
    if value == -_INF:
        return "-Inf"
    text = repr(value)
    dot = text.find(".")
    if dot > 6 and value > 0:
        digits = (text[:dot] + text[dot + 1 :]).rstrip("0")
        mantissa = f"{digits[0]}.{digits[1:]}" if len(digits) > 1 else digits
        return f"{mantissa}e+{dot - 1:02d}"
    return text


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


@lru_cache(maxsize=1 << 15)
def label_set(names: tuple[str, ...], values: tuple[str, ...], escaping: str = UNDERSCORES) -> str:
    """``a="x",b="y"`` (sorted by label name, values escaped), or nothing for no labels."""
    if not names:
        return ""
    pairs = sorted(zip(names, values, strict=True))
    return ",".join(f'{escape_label_name(k, escaping)}="{quote(v)}"' for k, v in pairs)


def _head(name: str, kind: str, help_text: str) -> str:
    return f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n"


def render(families: Iterable[MetricFamily], escaping: str = UNDERSCORES) -> bytes:
    """The text exposition of ``families``, in their order, names escaped under ``escaping``."""
    out: list[str] = []
    append = out.append
    for family in families:
        name, kind = family.name, family.type
        if kind == "counter":
            head = name + "_total"
        elif kind == "info":
            head = name + "_info"
        else:
            head = name
        help_text = _escape_help(family.documentation)
        append(_head(escape_metric_name(head, escaping), _TEXT_TYPE.get(kind, kind), help_text))
        moved: dict[str, list[str]] | None = None
        moved_names = (name + "_created", name + "_gcount", name + "_gsum")
        for sample in family.samples:
            line = _sample_line(sample, escaping)
            if sample.name in moved_names:
                if moved is None:
                    moved = {}
                moved.setdefault(sample.name, []).append(line)
            else:
                append(line)
        if moved is not None:
            for suffix in _MOVED_SUFFIXES:
                lines = moved.get(name + suffix)
                if lines:
                    append(_head(escape_metric_name(name + suffix, escaping), "gauge", help_text))
                    out.extend(lines)
    return "".join(out).encode()


def _sample_line(sample: Sample, escaping: str) -> str:
    labels = label_set(sample.labelnames, sample.labelvalues, escaping)
    name = escape_metric_name(sample.name, escaping)
    if escaping == ALLOW_UTF8 and name.startswith('"'):
        # a name outside the legacy set goes inside the braces, quoted
        return f"{{{name}{',' if labels else ''}{labels}}} {format_value(sample.value)}\n"
    if labels:
        return f"{name}{{{labels}}} {format_value(sample.value)}\n"
    return f"{name} {format_value(sample.value)}\n"
