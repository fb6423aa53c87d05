"""Structural tags (``response_format: {"type": "structural_tag"}`` and
``structured_outputs.structural_tag``) are accepted and refused as vLLM 0.32's request
validation does, and an accepted one reaches the engine as the same ``structural_tag`` string.

vLLM checks a tag by compiling it with xgrammar; this frontend checks its shape, then builds it
with xgrammar's native library (text/structural_tags.py). The tags that only a compiler can
refuse (a regex, EBNF grammar or JSON schema inside the tag that does not compile) are listed in
``COMPILE_ONLY``: refused by both.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.server.support import RunningServer
from tests.server.test_errors_match_vllm import (
    JSON,
    M,
    assert_same_outcome,
    exchange,
    our_server,
    vllm_client,
)
from vllm_frontend.server.app import ServerSettings
from vllm_frontend.text.structured_outputs import merge_response_format, resolve_structured_outputs

pytestmark = pytest.mark.oracle  # imports vLLM as the reference

pytest.importorskip("vllm")


def _st(fmt: Any, **extra: Any) -> dict[str, Any]:
    return {"type": "structural_tag", "format": fmt, **extra}


SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
TAG = {"begin": "<f>", "content": {"type": "json_schema", "json_schema": SCHEMA}, "end": "</f>"}
LEGACY = {"type": "structural_tag", "structures": [{"begin": "<f>", "schema": SCHEMA,
          "end": "</f>"}], "triggers": ["<f"]}  # fmt: skip

# Accepted by vLLM.
VALID = [
    _st({"type": "const_string", "value": "x"}),
    _st({"type": "const_string", "value": "x"}, extra=1),
    _st({"value": "x", "type": "const_string", "zzz": [1]}),
    _st({"type": "json_schema", "json_schema": SCHEMA}),
    _st({"type": "json_schema", "json_schema": True, "style": "qwen_xml"}),
    _st({"type": "json_schema", "json_schema": SCHEMA, "any_order": True, "excludes": ["a"]}),
    _st({"type": "any_text"}),
    _st({"type": "any_text", "max_chars": 5, "excludes": ["<"]}),
    _st({"type": "regex", "pattern": "[a-z]+"}),
    _st({"type": "grammar", "grammar": 'root ::= "a" | "b"'}),
    _st(
        {
            "type": "sequence",
            "elements": [{"type": "const_string", "value": "a"}, {"type": "any_text"}],
        }
    ),
    _st(
        {
            "type": "or",
            "elements": [
                {"type": "const_string", "value": "a"},
                {"type": "regex", "pattern": "b+"},
            ],
        }
    ),
    _st({"type": "tag", **TAG}),
    _st({"type": "tag", **TAG, "end": ["</f>", "</g>"]}),
    _st({"type": "triggered_tags", "triggers": ["<f"], "tags": [TAG]}),
    _st(
        {
            "type": "triggered_tags",
            "triggers": ["<f"],
            "tags": [{**TAG, "type": "tag"}],
            "at_least_one": True,
            "stop_after_first": True,
        }
    ),
    _st({"type": "tags_with_separator", "tags": [TAG], "separator": ","}),
    _st({"type": "optional", "content": {"type": "const_string", "value": "a"}}),
    _st({"type": "plus", "content": {"type": "const_string", "value": "a"}}),
    _st({"type": "star", "content": {"type": "const_string", "value": "a"}}),
    _st({"type": "repeat", "min": 1, "max": 3, "content": {"type": "const_string", "value": "a"}}),
    _st({"type": "qwen_xml_parameter", "json_schema": SCHEMA}),
    LEGACY,
    {**LEGACY, "extra": True},
    {**LEGACY, "format": {"type": "const_string", "value": "x"}},
    {
        "triggers": ["<f"],
        "structures": [{"end": "</f>", "schema": SCHEMA, "begin": "<f>", "x": 2}],
        "type": "structural_tag",
    },
    # what xgrammar reads besides the documented shapes
    _st({"value": "x"}),
    _st({"type": "tag", "begin": "<f>", "content": {"value": "x"}, "end": "</f>"}),
    _st({"elements": [{"value": "x"}]}),
    _st({"type": "const_string", "value": ""}),
    _st({"type": "token", "token": 5}),
    _st({"type": "any_text", "max_chars": 2.0, "max_tokens": None, "excludes": [""]}),
    _st({"type": "json_schema", "json_schema": SCHEMA, "max_whitespace_cnt": 2, "style": None}),
    _st({"type": "json_schema", "json_schema": {"type": "string"}, "style": "qwen_xml"}),
    _st({"type": "any_tokens", "exclude_tokens": [3]}),
    _st({"type": "exclude_token"}),
    _st(
        {
            "type": "tag",
            "begin": {"type": "token", "token": 5},
            "content": {"type": "const_string", "value": "a"},
            "end": "x",
        }
    ),
    _st(
        {"type": "tag", "begin": "", "content": {"type": "const_string", "value": "a"}, "end": "x"}
    ),
    _st(
        {
            "type": "tags_with_separator",
            "separator": "",
            "tags": [
                {"begin": "<f>", "content": {"type": "const_string", "value": "a"}, "end": "</f>"}
            ],
        }
    ),
    _st({"type": "repeat", "min": 0, "max": -1, "content": {"type": "const_string", "value": "a"}}),
    _st({"type": "repeat", "min": 0, "max": 0, "content": {"type": "const_string", "value": "a"}}),
    _st(
        {
            "type": "token_triggered_tags",
            "trigger_tokens": [5],
            "tags": [
                {
                    "begin": {"type": "token", "token": 5},
                    "content": {"type": "const_string", "value": "a"},
                    "end": "x",
                }
            ],
        }
    ),
    _st({"type": "dispatch", "rules": [["<f", {"type": "const_string", "value": "x"}]]}),
    _st({"type": "dispatch", "rules": [["", {"type": "const_string", "value": "x"}]]}),
    _st({"type": "sequence", "elements": [{"type": "any_text"}, {"type": "any_text"}]}),
]
# Refused by vLLM, and by us.
INVALID = [
    {"type": "structural_tag"},
    _st(None),
    _st(3),
    _st({}),
    _st({"type": "nope"}),
    _st({"type": "const_string"}),
    _st({"type": "const_string", "value": 1}),
    _st({"type": "any_text", "max_tokens": -1}),
    _st({"type": "any_text", "excludes": "a"}),
    _st({"type": "json_schema"}),
    _st({"type": "json_schema", "json_schema": SCHEMA, "style": "yaml"}),
    _st({"type": "json_schema", "json_schema": "{}"}),
    _st({"type": "sequence", "elements": [{"type": "nope"}]}),
    _st({"type": "sequence"}),
    _st({"type": "tag", "begin": "<f>", "end": "</f>"}),
    _st({"type": "tag", **TAG, "end": 3}),
    _st({"type": "triggered_tags", "triggers": ["<b"], "tags": [TAG]}),
    _st({"type": "triggered_tags", "triggers": [], "tags": [TAG]}),
    _st({"type": "triggered_tags", "tags": [TAG]}),
    _st({"type": "tags_with_separator", "tags": [TAG]}),
    _st({"type": "repeat", "min": 1, "content": {"type": "any_text"}}),
    {**LEGACY, "triggers": ["<b"]},
    {**LEGACY, "structures": [{"begin": "<f>", "end": "</f>"}]},
    {**LEGACY, "structures": [{"begin": 1, "schema": SCHEMA, "end": "</f>"}]},
    {**LEGACY, "triggers": "<f"},
    {"type": "structural_tag", "structures": [], "triggers": ["<f"], "format": 1},
    _st({"type": "json_schema", "json_schema": json.loads("[" * 90 + "]" * 90)}),
    _st({"type": "json_schema", "json_schema": {"a": json.loads("[" * 90 + "]" * 90)}}),
    {**LEGACY, "structures": []},
    {**LEGACY, "structures": [{"begin": "<f>", "schema": True, "end": "</f>"}]},
    _st({"type": "triggered_tags", "triggers": ["<f"], "tags": []}),
    _st({"type": "tags_with_separator", "tags": [], "separator": ","}),
    _st({"type": "or", "elements": []}),
    _st({"type": "sequence", "elements": []}),
    _st({"type": "triggered_tags", "triggers": [""], "tags": [TAG]}),
    _st({"type": "triggered_tags", "triggers": ["<", "<f"], "tags": [TAG]}),
    _st({"type": "tag", "begin": "", "content": {"type": "any_text"}, "end": ""}),
    _st({"type": "tag", "begin": "<f>", "content": {"type": "any_text"}, "end": ""}),
    _st(
        {
            "type": "tag",
            "begin": "<f>",
            "content": {"type": "const_string", "value": "a"},
            "end": [],
        }
    ),
    _st({"type": "triggered_tags", "triggers": ["<f"], "tags": [{**TAG, "type": "const_string"}]}),
    _st({"value": 1}),
    _st({"foo": 1}),
    _st({"pattern": "a+"}),
    _st({"type": "repeat", "min": -1, "max": -1, "content": {"type": "any_text"}}),
    _st({"type": "repeat", "min": 3, "max": 1, "content": {"type": "const_string", "value": "a"}}),
    _st({"type": "token", "token": "<f>"}),
    _st({"type": "any_tokens", "exclude_tokens": ["<f>"]}),
    _st({"type": "json_schema", "json_schema": SCHEMA, "max_whitespace_cnt": 0}),
    _st({"type": "json_schema", "json_schema": False}),
    _st({"type": "any_text", "max_tokens": True}),
    _st({"type": "any_text", "max_chars": 2.5}),
    _st({"type": "any_text", "excludes": None}),
    _st({"type": "const_string", "value": None}),
    _st({"type": "triggered_tags", "triggers": ["<f"], "tags": [TAG], "at_least_one": 1}),
    _st({"type": "dispatch", "rules": []}),
]
# Refused by vLLM only when xgrammar compiles them.
COMPILE_ONLY = [
    _st({"type": "regex", "pattern": "("}),
    _st({"type": "grammar", "grammar": "root ::= "}),
    _st({"type": "grammar", "grammar": 'start: "a"'}),
    _st({"type": "json_schema", "json_schema": {"type": "objectx"}}),
    _st({"type": "triggered_tags", "triggers": ["<x", "<"], "tags": [TAG]}),
    {**LEGACY, "triggers": ["<x", "<"]},
    {**LEGACY, "structures": [{"begin": "<f>", "schema": {"$ref": "#/nope"}, "end": "</f>"}]},
]


@pytest.fixture(scope="module")
def ours() -> Iterator[RunningServer]:
    srv = our_server(ServerSettings(served_model_names=["m"]))
    yield srv
    srv.stop()


def _bodies(rf: Any) -> list[tuple[str, dict[str, Any]]]:
    out = [
        ("/v1/chat/completions", {"messages": M, "response_format": rf}),
        ("/v1/completions", {"prompt": "a", "response_format": rf}),
    ]
    payload = rf if isinstance(rf, str) else json.dumps(rf)
    out.append(("/v1/chat/completions", {"messages": M, "structured_outputs":
                                         {"structural_tag": payload}}))  # fmt: skip
    return out


@pytest.mark.parametrize("rf", [*VALID, *INVALID], ids=range(len(VALID) + len(INVALID)))
def test_structural_tags_are_accepted_and_refused_like_vllm(ours: RunningServer, rf: Any) -> None:
    for path, body in _bodies(rf):
        mine, theirs = exchange(ours, vllm_client(), "POST", path, body, JSON)
        assert_same_outcome(mine, theirs)
        if "response_format" in body:  # the corpus is sorted by what vLLM does with those
            assert (mine.status_code == 200) == any(rf is v for v in VALID)


@pytest.mark.parametrize(
    "payload", ["", "  ", "[]", "{}", "nul", '{"format": {"type": "any_text"}}', '"x"']
)
def test_structured_outputs_tag_strings_match_vllm(ours: RunningServer, payload: str) -> None:
    body = {"messages": M, "structured_outputs": {"structural_tag": payload}}
    assert_same_outcome(*exchange(ours, vllm_client(), "POST", "/v1/chat/completions", body, JSON))


@pytest.mark.parametrize("rf", COMPILE_ONLY, ids=range(len(COMPILE_ONLY)))
def test_tags_only_a_compiler_refuses_are_refused_like_vllm(ours: RunningServer, rf: Any) -> None:
    for path, body in _bodies(rf):
        mine, theirs = exchange(ours, vllm_client(), "POST", path, body, JSON)
        assert theirs.status_code == 400 and "structural_tag specification" in theirs.text
        assert_same_outcome(mine, theirs)


@pytest.mark.parametrize("rf", VALID, ids=range(len(VALID)))
@pytest.mark.parametrize("backend", ["auto", "xgrammar"])
def test_engine_gets_vllms_structural_tag(rf: dict[str, Any], backend: str) -> None:
    from pydantic import TypeAdapter
    from vllm.entrypoints.generate.base.protocol import (
        AnyStructuralTagResponseFormat,
        structured_outputs_from_response_format,
    )
    from vllm.sampling_params import SamplingParams

    parsed = TypeAdapter(AnyStructuralTagResponseFormat).validate_python(copy.deepcopy(rf))
    expected = structured_outputs_from_response_format(None, parsed)
    assert expected is not None
    ours = merge_response_format(None, rf)
    assert ours is not None
    assert ours.structural_tag == expected.structural_tag

    # The input processor's backend choice (xgrammar, whether "auto" picked it).
    from types import SimpleNamespace

    params = SamplingParams(structured_outputs=expected)
    params._validate_structured_outputs(
        SimpleNamespace(is_diffusion=False),  # type: ignore[arg-type]
        SimpleNamespace(backend=backend),  # type: ignore[arg-type]
        tokenizer=object(),  # type: ignore[arg-type]
    )
    resolved = resolve_structured_outputs(ours, backend)
    so = params.structured_outputs
    assert so is not None
    assert (resolved.structural_tag, resolved.backend, resolved.backend_was_auto) == (
        so.structural_tag,
        so._backend,
        so._backend_was_auto,
    )
