"""Structured-output constraints: request fields → the engine's `StructuredOutputsParams`.

Follows vLLM 0.32 in three steps, each with vLLM's messages:

1. the request's `structured_outputs` object becomes a `StructuredOutputsParams` whose
   `__post_init__` demands exactly one constraint (vllm/sampling_params.py);
2. `response_format` overrides it (`structured_outputs_from_response_format`,
   vllm/entrypoints/generate/base/protocol.py): `json_object` → `json_object=True`,
   `json_schema` → `json=<schema>`;
3. the input processor's `SamplingParams._validate_structured_outputs` picks the grammar backend
   (`_backend`, `_backend_was_auto`), refuses empty or malformed constraints and, for
   xgrammar, rewrites `choice` into an EBNF `grammar` (vllm/v1/structured_output/utils.py
   `choice_as_grammar`), which is what the engine then receives.

The backend's own check then runs as in vLLM, with vLLM's 400 and message for a refusal:
xgrammar's build (text/xgrammar_checks.py), guidance's (text/guidance_checks.py), outlines'
(text/outlines_checks.py), lm-format-enforcer's (text/lmfe_checks.py); with ``auto``, xgrammar's,
then, where it refuses, outlines' or guidance's, whichever vLLM falls back to. Without xgrammar's
native library its verdict is left to the engine's compiler. A request's structural tag is
checked when the request is read (text/structural_tags.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from vllm_frontend.engine.protocol import StructuredOutputsParams
from vllm_frontend.engine.validate import InvalidRequestError
from vllm_frontend.text.guidance_checks import guidance_lacks, guidance_refusal
from vllm_frontend.text.lmfe_checks import lmfe_refusal
from vllm_frontend.text.outlines_checks import outlines_refusal
from vllm_frontend.text.structural_tags import (
    STRUCTURAL_TAG_WRAPPER_NESTING,
    structural_tag_payload,
)
from vllm_frontend.text.xgrammar_checks import xgrammar_refusal
from vllm_frontend.text.xgrammar_native import XgrammarUnavailable

__all__ = [
    "BACKENDS",
    "check_json_nesting",
    "choice_as_grammar",
    "merge_response_format",
    "resolve_structured_outputs",
    "structured_outputs_params",
    "xgrammar_supports",
]

BACKENDS = ("auto", "xgrammar", "guidance", "outlines", "lm-format-enforcer")
"""vLLM's `--structured-outputs-config.backend` choices."""

_CONSTRAINTS = ("json", "regex", "choice", "grammar", "json_object", "structural_tag")
_OPTIONS = ("disable_any_whitespace", "disable_additional_properties", "whitespace_pattern")
_MAX_JSON_NESTING = 64  # vLLM's MAX_STRUCTURED_OUTPUT_JSON_NESTING


def structured_outputs_params(fields: Mapping[str, Any]) -> StructuredOutputsParams:
    """The constraint of a request's (schema-valid) `structured_outputs` object.

    Unknown keys are ignored, as vLLM's dataclass does (`_backend` included: it is not an init
    field there). Raises InvalidRequestError unless exactly one constraint is given.
    """
    known = {k: fields[k] for k in (*_CONSTRAINTS, *_OPTIONS) if k in fields}
    for flag in ("disable_any_whitespace", "disable_additional_properties"):
        if known.get(flag) is None:
            known.pop(flag, None)
    so = StructuredOutputsParams(**known)
    _check_one_constraint(so)
    return so


def merge_response_format(
    so: StructuredOutputsParams | None, response_format: Mapping[str, Any] | None
) -> StructuredOutputsParams | None:
    """Apply a (schema-valid) `response_format` over `so`, as vLLM's `to_sampling_params`.

    A `structural_tag` format becomes `structural_tag=<its JSON>` (checked by the request
    schema already: text/structural_tags.py).
    """
    kind = None if response_format is None else response_format.get("type")
    if kind is None or kind == "text":
        return so
    overrides: dict[str, Any]
    if kind == "json_object":
        overrides = {"json_object": True}
    elif kind == "json_schema":
        spec = response_format.get("json_schema") if response_format else None
        overrides = {"json": spec.get("schema") if isinstance(spec, Mapping) else None}
    else:
        overrides = {"structural_tag": structural_tag_payload(response_format or {})}
    merged = StructuredOutputsParams() if so is None else _copy(so)
    for name, value in overrides.items():
        setattr(merged, name, value)
    _check_one_constraint(merged)
    return merged


def resolve_structured_outputs(
    so: StructuredOutputsParams,
    backend: str = "auto",
    *,
    mistral_tokenizer: str | None = None,
    tekken: Callable[[], Any] | None = None,
) -> StructuredOutputsParams:
    """A copy of `so` as vLLM's input processor sends it to the engine with `backend`
    (``mistral_tokenizer``: ``tekken`` or ``spm`` with ``--tokenizer-mode mistral``; ``tekken``
    gives a tekken tokenizer's llguidance vocabulary, which guidance's check then uses).

    Raises InvalidRequestError (vLLM's messages) for constraints vLLM refuses before compiling.
    """
    out = _copy(so)
    out.backend = backend
    if isinstance(out.choice, list) and not out.choice:
        raise InvalidRequestError(f"Choice '{out.choice}' cannot be an empty list")
    if isinstance(out.grammar, str) and not out.grammar.strip():
        raise InvalidRequestError("structured_outputs.grammar cannot be an empty string")
    if isinstance(out.json, str) and not out.json.strip():
        raise InvalidRequestError("structured_outputs.json cannot be an empty string")
    check_json_nesting(out.json)
    check_json_nesting(out.structural_tag, STRUCTURAL_TAG_WRAPPER_NESTING)
    if out.json_object is False:
        raise InvalidRequestError(
            "structured_outputs.json_object must be True if set; omit "
            "structured_outputs to disable structured outputs"
        )
    if isinstance(out.structural_tag, str) and not out.structural_tag.strip():
        raise InvalidRequestError("structured_outputs.structural_tag cannot be an empty string")
    if out.regex and "\x00" in out.regex:
        raise InvalidRequestError(
            "structured_outputs.regex must not contain a NUL character ('\\x00')"
        )
    if backend.startswith("xgrammar"):
        _raise_if(_xgrammar_verdict(out))
        _choice_to_grammar(out)
    elif backend.startswith("guidance"):
        if mistral_tokenizer == "spm":
            raise InvalidRequestError(
                "Non-tekken Mistral tokenizers are not supported for the 'guidance' structured "
                "output backend. Please either use a more recent Mistral model, the ['xgrammar', "
                "'outlines'] backends or tokenizer_mode='hf' instead."
            )
        _check_guidance(out, mistral_tokenizer, tekken)
    elif backend == "outlines":
        _raise_if(outlines_refusal(out))
    elif backend == "lm-format-enforcer":
        if mistral_tokenizer is not None:
            raise InvalidRequestError(
                "Mistral tokenizer is not supported for the 'lm-format-enforcer' structured "
                "output backend. Please use ['xgrammar', 'outlines'] backends or "
                "tokenizer_mode='hf' instead."
            )
        _raise_if(lmfe_refusal(out))
    elif (
        backend == "auto"
        and mistral_tokenizer == "tekken"
        and isinstance(out.grammar, str)
        and grammar_is_likely_lark(out.grammar)
    ):
        # vLLM sends Lark grammars for tekken tokenizers (its Mistral tool parser's included)
        # to guidance, which never lets a rule match a special token.
        _check_guidance(out, mistral_tokenizer, tekken)
        out.backend = "guidance"
        out.backend_was_auto = True
    elif backend == "auto":
        _resolve_auto(out, mistral_tokenizer, tekken)
    _check_one_constraint(out)
    return out


def _resolve_auto(
    so: StructuredOutputsParams, mistral_tokenizer: str | None, tekken: Callable[[], Any] | None
) -> None:
    # vLLM's "auto": xgrammar where its check passes; otherwise outlines (non-tekken Mistral
    # tokenizers, schemas with features guidance lacks) or guidance, whose own check then
    # decides (vllm/sampling_params.py _validate_structured_outputs).
    so.backend_was_auto = True
    if _xgrammar_verdict(so) is None:
        _choice_to_grammar(so)
        so.backend = "xgrammar"
        return
    to_outlines = mistral_tokenizer == "spm" or (
        bool(so.json) and guidance_lacks(_parsed_schema(so.json))
    )
    if to_outlines:
        _raise_if(outlines_refusal(so))
        so.backend = "outlines"
    else:
        _check_guidance(so, mistral_tokenizer, tekken)
        so.backend = "guidance"


def _check_guidance(
    so: StructuredOutputsParams, mistral_tokenizer: str | None, tekken: Callable[[], Any] | None
) -> None:
    if mistral_tokenizer == "tekken":
        # vLLM checks with the tekken tokenizer's own llguidance vocabulary (which lets a
        # grammar name special tokens). Without it only the structural tag's reading is
        # reproduced, and the engine's compiler judges the rest.
        if tekken is not None:
            _raise_if(guidance_refusal(so, tekken()))
        elif so.structural_tag is not None:
            _check_guidance_structural_tag(so.structural_tag)
        return
    _raise_if(guidance_refusal(so))


def _raise_if(refusal: str | None) -> None:
    if refusal is not None:
        raise InvalidRequestError(refusal)


def _parsed_schema(schema: Any) -> Any:
    if isinstance(schema, str):
        try:
            return json.loads(schema)
        except ValueError:
            raise InvalidRequestError("Invalid JSON grammar specification.") from None
    return schema


def _choice_to_grammar(so: StructuredOutputsParams) -> None:
    # What vLLM's xgrammar check leaves in the params: a choice as its EBNF grammar.
    if so.choice:
        so.grammar = choice_as_grammar(so.choice)
        so.choice = None


def _xgrammar_verdict(so: StructuredOutputsParams) -> str | None:
    # vLLM's validate_xgrammar_grammar: the checks before compiling, then the constraint built
    # by xgrammar's native library (without it, the engine's compiler judges).
    schema = _parsed_schema(so.json) if so.json else so.json
    if schema and _xgrammar_lacks(schema):
        return "The provided JSON schema contains features not supported by xgrammar."
    return _xgrammar_refusal(so, schema)


def _xgrammar_refusal(so: StructuredOutputsParams, schema: Any) -> str | None:
    # In vLLM's order: regex, choice, JSON schema, grammar (a structural tag was built when the
    # request was read: text/structural_tags.py).
    try:
        if so.regex:
            return xgrammar_refusal(regex=so.regex)
        if so.choice:
            return xgrammar_refusal(choice_grammar=choice_as_grammar(so.choice))
        if so.json:
            return xgrammar_refusal(schema=schema)
        if so.grammar:
            return xgrammar_refusal(grammar=so.grammar, lark=grammar_is_likely_lark(so.grammar))
    except XgrammarUnavailable:
        return None
    return None


def xgrammar_supports(so: StructuredOutputsParams) -> bool:
    """vLLM's verdict on whether xgrammar takes ``so`` alone (``_xgrammar_supports`` in
    vllm/parser/abstract_parser.py: its validate_xgrammar_grammar passes): the checks made
    before compiling, then the regex, grammar or JSON schema built by xgrammar's native library
    (a structural tag was built when the request was read). Without the library, the checks
    made before compiling only."""
    try:
        resolve_structured_outputs(so, "xgrammar")
    except (InvalidRequestError, NotImplementedError):
        return False
    return True


def _check_guidance_structural_tag(tag: Any) -> None:
    # vLLM's serialize_guidance_grammar reads a structural tag in its legacy form only
    # (``triggers`` and ``structures``; any other is refused with the KeyError's text); each
    # structure's schema, compiled by llguidance, is left to the engine's compiler. The reads
    # are vLLM's, in its order, so the same Python errors (their text) come out of them.
    try:
        spec = json.loads(tag) if isinstance(tag, str) else tag
        triggers = spec["triggers"]
        found = False
        for structure in spec["structures"]:
            begin = structure["begin"]
            if next((t for t in triggers if begin.startswith(t)), None) is None:
                raise _GuidanceTagError(f"Trigger {begin} not found in triggers {triggers}")
            _ = (structure["schema"], structure["end"])
            found = True
        if not found:
            raise _GuidanceTagError("No structural tags found in the grammar spec.")
    except _GuidanceTagError as e:
        raise InvalidRequestError(str(e)) from None
    except (ValueError, KeyError, TypeError) as e:
        raise InvalidRequestError(f"Invalid grammar specification: {e}") from None


class _GuidanceTagError(Exception):
    pass


def grammar_is_likely_lark(grammar: str) -> bool:
    """vLLM's guess that a grammar is Lark, not EBNF: no line (comments dropped) has ``::=``."""
    if not grammar:
        return False
    for line in grammar.split("\n"):
        line = re.sub(r"(#|//).*$", "", line).strip()
        if "::=" in line:
            return False
    return True


# String formats xgrammar can constrain (vllm/v1/structured_output/backend_xgrammar.py).
_XGRAMMAR_STRING_FORMATS = frozenset(
    {
        "email", "date", "time", "date-time", "duration", "ipv4", "ipv6", "hostname", "uuid",
        "uri", "uri-reference", "uri-template", "json-pointer", "relative-json-pointer",
    }
)  # fmt: skip
_ARRAY_KEYWORDS_XGRAMMAR_LACKS = ("uniqueItems", "contains", "minContains", "maxContains")


def _xgrammar_lacks(schema: Any) -> bool:
    """Whether a JSON schema uses a keyword combination vLLM knows xgrammar mishandles
    (vLLM's has_xgrammar_unsupported_json_features): any schema object anywhere in it."""
    return any(_node_xgrammar_lacks(node) for node in _schema_objects(schema))


def _node_xgrammar_lacks(node: dict[str, Any]) -> bool:
    kind = node.get("type")
    types = {kind} if isinstance(kind, str) else set()
    if isinstance(kind, list):
        types = {t for t in kind if isinstance(t, str)}
    if types & {"integer", "number"} and "multipleOf" in node:
        return True
    if "array" in types and any(k in node for k in _ARRAY_KEYWORDS_XGRAMMAR_LACKS):
        return True
    if "string" in types and (
        ("format" in node and not _known_format(node["format"])) or _pattern_with_length(node)
    ):
        return True
    if "object" in types and "propertyNames" in node:
        names = node.get("propertyNames")
        if (
            (isinstance(names, dict) and _pattern_with_length(names))
            or "patternProperties" in node
            or "properties" in node
            or node.get("unevaluatedProperties", True) is not True
        ):
            return True
    patterns = node.get("patternProperties")
    if (
        "object" in types
        and isinstance(patterns, dict)
        and ("properties" in node or len(patterns) > 1)
    ):
        return True
    all_of = node.get("allOf")
    return isinstance(all_of, list) and len(all_of) >= 2


def _known_format(value: Any) -> bool:
    # An unhashable format makes vLLM's own check raise, which counts as xgrammar refusing.
    try:
        return value in _XGRAMMAR_STRING_FORMATS
    except TypeError:
        return False


def _pattern_with_length(node: dict[str, Any]) -> bool:
    return ("pattern" in node or "format" in node) and ("minLength" in node or "maxLength" in node)


def _schema_objects(schema: Any) -> list[dict[str, Any]]:
    # The schema objects vLLM's checks visit: the root, then (depth first) every dict that is a
    # value of a visited dict or an item of a list value of one.
    out: list[dict[str, Any]] = []
    stack = [schema] if isinstance(schema, dict) else []
    while stack:
        node = stack.pop()
        out.append(node)
        children: list[dict[str, Any]] = []
        for value in node.values():
            if isinstance(value, dict):
                children.append(value)
            elif isinstance(value, list):
                children.extend(item for item in value if isinstance(item, dict))
        stack.extend(reversed(children))
    return out


def choice_as_grammar(choice: list[str]) -> str:
    """The EBNF grammar xgrammar receives for a `choice` constraint: one quoted alternative per
    choice, with backslash, quote, line breaks, tab and other control characters escaped."""
    return "root ::= " + " | ".join(f'"{_ebnf_escape(c)}"' for c in choice)


_EBNF_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _ebnf_escape(text: str) -> str:
    out = []
    for ch in text:
        if ch in _EBNF_ESCAPES:
            out.append(_EBNF_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "".join(out)


def _copy(so: StructuredOutputsParams) -> StructuredOutputsParams:
    return StructuredOutputsParams(
        **{name: getattr(so, name) for name in (*_CONSTRAINTS, *_OPTIONS)},
        backend=so.backend,
        backend_was_auto=so.backend_was_auto,
    )


def _check_one_constraint(so: StructuredOutputsParams) -> None:
    count = sum(getattr(so, name) is not None for name in _CONSTRAINTS)
    if count == 1:
        return
    # vLLM prints the dataclass's __dict__: all fields in declaration order, private ones last.
    shown = {name: getattr(so, name) for name in (*_CONSTRAINTS[:5], *_OPTIONS, "structural_tag")}
    shown["_backend"] = so.backend
    shown["_backend_was_auto"] = so.backend_was_auto
    if count > 1:
        raise InvalidRequestError(
            "You can only use one kind of structured outputs constraint "
            f"but multiple are specified: {shown}"
        )
    raise InvalidRequestError(
        f"You must use one kind of structured outputs constraint but none are specified: {shown}"
    )


def check_json_nesting(spec: Any, extra: int = 0) -> None:
    """vLLM's ``check_json_nesting``: objects and arrays may nest at most 64 levels (``extra``
    more for a structural tag's wrapper); a string is parsed first, malformed JSON is left to the
    grammar validation. Raises InvalidRequestError (vLLM's message)."""
    if not spec:
        return
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except RecursionError:
            _too_deep()
        except ValueError:
            return
    level = [spec]
    for _ in range(_MAX_JSON_NESTING + extra):
        level = [
            child
            for node in level
            if isinstance(node, dict | list)
            for child in (node.values() if isinstance(node, dict) else node)
            if isinstance(child, dict | list)
        ]
        if not level:
            return
    _too_deep()


def _too_deep() -> None:
    raise InvalidRequestError(
        "The JSON schema is nested too deeply: objects and arrays may nest at "
        f"most {_MAX_JSON_NESTING} levels"
    )
