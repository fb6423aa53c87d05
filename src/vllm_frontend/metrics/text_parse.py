"""Metric families read back from a text exposition that :func:`~vllm_frontend.metrics.exposition.
render` wrote (or :func:`~vllm_frontend.metrics.merge.merge_expositions` merged), so that a page
merged from several API server processes can be written in another format (OpenMetrics).

The inverse of ``render`` for the families this project exports: a counter's ``_total`` name and
``counter`` type give the family's name back, ``untyped`` is ``unknown`` again, and the
``_created`` (``_gsum``, ``_gcount``) gauges written after a counter, histogram or summary go back
into it, each sample after the last one of its series (labels other than ``le``), where
prometheus_client's metrics have them. What the text format does not keep stays lost: an
``info`` or ``stateset`` family reads back as a gauge, a ``gaugehistogram`` as a histogram.
Timestamps are dropped.
"""

from __future__ import annotations

from vllm_frontend.metrics.exposition import MetricFamily, Sample

__all__ = ["parse_text"]

_MOVED = ("_created", "_gsum", "_gcount")
_FOLDED_INTO = frozenset({"counter", "histogram", "summary"})
_UNESCAPE = {"\\": "\\", "n": "\n", '"': '"'}


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            out.append(_UNESCAPE.get(nxt, "\\" + nxt))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _sample(line: str) -> Sample:
    brace = line.find("{")
    space = line.find(" ")
    if brace == -1 or (space != -1 and space < brace):
        name, rest = line[:space], line[space + 1 :]
        return Sample(name, (), (), float(rest.split()[0]))
    name = line[:brace]
    names: list[str] = []
    values: list[str] = []
    i = brace + 1
    while line[i] != "}":
        eq = line.index("=", i)
        names.append(line[i:eq].strip().lstrip(",").strip())
        j = eq + 2  # after the opening quote
        start = j
        while line[j] != '"':
            j += 2 if line[j] == "\\" else 1
        values.append(_unescape(line[start:j]))
        i = j + 1
        if line[i] == ",":
            i += 1
    return Sample(name, tuple(names), tuple(values), float(line[i + 1 :].split()[0]))


def _series(sample: Sample) -> tuple[tuple[str, str], ...]:
    return tuple((n, v) for n, v in zip(sample.labelnames, sample.labelvalues, strict=True)
                 if n != "le")  # fmt: skip


def _fold(into: MetricFamily, moved: list[Sample]) -> None:
    """Put ``moved`` samples after the last sample of their series in ``into``."""
    last = {_series(s): i for i, s in enumerate(into.samples)}
    after: dict[int, list[Sample]] = {}
    rest: list[Sample] = []
    for sample in moved:
        i = last.get(_series(sample))
        if i is None:
            rest.append(sample)
        else:
            after.setdefault(i, []).append(sample)
    samples: list[Sample] = []
    for i, sample in enumerate(into.samples):
        samples.append(sample)
        samples.extend(after.get(i, ()))
    samples.extend(rest)
    into.samples = samples


def parse_text(page: bytes) -> list[MetricFamily]:
    """The families of a text exposition, in its order."""
    families: list[MetricFamily] = []
    heads: list[str] = []  # each family's name as its header lines have it
    by_head: dict[str, MetricFamily] = {}
    current: MetricFamily | None = None
    for line in page.decode().splitlines():
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) < 3 or parts[1] not in ("HELP", "TYPE"):
                continue
            head = parts[2]
            if current is None or heads[-1] != head or current.samples:
                current = MetricFamily(head, "unknown", "")
                families.append(current)
                heads.append(head)
                by_head[head] = current
            text = parts[3] if len(parts) == 4 else ""
            if parts[1] == "HELP":
                current.documentation = _unescape(text)
            else:
                current.type = {"untyped": "unknown"}.get(text.strip(), text.strip())
            continue
        if current is None:
            current = MetricFamily("", "unknown", "")
            families.append(current)
            heads.append("")
        current.samples.append(_sample(line))
    out: list[MetricFamily] = []
    for family in families:
        if family.type == "counter":
            family.name = family.name.removesuffix("_total")
        if family.type == "gauge":
            base = next((family.name[: -len(s)] for s in _MOVED if family.name.endswith(s)), None)
            owner = by_head.get(base + "_total") or by_head.get(base) if base else None
            if owner is not None and owner.type in _FOLDED_INTO and owner is not family:
                _fold(owner, family.samples)
                continue
        out.append(family)
    return out
