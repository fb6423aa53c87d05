"""Metric and label names as the exposition formats write them under each name escaping scheme.

Prometheus' content negotiation lets a scraper ask for one of four schemes (``escaping=`` in the
``Accept`` header): ``underscores`` (the default: a name outside the legacy character set gets
``_`` for each character outside it), ``dots`` (``_`` doubled, ``.`` as ``_dot_``, other
characters outside the set as ``__``), ``values`` (``U__`` and each character outside the set as
``_<hex code>_``) and ``allow-utf-8`` (names kept, quoted when outside the set). The rules are
prometheus_client's (``openmetrics/exposition.py``: ``escape_metric_name``,
``escape_label_name``), quirks included: its OpenMetrics writer escapes *sample* names with the
label-name character set (``:`` is outside it), so ``vllm:x_total`` is written ``vllm_x_total``
under ``underscores`` there, while the family's ``# HELP``/``# TYPE`` lines keep ``vllm:x``
(:func:`om_sample_name`).
"""

from __future__ import annotations

import re
from functools import lru_cache

__all__ = [
    "ALLOW_UTF8",
    "DOTS",
    "ESCAPINGS",
    "UNDERSCORES",
    "VALUES",
    "escape_label_name",
    "escape_metric_name",
    "is_legacy_metric_name",
    "om_sample_name",
    "quote",
]

ALLOW_UTF8 = "allow-utf-8"
UNDERSCORES = "underscores"
DOTS = "dots"
VALUES = "values"
ESCAPINGS = (ALLOW_UTF8, UNDERSCORES, DOTS, VALUES)
"""The escaping schemes a scraper may ask for."""

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def is_legacy_metric_name(name: str) -> bool:
    """Whether ``name`` is in the legacy metric-name character set."""
    return _METRIC_NAME.fullmatch(name) is not None


def _rune_ok(c: str, i: int, colon: bool) -> bool:
    return ("a" <= c <= "z" or "A" <= c <= "Z" or c == "_" or ("0" <= c <= "9" and i > 0)
            or (colon and c == ":"))  # fmt: skip


def quote(text: str) -> str:
    """Backslash, newline and double quote escaped (label values, OpenMetrics help texts)."""
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape(name: str, escaping: str, colon: bool) -> str:
    """Every character of ``name`` rewritten under ``escaping`` (no legality check)."""
    if escaping == ALLOW_UTF8:
        return quote(name)
    out: list[str] = []
    if escaping == UNDERSCORES:
        for i, c in enumerate(name):
            out.append(c if _rune_ok(c, i, colon) else "_")
    elif escaping == DOTS:
        for i, c in enumerate(name):
            if c == "_":
                out.append("__")
            elif c == ".":
                out.append("_dot_")
            else:
                out.append(c if _rune_ok(c, i, colon) else "__")
    elif escaping == VALUES:
        out.append("U__")
        for i, c in enumerate(name):
            if c == "_":
                out.append("__")
            elif _rune_ok(c, i, colon):
                out.append(c)
            elif 0xD800 <= ord(c) <= 0xDFFF:
                out.append("_FFFD_")
            else:
                out.append(f"_{ord(c):x}_")
    else:
        return name
    return "".join(out)


@lru_cache(maxsize=4096)
def escape_metric_name(name: str, escaping: str = UNDERSCORES) -> str:
    """A metric name as headers and text-format samples write it (quoted under ``allow-utf-8``
    when outside the legacy set)."""
    if not name:
        return name
    legal = _METRIC_NAME.fullmatch(name) is not None
    if escaping == ALLOW_UTF8:
        return _escape(name, escaping, True) if legal else f'"{_escape(name, escaping, True)}"'
    if escaping == DOTS or not legal:
        return _escape(name, escaping, True)
    return name


@lru_cache(maxsize=4096)
def escape_label_name(name: str, escaping: str = UNDERSCORES) -> str:
    """A label name as samples write it (quoted under ``allow-utf-8`` when outside the set)."""
    if not name:
        return name
    legal = _LABEL_NAME.fullmatch(name) is not None
    if escaping == ALLOW_UTF8:
        return _escape(name, escaping, False) if legal else f'"{_escape(name, escaping, False)}"'
    if escaping == DOTS or not legal:
        return _escape(name, escaping, False)
    return name


@lru_cache(maxsize=4096)
def om_sample_name(name: str, escaping: str = UNDERSCORES) -> str:
    """A sample name as prometheus_client's OpenMetrics writer writes it (every character checked
    against the label-name set, ``:`` included; under ``allow-utf-8`` only quotes escaped)."""
    return _escape(name, escaping, False)
