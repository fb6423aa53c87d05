"""A request's structured-output constraint as an xgrammar structural-tag format: vLLM 0.32's
``structured_outputs_to_format`` (vllm/parser/abstract_parser.py), which the tool-call tags of
chat/tool_tags.py and the gpt-oss answer tag of chat/tags/harmony.py wrap."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from vllm_frontend.chat.errors import ChatError
from vllm_frontend.chat.tags.formats import Format, canonical, json_schema, tag, triggered
from vllm_frontend.text.structural_tags import STRUCTURAL_TAG_WRAPPER_NESTING
from vllm_frontend.text.structured_outputs import check_json_nesting
from vllm_frontend.text.xgrammar_native import XgrammarUnavailable, lark_to_ebnf

__all__ = ["constraint_format", "likely_lark"]


def constraint_format(so: Mapping[str, Any]) -> Format | None:
    """The format of the constraint in ``so`` (the ``structured_outputs`` fields, one set);
    None without one. A Lark grammar is converted to EBNF by xgrammar, as vLLM does (its native
    library: NotImplementedError, HTTP 501, without it; ChatError, 400, for a grammar it cannot
    read)."""
    if so.get("json_object"):
        return json_schema({"type": "object"})
    if so.get("json") is not None:
        schema = so["json"]
        if isinstance(schema, str):
            check_json_nesting(schema)
            schema = json.loads(schema)
        return json_schema(schema)
    if so.get("regex") is not None:
        return {"type": "regex", "pattern": so["regex"]}
    if so.get("choice") is not None:
        return {"type": "or", "elements": [{"type": "const_string", "value": c}
                                           for c in so["choice"]]}  # fmt: skip
    if so.get("grammar") is not None:
        grammar = so["grammar"]
        if likely_lark(grammar):
            try:
                grammar = lark_to_ebnf(grammar)
            except XgrammarUnavailable:
                raise
            except RuntimeError:
                raise ChatError("Invalid grammar specification.") from None
        return {"type": "grammar", "grammar": grammar}
    structural = so.get("structural_tag")
    if structural is not None:
        check_json_nesting(structural, STRUCTURAL_TAG_WRAPPER_NESTING)
        parsed = json.loads(structural)
        if "structures" in parsed:
            return triggered(parsed["triggers"], [
                tag(s["begin"], json_schema(s["schema"]), s["end"]) for s in parsed["structures"]
            ])  # fmt: skip
        fmt: Format = canonical(parsed["format"])
        return fmt
    return None


_COMMENT = re.compile(r"(#|//).*$")


def likely_lark(grammar: str) -> bool:
    """vLLM's ``grammar_is_likely_lark``: a non-empty grammar none of whose lines (comments cut
    off at ``#`` or ``//``) holds an EBNF ``::=``."""
    if not grammar or not isinstance(grammar, str):
        return False
    return all("::=" not in _COMMENT.sub("", line) for line in grammar.split("\n"))
