"""outlines' verdict on a request's constraint, as vLLM 0.32's
``validate_structured_output_request_outlines`` (vllm/v1/structured_output/backend_outlines.py)
reaches it, with vLLM's messages: a regex must parse (Python's own regex parser), use none of the
features outlines-core's automata lack (backreferences, look-arounds, word boundaries) and match
without context before its first character; a JSON schema becomes a regex in outlines-core (its
native package, imported on first use) and is checked the same way; grammars and JSON objects
are refused.
"""

from __future__ import annotations

import functools
import json
import re
from re import _constants as sre_c  # type: ignore[attr-defined]
from re import _parser as sre_p  # type: ignore[attr-defined]
from typing import Any

from vllm_frontend.engine.protocol import StructuredOutputsParams

__all__ = ["OUTLINES_CORE_REQUIREMENT", "OutlinesUnavailable", "outlines_refusal"]

OUTLINES_CORE_REQUIREMENT = "outlines_core==0.2.14"
"""The outlines-core release vLLM 0.32 pins."""

_CONSUMERS = (sre_p.LITERAL, sre_p.IN, sre_p.ANY)
_ASSERTIONS = (sre_c.ASSERT, sre_c.ASSERT_NOT)


class OutlinesUnavailable(NotImplementedError):
    """outlines-core cannot be imported here (HTTP 501 for the request needing it)."""


def outlines_refusal(so: StructuredOutputsParams) -> str | None:
    """vLLM's message refusing ``so``'s constraint with outlines, ``None`` where it passes.
    Raises :class:`OutlinesUnavailable` for a JSON schema without outlines-core."""
    if so.regex:
        return regex_refusal(so.regex)
    if so.json:
        if isinstance(so.json, str):
            try:
                json.loads(so.json)
            except ValueError:
                return "Invalid JSON grammar specification."
            text = so.json
        else:
            text = json.dumps(so.json)
        return _schema_refusal(text)
    if so.choice:
        # vLLM escapes each choice with the `regex` package; any escaping of literals gives a
        # pattern with the same verdict.
        return regex_refusal("(" + "|".join(re.escape(str(c)) for c in so.choice) + ")")
    if so.json_object:
        return "Outlines structured outputs backend does not support json_object specifications"
    if so.grammar:
        return "Outlines structured outputs backend does not support grammar specifications"
    return None


@functools.lru_cache(maxsize=128)
def _schema_refusal(text: str) -> str | None:
    try:
        from outlines_core.json_schema import build_regex_from_schema
    except ImportError as e:
        raise OutlinesUnavailable(
            "This request needs outlines-core (vLLM checks its JSON schema with outlines), which "
            f"is not installed. Install it with:\n    pip install {OUTLINES_CORE_REQUIREMENT}"
        ) from e
    try:
        pattern = build_regex_from_schema(text)
    except Exception as e:  # any refusal is the client's 400, as in vLLM
        return f"Failed to transform json schema into a regex: {e}"
    return regex_refusal(pattern)


def regex_refusal(pattern: str) -> str | None:
    """vLLM's message refusing a regex outlines-core cannot build (``validate_regex_is_buildable``),
    ``None`` where it can."""
    try:
        parsed = sre_p.parse(pattern)
    except re.error as e:
        return f"Error parsing regex: {e}"
    feature = _unsupported_feature(parsed)
    if feature is not None:
        return (
            f"Regex uses unsupported feature for structured outputs: {feature}. Only basic "
            "matching constructs are supported—lookarounds, backreferences, and unicode "
            "boundaries are not."
        )
    if _needs_context(parsed) is True:
        return (
            "Regex does not have a anchored universal start state"  # vLLM's words, sic
            "This means that the Regex uses anchors (^) or look-arounds in a way which requires "
            "context before any token is matched.structured outputs needs regexes that can "
            "match without needing that context. Try rewriting the pattern without using these "
            f"constructs. Pattern:\n{pattern}"
        )
    return None


def _unsupported_feature(items: Any) -> str | None:
    # The first feature outlines-core lacks, depth first in pattern order.
    for op, arg in items:
        if op in (sre_p.GROUPREF, sre_p.GROUPREF_EXISTS):
            return "Backreferences are unsupported."
        if op in _ASSERTIONS:
            return "Look-Around assertion are unsupported."
        if op == sre_p.AT:
            if arg in (sre_c.AT_BOUNDARY, sre_c.AT_NON_BOUNDARY):
                return "Unicode word boundaries are unsupported."
            continue
        if op == sre_p.BRANCH:
            subs = list(arg[1])
        else:
            subs = [s for s in (arg if isinstance(arg, tuple) else (arg,))
                    if isinstance(s, sre_p.SubPattern)]  # fmt: skip
        for sub in subs:
            found = _unsupported_feature(sub)
            if found is not None:
                return found
    return None


def _needs_context(items: Any) -> bool | None:
    # True: an anchor or look-around comes before anything is consumed; False: something is
    # consumed first; None: neither was decided within ``items``.
    for op, arg in items:
        if op == sre_p.AT or op in _ASSERTIONS:
            return True
        if op in _CONSUMERS:
            return False
        if op == sre_p.SUBPATTERN:
            inner = [arg[3]]
        elif op == sre_p.MAX_REPEAT:
            inner = [arg[2]]
        elif op == sre_p.BRANCH:
            inner = list(arg[1])
        else:
            continue
        if any(_needs_context(sub) is True for sub in inner):
            return True
        if op == sre_p.BRANCH:
            if any(_consumes(sub) for sub in inner):
                return False
        elif _consumes(inner[0]):
            return False
    return None


def _consumes(items: Any) -> bool:
    # Whether the pattern can consume at least one character (as vLLM counts it).
    for op, arg in items:
        if op in _CONSUMERS:
            return True
        if op == sre_p.MAX_REPEAT and arg[1] != 0 and _consumes(arg[2]):
            return True
        if op == sre_p.BRANCH and any(_consumes(b) for b in arg[1]):
            return True
        if op == sre_p.SUBPATTERN and _consumes(arg[3]):
            return True
    return False
