"""Comparing two prometheus_client registries' pages, ``_created`` series included."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import prometheus_client
import prometheus_client.metrics
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

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


def assert_same_exposition(pair: Any, switch: Callable[[bool], None]) -> None:
    """``pair.ours_registry`` and ``pair.reference_registry`` render the same page in both text
    formats: with ``_created`` series (their timestamps aside) and without them (byte for
    byte)."""
    ours, reference = pair.ours_registry, pair.reference_registry
    switch(True)
    for generate in (prometheus_client.generate_latest, generate_openmetrics):
        assert without_created_values(generate(ours)) == without_created_values(generate(reference))
    switch(False)
    for generate in (prometheus_client.generate_latest, generate_openmetrics):
        assert generate(ours) == generate(reference)
