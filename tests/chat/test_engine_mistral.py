"""``--tool-call-parser mistral`` and ``--reasoning-parser mistral`` match vLLM's, delta for
delta, on the Hugging Face tokenizer path: ``[ARGS]`` in the vocabulary picks the v11+ grammar
(else the pre-v11 JSON list), ``[THINK]`` picks reasoning (``tests/chat/tool_family_harness.py``).
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.chat.test_engine_tool_parsers import TOOLS, check_all, requests
from tests.chat.tool_family_harness import Family, vllm_request

pytestmark = pytest.mark.oracle  # imports vLLM as the reference

pytest.importorskip("vllm")

_SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

V11 = ("[TOOL_CALLS]", "[ARGS]", "[THINK]", "[/THINK]")
EOS = ("</s>",)


def _family(special: tuple[str, ...], reasoning: str | None = None) -> Family:
    return Family("mistral", reasoning=reasoning, special=(*special, *EOS))


V11_FAMILIES = [
    _family(V11),
    _family(V11, "mistral"),
    _family(V11[:2]),
    _family(V11[:2], "mistral"),
]


def _call(name: str, args: str, sep: str = "[ARGS]") -> str:
    return f"[TOOL_CALLS]{name}{sep}{args}"


V11_OUTPUTS = [
    _call("get_weather", '{"city": "Paris"}'),
    "Let me check."
    + _call("get_weather", '{"city": "Zürich", "unit": "c"}')
    + _call("get_time", "{}"),
    _call("get_weather", '{"city": "Paris"}', sep=""),
    _call("plan_trip", '{"days": 2, "opts": {"n": [1, {"a": "}"}]}} trailing words'),
    _call("plan_trip", '{"days": "3", "budget": null, "metric": "true", "stops": [1]}'),
    _call("get_weather", '{"city": "Pa'),
    _call("", '{"a": 1}'),
    _call("unknown", '{"name": "x"}'),
    _call("get_weather", "not json"),
    _call("get_weather", ""),
    _call("get_time", "{}</s>"),
    "[THINK]Need the weather.[/THINK]Sure." + _call("get_weather", '{"city": "Paris"}'),
    "[THINK]thinking only, never closed",
    "[THINK]plan  \n" + _call("get_time", "{}"),
    "[THINK]a[THINK]b[/THINK]c[/THINK]d",
    "plain answer",
    "\n\n" + _call("get_time", "{}"),
    "text [/THINK] more",
    'say "hi" \\ {"not": "a call"}',
    _call("get_weather", '{"city": "x"}') + "[TOOL_CALLS]",
]


def _v11_cases() -> list[tuple[int, str]]:
    """Every output with ``[THINK]`` in the vocabulary and the reasoning parser; without the
    reasoning parser, or without ``[THINK]`` (no reasoning at all), those whose reading
    changes."""
    without = [V11_OUTPUTS[i] for i in (1, 11, 13, 17)]
    return [
        *((1, t) for t in V11_OUTPUTS),
        *((0, V11_OUTPUTS[i]) for i in (0, 1, 11, 12, 14, 16, 17)),
        *((f, t) for f in (2, 3) for t in without),
    ]


@pytest.mark.parametrize(("family", "text"), _v11_cases())
def test_mistral_v11_matches_vllm(family: int, text: str) -> None:
    check_all(V11_FAMILIES[family], text)


@pytest.mark.parametrize("text", V11_OUTPUTS[11:15])
def test_mistral_reasoning_alone_matches_vllm(text: str) -> None:
    family = Family(None, reasoning="mistral", special=(*V11, *EOS))  # type: ignore[arg-type]
    for req in (vllm_request(None), vllm_request(None, include_reasoning=False)):
        family.check(text, req)


PRE_V11 = [_family(V11[:1]), _family(V11[:1], "mistral")]


def _list(*calls: str) -> str:
    return "[" + ", ".join(calls) + "]"


PRE_V11_OUTPUTS = [
    '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]',
    'Sure. [TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Zürich"}}, '
    '{"name": "get_time", "arguments": {}}] and after',
    '[TOOL_CALLS]{"name": "get_time", "arguments": {}} after a bare object',
    '[TOOL_CALLS][{"name": "get_weather", "arguments": "{\\"city\\": \\"x\\"}"}]',
    '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Pa',
    '[TOOL_CALLS]get_weather{"city": "x"}',
    '[TOOL_CALLS][{"arguments": {"opts": {"n": [1, 2]}, "days": 3}, "name": "plan_trip"}]',
    "[TOOL_CALLS][1, 2]",
    '[TOOL_CALLS][{"name": 5, "arguments": {"a": 1.5e3, "b": true, "c": null}}]',
    '[TOOL_CALLS][{"name": "get_time"}]',
    '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "a}b]c,d:e"}}]',
    '[TOOL_CALLS][{"name": "get_time", "arguments": {}},]',
    "no calls at all",
    '[{"name": "get_time", "arguments": {}}]',
    "[TOOL_CALLS]",
    '[TOOL_CALLS][{"name": "get_time", "arguments": {}}][TOOL_CALLS][{"name": "x"}]',
    '[THINK]hmm[/THINK][TOOL_CALLS][{"name": "get_time", "arguments": {}}]',
]


@pytest.mark.parametrize("family", PRE_V11, ids=lambda f: f"{f.reasoning}")
@pytest.mark.parametrize("text", PRE_V11_OUTPUTS)
def test_mistral_pre_v11_matches_vllm(family: Family, text: str) -> None:
    check_all(family, text)


@_SETTINGS
@given(
    st.sampled_from(range(len(V11_FAMILIES))),
    st.sampled_from(V11_OUTPUTS),
    st.lists(st.integers(0, 40), max_size=12),
    st.sampled_from(range(len(requests()))),
)
def test_mistral_v11_streaming_matches_vllm_for_any_cut(
    which_family: int, text: str, cuts: list[int], which: int
) -> None:
    V11_FAMILIES[which_family].check_stream(text, cuts, requests()[which])


@_SETTINGS
@given(
    st.sampled_from(PRE_V11_OUTPUTS),
    st.lists(st.integers(0, 60), max_size=14),
    st.sampled_from(range(len(requests()))),
)
def test_mistral_pre_v11_streaming_matches_vllm_for_any_cut(
    text: str, cuts: list[int], which: int
) -> None:
    PRE_V11[0].check_stream(text, cuts, requests()[which])


def test_tools_list_is_shared() -> None:
    assert TOOLS[0]["function"]["name"] == "get_weather"


# -- the request: "required" and named choices ---------------------------------------------------


@functools.cache
def _route(special: tuple[str, ...]) -> tuple[Any, Any]:
    """A scripted engine and our chat app with ``--tool-call-parser mistral`` and the family's
    tokens."""
    from tests.chat.test_tool_parsers import _chat_app, _ScriptedEngine
    from tests.support.shared_tokenizer import shared_tokenizer
    from tests.support.tiny_model import tiny_model_dir
    from vllm_frontend.chat.output_parser import OutputParsers

    tok = shared_tokenizer(tiny_model_dir(), use_fastokens=False)
    vocab = {t: 128_100 + i for i, t in enumerate(special)}
    parsers = OutputParsers.for_tokenizer(
        lambda t: vocab.get(t) if t in vocab else tok.token_to_id(t),
        tool_call_parser="mistral",
        enable_auto_tool_choice=True,
        special_tokens=tok.all_special_tokens,
    )
    engine = _ScriptedEngine(tok.encode("x", add_special_tokens=False))
    return engine, _chat_app(engine, parsers)


CHOICES = [
    "required",
    {"type": "function", "function": {"name": "get_time"}},
    "auto",
]


def _vllm_forced_json(family: Family, choice: object, fields: dict[str, object]) -> Any:
    req = vllm_request(TOOLS, tool_choice=choice, **fields)
    req = family.vllm_parser(req).adjust_request(req)
    assert req.skip_special_tokens is False
    so = req.structured_outputs
    return so.json if so is not None and so.json is not None else None


def test_forced_choices_are_constrained_as_vllm_does() -> None:
    """Without a mistral tokenizer, vLLM constrains ``required`` / named choices to the
    pre-v11 JSON list (any version), unless the request has its own constraint; special
    tokens are kept."""
    import json

    from tests.chat.test_tool_parsers import CHAT, _post

    engine, app = _route(V11_FAMILIES[0].special)
    cases = [
        (CHOICES[0], {"response_format": {"type": "json_object"}}),
        (CHOICES[1], {}),
        (CHOICES[2], {}),
    ]
    for choice, fields in cases:
        expected = _vllm_forced_json(V11_FAMILIES[0], choice, fields)
        engine.requests.clear()
        status, raw = _post(app, {**CHAT, "tools": TOOLS, "tool_choice": choice, **fields})
        assert status == 200, raw
        params = engine.requests[0].sampling_params
        ours = params.structured_outputs
        if expected is None:
            assert ours is None or ours.json is None
        else:
            assert ours is not None and json.loads(json.dumps(ours.json)) == expected
        assert params.skip_special_tokens is False


@pytest.mark.parametrize("choice", CHOICES, ids=str)
def test_forced_schema_is_vllms_for_pre_v11_too(choice: object) -> None:
    from vllm_frontend.chat.tools.mistral import MistralToolParser

    expected = _vllm_forced_json(PRE_V11[0], choice, {})
    assert MistralToolParser.forced_schema(TOOLS, choice) == expected
