"""Structured outputs end to end: the same constrained requests to our frontend and to vLLM's,
each in front of an identical fresh CPU engine, give the same answers (greedy).

The engine compiles the grammars (xgrammar, picked by the default ``auto`` backend); these tests
show our frontend hands it what vLLM's does: a JSON schema or JSON-object constraint from
``response_format``, and regex / choice / grammar constraints from ``structured_outputs``.
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.conftest import Frontends
from tests.e2e.test_differential import chat, compare, completion

pytestmark = pytest.mark.engine

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 8}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}


def _text(answer: Any) -> str:
    if isinstance(answer, list):  # a stream
        parts = []
        for chunk in answer:
            for choice in chunk.get("choices") or []:
                parts.append((choice.get("delta") or {}).get("content") or choice.get("text") or "")
        return "".join(parts)
    choice = answer["choices"][0]
    return str(choice["message"]["content"] if "message" in choice else choice["text"])


@pytest.mark.parametrize("stream", [False, True], ids=["full", "stream"])
def test_chat_json_schema_response_format_gives_the_same_json(
    sdk: dict[str, openai.OpenAI], frontends: Frontends, stream: bool
) -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
    ref = compare(sdk, chat(frontends.model, max_tokens=48, temperature=0, stream=stream,
                            response_format=fmt))  # fmt: skip
    text = _text(ref)
    assert text.startswith("{")  # the engine really constrained the output


@pytest.mark.parametrize("stream", [False, True], ids=["full", "stream"])
def test_chat_json_object_response_format_gives_the_same_json(
    sdk: dict[str, openai.OpenAI], frontends: Frontends, stream: bool
) -> None:
    ref = compare(sdk, chat(frontends.model, max_tokens=32, temperature=0, stream=stream,
                            response_format={"type": "json_object"}))  # fmt: skip
    assert _text(ref).lstrip().startswith("{")


def test_completion_json_schema_response_format_gives_the_same_json(
    sdk: dict[str, openai.OpenAI], frontends: Frontends
) -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
    ref = compare(sdk, lambda c: c.completions.create(
        model=frontends.model, prompt="A person:", max_tokens=48, temperature=0,
        extra_body={"response_format": fmt}))  # fmt: skip
    assert _text(ref).startswith("{")


@pytest.mark.parametrize("stream", [False, True], ids=["full", "stream"])
def test_regex_constraint_gives_the_same_matching_text(
    sdk: dict[str, openai.OpenAI], frontends: Frontends, stream: bool
) -> None:
    ref = compare(sdk, lambda c: c.completions.create(
        model=frontends.model, prompt="Phone:", max_tokens=20, temperature=0, stream=stream,
        extra_body={"structured_outputs": {"regex": "[0-9]{3}-[0-9]{4}"}}))  # fmt: skip
    assert re.fullmatch("[0-9]{3}-[0-9]{4}", _text(ref))


@pytest.mark.parametrize("stream", [False, True], ids=["full", "stream"])
def test_choice_constraint_picks_the_same_choice(
    sdk: dict[str, openai.OpenAI], frontends: Frontends, stream: bool
) -> None:
    choices = ["yes", "no", 'a "quoted"\nanswer']
    ref = compare(sdk, lambda c: c.chat.completions.create(
        model=frontends.model, messages=[{"role": "user", "content": "Well?"}], max_tokens=20,
        temperature=0, stream=stream,
        extra_body={"structured_outputs": {"choice": choices}}))  # fmt: skip
    assert _text(ref) in choices


def test_grammar_constraint_gives_the_same_text(
    sdk: dict[str, openai.OpenAI], frontends: Frontends
) -> None:
    grammar = 'root ::= "(" [a-z]+ ")" | "[" [0-9]+ "]"'
    ref = compare(sdk, lambda c: c.completions.create(
        model=frontends.model, prompt="x", max_tokens=12, temperature=0,
        extra_body={"structured_outputs": {"grammar": grammar}}))  # fmt: skip
    assert _text(ref)[:1] in "(["


def _post_both(frontends: Frontends, path: str, body: dict[str, Any]) -> list[httpx.Response]:
    return [
        httpx.post(url + path, json=body, timeout=120) for url in (frontends.ours, frontends.vllm)
    ]


@pytest.mark.parametrize(
    ("path", "extra"),
    [
        ("/v1/completions", {"structured_outputs": {"choice": []}}),
        ("/v1/completions", {"structured_outputs": {"json": "{oops"}}),
        ("/v1/completions", {"structured_outputs": {"json_object": False}}),
        ("/v1/chat/completions", {"structured_outputs": {"grammar": "  "}}),
        ("/v1/chat/completions", {"response_format": {"type": "json_schema",
                                                      "json_schema": {"name": "x"}}}),
        ("/v1/chat/completions", {"structured_outputs": {"regex": "a"},
                                  "response_format": {"type": "json_object"}}),
        ("/v1/chat/completions", {"tool_choice": "required", "tools": [
            {"type": "function", "function": {"name": "f", "parameters": {}}}]}),
    ],
)  # fmt: skip
def test_refused_constraints_get_vllms_error(
    frontends: Frontends, path: str, extra: dict[str, Any]
) -> None:
    body: dict[str, Any] = {"model": frontends.model, "max_tokens": 4, **extra}
    if path.endswith("chat/completions"):
        body["messages"] = [{"role": "user", "content": "hi"}]
    else:
        body["prompt"] = "hi"
    ours, ref = _post_both(frontends, path, body)
    assert ref.status_code == 400
    assert (ours.status_code, ours.json()) == (ref.status_code, ref.json())


def test_a_plain_request_after_constrained_ones_is_unconstrained_on_both(
    sdk: dict[str, openai.OpenAI], frontends: Frontends
) -> None:
    compare(sdk, completion(frontends.model, prompt="Hello world", max_tokens=12, temperature=0))


@pytest.mark.parametrize("stream", [False, True], ids=["full", "stream"])
def test_a_regex_xgrammar_and_guidance_refuse_gets_vllms_error(
    sdk: dict[str, openai.OpenAI], frontends: Frontends, stream: bool
) -> None:
    # With the "auto" backend vLLM's frontend hands a regex xgrammar refuses to guidance's check
    # (llguidance), which refuses it too: the same error, and the engine lives on.
    body = {"model": frontends.model, "prompt": "x", "max_tokens": 4, "stream": stream,
            "structured_outputs": {"regex": "(unclosed"}}  # fmt: skip
    ours, ref = _post_both(frontends, "/v1/completions", body)
    if stream:
        # vLLM validates a streamed completion's constraint once its stream has started: 200,
        # the error as an SSE event (tests/e2e/test_streamed_refusals.py), and so does ours.
        assert ref.status_code == ours.status_code == 200
        assert ours.text == ref.text
    else:
        assert ref.status_code == 400 and ours.json() == ref.json()
    assert "Grammar error" in ours.text
    compare(sdk, completion(frontends.model, prompt="Hello world", max_tokens=6, temperature=0))


# Constraints xgrammar refuses (or has features vLLM keeps from it), which vLLM's "auto" hands to
# guidance's or outlines' check: refused by it (400) or served.
AUTO_FALLBACKS: list[dict[str, Any]] = [
    {"regex": "(?<=a)b"},
    {"regex": "[0-9]+(?=x)"},
    {"grammar": "start: foo"},
    {"grammar": 'root ::= "a'},
    {"grammar": 'start: "(" /[a-z]+/ ")"'},
    {"json": {"type": "integer", "multipleOf": 3, "minimum": 10, "maximum": 5}},
    {"json": {"type": "integer", "multipleOf": 7}},
    {"json": {"type": "object", "properties": {"a": {"type": "string", "format": "phone"}},
              "required": ["a"]}},
    {"json": {"type": "object", "patternProperties": {"^x": {"type": "integer"}},
              "properties": {"a": {"type": "integer"}}, "required": ["a"]}},
    {"json": {"type": "array", "items": {"type": "integer"}, "uniqueItems": True,
              "minItems": 3, "maxItems": 1}},
    {"choice": ["yes", "no"]},
]  # fmt: skip


@pytest.mark.parametrize("constraint", AUTO_FALLBACKS, ids=lambda c: json.dumps(c)[:50])
def test_auto_fallback_constraints_get_vllms_answer(
    frontends: Frontends, constraint: dict[str, Any]
) -> None:
    body = {"model": frontends.model, "prompt": "Answer:", "max_tokens": 8, "temperature": 0,
            "structured_outputs": constraint}  # fmt: skip
    ours, ref = _post_both(frontends, "/v1/completions", body)
    assert ours.status_code == ref.status_code < 500, (ours.text, ref.text)
    if ref.status_code != 200:
        assert ours.json() == ref.json()
    else:
        assert _text(ours.json()) == _text(ref.json())


# Constraints only guidance or outlines take: their check passes in the frontend, then the engine,
# whose one grammar backend is its first structured request's (xgrammar here), fails to compile
# them; vLLM answers 500, as this frontend does.
ENGINE_FAILURES: list[dict[str, Any]] = [
    {"regex": "\\p{Lu}[a-z]{2,4}"},
    {"json": {"type": "object", "patternProperties": {"(": {}}, "properties": {"a": {}}}},
]


@pytest.mark.parametrize("constraint", ENGINE_FAILURES, ids=lambda c: json.dumps(c)[:50])
def test_what_only_guidance_or_outlines_take_fails_in_an_xgrammar_engine_as_in_vllm(
    sdk: dict[str, openai.OpenAI], frontends: Frontends, constraint: dict[str, Any]
) -> None:
    warm = {"model": frontends.model, "prompt": "x", "max_tokens": 2,
            "structured_outputs": {"regex": "[ab]"}}  # fmt: skip
    for response in _post_both(frontends, "/v1/completions", warm):  # xgrammar's engine backend
        assert response.status_code == 200
    body = {"model": frontends.model, "prompt": "Answer:", "max_tokens": 8, "temperature": 0,
            "structured_outputs": constraint}  # fmt: skip
    ours, ref = _post_both(frontends, "/v1/completions", body)
    assert (ours.status_code, ours.json()) == (ref.status_code, ref.json()) == (500, ref.json())
    compare(sdk, completion(frontends.model, prompt="Hello world", max_tokens=6, temperature=0))
