"""The OpenMetrics text exposition (1.0.0) of metric families, as prometheus_client's
``openmetrics.exposition.generate_latest`` writes it, byte for byte.

Unlike the Prometheus text format (``vllm_frontend.metrics.exposition``) a family keeps its own
name (a counter's without ``_total``) and type (``unknown``, ``info``, ``stateset`` …), its
``_created`` samples stay where the family has them, help texts also escape double quotes, and
the page ends with ``# EOF``. Sample names are escaped as prometheus_client escapes them (see
``vllm_frontend.metrics.names``: ``vllm:x_total`` becomes ``vllm_x_total`` under the default
``underscores`` scheme, while the family's header lines keep ``vllm:x``). Served from ``/metrics``
to a scraper asking for ``application/openmetrics-text`` (``vllm_frontend.metrics.negotiation``).
"""

from __future__ import annotations

from collections.abc import Iterable

from vllm_frontend.metrics.exposition import MetricFamily, format_value, label_set
from vllm_frontend.metrics.names import (
    ALLOW_UTF8,
    UNDERSCORES,
    escape_metric_name,
    is_legacy_metric_name,
    om_sample_name,
    quote,
)

__all__ = ["CONTENT_TYPE", "render_openmetrics"]

CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"
"""The content type prometheus_client (0.26: ``openmetrics.exposition.CONTENT_TYPE_LATEST``)
sends with this format when the scraper names no version."""


def render_openmetrics(families: Iterable[MetricFamily], escaping: str = UNDERSCORES) -> bytes:
    """The OpenMetrics exposition of ``families``, in their order, ending with ``# EOF``."""
    out: list[str] = []
    append = out.append
    for family in families:
        name = escape_metric_name(family.name, escaping)
        append(f"# HELP {name} {quote(family.documentation)}\n# TYPE {name} {family.type}\n")
        if family.unit:
            append(f"# UNIT {name} {family.unit}\n")
        for sample in family.samples:
            labels = label_set(sample.labelnames, sample.labelvalues, escaping)
            value = format_value(sample.value)
            if escaping == ALLOW_UTF8 and not is_legacy_metric_name(sample.name):
                quoted = escape_metric_name(sample.name, escaping)
                append(f"{{{quoted}{',' if labels else ''}{labels}}} {value}\n")
            elif labels:
                append(f"{om_sample_name(sample.name, escaping)}{{{labels}}} {value}\n")
            else:
                append(f"{om_sample_name(sample.name, escaping)} {value}\n")
    append("# EOF\n")
    return "".join(out).encode()
