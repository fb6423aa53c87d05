"""Which exposition a scrape gets, from its ``Accept``, ``Accept-Encoding`` and ``name[]``
query parameters, as prometheus_client's ``make_asgi_app`` decides it (sans-IO).

vLLM mounts that app under ``/metrics`` (``vllm/entrypoints/serve/instrumentator/metrics.py``),
so every request to a path starting with ``/metrics`` other than ``GET /metrics`` itself (which
prometheus-fastapi-instrumentator's own route answers: always the text format, never
compressed) is answered this way (prometheus_client 0.26, ``exposition.py``
``choose_encoder``, ``gzip_accepted``, ``_bake_output``):

* ``Accept`` is read entry by entry (comma-separated, parameters after ``;``): the first
  ``application/openmetrics-text`` entry picks OpenMetrics (version 1.0.0 when it names none; a
  version below 1.0.0 is passed over), the first ``text/plain`` entry with a version of 1.0.0
  or more picks the text format with an ``escaping=`` in its content type; otherwise the text
  format under ``text/plain; version=0.0.4``. ``q`` values are not weighed.
* ``escaping=`` of the chosen entry selects the name escaping (``underscores`` unless it is one
  of the four schemes).
* ``Accept-Encoding`` with a ``gzip`` entry: the body is gzip-compressed and
  ``Content-Encoding: gzip`` is sent.
* ``name[]`` query parameters keep only the samples with those names (families without any are
  left out); prometheus_client's order of collectors is then its set's, ours stays the page's.
"""

from __future__ import annotations

import gzip
from collections.abc import Collection, Iterable, Iterator
from typing import NamedTuple

from vllm_frontend.metrics.exposition import MetricFamily, render
from vllm_frontend.metrics.names import ESCAPINGS, UNDERSCORES
from vllm_frontend.metrics.openmetrics import CONTENT_TYPE as OPENMETRICS_CONTENT_TYPE
from vllm_frontend.metrics.openmetrics import render_openmetrics

__all__ = [
    "TEXT_0_0_4_CONTENT_TYPE",
    "EncodedPage",
    "PageFormat",
    "choose_format",
    "encode_page",
    "gzip_accepted",
]

TEXT_0_0_4_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""What prometheus_client's negotiation sends with the text format by default."""


class PageFormat(NamedTuple):
    """The exposition format a scrape asked for."""

    openmetrics: bool
    escaping: str
    content_type: str


class EncodedPage(NamedTuple):
    """A negotiated ``/metrics`` body and the headers it goes with."""

    body: bytes
    content_type: str
    gzipped: bool


def _at_least_1(version: str) -> bool:
    """Whether ``version`` (dot-separated; parts compared as numbers where they are) is 1.0.0 or
    later. A comparison prometheus_client cannot make (``"1.0.x"``) fails its scrape; here the
    entry is passed over."""
    parts: list[int | str] = []
    for part in version.split("."):
        try:
            parts.append(int(part))
        except ValueError:
            parts.append(part)
    try:
        return tuple(parts) >= (1, 0, 0)
    except TypeError:
        return False


def _params(entry: list[str]) -> tuple[str, str]:
    """The ``version`` and ``escaping`` parameters of one ``Accept`` entry (first of each)."""
    version = escaping = ""
    for token in entry[1:]:
        key, eq, value = token.strip().partition("=")
        if not eq:
            continue
        if key == "version" and not version:
            version = value
        elif key == "escaping" and not escaping:
            escaping = value
    return version, escaping if escaping in ESCAPINGS else UNDERSCORES


def choose_format(accept: str) -> PageFormat:
    """The format for an ``Accept`` header (prometheus_client's ``choose_encoder`` rules)."""
    for accepted in (accept or "").split(","):
        entry = accepted.split(";")
        media = entry[0].strip()
        if media == "application/openmetrics-text":
            version, escaping = _params(entry)
            if not version:
                return PageFormat(True, UNDERSCORES, OPENMETRICS_CONTENT_TYPE)
            if _at_least_1(version):
                content_type = (
                    f"application/openmetrics-text; version={version}; charset=utf-8; "
                    f"escaping={escaping}"
                )
                return PageFormat(True, escaping, content_type)
        elif media == "text/plain":
            version, escaping = _params(entry)
            if version and _at_least_1(version):
                content_type = f"text/plain; version=1.0.0; charset=utf-8; escaping={escaping}"
                return PageFormat(False, escaping, content_type)
    return PageFormat(False, UNDERSCORES, TEXT_0_0_4_CONTENT_TYPE)


def gzip_accepted(accept_encoding: str) -> bool:
    """Whether ``Accept-Encoding`` lists ``gzip`` (any case, any parameters)."""
    return any(
        entry.split(";")[0].strip().lower() == "gzip"
        for entry in (accept_encoding or "").split(",")
    )


def _restricted(families: Iterable[MetricFamily], names: Collection[str]) -> Iterator[MetricFamily]:
    for family in families:
        samples = [s for s in family.samples if s.name in names]
        if samples:
            yield MetricFamily(family.name, family.type, family.documentation, samples)


def encode_page(
    families: Iterable[MetricFamily],
    accept: str,
    accept_encoding: str,
    names: Collection[str] | None = None,
) -> EncodedPage:
    """``families`` in the format ``accept`` asks for, gzip-compressed when ``accept_encoding``
    allows it, restricted to the sample ``names`` when given (the ``name[]`` parameters)."""
    chosen = choose_format(accept)
    if names is not None:
        families = _restricted(families, set(names))
    if chosen.openmetrics:
        body = render_openmetrics(families, chosen.escaping)
    else:
        body = render(families, chosen.escaping)
    if gzip_accepted(accept_encoding):
        return EncodedPage(gzip.compress(body), chosen.content_type, True)
    return EncodedPage(body, chosen.content_type, False)
