"""lm-format-enforcer's verdict on a request's constraint, as vLLM 0.32's
``validate_structured_output_request_lm_format_enforcer``
(vllm/v1/structured_output/backend_lm_format_enforcer.py) reaches it, with vLLM's messages: a
regex must become an automaton in interegular (what lm-format-enforcer's ``RegexParser`` builds
it with; the package itself imports torch), within vLLM's regex time bound; a JSON schema given
as text must be JSON; grammars are refused.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from vllm_frontend.engine.protocol import StructuredOutputsParams
from vllm_frontend.text.regex_timeout import build_regex_with_timeout

__all__ = ["INTEREGULAR_REQUIREMENT", "LmfeUnavailable", "lmfe_refusal"]

INTEREGULAR_REQUIREMENT = "interegular==0.3.3"
"""The interegular release lm-format-enforcer 0.11.3 (vLLM 0.32's pin) runs with."""


class LmfeUnavailable(NotImplementedError):
    """interegular cannot be imported here (HTTP 501 for the request needing it)."""


def lmfe_refusal(so: StructuredOutputsParams) -> str | None:
    """vLLM's message refusing ``so``'s constraint with lm-format-enforcer, ``None`` where it
    passes. Raises :class:`LmfeUnavailable` for a regex without interegular."""
    if so.regex:
        return _regex_refusal(so.regex)
    if so.json:
        if isinstance(so.json, str):
            try:
                json.loads(so.json)
            except ValueError:
                return "Invalid JSON grammar specification."
        return None
    if so.choice:
        return None
    if so.grammar:
        return (
            "LM Format Enforcer structured outputs backend does not support grammar specifications"
        )
    return None


@functools.lru_cache(maxsize=128)
def _regex_refusal(regex: str) -> str | None:
    parse = _interegular().parse_pattern
    try:
        build_regex_with_timeout(lambda r: parse(r).to_fsm(), regex)
    except Exception as err:  # any refusal is the client's 400, as in vLLM
        return f"Failed to compile regex for lm-format-enforcer: {err}"
    return None


@functools.cache
def _interegular() -> Any:
    try:
        import interegular
    except ImportError as e:
        raise LmfeUnavailable(
            "This request needs interegular (vLLM checks its regex with lm-format-enforcer), "
            f"which is not installed. Install it with:\n    pip install {INTEREGULAR_REQUIREMENT}"
        ) from e
    return interegular
