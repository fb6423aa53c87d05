"""Every structured-outputs backend judges a constraint as vLLM 0.32's frontend does: the same
backend chosen (``auto``), the same 400 and message, or the same engine-bound params.

The peers are vLLM's own functions: the whole path (`to_sampling_params`, then
`SamplingParams._validate_structured_outputs`, through tests/text/test_structured_outputs_match_vllm
.py's `vllm_outcome`) over a corpus per constraint kind, and, over generated regexes and JSON
schemas, the single checks (`validate_guidance_grammar`, `validate_regex_is_buildable`,
`validate_structured_output_request_lm_format_enforcer`).
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.text.test_structured_outputs_match_vllm import M, our_outcome, unstamped, vllm_outcome

from vllm_frontend.engine.protocol import StructuredOutputsParams
from vllm_frontend.text.guidance_checks import guidance_refusal
from vllm_frontend.text.lmfe_checks import lmfe_refusal
from vllm_frontend.text.outlines_checks import outlines_refusal, regex_refusal

pytestmark = pytest.mark.oracle  # imports vLLM or transformers as the reference

pytest.importorskip("vllm")
pytest.importorskip("llguidance")
pytest.importorskip("outlines_core")

BACKENDS = ["auto", "xgrammar", "guidance", "outlines", "lm-format-enforcer"]

REGEXES = [
    r"\p{L}+", r"\p{Greek}", r"[[:alpha:]]+", r"(?<name>a)", r"a{,3}", r"\Aabc\z", r"a\Z",
    r"(?i)abc", r"(?i:a)b", r"a*+", r"(?>ab)", r"a++b", r"\bword\b", r"\Bx", r"^abc$", r"(^a|b)",
    r"(?:^)?x", r"(a)\1", r"(?(1)a|b)", r"(?=x)x", r"(?!x)y", r"x(?=y)", r"(?<!a)b", r"\x{41}",
    r"\u0041", r"[\w&&[^\d]]", r"\Q.*\E", r"a{2}{3}", r"\h+", r"\R", r"\X", r"\K", r"[^\n]*",
    r".*?", r"(a|)+", r"\d{1,3}(\.\d{1,3}){3}", r"[a-\d]", r"\ca", r"\N{LATIN SMALL LETTER A}",
    r"(?P=x)", r"(?#comment)a", r"(?x) a b # c", r"[]a]", r"[^]a]", r"\e", r"\v", "",
]  # fmt: skip
GRAMMARS = [
    'start: "a"+', 'start: <|eot_id|> "a"', 'start: <[128000]> "a"', "start: %json {}",
    'start: %json {"type": "integer"}', 'start: /[a-z]+/ "!"', "start: a\na: b\nb: a",
    'start: "a" | ', "start: /(?=a)a/", 'root ::= "a" [0-9]*', 'root ::= [^"]+',
    'root ::= "x" root?', 'root ::= ("a" | "b"){2,3}', "root ::= [\\p{L}]", 'root ::= "a" b',
    'root ::= "a"\nb ::= "b"', '%llguidance {}\nstart: "a"',
    'start: %regex {"substring_words": "a b"}',
    'start: "a"\n%ignore " "', 'start[max_tokens=3]: "a"+', "start: A\nA: /a/ | /b/",
    'start: x\nx[lazy]: /.*/ "!"', 'start: "\\u0041"',
]  # fmt: skip
SCHEMAS: list[Any] = [
    {"type": "integer", "multipleOf": 3}, {"type": "number", "multipleOf": 0.5},
    {"type": "array", "items": {"type": "integer"}, "uniqueItems": True},
    {"type": "array", "contains": {"const": 1}}, {"type": "string", "format": "phone"},
    {"type": "string", "format": "email", "maxLength": 5},
    {"type": "string", "pattern": "^a+$", "minLength": 2},
    {"type": "string", "pattern": "(?=a)", "maxLength": 3},
    {"type": "object", "propertyNames": {"pattern": "^a"}, "properties": {"a": {}}},
    {"type": "object", "patternProperties": {"^x": {"type": "integer"}}, "properties": {"a": {}}},
    {"type": "object", "patternProperties": {"(": {}}, "properties": {"a": {}}},
    {"allOf": [{"type": "integer"}, {"minimum": 2}]},
    {"allOf": [{"type": "integer"}, {"type": "string"}]},
    {"allOf": [{"$ref": "#/nowhere"}, {"type": "string"}]},
    {"type": "integer", "multipleOf": 3, "minimum": 10, "maximum": 5},
    {"type": "integer", "multipleOf": 0},
    {"type": "array", "uniqueItems": True, "minItems": 3, "maxItems": 1},
    {"type": "string", "format": "phone", "pattern": "(a"},
    {"type": "object", "properties": {"a": {"type": "integer", "multipleOf": 2}},
     "required": ["a", "b"], "additionalProperties": False},
    {"type": "foo", "multipleOf": 2},
    {"type": ["integer", "string"], "multipleOf": 2},
    {"type": "integer", "multipleOf": 2, "not": {"const": 4}},
    {"type": "integer", "multipleOf": 2, "if": {"minimum": 2}, "then": {"maximum": 8}},
    {"type": "integer", "multipleOf": 2, "$ref": "#/$defs/x", "$defs": {"x": {"minimum": 1}}},
]  # fmt: skip
CHOICES = [["a", "b"], ["(", "\\", "^"], ["\ud800"], ["", "x"], ["<|eot_id|>"]]
TAGS = [
    {"triggers": ["<f"], "structures": [{"begin": "<f>", "schema": {"type": "integer",
     "multipleOf": 2}, "end": "</f>"}]},
    {"triggers": ["<f"], "structures": [{"begin": "<f>", "schema": {"type": "foo"}, "end": "x"}]},
    {"triggers": ["<f"], "structures": [{"begin": "<f>", "schema": {"type": "object"},
     "end": "</f>"}, {"begin": "<g>", "schema": {}, "end": "</g>"}]},
]  # fmt: skip


def _fields() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    out += [{"structured_outputs": {"regex": r}} for r in REGEXES]
    out += [{"structured_outputs": {"grammar": g}} for g in GRAMMARS]
    out += [{"structured_outputs": {"json": s}} for s in SCHEMAS]
    out += [{"structured_outputs": {"json": json.dumps(s)}} for s in SCHEMAS[:3]]
    out += [{"structured_outputs": {"choice": c}} for c in CHOICES]
    out += [{"structured_outputs": {"structural_tag": json.dumps(t)}} for t in TAGS]
    out += [{"structured_outputs": {"json_object": True}}]
    out += [{"response_format": {"type": "json_object"}}]
    out += [
        {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": s}}}
        for s in SCHEMAS[:6]
    ]
    return out


FIELDS = _fields()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fields", FIELDS, ids=[json.dumps(f)[:70] for f in FIELDS])
def test_each_backend_judges_a_constraint_as_vllm(
    hf_fast: Any, fields: dict[str, Any], backend: str
) -> None:
    body: dict[str, Any] = {"messages": M, **fields}
    theirs = unstamped(vllm_outcome(body, True, backend, hf_fast))
    assert unstamped(our_outcome(body, True, backend)) == theirs


def test_auto_really_falls_back_in_the_corpus(hf_fast: Any) -> None:
    # The corpus reaches every branch of vLLM's "auto": xgrammar, guidance, outlines, refusals.
    seen = set()
    for fields in FIELDS:
        out = our_outcome({"messages": M, **fields}, True, "auto")
        seen.add(out[0] if isinstance(out, tuple) else out["_backend"])
    assert seen == {"xgrammar", "guidance", "outlines", "refused"}


def _vllm_check(check: Any, **constraint: Any) -> str | None:
    from vllm.sampling_params import StructuredOutputsParams as VllmParams

    try:
        check(SimpleNamespace(structured_outputs=VllmParams(**constraint)))
    except Exception as e:
        return str(e)
    return None


REGEX_ALPHABET = [*"ab01()[]{}^$\\|?*+.,=!<>:-PpLdwsbBAzZ#", "(?=", "(?<=", "(?:", "\\p{L}"]
regexes = st.lists(st.sampled_from(REGEX_ALPHABET), max_size=10).map("".join)
"""Short regexes over the characters that make up anchors, classes, groups and repeats."""


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(regex=regexes)
def test_generated_regexes_get_each_backends_verdict(regex: str) -> None:
    from vllm.v1.structured_output.backend_guidance import validate_guidance_grammar
    from vllm.v1.structured_output.backend_lm_format_enforcer import (
        validate_structured_output_request_lm_format_enforcer as vllm_lmfe,
    )
    from vllm.v1.structured_output.backend_outlines import validate_regex_is_buildable

    if "\x00" in regex or not regex:
        return
    try:
        validate_regex_is_buildable(regex)
        theirs = None
    except Exception as e:
        theirs = str(e)
    assert regex_refusal(regex) == theirs
    so = StructuredOutputsParams(regex=regex)
    assert guidance_refusal(so) == _vllm_check(validate_guidance_grammar, regex=regex)
    assert lmfe_refusal(so) == _vllm_check(vllm_lmfe, regex=regex)


KEYS = st.sampled_from([
    "type", "multipleOf", "pattern", "format", "minLength", "maxLength", "properties",
    "patternProperties", "required", "items", "enum", "const", "minimum", "anyOf", "allOf",
    "additionalProperties", "$ref",
])  # fmt: skip
TYPES = st.sampled_from(["integer", "number", "array", "string", "object", "null", "boolean"])
leaves = st.none() | st.booleans() | st.integers(-1, 3) | st.sampled_from(["a", "^a$", "(", "ab"])
schemas = st.recursive(
    st.fixed_dictionaries({"type": TYPES}, optional={"multipleOf": st.integers(0, 3)}),
    lambda inner: st.dictionaries(KEYS, inner | leaves | st.lists(inner | leaves, max_size=3),
                                  max_size=4),
    max_leaves=8,
)  # fmt: skip


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=schemas)
def test_generated_schemas_get_guidances_and_outlines_verdicts(schema: dict[str, Any]) -> None:
    from vllm.v1.structured_output.backend_guidance import validate_guidance_grammar
    from vllm.v1.structured_output.backend_outlines import (
        validate_structured_output_request_outlines as vllm_outlines,
    )

    so = StructuredOutputsParams(json=schema)
    assert guidance_refusal(so) == _vllm_check(validate_guidance_grammar, json=schema)
    assert outlines_refusal(so) == _vllm_check(vllm_outlines, json=schema)


TEKKEN_CASES = [
    ("auto", {"grammar": 'start: <[1]> "a"'}),
    ("auto", {"grammar": "start: <[999999]>"}),
    ("auto", {"grammar": "start: <|INST|>"}),
    ("auto", {"grammar": 'start: <INST> "a"'}),
    ("auto", {"grammar": "start: foo"}),
    ("auto", {"grammar": 'start: "a"+'}),
    ("auto", {"regex": "\\p{L}+"}),
    ("auto", {"regex": "(?=a)a"}),
    ("auto", {"json": {"type": "integer", "multipleOf": 3}}),
    ("guidance", {"grammar": 'start: <[1]> "a"'}),
    ("guidance", {"grammar": "start: <[999999]>"}),
    ("guidance", {"grammar": 'root ::= "a" [0-9]'}),
    ("guidance", {"regex": "(?=a)"}),
    ("guidance", {"json": {"type": "integer", "minimum": 3, "maximum": 1}}),
    ("guidance", {"choice": ["a", "b"]}),
]


@pytest.fixture(scope="module")
def tekken_pair() -> tuple[Any, Any]:
    """vLLM's and our tokenizer for the tiny tekken model."""
    from tests.support.tiny_mistral import tiny_mistral_dir
    from vllm.tokenizers.mistral import MistralTokenizer as VllmMistralTokenizer

    from vllm_frontend.text.tokenizer_mistral import MistralTokenizer

    path = tiny_mistral_dir()
    return VllmMistralTokenizer.from_pretrained(str(path)), MistralTokenizer.from_dir(path)


@pytest.mark.parametrize(("backend", "constraint"), TEKKEN_CASES)
def test_tekken_tokenizers_are_checked_with_their_own_vocabulary(
    tekken_pair: tuple[Any, Any], backend: str, constraint: dict[str, Any]
) -> None:
    # vLLM's guidance check for a tekken tokenizer knows its special tokens (a grammar may name
    # them): auto's Lark grammars and the guidance backend's constraints.
    import msgspec

    from vllm_frontend.text.guidance_checks import tekken_vocabulary
    from vllm_frontend.text.structured_outputs import resolve_structured_outputs

    theirs_tok, ours_tok = tekken_pair
    body = {"messages": M, "structured_outputs": constraint}
    theirs = unstamped(vllm_outcome(body, True, backend, theirs_tok))
    try:
        out = resolve_structured_outputs(
            StructuredOutputsParams(**constraint), backend, mistral_tokenizer="tekken",
            tekken=lambda: tekken_vocabulary(ours_tok.mistral),
        )  # fmt: skip
    except ValueError as e:
        ours: Any = unstamped(("refused", str(e), None))
    else:
        fields = msgspec.structs.fields(StructuredOutputsParams)
        ours = {f.encode_name: getattr(out, f.name) for f in fields}
    assert ours == theirs


@pytest.mark.parametrize(
    ("module", "missing", "backend", "constraint"),
    [
        ("guidance_checks", "llguidance", "auto", {"regex": "\\p{L}+"}),
        ("outlines_checks", "outlines_core", "outlines", {"json": {"type": "integer"}}),
        ("lmfe_checks", "interegular", "lm-format-enforcer", {"regex": "a+"}),
    ],
)
def test_a_missing_checker_library_answers_501_naming_it(
    monkeypatch: pytest.MonkeyPatch, module: str, missing: str, backend: str,
    constraint: dict[str, Any],
) -> None:  # fmt: skip
    import importlib
    import sys

    from vllm_frontend.server.errors import classify
    from vllm_frontend.text.structured_outputs import resolve_structured_outputs

    checks = importlib.import_module(f"vllm_frontend.text.{module}")
    for loaded in [m for m in sys.modules if m == missing or m.startswith(f"{missing}.")]:
        monkeypatch.setitem(sys.modules, loaded, None)
    monkeypatch.setitem(sys.modules, missing, None)
    for name in ("_llguidance", "_interegular", "_schema_refusal", "_regex_refusal", "_verdict"):
        if hasattr(checks, name):
            getattr(checks, name).cache_clear()
    with pytest.raises(NotImplementedError) as err:
        resolve_structured_outputs(StructuredOutputsParams(**constraint), backend)
    status, _, message, _ = classify(err.value)
    assert status == 501 and missing.replace("_", "-") in message.replace("_", "-")
    for name in ("_llguidance", "_interegular", "_schema_refusal", "_regex_refusal", "_verdict"):
        if hasattr(checks, name):
            getattr(checks, name).cache_clear()
