"""``tool_choice: "required"`` and named functions: the engine gets the JSON schema vLLM 0.32
builds, and the constrained output reads back as the same tool calls, whole and streamed.

The reference is vLLM's own code in the test process: ``get_json_schema_from_tools`` for the
schema and its composed ``Parser`` (``parse`` / ``parse_delta``) for reading the output. vLLM 0.32
takes this JSON path for a tool parser whose ``supports_required_and_named`` is true; its hermes
and llama3_json parsers turn that off while ``VLLM_ENFORCE_STRICT_TOOL_CALLING`` (structural
tags) is on, so the reference parser instance gets it switched back on.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.chat.test_tool_parsers import (
    CHAT,
    TIME_TOOL,
    WEATHER_TOOL,
    _chat_app,
    _post,
    _ScriptedEngine,
    ours_parsers,
    tokenizer,
    vllm_parser_cls,
    vllm_request,
)
from tests.support.tiny_model import tiny_model_dir
from vllm_frontend.chat.errors import ChatError
from vllm_frontend.chat.output_parser import OutputParsers, RequestToolOptions
from vllm_frontend.chat.tool_choice import (
    forced_tool_choice,
    forced_tool_schema,
    parse_required_tool_calls,
)

pytestmark = pytest.mark.oracle  # imports vLLM or transformers as the reference

pytest.importorskip("vllm")


@pytest.fixture(autouse=True)
def _json_forced_tool_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    # The JSON path is vLLM's with VLLM_ENFORCE_STRICT_TOOL_CALLING off (for a parser with a
    # structural-tag model, as llama3_json and hermes; tests/chat/test_tool_structural_tags.py
    # covers it on).
    monkeypatch.setenv("VLLM_ENFORCE_STRICT_TOOL_CALLING", "0")


_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

DEFS_TOOL = {
    "type": "function",
    "function": {
        "name": "book",
        "parameters": {
            "type": "object",
            "properties": {"where": {"$ref": "#/$defs/place"}},
            "$defs": {"place": {"type": "string"}},
        },
    },
}
NO_PARAMS_TOOL = {"type": "function", "function": {"name": "ping"}}
EMPTY_PARAMS_TOOL = {"type": "function", "function": {"name": "noop", "parameters": {}}}
ONLY_DEFS_TOOL = {
    "type": "function",
    "function": {"name": "odd", "parameters": {"$defs": {"place": {"type": "string"}}}},
}
TOOL_SETS = [
    [WEATHER_TOOL],
    [WEATHER_TOOL, TIME_TOOL],
    [WEATHER_TOOL, DEFS_TOOL, NO_PARAMS_TOOL, EMPTY_PARAMS_TOOL],
    [DEFS_TOOL, ONLY_DEFS_TOOL],
]


def named(name: str) -> dict[str, Any]:
    """A named-function ``tool_choice``."""
    return {"type": "function", "function": {"name": name}}


def vllm_schema(tools: list[dict[str, Any]], tool_choice: Any, parallel: bool | None) -> Any:
    """What vLLM's ``ToolParser.adjust_request`` constrains the output with."""
    from vllm.tool_parsers.utils import get_json_schema_from_tools

    req = vllm_request(copy.deepcopy(tools), tool_choice=tool_choice, parallel_tool_calls=parallel)
    return get_json_schema_from_tools(req.tool_choice, req.tools, req.parallel_tool_calls)


@pytest.mark.parametrize("tools", TOOL_SETS, ids=range(len(TOOL_SETS)))
@pytest.mark.parametrize("parallel", [None, True, False])
def test_required_constrains_output_to_vllms_array_schema(
    tools: list[dict[str, Any]], parallel: bool | None
) -> None:
    choice = forced_tool_choice("required")
    assert choice is not None
    ours = forced_tool_schema(copy.deepcopy(tools), choice, parallel)
    assert ours == vllm_schema(tools, "required", parallel)
    assert list(ours) == list(vllm_schema(tools, "required", parallel))  # same key order


@pytest.mark.parametrize(
    "tools", [*TOOL_SETS, [WEATHER_TOOL, {**WEATHER_TOOL, "function": {"name": "get_weather"}}]]
)
def test_named_function_constrains_output_to_its_parameters(tools: list[dict[str, Any]]) -> None:
    for tool in tools:
        name = tool["function"]["name"]
        choice = forced_tool_choice(named(name))
        assert choice is not None and choice.name == name
        assert forced_tool_schema(tools, choice) == vllm_schema(tools, named(name), None)


def test_tools_that_are_not_forced_get_no_schema() -> None:
    for choice in ("auto", "none", None):
        assert forced_tool_choice(choice) is None
        assert vllm_schema([WEATHER_TOOL], choice, None) is None


def _vllm_error(tools: list[dict[str, Any]], tool_choice: Any) -> Exception:
    with pytest.raises(Exception) as info:
        vllm_schema(tools, tool_choice, None)
    return info.value


@pytest.mark.parametrize(
    "bad_defs",
    [[1], "x", None, 3],
    ids=["list", "str", "null", "int"],
)
def test_unusable_defs_are_refused_with_vllms_message(bad_defs: Any) -> None:
    bad = copy.deepcopy(DEFS_TOOL)
    bad["function"]["parameters"]["$defs"] = bad_defs
    theirs = _vllm_error([WEATHER_TOOL, bad], "required")
    with pytest.raises(ChatError) as ours:
        forced_tool_schema([WEATHER_TOOL, bad], forced_tool_choice("required"))  # type: ignore[arg-type]
    assert str(ours.value) == str(theirs)
    assert ours.value.param == getattr(theirs, "parameter", None) == "tools"


def test_conflicting_defs_are_refused_with_vllms_message() -> None:
    other = copy.deepcopy(DEFS_TOOL)
    other["function"]["name"] = "book2"
    other["function"]["parameters"]["$defs"]["place"] = {"type": "integer"}
    theirs = _vllm_error([DEFS_TOOL, other], "required")
    with pytest.raises(ChatError) as ours:
        forced_tool_schema([DEFS_TOOL, other], forced_tool_choice("required"))  # type: ignore[arg-type]
    assert str(ours.value) == str(theirs)
    # The same definition twice is fine.
    same = copy.deepcopy(DEFS_TOOL)
    same["function"]["name"] = "book2"
    choice = forced_tool_choice("required")
    assert choice is not None
    assert forced_tool_schema([DEFS_TOOL, same], choice) == vllm_schema(
        [DEFS_TOOL, same], "required", None
    )


def test_named_function_missing_from_tools_is_refused_with_vllms_message() -> None:
    from vllm.entrypoints.openai.chat_completion.protocol import (
        ChatCompletionNamedToolChoiceParam,
        ChatCompletionToolsParam,
    )
    from vllm.tool_parsers.utils import get_json_schema_from_tools

    # The request validators refuse this earlier; the schema builder still says why.
    with pytest.raises(ValueError) as theirs:
        get_json_schema_from_tools(
            ChatCompletionNamedToolChoiceParam.model_validate(named("nope")),
            [ChatCompletionToolsParam.model_validate(WEATHER_TOOL)],
        )
    with pytest.raises(ChatError) as ours:
        forced_tool_schema([WEATHER_TOOL], forced_tool_choice(named("nope")))  # type: ignore[arg-type]
    assert str(ours.value) == str(theirs.value)


# -- reading the constrained output back ---------------------------------------------------------


def vllm_json_parser(req: Any) -> Any:
    """vLLM's composed hermes parser on its JSON path for required / named tool choices."""
    parser = vllm_parser_cls("hermes", None)(tokenizer(), req.tools, chat_template_kwargs={})
    parser._tool_parser.supports_required_and_named = True
    return parser


def ours_parser(tool_choice: Any) -> Any:
    """Our parser for one choice."""
    options = RequestToolOptions(tools=True, tool_choice=tool_choice)
    return ours_parsers("hermes", None).for_request(options)


def vllm_parse(text: str, tool_choice: Any) -> tuple[str | None, list[tuple[str, str]]]:
    """Content and ``(name, arguments)`` of vLLM's whole-output parse."""
    req = vllm_request([WEATHER_TOOL, TIME_TOOL], tool_choice=tool_choice)
    _, content, calls = vllm_json_parser(req).parse(text, req, enable_auto_tools=True)
    return content, [(c.name, c.arguments) for c in calls or []]


def ours_parse(text: str, tool_choice: Any) -> tuple[str | None, list[tuple[str, str]]]:
    """Content and ``(name, arguments)`` of our whole-output parse."""
    parsed = ours_parser(tool_choice).parse(text)
    for call in parsed.tool_calls:
        assert re.fullmatch(r"chatcmpl-tool-[0-9a-f]{16}", call.id)
    return parsed.content, [(c.name, c.arguments) for c in parsed.tool_calls]


REQUIRED_OUTPUTS = [
    '[{"name": "get_weather", "parameters": {"city": "Paris"}}]',
    '[{"name": "get_weather", "parameters": {"city": "Zürich 日本", "unit": "c"}},'
    ' {"name": "get_time", "parameters": {}}]',
    '[\n  {\n    "name": "get_time",\n'
    '    "parameters": {"n": [1, 2.50, -0, 1e3, true, null]}\n  }\n]',
    '[{"parameters": {"city": "Paris"}, "name": "get_weather", "extra": 1}]',
    '[{"name": "get_time", "parameters": null, "strict": "yes", "defer_loading": 0}]',
    '[{"name": "get_time", "parameters": {}, "strict": 2}]',
    '[{"name": "get_time", "parameters": {"x": NaN}}]',
    '[{"name": "get_time", "parameters": []}]',
    '[{"name": 3, "parameters": {}}]',
    '[{"name": "get_time", "description": 1}]',
    '[{"name": "get_time"}]',
    '[{"name": "get_weather", "parameters": {"city": "Pa',
    '{"name": "get_weather", "parameters": {}}',
    "[]",
    "",
    "   ",
    "not json",
    '[{"name": "get_time", "parameters": {}}] trailing',
    '[{"name": "get\\u00e9", "parameters": {"a": "\\"]}"}}]',
]


@pytest.mark.parametrize("text", REQUIRED_OUTPUTS)
def test_required_output_reads_as_vllms_tool_calls(text: str) -> None:
    assert ours_parse(text, "required") == vllm_parse(text, "required")
    assert parse_required_tool_calls(text) == vllm_parse(text, "required")[1]


@pytest.mark.parametrize("text", ['{"city": "Paris"}', '{"city": "Pa', "", "  \n", "oops"])
def test_named_output_is_the_arguments_of_one_call(text: str) -> None:
    choice = named("get_weather")
    assert ours_parse(text, choice) == vllm_parse(text, choice)


def _json_values() -> st.SearchStrategy[Any]:
    scalars = st.none() | st.booleans() | st.integers(-1000, 1000) | st.text(max_size=6)
    scalars = scalars | st.floats(allow_nan=False, allow_infinity=False, width=32)
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
        max_leaves=8,
    )


@st.composite
def required_texts(draw: st.DrawFn) -> str:
    """A ``required`` output: an array of calls, rendered in some JSON style, maybe cut short
    and maybe followed by text."""
    calls = draw(
        st.lists(
            st.fixed_dictionaries(
                {
                    "name": st.sampled_from(["get_weather", "get_time", 'q"uote', "ü"]),
                    "parameters": st.dictionaries(st.text(max_size=4), _json_values()),
                }
            ),
            max_size=3,
        )
    )
    if draw(st.booleans()):
        calls = [dict(reversed(list(c.items()))) for c in calls]  # type: ignore[misc]
    style = draw(st.sampled_from([{}, {"indent": 2}, {"separators": (",", ":")}]))
    text = json.dumps(calls, ensure_ascii=draw(st.booleans()), **style)  # type: ignore[arg-type]
    if draw(st.booleans()):
        text = text[: draw(st.integers(0, len(text)))]
    return text + draw(st.sampled_from(["", " ", "\n", " tail", "]", "}"]))


def cut(text: str, cuts: list[int]) -> list[str]:
    """``text`` as engine updates cut at ``cuts`` (character offsets)."""
    bounds = [0, *sorted({c for c in cuts if 0 < c < len(text)}), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)] or [""]


def vllm_deltas(pieces: list[str], tool_choice: Any) -> list[Any]:
    """vLLM's ``parse_delta`` results, tool-call ids replaced by a marker."""
    req = vllm_request([WEATHER_TOOL, TIME_TOOL], tool_choice=tool_choice)
    parser = vllm_json_parser(req)
    out = []
    for k, piece in enumerate(pieces):
        msg = parser.parse_delta(
            piece, [], req, prompt_token_ids=[1], finished=k == len(pieces) - 1
        )
        calls = [
            (tc.index, tc.id, tc.function.name, tc.function.arguments)
            for tc in (msg.tool_calls if msg else [])
        ]
        out.append(None if msg is None else delta_shape(msg.content, msg.reasoning, calls))
    return out


def ours_deltas(pieces: list[str], tool_choice: Any) -> list[Any]:
    """Our ``feed`` results in the same shape."""
    parser = ours_parser(tool_choice)
    out = []
    for k, piece in enumerate(pieces):
        msg = parser.feed(piece, [], [1], finished=k == len(pieces) - 1)
        calls = [(tc.index, tc.id, tc.name, tc.arguments) for tc in (msg.tool_calls if msg else [])]
        out.append(None if msg is None else delta_shape(msg.content, msg.reasoning, calls))
    return out


def delta_shape(
    content: str | None, reasoning: str | None, calls: list[tuple[int, str | None, Any, Any]]
) -> tuple[Any, ...]:
    """One streamed delta, comparable across vLLM and us: a call's id only says whether it is
    there (and must look like vLLM's when it is)."""
    for _, call_id, _, _ in calls:
        assert call_id is None or re.fullmatch(r"chatcmpl-tool-[0-9a-f]{16}", call_id)
    shaped = [(index, call_id is not None, name, args) for index, call_id, name, args in calls]
    return (content, reasoning, shaped)


@_SETTINGS
@given(required_texts(), st.lists(st.integers(0, 200), max_size=20))
def test_required_calls_stream_as_vllms_deltas_for_any_cut(text: str, cuts: list[int]) -> None:
    pieces = cut(text, cuts)
    assert ours_deltas(pieces, "required") == vllm_deltas(pieces, "required")
    assert ours_parse(text, "required") == vllm_parse(text, "required")


@pytest.mark.parametrize("text", REQUIRED_OUTPUTS)
def test_required_examples_stream_as_vllms_deltas_token_by_character(text: str) -> None:
    pieces = list(text) or [""]
    assert ours_deltas(pieces, "required") == vllm_deltas(pieces, "required")


@_SETTINGS
@given(st.text(max_size=30), st.lists(st.integers(0, 40), max_size=8))
def test_named_call_streams_every_delta_as_arguments_like_vllm(text: str, cuts: list[int]) -> None:
    pieces = cut(text, cuts)
    choice = named("get_time")
    assert ours_deltas(pieces, choice) == vllm_deltas(pieces, choice)


# -- over HTTP: the chat route with a scripted engine ----------------------------------------


def _llama_parsers() -> OutputParsers:
    from tests.support.shared_tokenizer import shared_tokenizer

    tok = shared_tokenizer(tiny_model_dir())
    return OutputParsers.for_tokenizer(
        tok.token_to_id, tool_call_parser="llama3_json", enable_auto_tool_choice=True
    )


def _ids(text: str) -> list[int]:
    from tests.support.shared_tokenizer import shared_tokenizer

    return shared_tokenizer(tiny_model_dir()).encode(text, add_special_tokens=False)


REQUIRED_TEXT = (
    '[{"name": "get_weather", "parameters": {"city": "Paris"}}, '
    '{"name": "get_time", "parameters": {}}]'
)


@pytest.mark.parametrize("parallel", [None, False])
def test_required_request_returns_tool_calls_and_constrains_the_engine(
    parallel: bool | None,
) -> None:
    engine = _ScriptedEngine(_ids(REQUIRED_TEXT))
    app = _chat_app(engine, _llama_parsers())
    body = {
        **CHAT,
        "tools": [WEATHER_TOOL, TIME_TOOL],
        "tool_choice": "required",
        # vLLM drops these for the tools' schema
        "response_format": {"type": "json_object"},
    }
    if parallel is not None:
        body["parallel_tool_calls"] = parallel
    status, raw = _post(app, body)
    assert status == 200, raw
    choice = json.loads(raw)["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    message = choice["message"]
    assert message["content"] == ""  # vLLM's message for a forced call
    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]]
    expected = vllm_parse(REQUIRED_TEXT, "required")[1]
    assert calls == (expected[:1] if parallel is False else expected)
    for call in message["tool_calls"]:
        assert call["type"] == "function"
        assert re.fullmatch(r"chatcmpl-tool-[0-9a-f]{16}", call["id"])
    so = engine.requests[0].sampling_params.structured_outputs
    assert so.json == vllm_schema([WEATHER_TOOL, TIME_TOOL], "required", parallel)
    assert so.json_object is None


def _stream_chunks(raw: bytes) -> list[dict[str, Any]]:
    return [
        json.loads(line.removeprefix("data: "))
        for line in raw.decode().split("\n\n")
        if line.startswith("data: {")
    ]


def test_named_request_streams_one_call_and_finishes_with_stop() -> None:
    args = '{"city": "Paris"}'
    engine = _ScriptedEngine(_ids(args))
    app = _chat_app(engine, _llama_parsers())
    status, raw = _post(
        app,
        {**CHAT, "tools": [WEATHER_TOOL, TIME_TOOL], "tool_choice": named("get_weather"),
         "stream": True},
    )  # fmt: skip
    assert status == 200
    chunks = _stream_chunks(raw)
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert deltas[0] == {"role": "assistant", "content": ""}
    pieces = [tc for d in deltas[1:] for tc in d.get("tool_calls", [])]
    assert all("content" not in d for d in deltas[1:])
    assert pieces[0]["id"].startswith("chatcmpl-tool-") and pieces[0]["type"] == "function"
    assert pieces[0]["function"]["name"] == "get_weather"
    assert all(p["index"] == 0 and "id" not in p for p in pieces[1:])
    assert "".join(p["function"]["arguments"] for p in pieces) == args
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"  # named calls finish with stop
    so = engine.requests[0].sampling_params.structured_outputs
    assert so.json == WEATHER_TOOL["function"]["parameters"]


def test_required_request_streams_calls_and_finishes_with_tool_calls() -> None:
    engine = _ScriptedEngine(_ids(REQUIRED_TEXT))
    app = _chat_app(engine, _llama_parsers())
    status, raw = _post(
        app,
        {**CHAT, "tools": [WEATHER_TOOL, TIME_TOOL], "tool_choice": "required", "stream": True},
    )
    assert status == 200
    chunks = _stream_chunks(raw)
    names: dict[int, str] = {}
    args: dict[int, str] = {}
    for chunk in chunks[1:]:
        for tc in chunk["choices"][0]["delta"].get("tool_calls", []):
            if "id" in tc:
                names[tc["index"]] = tc["function"]["name"]
            else:  # vLLM's later pieces say "name": null
                assert tc["function"]["name"] is None
            args[tc["index"]] = args.get(tc["index"], "") + tc["function"]["arguments"]
    assert [(names[i], args[i]) for i in sorted(names)] == vllm_parse(REQUIRED_TEXT, "required")[1]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_forced_tool_choice_with_structured_outputs_is_refused_like_vllm() -> None:
    app = _chat_app(_ScriptedEngine([1]), _llama_parsers())
    body = {
        **CHAT,
        "tools": [WEATHER_TOOL],
        "tool_choice": named("get_weather"),
        "structured_outputs": {"json": {"type": "object"}},
    }
    status, raw = _post(app, body)
    assert status == 400
    with pytest.raises(Exception) as theirs:
        vllm_request(**{k: v for k, v in body.items() if k not in ("model", "messages")})
    assert json.loads(raw)["error"]["message"] in str(theirs.value)


def test_defs_conflict_is_a_400_naming_tools() -> None:
    other = copy.deepcopy(DEFS_TOOL)
    other["function"]["name"] = "book2"
    other["function"]["parameters"]["$defs"]["place"] = {"type": "integer"}
    app = _chat_app(_ScriptedEngine([1]), _llama_parsers())
    status, raw = _post(app, {**CHAT, "tools": [DEFS_TOOL, other], "tool_choice": "required"})
    assert status == 400
    error = json.loads(raw)["error"]
    assert error["message"] == str(_vllm_error([DEFS_TOOL, other], "required"))
    assert error["param"] == "tools"
