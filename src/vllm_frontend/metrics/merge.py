"""One ``/metrics`` exposition out of several API server processes' own (sans-IO).

With ``--api-server-count N`` vLLM switches prometheus_client to its multiprocess mode
(``vllm/v1/metrics/prometheus.py``: ``setup_multiprocess_prometheus``, then
``get_prometheus_registry`` puts a ``MultiProcessCollector`` on the ``/metrics`` registry), so any
process answers with the whole server. Our processes keep their fast in-memory series instead
and merge each other's rendered expositions at scrape time, with the aggregation prometheus_client
applies in that mode (``prometheus_client/multiprocess.py``) and the gauge modes vLLM declares
(``vllm/v1/metrics/loggers.py``):

* counters, histograms and summaries: every sample summed over the processes (the ``engine``
  label keeps engines apart; the processes' shares of one engine add up);
* a counter's, histogram's or summary's ``_created`` series: the earliest of the processes'
  (prometheus_client's multiprocess mode drops ``_created`` altogether; we keep the series
  every single-process exposition has, with the value that means "counting since");
* gauges with an ``engine`` label (``vllm:num_requests_running``, ``…_waiting``,
  ``vllm:kv_cache_usage_perc``, declared ``multiprocess_mode="mostrecent"`` in vLLM): the value
  of the process holding that engine's newest stats, so each engine shows once. An engine sends
  its scheduler stats to one frontend per step (``vllm/v1/core/sched/scheduler.py``
  ``update_from_output``: "Return stats to only one of the front-ends"), so the others' values
  are older, not another share. "Newest" is by the engine's own clock (the outputs message's
  ``timestamp``), so it is exact; prometheus_client stamps a ``mostrecent`` gauge when the
  recording process sets it, which can put two messages of one engine that reach two processes
  close together in the wrong order (a stale value that stays until the engine's next stats);
* other gauges: summed (vLLM's ``"sum"``/``"livesum"`` modes, e.g. ``vllm:lora_requests_info``);
* anything else: the first process's samples.

Families and samples keep the first process's order (the scraped process comes first), samples
that only other processes have follow; HELP and TYPE lines are copied as they are, values are
rendered as prometheus_client renders them (``vllm_frontend.metrics.exposition.format_value``),
so one process's exposition merges into itself byte for byte. Sample timestamps (prometheus_client
writes none for these series) are dropped.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import msgspec

from vllm_frontend.metrics.exposition import format_value

__all__ = ["MetricsSnapshot", "merge_expositions"]


class MetricsSnapshot(msgspec.Struct, frozen=True):
    """One process's contribution to a scrape."""

    exposition: bytes
    """Its own ``/metrics`` body (prometheus_client's text format)."""
    stats_times: dict[str, float] = msgspec.field(default_factory=dict)
    """``engine`` label value → when that engine made the scheduler stats this process holds
    (the engine's own monotonic clock: ``EngineCoreClient.scheduler_stats_times``)."""


_SUM, _MIN, _GAUGE, _FIRST = range(4)
_SUMMED_KINDS = frozenset({"counter", "histogram", "summary", "gaugehistogram"})
_ENGINE_LABEL = re.compile(r'[{,]\s*engine="((?:[^"\\]|\\.)*)"')


@dataclass(slots=True)
class _Family:
    name: str
    kind: str = "untyped"
    header: list[str] = field(default_factory=list)
    samples: dict[str, float] = field(default_factory=dict)


@dataclass(slots=True)
class _Merged:
    header: list[str]
    rule: int
    values: dict[str, float] = field(default_factory=dict)
    received: dict[str, float] = field(default_factory=dict)
    """Per engine-labelled gauge sample: when its engine made the stats it was taken from."""


def _sample_key_end(line: str) -> int:
    """Where the series (name and labels) of a sample line ends: after the label set's closing
    brace (label values may hold spaces, braces and escaped quotes), else at the first space."""
    brace = line.find("{")
    space = line.find(" ")
    if brace == -1 or (space != -1 and space < brace):
        return space
    quoted = False
    i = brace + 1
    while i < len(line):
        c = line[i]
        if quoted:
            if c == "\\":
                i += 1
            elif c == '"':
                quoted = False
        elif c == '"':
            quoted = True
        elif c == "}":
            return i + 1
        i += 1
    return -1


def _parse(text: str) -> list[_Family]:
    families: list[_Family] = []
    current: _Family | None = None
    for line in text.splitlines():
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                name = parts[2]
                if current is None or current.name != name or current.samples:
                    current = _Family(name)
                    families.append(current)
                if parts[1] == "TYPE" and len(parts) == 4:
                    current.kind = parts[3].strip()
            elif current is None:
                current = _Family("")
                families.append(current)
            current.header.append(line)
            continue
        key, _, value = line.rpartition(" ")
        # The value is the last field, unless a timestamp follows it: then what precedes the last
        # space is neither a bare name nor ends with the label set's brace, and a scan decides.
        if not key or not (key[-1] == "}" or ("{" not in key and " " not in key)):
            end = _sample_key_end(line)
            fields = line[end:].split() if end > 0 else []
            if not fields:
                raise ValueError(f"not a sample line: {line!r}")
            key, value = line[:end], fields[0]
        if current is None:
            current = _Family("")
            families.append(current)
        current.samples[key] = float(value)
    return families


def _rules(families: Sequence[_Family]) -> dict[str, int]:
    """Each family's aggregation (a gauge's samples with an ``engine`` label take the most recent
    value, the others are summed)."""
    bases = set()
    for f in families:
        if f.kind == "counter":
            bases.add(f.name.removesuffix("_total"))
        elif f.kind in _SUMMED_KINDS:
            bases.add(f.name)
    rules = {}
    for f in families:
        if f.kind in _SUMMED_KINDS:
            rules[f.name] = _SUM
        elif f.kind == "gauge" and f.name.endswith("_created") and f.name[:-8] in bases:
            rules[f.name] = _MIN
        elif f.kind == "gauge":
            rules[f.name] = _GAUGE
        else:
            rules[f.name] = _FIRST
    return rules


def merge_expositions(snapshots: Sequence[MetricsSnapshot]) -> bytes:
    """The exposition of all ``snapshots`` together (the first one's order leads)."""
    merged: dict[str, _Merged] = {}
    for snapshot in snapshots:
        families = _parse(snapshot.exposition.decode())
        rules = _rules(families)
        received = snapshot.stats_times
        for family in families:
            into = merged.get(family.name)
            if into is None:
                into = merged[family.name] = _Merged(list(family.header), rules[family.name])
            _merge_family(into, family, received)
    lines: list[str] = []
    for out in merged.values():
        lines.extend(out.header)
        lines.extend(f"{key} {format_value(v)}" for key, v in out.values.items())
    return ("\n".join(lines) + "\n").encode() if lines else b""


def _merge_family(into: _Merged, family: _Family, received: Mapping[str, float]) -> None:
    values = into.values
    rule = into.rule
    for key, value in family.samples.items():
        if rule == _GAUGE:
            engine = _ENGINE_LABEL.search(key)
            if engine is not None:
                made = received.get(engine.group(1), -math.inf)
                if key not in values or made > into.received[key]:
                    values[key] = value
                    into.received[key] = made
                continue
            # a gauge no engine owns: each process's own share (vLLM's "sum" gauges)
        old = values.get(key)
        if old is None:
            values[key] = value
        elif rule in (_SUM, _GAUGE):
            values[key] = old + value
        elif rule == _MIN and value < old:
            values[key] = value
