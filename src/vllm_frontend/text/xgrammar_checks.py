"""xgrammar's verdict on a request's regex, choice, JSON schema or grammar, as vLLM 0.32's
``validate_xgrammar_grammar`` (vllm/v1/structured_output/backend_xgrammar.py) reaches it: the
constraint built by xgrammar's native library (text/xgrammar_native.py), its refusal worded as
vLLM words it (xgrammar's own error text embedded where vLLM embeds it).

The checks vLLM makes before compiling (NUL in a regex, nesting, JSON-schema features xgrammar
lacks) stay with their caller (text/structured_outputs.py). Accepted constraints are remembered
(a bounded LRU): a client repeating its schema pays the build once. Refusals are not, since
xgrammar's message carries the time it was raised.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from vllm_frontend.text.regex_timeout import build_regex_with_timeout
from vllm_frontend.text.xgrammar_native import (
    XgrammarUnavailable,
    ebnf_to_grammar,
    json_schema_to_ebnf,
    lark_to_ebnf,
    regex_to_ebnf,
)

__all__ = ["xgrammar_refusal"]

_CACHE_SIZE = 128
_UNSET: Any = object()


def xgrammar_refusal(
    *, regex: str | None = None, choice_grammar: str | None = None, schema: Any = _UNSET,
    grammar: str | None = None, lark: bool = False,
) -> str | None:  # fmt: skip
    """vLLM's message refusing the (single) constraint given, ``None`` where xgrammar builds it.

    ``choice_grammar`` is a choice as EBNF (``choice_as_grammar``); ``schema`` the parsed JSON
    schema (vLLM hands xgrammar a dict as ``json.dumps`` text, a string as it is); ``lark``:
    ``grammar`` is Lark. Raises :class:`XgrammarUnavailable` without the native library.
    """
    try:
        if regex is not None:
            _accepted("regex", regex)
        elif choice_grammar is not None:
            _accepted("ebnf", choice_grammar)
        elif schema is not _UNSET:
            if isinstance(schema, dict):
                schema = json.dumps(schema)
            elif not isinstance(schema, str):
                # xgrammar's own refusal of anything else (xgrammar/grammar.py).
                raise ValueError("The schema should be a string or a Pydantic model.")
            _accepted("json", schema)
        elif grammar is not None:
            _accepted("lark" if lark else "ebnf", grammar)
    except XgrammarUnavailable:
        raise
    except Exception as err:
        if regex is not None:
            return f"Failed to transform regex into a grammar: {err}"
        if choice_grammar is not None:
            return f"Failed to transform choices into a grammar: {err}"
        if schema is not _UNSET:
            return f"Failed to transform json schema into a grammar: {err}"
        return "Invalid grammar specification."
    return None


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _accepted(kind: str, text: str) -> bool:
    # Raises on a refusal, so only acceptances are cached.
    if kind == "regex":
        build_regex_with_timeout(lambda r: regex_to_ebnf(r), text)
    elif kind == "json":
        json_schema_to_ebnf(text)
    elif kind == "lark":
        lark_to_ebnf(text)
    else:
        ebnf_to_grammar(text)
    return True
