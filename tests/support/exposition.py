"""Comparing our pages with prometheus_client's, ``_created`` series included."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import prometheus_client
import prometheus_client.metrics
from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from vllm_frontend.metrics.exposition import render
from vllm_frontend.metrics.openmetrics import render_openmetrics
from vllm_frontend.metrics.registry import MetricsRegistry
from vllm_frontend.metrics.text_parse import parse_text

_CREATED = re.compile(r"^(\S+_created(?:\{[^}]*\})?) \S+$", re.M)


def without_created_values(exposition: bytes) -> str:
    """The page with every ``_created`` sample's value (a timestamp) replaced by ``<t>``."""
    return _CREATED.sub(r"\1 <t>", exposition.decode())


@contextmanager
def created_series_switch() -> Iterator[Callable[[bool], None]]:
    """A switch for prometheus_client's ``_created`` series; the setting is restored after."""
    before = prometheus_client.metrics._use_created

    def switch(on: bool) -> None:
        if on:
            prometheus_client.metrics.enable_created_metrics()
        else:
            prometheus_client.metrics.disable_created_metrics()

    try:
        yield switch
    finally:
        switch(before)


def prometheus_view(registry: MetricsRegistry) -> CollectorRegistry:
    """A prometheus_client registry over ``registry``'s collectors (for ``get_sample_value``)."""
    view = CollectorRegistry()
    view.register(registry)
    return view


def assert_same_exposition(pair: Any, switch: Callable[[bool], None]) -> None:
    """``pair.ours_registry`` (rendered by ``vllm_frontend.metrics.exposition``) and
    ``pair.reference_registry`` (prometheus_client's metrics, rendered by prometheus_client) show
    the same page: with ``_created`` series (their timestamps aside) and without them (byte for
    byte); and our renderer writes byte for byte what prometheus_client writes for our families,
    in the text format and in OpenMetrics (also read back from our text page). Our families in
    OpenMetrics match prometheus_client's metrics in OpenMetrics too."""
    ours, reference = pair.ours_registry, pair.reference_registry
    for created in (True, False):
        switch(created)
        page = render(ours.collect())
        assert page == prometheus_client.generate_latest(ours)
        # our OpenMetrics renderer too, also from the text page read back (merged pages are)
        openmetrics_page = generate_openmetrics(ours)
        assert render_openmetrics(ours.collect()) == openmetrics_page
        assert render_openmetrics(parse_text(page)) == openmetrics_page
        pages = [
            (page, prometheus_client.generate_latest(reference)),
            (generate_openmetrics(ours), generate_openmetrics(reference)),
        ]
        for mine, theirs in pages:
            if created:
                assert without_created_values(mine) == without_created_values(theirs)
            else:
                assert mine == theirs
