"""Regexes, choices, JSON schemas and grammars xgrammar refuses are refused as vLLM 0.32's frontend
refuses them (400, its message), per grammar backend.

The peer is vLLM's own path (`to_sampling_params`, then
`SamplingParams._validate_structured_outputs`, whose xgrammar step is
`validate_xgrammar_grammar`). xgrammar's error text starts with the time it was raised
(``[HH:MM:SS]``): both sides' messages are compared with that stamp removed.

Every backend's verdict is reproduced (with "auto", vLLM's fallback from a build xgrammar refuses
to guidance's or outlines' check): the tests compare them exactly. More constraints, and
generated ones, in test_backend_checks_match_vllm.py.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from tests.text.test_structured_outputs_match_vllm import M, our_outcome, unstamped, vllm_outcome

from vllm_frontend.engine.protocol import StructuredOutputsParams
from vllm_frontend.text import xgrammar_checks
from vllm_frontend.text.structured_outputs import resolve_structured_outputs, xgrammar_supports
from vllm_frontend.text.xgrammar_native import XgrammarUnavailable

pytestmark = pytest.mark.oracle  # imports vLLM or transformers as the reference

pytest.importorskip("vllm")
pytest.importorskip("xgrammar")

REGEXES = [
    "[0-9]{3}-[a-z]+", "(a", "a)", "a{3,1}", "[z-a]", "\\", "(?<=a)b", "(?=a)a", "a**", "\\p{L}+",
    "(?P<x>a)", "[", "a{,2}", "\\d+\\.\\d*", "(a|b|)", "\\1", "x{99999}",
]  # fmt: skip
GRAMMARS = [
    'root ::= "a" | "b"', "root ::= foo", 'root ::= "a', 'x ::= "a"', "root ::= [a-", "root ::=",
    'start: "a" | "b"', "start: foo", 'start: "a" |', "?start: x\nx: /[0-9]+/", "start: /(/",
    'root ::= "a"\n# comment ::= x', "%import common.NUMBER\nstart: NUMBER",
]  # fmt: skip
SCHEMAS: list[Any] = [
    {"type": "object", "properties": {"a": {"type": "integer"}}}, {"type": "foo"},
    {"$ref": "#/defs/x"}, {"type": "integer", "minimum": 5, "maximum": 1},
    {"type": "string", "format": "email"}, {"type": "string", "format": "phone"},
    {"type": "string", "minLength": 3, "maxLength": 1},
    {"type": "array", "minItems": 2, "maxItems": 1},
    {"type": "string", "pattern": "(a"}, {"type": "integer", "multipleOf": 3},
    {"type": "object", "patternProperties": {"^a": {"type": "string"}}, "properties": {"b": {}}},
    {"type": "object", "patternProperties": {"(": {"type": "string"}}},
    {"enum": []}, {"const": 1}, {"type": ["string", "null"]}, {"anyOf": []}, {"required": 5},
    {"type": "object", "required": ["x"], "additionalProperties": False},
]  # fmt: skip
JSON_TEXTS = ["[1]", "5", '"abc"', "null", "true", '{"type": "nope"}', '{"type": "string"}']
CHOICES = [["a", "b"], ["(", "\\"], ["\ud800"]]

BACKENDS = ["auto", "xgrammar", "guidance", "outlines", "lm-format-enforcer"]


def _fields() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    out += [{"structured_outputs": {"regex": r}} for r in REGEXES]
    out += [{"structured_outputs": {"grammar": g}} for g in GRAMMARS]
    out += [{"structured_outputs": {"json": s}} for s in SCHEMAS]
    out += [{"structured_outputs": {"json": t}} for t in JSON_TEXTS]
    out += [{"structured_outputs": {"choice": c}} for c in CHOICES]
    out += [
        {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": s}}}
        for s in SCHEMAS[:4]
    ]
    out += [
        {"guided_regex": "(a"},
        {"guided_grammar": "root ::= foo"},
        {"guided_json": {"type": 1}},
    ]
    return out


FIELDS = _fields()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fields", FIELDS, ids=[json.dumps(f)[:60] for f in FIELDS])
def test_constraint_verdicts_match_vllms(
    hf_fast: Any, fields: dict[str, Any], backend: str
) -> None:
    body: dict[str, Any] = {"messages": M, **fields}
    theirs = unstamped(vllm_outcome(body, True, backend, hf_fast))
    ours = unstamped(our_outcome(body, True, backend))
    assert ours == theirs


def test_the_regex_timeout_message_is_vllms(monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm.v1.structured_output.utils import compile_regex_with_timeout

    monkeypatch.setenv("VLLM_REGEX_COMPILATION_TIMEOUT_S", "1")
    monkeypatch.setattr("vllm.envs.VLLM_REGEX_COMPILATION_TIMEOUT_S", 1, raising=False)
    monkeypatch.setattr(xgrammar_checks, "regex_to_ebnf", lambda regex: time.sleep(1.3))
    pattern = "(a+)+b" * 40
    with pytest.raises(ValueError) as theirs:
        compile_regex_with_timeout(lambda p: time.sleep(1.3), pattern)
    so = StructuredOutputsParams(regex=pattern)
    with pytest.raises(ValueError) as ours:
        resolve_structured_outputs(so, "xgrammar")
    assert str(ours.value) == f"Failed to transform regex into a grammar: {theirs.value}"


def test_accepted_constraints_are_built_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = xgrammar_checks.json_schema_to_ebnf

    def counting(text: str) -> str:
        calls.append(text)
        return real(text)

    monkeypatch.setattr(xgrammar_checks, "json_schema_to_ebnf", counting)
    xgrammar_checks._accepted.cache_clear()
    schema = {"type": "object", "properties": {"once": {"type": "string"}}}
    for _ in range(3):
        resolve_structured_outputs(StructuredOutputsParams(json=schema), "xgrammar")
    assert len(calls) == 1
    bad = {"type": "bogus"}
    for _ in range(2):
        with pytest.raises(ValueError):
            resolve_structured_outputs(StructuredOutputsParams(json=bad), "xgrammar")
    assert len(calls) == 3  # refusals are built again: their message carries the time


@pytest.mark.parametrize(
    "schema",
    [{"type": "integer", "multipleOf": 3}, {"type": "string", "format": "phone"}],
)
def test_auto_sends_schemas_xgrammar_lacks_to_outlines_for_non_tekken_mistral(
    hf_fast: Any, monkeypatch: pytest.MonkeyPatch, schema: dict[str, Any]
) -> None:
    # vLLM skips guidance for non-tekken Mistral tokenizers; the tokenizer's kind is all its
    # check reads, so the reference is told that kind directly.
    monkeypatch.setattr("vllm.sampling_params._is_non_tekken_mistral", lambda tokenizer: True)
    body = {"messages": M, "structured_outputs": {"json": schema}}
    theirs = vllm_outcome(body, True, "auto", hf_fast)
    try:
        out = resolve_structured_outputs(
            StructuredOutputsParams(json=schema), "auto", mistral_tokenizer="spm"
        )
    except ValueError as e:
        assert theirs == ("refused", str(e), None)  # outlines' own check refused it
    else:
        assert isinstance(theirs, dict)
        assert theirs["_backend"] == out.backend == "outlines" and out.backend_was_auto


@pytest.mark.parametrize("backend", ["xgrammar", "auto"])
def test_without_the_native_library_the_engine_judges(
    monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    def missing(text: str) -> str:
        raise XgrammarUnavailable("not installed")

    for name in ("regex_to_ebnf", "json_schema_to_ebnf", "lark_to_ebnf", "ebnf_to_grammar"):
        monkeypatch.setattr(xgrammar_checks, name, missing)
    xgrammar_checks._accepted.cache_clear()
    for so in (
        StructuredOutputsParams(regex="(a"),
        StructuredOutputsParams(json={"type": "foo"}),
        StructuredOutputsParams(grammar="root ::= foo"),
    ):
        out = resolve_structured_outputs(so, backend)
        assert (out.backend, out.backend_was_auto) == ("xgrammar", backend == "auto")
        assert xgrammar_supports(so)
