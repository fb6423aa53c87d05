"""`response_format` and `structured_outputs` reach the engine as vLLM's frontend sends them.

The peer is vLLM 0.32's own path: its pydantic request model (`ChatCompletionRequest` /
`CompletionRequest`), `to_sampling_params`, then the input processor's
`SamplingParams._validate_structured_outputs` with a `StructuredOutputsConfig` — which picks the
grammar backend and rewrites constraints. Refusals must carry vLLM's message.

Constraints xgrammar refuses to build (a regex, EBNF or JSON schema that does not compile) are
compared in test_xgrammar_checks_match_vllm.py, structural tags in the tests below and in
test_structural_tags_match_vllm.py.
"""

from __future__ import annotations

import json
import re
import warnings
from types import SimpleNamespace
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vllm_frontend.engine.protocol import StructuredOutputsParams
from vllm_frontend.server.errors import ApiError, classify
from vllm_frontend.server.protocol import parse_chat_request, parse_completion_request
from vllm_frontend.text.sampling import ModelSamplingInfo, SamplingRequest, lower_sampling_params
from vllm_frontend.text.structured_outputs import (
    choice_as_grammar,
    merge_response_format,
    structured_outputs_params,
)

pytestmark = pytest.mark.oracle  # imports vLLM or transformers as the reference

pytest.importorskip("vllm")

M = [{"role": "user", "content": "hi"}]
_STAMP = re.compile(r"\[\d\d:\d\d:\d\d\] ")  # xgrammar's time stamp in its messages
SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name"],
}


def schema_format(**spec: Any) -> dict[str, Any]:
    return {"response_format": {"type": "json_schema", "json_schema": {"name": "p", **spec}}}


def so(**fields: Any) -> dict[str, Any]:
    return {"structured_outputs": fields}


def deep(levels: int) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        node = {"type": "array", "items": node}
    return node


# (fields added to the body, backend) — every case runs on both routes.
CASES: list[tuple[dict[str, Any], str]] = [
    ({}, "auto"),
    ({"response_format": {"type": "text"}}, "auto"),
    ({"response_format": {"type": "json_object"}}, "auto"),
    (schema_format(schema=SCHEMA), "auto"),
    (schema_format(strict=True, schema=SCHEMA), "xgrammar"),
    (schema_format(), "auto"),
    (schema_format(schema={}), "auto"),
    (schema_format(schema=deep(70)), "auto"),
    (schema_format(schema=deep(60)), "auto"),
    ({"structured_outputs": {"json": SCHEMA}}, "auto"),
    ({"structured_outputs": {"json": json.dumps(SCHEMA)}}, "auto"),
    ({"structured_outputs": {"json": json.dumps(SCHEMA)}}, "xgrammar"),
    ({"structured_outputs": {"json": "{not json"}}, "auto"),
    ({"structured_outputs": {"json": "{not json"}}, "xgrammar"),
    ({"structured_outputs": {"json": "   "}}, "auto"),
    ({"structured_outputs": {"json": SCHEMA, "disable_any_whitespace": True}}, "auto"),
    (so(json=SCHEMA, disable_additional_properties=True, whitespace_pattern=" ?"), "auto"),
    ({"structured_outputs": {"regex": "[0-9]{3}-[a-z]+"}}, "auto"),
    ({"structured_outputs": {"regex": "(yes|no)"}}, "xgrammar"),
    ({"structured_outputs": {"regex": ""}}, "auto"),
    ({"structured_outputs": {"regex": "a\x00b"}}, "auto"),
    (so(choice=["yes", "no", 'say "hi"\n', "tab\there", "bell\x07", "\\"]), "auto"),
    ({"structured_outputs": {"choice": ["yes", "no"]}}, "xgrammar"),
    ({"structured_outputs": {"choice": ["yes", "no"]}}, "guidance"),
    ({"structured_outputs": {"choice": []}}, "auto"),
    ({"structured_outputs": {"grammar": 'root ::= "a" | "b"'}}, "auto"),
    ({"structured_outputs": {"grammar": "  \n"}}, "auto"),
    ({"structured_outputs": {"json_object": True}}, "auto"),
    ({"structured_outputs": {"json_object": False}}, "auto"),
    ({"structured_outputs": {"regex": "a+"}}, "outlines"),
    ({"structured_outputs": {}}, "auto"),
    ({"structured_outputs": {"disable_any_whitespace": True}}, "auto"),
    ({"structured_outputs": {"regex": "a", "grammar": 'root ::= "a"'}}, "auto"),
    ({"structured_outputs": {"json_object": True, "choice": ["a"]}}, "auto"),
    ({"structured_outputs": {"regex": "a", "_backend": "guidance", "unknown": 1}}, "auto"),
    ({"structured_outputs": {"regex": "[ab]+"}, "response_format": {"type": "text"}}, "auto"),
    ({**so(regex="[ab]+"), "response_format": {"type": "json_object"}}, "auto"),
    ({**so(disable_any_whitespace=True), "response_format": {"type": "json_object"}}, "auto"),
    (so(json={"type": "integer", "multipleOf": 3}), "auto"),
    (so(json={"type": "integer", "multipleOf": 3}), "xgrammar"),
    (so(json={"type": "integer", "multipleOf": 3}), "guidance"),
    (so(json=json.dumps({"type": "number", "multipleOf": 0.5})), "auto"),
    (so(json={"type": "object", "patternProperties": {"a": {}, "b": {}}}), "auto"),
    (so(json={"type": "string", "pattern": "a+", "maxLength": 3}), "xgrammar"),
    (so(json={"allOf": [{"type": "string"}, {"enum": ["a"]}]}), "auto"),
    (schema_format(schema={"type": "object", "properties": {"x": {"type": ["number", "null"], "multipleOf": 2}}}), "auto"),  # noqa: E501
    ({"guided_json": SCHEMA}, "auto"),
    ({"guided_regex": "a+", "guided_choice": ["a"], "guided_grammar": "x"}, "auto"),
]  # fmt: skip


def unstamped(outcome: Any) -> Any:
    """An outcome with xgrammar's time stamps taken out of a refusal's message."""
    if isinstance(outcome, tuple):
        return (outcome[0], _STAMP.sub("", outcome[1]), outcome[2])
    return outcome


def vllm_outcome(body: dict[str, Any], chat: bool, backend: str, hf: Any) -> Any:
    """vLLM's engine-bound StructuredOutputsParams (as a dict), or its refusal."""
    from vllm.config.structured_outputs import StructuredOutputsConfig
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.entrypoints.openai.completion.protocol import CompletionRequest

    cls = ChatCompletionRequest if chat else CompletionRequest
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            req = cls.model_validate(body)
        sp = req.to_sampling_params(16, {})
        # The only ModelConfig attribute the structured-output checks read.
        model_config: Any = SimpleNamespace(is_diffusion=False)
        config = StructuredOutputsConfig(backend=backend)  # type: ignore[arg-type]
        sp._validate_structured_outputs(model_config, config, hf)
    except Exception as e:
        return ("refused", str(e), getattr(e, "parameter", None))
    so = sp.structured_outputs
    return None if so is None else dict(vars(so))


def our_outcome(body: dict[str, Any], chat: bool, backend: str) -> Any:
    """Our parse + lowering (the route glue of ServingContext.lower, spelled out)."""
    try:
        raw = json.dumps(body).encode()
        req = parse_chat_request(raw) if chat else parse_completion_request(raw)
        given = req.structured_outputs
        merged = merge_response_format(
            None if given is None else structured_outputs_params(given), req.response_format
        )
        model = ModelSamplingInfo(
            max_model_len=100, eos_token_id=None, structured_outputs_backend=backend
        )
        sreq = SamplingRequest(structured_outputs=merged)
        params = lower_sampling_params(sreq, max_tokens=16, model=model)
    except (ApiError, ValueError) as e:
        status, _, message, param = classify(e)
        assert status == 400
        return ("refused", message, param)
    out = params.structured_outputs
    if out is None:
        return None
    assert isinstance(out, StructuredOutputsParams)
    return {
        f.encode_name: getattr(out, f.name) for f in msgspec.structs.fields(StructuredOutputsParams)
    }  # fmt: skip


@pytest.mark.parametrize("chat", [True, False], ids=["chat", "completions"])
@pytest.mark.parametrize(("fields", "backend"), CASES)
def test_engine_gets_vllms_structured_outputs_or_the_same_refusal(
    hf_fast: Any, fields: dict[str, Any], backend: str, chat: bool
) -> None:
    body: dict[str, Any] = {"messages": M} if chat else {"prompt": "hi"}
    body.update(fields)
    expected = vllm_outcome(body, chat, backend, hf_fast)
    assert our_outcome(body, chat, backend) == expected


@pytest.mark.parametrize(
    "choice",
    [["a"], ["x y", "", "ü"], ['"', "\\n", "\r\n", "\x00\x1f\x7f"], ["a|b", "(c)", "d*"]],
)
def test_choices_become_the_grammar_vllm_hands_xgrammar(choice: list[str]) -> None:
    from vllm.v1.structured_output.utils import choice_as_grammar as vllm_choice_as_grammar

    assert choice_as_grammar(choice) == vllm_choice_as_grammar(choice)


NEW_TAG = {"type": "structural_tag", "format": {"type": "const_string", "value": "x"}}
LEGACY = {
    "type": "structural_tag",
    "triggers": ["<w"],
    "structures": [{"begin": "<w>", "schema": {"type": "object"}, "end": "</w>"}],
}
TAGS: list[dict[str, Any]] = [
    {"response_format": NEW_TAG},
    so(structural_tag=json.dumps(NEW_TAG)),
    {"response_format": LEGACY},
    so(structural_tag=json.dumps(LEGACY)),
    so(structural_tag=json.dumps({**LEGACY, "triggers": ["<x", "<"]})),
    so(structural_tag=json.dumps({**LEGACY, "triggers": ["<x"]})),
    so(structural_tag=json.dumps({**LEGACY, "structures": []})),
    so(structural_tag=json.dumps({**LEGACY, "structures": [{"begin": "<w>", "schema": {}}]})),
    so(structural_tag=json.dumps({"triggers": ["<w"]})),
    so(structural_tag="[1]"),
    so(structural_tag="{bad"),
]  # fmt: skip
"""Structural tags (the current and legacy forms, and ones guidance reads wrongly)."""


@pytest.mark.parametrize("backend", ["guidance", "outlines", "lm-format-enforcer"])
@pytest.mark.parametrize("fields", TAGS)
def test_structural_tags_with_other_backends_as_vllm(
    hf_fast: Any, fields: dict[str, Any], backend: str
) -> None:
    # guidance reads the legacy form only (the other refused with vLLM's message); outlines and
    # lm-format-enforcer let a tag through to the engine, as vLLM's checks do.
    body: dict[str, Any] = {"messages": M, **fields}
    assert our_outcome(body, True, backend) == vllm_outcome(body, True, backend, hf_fast)


KEYS = st.sampled_from([
    "type", "multipleOf", "uniqueItems", "contains", "minContains", "maxContains", "format",
    "pattern", "minLength", "maxLength", "propertyNames", "properties",
    "unevaluatedProperties", "allOf", "items", "anyOf", "x",
])  # fmt: skip
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(0, 3) | st.sampled_from(["a", "email", "phone"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=12,
)
TYPES = st.sampled_from(["integer", "number", "array", "string", "object", "null"])
schemas = st.recursive(
    st.fixed_dictionaries(
        {"type": TYPES | st.lists(TYPES, max_size=2)},
        optional={k: json_values for k in ["multipleOf", "uniqueItems", "format", "pattern",
                                           "maxLength", "propertyNames", "unevaluatedProperties",
                                           "contains"]},
    ),
    lambda inner: st.dictionaries(KEYS, inner | st.lists(inner, max_size=3), max_size=3)
    | st.fixed_dictionaries({"type": TYPES}, optional={"properties": inner, "allOf": st.lists(inner, max_size=3), "patternProperties": st.dictionaries(st.sampled_from(["a", "b"]), inner, max_size=2)}),  # noqa: E501
    max_leaves=8,
)  # fmt: skip


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=schemas)
def test_backend_fallback_sees_the_schema_features_vllm_sees(
    hf_fast: Any, schema: dict[str, Any]
) -> None:
    # vLLM's "auto" picks xgrammar, guidance or outlines by the schema's features and by each
    # one's own check: the same backend, or the same refusal (xgrammar's time stamp aside).
    body = {"messages": M, "structured_outputs": {"json": schema}}
    theirs = vllm_outcome(body, True, "auto", hf_fast)
    assert unstamped(our_outcome(body, True, "auto")) == unstamped(theirs)
