"""Tool-call parsing gives the same calls, content and reasoning as vLLM 0.32's own parsers.

vLLM's parser classes (``ParserManager.get_parser``, the composition its chat serving uses) run in
the test process as the reference, on the tiny Llama 3 tokenizer with Qwen-style markers added as
single tokens. Streaming is compared on the concatenation of the deltas, for many random ways of
cutting the same output into engine updates.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.chat.tool_family_harness import TIME_TOOL, WEATHER_TOOL, written_keys
from tests.support.responses import body as body_of
from tests.support.tiny_model import tiny_model_dir
from vllm_frontend.chat.output_parser import (
    OutputParsers,
    ParserConfigError,
    RequestToolOptions,
)

pytestmark = pytest.mark.oracle  # imports vLLM or transformers as the reference

pytest.importorskip("vllm")


@functools.cache
def tokenizer() -> Any:
    """The tiny model's tokenizer with ``<think>``/``<tool_call>`` markers as single tokens."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir())
    tok.add_tokens(["<think>", "</think>", "<tool_call>", "</tool_call>"])
    tok.add_tokens(["<|im_start|>", "<|im_end|>"], special_tokens=True)
    # Every parser (ours and vLLM's) reads the vocabulary once per instance: 0.2 s each uncached.
    vocab = tok.get_vocab()
    tok.get_vocab = lambda: vocab  # type: ignore[method-assign]
    return tok


PROMPT = "<|im_start|>user\nWhat is the weather?<|im_end|>\n<|im_start|>assistant\n"


@functools.cache
def _prompt_ids(prompt: str) -> tuple[int, ...]:
    return tuple(tokenizer().encode(prompt, add_special_tokens=False))


def prompt_ids(prompt: str = PROMPT) -> list[int]:
    """Token ids of a ChatML prompt."""
    return list(_prompt_ids(prompt))


def vllm_request(tools: list[dict[str, Any]] | None, **fields: Any) -> Any:
    """vLLM's validated request (its validators set tool_choice defaults)."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    if tools is not None:
        body["tools"] = tools
    body.update(fields)
    return ChatCompletionRequest.model_validate(body)


@dataclass
class Result:
    """A parsed output as a client sees it."""

    reasoning: str | None
    content: str | None
    calls: list[tuple[str, str]] = field(default_factory=list)
    tool_calls_finish: bool = False


@functools.cache
def vllm_parser_cls(tool: str | None, reasoning: str | None) -> Any:
    """vLLM's composed parser class."""
    from vllm.parser import ParserManager

    return ParserManager.get_parser(
        tool_parser_name=tool,
        reasoning_parser_name=reasoning,
        enable_auto_tools=tool is not None,
        tokenizer=tokenizer(),
    )


def vllm_full(tool: str | None, reasoning: str | None, text: str, req: Any) -> Result:
    """The message of vLLM's ``chat_completion_full_generator`` for ``text``."""
    cls = vllm_parser_cls(tool, reasoning)
    parser = cls(tokenizer(), req.tools, chat_template_kwargs=req.chat_template_kwargs or {})
    ids = tokenizer().encode(text, add_special_tokens=False)
    reasoning_text, content, calls = parser.parse(
        text, req, enable_auto_tools=tool is not None, model_output_token_ids=ids
    )
    if not req.include_reasoning:
        reasoning_text = None
    # serving.py: tool calls only reach the message for tools + tool_choice "auto".
    if tool is not None and req.tools and req.tool_choice == "auto" and calls:
        out = [(c.name, c.arguments) for c in calls]
        return Result(reasoning_text, content, out, True)
    return Result(reasoning_text, content)


def ours_parsers(tool: str | None, reasoning: str | None) -> OutputParsers:
    """Our parsers configured like ``vllm serve --tool-call-parser/--reasoning-parser``."""
    return OutputParsers(
        tokenizer().get_vocab(),
        tool_call_parser=tool,
        reasoning_parser=reasoning,
        enable_auto_tool_choice=tool is not None,
    )


def options_of(req: Any) -> RequestToolOptions:
    """Our per-request options from vLLM's request object."""
    return RequestToolOptions(
        tools=bool(req.tools),
        tool_choice=req.tool_choice if isinstance(req.tool_choice, str | type(None)) else {},
        include_reasoning=req.include_reasoning,
        chat_template_kwargs=req.chat_template_kwargs,
    )


def ours_full(tool: str | None, reasoning: str | None, text: str, req: Any) -> Result:
    """Our whole-output parse."""
    parsed = ours_parsers(tool, reasoning).for_request(options_of(req)).parse(text)
    reasoning_text = parsed.reasoning if req.include_reasoning else None
    calls = [(c.name, c.arguments) for c in parsed.tool_calls]
    for c in parsed.tool_calls:
        assert re.fullmatch(r"chatcmpl-tool-[0-9a-f]{16}", c.id)
    return Result(reasoning_text, parsed.content, calls, parsed.tools_called)


def deltas_of(text: str, cuts: list[int]) -> list[tuple[str, list[int]]]:
    """``text`` as engine updates: token groups cut at ``cuts`` with their incremental text."""
    tok = tokenizer()
    ids = tok.encode(text, add_special_tokens=False)
    bounds = [*sorted({c for c in cuts if 0 < c < len(ids)}), len(ids)]
    out: list[tuple[str, list[int]]] = []
    start, sent = 0, ""
    for end in bounds:
        decoded = tok.decode(ids[:end], skip_special_tokens=False)
        if not decoded.startswith(sent) or "\ufffd" in decoded[len(sent) :]:
            continue  # mid-character: the detokenizer would hold these bytes back
        out.append((decoded[len(sent) :], ids[start:end]))
        sent, start = decoded, end
    assert sent == text, "test texts must round-trip through the tokenizer"
    return out


def vllm_stream(
    tool: str | None, reasoning: str | None, deltas: list[tuple[str, list[int]]], req: Any
) -> Result:
    """Concatenated deltas of vLLM's streaming path."""
    cls = vllm_parser_cls(tool, reasoning)
    parser = cls(tokenizer(), req.tools, chat_template_kwargs=req.chat_template_kwargs or {})
    result = Result(None, None)
    names: dict[int, str] = {}
    args: dict[int, str] = {}
    for k, (text, ids) in enumerate(deltas):
        msg = parser.parse_delta(
            text, list(ids), req, prompt_token_ids=prompt_ids(), finished=k == len(deltas) - 1
        )
        if msg is None:
            continue
        if msg.content:
            result.content = (result.content or "") + msg.content
        if msg.reasoning:
            result.reasoning = (result.reasoning or "") + msg.reasoning
        for tc in msg.tool_calls:
            result.tool_calls_finish = True
            if tc.id is not None:
                assert re.fullmatch(r"chatcmpl-tool-[0-9a-f]{16}", tc.id)
                assert tc.index not in names
                names[tc.index] = tc.function.name
            if tc.function is not None and tc.function.arguments:
                args[tc.index] = args.get(tc.index, "") + tc.function.arguments
    result.calls = [(names.get(i, ""), args.get(i, "")) for i in sorted(names | args)]
    return result


def ours_stream(
    tool: str | None, reasoning: str | None, deltas: list[tuple[str, list[int]]], req: Any
) -> Result:
    """Concatenated deltas of our streaming path."""
    parser = ours_parsers(tool, reasoning).for_request(options_of(req))
    result = Result(None, None)
    names: dict[int, str] = {}
    args: dict[int, str] = {}
    for k, (text, ids) in enumerate(deltas):
        msg = parser.feed(text, ids, prompt_ids(), finished=k == len(deltas) - 1)
        if msg is None:
            continue
        if msg.content:
            result.content = (result.content or "") + msg.content
        if msg.reasoning:
            result.reasoning = (result.reasoning or "") + msg.reasoning
        for tc in msg.tool_calls:
            if tc.id is not None:
                assert re.fullmatch(r"chatcmpl-tool-[0-9a-f]{16}", tc.id)
                assert tc.index not in names
                assert tc.name is not None
                names[tc.index] = tc.name
            if tc.arguments:
                args[tc.index] = args.get(tc.index, "") + tc.arguments
    result.calls = [(names.get(i, ""), args.get(i, "")) for i in sorted(names | args)]
    result.tool_calls_finish = parser.tool_calls_streamed
    return result


HERMES_OUTPUTS = [
    "I will check.\n<tool_call>\n"
    '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n'
    '</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>',
    '<tool_call>{"name":"get_weather","arguments":{"city":"Zürich 日本"}}</tool_call>',
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa',
    "The weather in Paris is sunny, no tool needed.",
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}\n</tool_call>',
    "<tool_call>not json</tool_call> trailing",
    '  \n<tool_call>\n{"name": "get_time", "arguments": {"nested": {"a": [1, 2.5, true, null]}}}\n'
    "</tool_call>\nDone.",
    '<tool_call>\n{"arguments": {"city": "Paris"}, "name": "get_weather"}\n</tool_call>',
    "Use < and > carefully <tool_ maybe",
]

LLAMA_OUTPUTS = [
    '{"name": "get_weather", "parameters": {"city": "Paris"}}',
    '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}',
    '{"name": "get_weather", "parameters": {"city": "Paris"}}; '
    '{"name": "get_time", "parameters": {}}',
    '<|python_tag|>{"name": "get_time", "parameters": {"tz": "Europe/Zürich", "n": -2.5e3}}',
    "Sure! Here is the answer without tools.",
    'Let me call {"name": "get_weather", "parameters": {"city": "Paris"}}',
    '{"name": "get_weather", "parameters": {"city": "Par',
    '{"name": "get_weather"}',
    '{"city": "Paris"}',
    '{"name": "get_weather", "parameters": {"city": "Paris", "days": [1, 2, 3], "ok": true}}',
    '{"name": "get_weather", "parameters": {"q": "a \\"quoted\\" word\\n"}}',
    "Braces { without json",
]


def _check(
    tool: str | None, reasoning: str | None, text: str, req: Any, cuts: list[int] | None
) -> None:
    assert ours_full(tool, reasoning, text, req) == vllm_full(tool, reasoning, text, req)
    ids = tokenizer().encode(text, add_special_tokens=False)
    for split in ([], list(range(len(ids))), cuts or []):
        deltas = deltas_of(text, split)
        assert ours_stream(tool, reasoning, deltas, req) == vllm_stream(
            tool, reasoning, deltas, req
        ), (text, split)


@pytest.mark.parametrize("text", HERMES_OUTPUTS)
def test_hermes_tool_calls_match_vllm(text: str) -> None:
    _check("hermes", None, text, vllm_request([WEATHER_TOOL, TIME_TOOL]), None)


@pytest.mark.parametrize("text", LLAMA_OUTPUTS)
def test_llama3_json_tool_calls_match_vllm(text: str) -> None:
    _check("llama3_json", None, text, vllm_request([WEATHER_TOOL, TIME_TOOL]), None)


@pytest.mark.parametrize("text", HERMES_OUTPUTS[:3])
def test_tool_choice_none_leaves_calls_in_content(text: str) -> None:
    req = vllm_request([WEATHER_TOOL], tool_choice="none")
    _check("hermes", None, text, req, None)


@pytest.mark.parametrize("text", HERMES_OUTPUTS[:2])
def test_request_without_tools_gets_no_tool_calls(text: str) -> None:
    _check("hermes", None, text, vllm_request(None), None)


@pytest.mark.parametrize(
    "text",
    [
        "<think>The user wants weather.</think>\n\n" + HERMES_OUTPUTS[0],
        "Thinking about it</think>" + HERMES_OUTPUTS[1],
        "Thinking without end " + HERMES_OUTPUTS[0],
        "<think>plan</think>\n\nJust text.",
    ],
)
@pytest.mark.parametrize("reasoning", ["qwen3", "deepseek_r1"])
def test_reasoning_then_tool_calls_match_vllm(text: str, reasoning: str) -> None:
    _check("hermes", reasoning, text, vllm_request([WEATHER_TOOL, TIME_TOOL]), None)


_SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_SETTINGS
@given(st.sampled_from(HERMES_OUTPUTS), st.lists(st.integers(0, 80), max_size=12))
def test_hermes_streaming_matches_vllm_for_any_cut(text: str, cuts: list[int]) -> None:
    req = vllm_request([WEATHER_TOOL, TIME_TOOL])
    deltas = deltas_of(text, cuts)
    assert ours_stream("hermes", None, deltas, req) == vllm_stream("hermes", None, deltas, req)


@_SETTINGS
@given(st.sampled_from(LLAMA_OUTPUTS), st.lists(st.integers(0, 60), max_size=12))
def test_llama3_json_streaming_matches_vllm_for_any_cut(text: str, cuts: list[int]) -> None:
    req = vllm_request([WEATHER_TOOL, TIME_TOOL])
    deltas = deltas_of(text, cuts)
    assert ours_stream("llama3_json", None, deltas, req) == vllm_stream(
        "llama3_json", None, deltas, req
    )


@_SETTINGS
@given(
    st.dictionaries(
        st.text(st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"]), max_size=6),
        st.one_of(st.integers(-5000, 5000), st.text(max_size=8), st.booleans(), st.none()),
        max_size=3,
    ),
    st.sampled_from(["hermes", "llama3_json"]),
    st.lists(st.integers(0, 60), max_size=10),
)
def test_generated_arguments_round_trip_like_vllm(
    arguments: dict[str, Any], tool: str, cuts: list[int]
) -> None:
    call = json.dumps({"name": "get_weather", "arguments": arguments}, ensure_ascii=False)
    text = f"<tool_call>\n{call}\n</tool_call>" if tool == "hermes" else call
    if tokenizer().decode(tokenizer().encode(text, add_special_tokens=False)) != text:
        return
    req = vllm_request([WEATHER_TOOL])
    assert ours_full(tool, None, text, req) == vllm_full(tool, None, text, req)
    deltas = deltas_of(text, cuts)
    assert ours_stream(tool, None, deltas, req) == vllm_stream(tool, None, deltas, req)


def test_unknown_tool_parser_fails_with_the_valid_names() -> None:
    with pytest.raises(ParserConfigError, match=r"hermes.*llama3_json"):
        ours_parsers("no_such_parser", None)


def test_llama3_json_needs_the_python_tag_token() -> None:
    with pytest.raises(ParserConfigError, match="python_tag"):
        OutputParsers({"a": 1}, tool_call_parser="llama3_json", enable_auto_tool_choice=True)


def test_startup_fails_for_an_unknown_parser_name_listing_the_valid_ones() -> None:
    from vllm_frontend.cmd.config import ConfigError, config_from_args

    base = {"model_tag": "m", "enable_auto_tool_choice": True}
    with pytest.raises(ConfigError, match=r"'kimi_k9'.*deepseek_v3, .*hermes, .*pythonic"):
        config_from_args({**base, "tool_call_parser": "kimi_k9"})
    with pytest.raises(ConfigError, match=r"'nope'.*deepseek_r1, deepseek_v3"):
        config_from_args({"model_tag": "m", "reasoning_parser": "nope"})
    with pytest.raises(ConfigError, match="requires --tool-call-parser"):
        config_from_args(base)
    config = config_from_args({**base, "tool_call_parser": "hermes", "reasoning_parser": "qwen3"})
    assert (config.tool_call_parser, config.reasoning_parser) == ("hermes", "qwen3")


# -- over HTTP: the chat route with a scripted engine ----------------------------------------


class _ScriptedEngine:
    """Answers every request with ``token_ids``, one per engine update, then EOS (a stop)."""

    def __init__(self, token_ids: list[int]) -> None:
        self.token_ids = [*token_ids, 128009]  # <|eot_id|>
        self.requests: list[Any] = []

    async def _run(self, req: Any) -> Any:
        from vllm_frontend.engine.protocol import EngineCoreOutput, FinishReason

        for i, tid in enumerate(self.token_ids):
            last = i == len(self.token_ids) - 1
            yield EngineCoreOutput(
                req.request_id, [tid], finish_reason=FinishReason.STOP if last else None
            )

    def add_request(self, request: Any) -> Any:
        self.requests.append(request)
        return self._run(request)

    def abort_requests(self, request_ids: Any) -> int:
        return len(request_ids)


def _chat_app(
    engine: _ScriptedEngine,
    parsers: OutputParsers | None,
    tokenizer_dir: str | None = None,
    chat_options: Any = None,
    tok: Any = None,
) -> Any:
    import pathlib

    from tests.support.shared_tokenizer import shared_tokenizer
    from vllm_frontend.chat import ChatRenderer, ModelChatTemplates, special_tokens_map
    from vllm_frontend.engine.protocol import EngineCoreRequest
    from vllm_frontend.llm import LLM
    from vllm_frontend.server.app import App, ServerSettings
    from vllm_frontend.server.chat import ChatHandler
    from vllm_frontend.server.generation import ServingContext
    from vllm_frontend.server.protocol import parse_chat_request
    from vllm_frontend.text.sampling import ModelSamplingInfo

    model = pathlib.Path(tiny_model_dir())
    tok = tok or shared_tokenizer(tokenizer_dir or model)
    cfg = json.loads((model / "tokenizer_config.json").read_text())
    ctx = ServingContext(
        llm=LLM(engine, EngineCoreRequest),
        tokenizer=tok,
        served_model_names=["m"],
        max_model_len=2048,
        sampling=ModelSamplingInfo(max_model_len=2048, eos_token_id=tok.eos_token_id),
        chat_renderer=ChatRenderer(
            ModelChatTemplates.from_model_dir(model, cfg), special_tokens_map(cfg), chat_options
        ),
    )
    app = App(ServerSettings(served_model_names=["m"], max_model_len=2048))
    app.route("POST", "/v1/chat/completions", ChatHandler(ctx, parse_chat_request, parsers))
    return app


def _post(app: Any, body: dict[str, Any]) -> tuple[int, bytes]:
    import asyncio

    from vllm_frontend.server.transport import Request

    async def go() -> tuple[int, bytes]:
        request = Request(
            "POST",
            "/v1/chat/completions",
            b"",
            {b"content-type": b"application/json"},
            json.dumps(body).encode(),
        )
        response = await app(request)
        return response.status, await body_of(response)

    return asyncio.run(go())


CALL_TEXT = '{"name": "get_weather", "parameters": {"city": "Paris", "unit": "celsius"}}'
CHAT = {"model": "m", "messages": [{"role": "user", "content": "Weather in Paris?"}]}


def test_chat_route_returns_llama3_tool_calls_like_vllm() -> None:
    from tests.support.shared_tokenizer import shared_tokenizer

    tok = shared_tokenizer(tiny_model_dir())
    ids = tok.encode(CALL_TEXT, add_special_tokens=False)
    parsers = OutputParsers.for_tokenizer(
        tok.token_to_id, tool_call_parser="llama3_json", enable_auto_tool_choice=True
    )
    body = {**CHAT, "tools": [WEATHER_TOOL]}
    req = vllm_request([WEATHER_TOOL])
    expected = vllm_full("llama3_json", None, CALL_TEXT, req)

    status, raw = _post(_chat_app(_ScriptedEngine(ids), parsers), body)
    assert status == 200, raw
    choice = json.loads(raw)["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    message = choice["message"]
    assert message["content"] == expected.content
    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]]
    assert calls == expected.calls
    assert all(re.fullmatch(r"chatcmpl-tool-[0-9a-f]{16}", c["id"]) for c in message["tool_calls"])

    status, raw = _post(_chat_app(_ScriptedEngine(ids), parsers), {**body, "stream": True})
    assert status == 200
    chunks = [
        json.loads(line.removeprefix("data: "))
        for line in raw.decode().split("\n\n")
        if line.startswith("data: {")
    ]
    streamed = vllm_stream("llama3_json", None, deltas_of(CALL_TEXT, list(range(len(ids)))), req)
    names: dict[int, str] = {}
    args: dict[int, str] = {}
    for chunk in chunks:
        for tc in chunk["choices"][0]["delta"].get("tool_calls", []):
            if "id" in tc:
                names[tc["index"]] = tc["function"]["name"]
                assert tc["type"] == "function"
            args[tc["index"]] = args.get(tc["index"], "") + tc.get("function", {}).get(
                "arguments", ""
            )
    assert [(names[i], args[i]) for i in sorted(names)] == streamed.calls
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_chat_route_rejects_tools_without_auto_tool_choice_like_vllm() -> None:
    # vLLM's OnlineRenderer.render_chat error messages.
    app = _chat_app(_ScriptedEngine([1]), None)
    status, raw = _post(app, {**CHAT, "tools": [WEATHER_TOOL]})
    assert status == 400
    assert json.loads(raw)["error"]["message"] == (
        '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
    )
    status, raw = _post(app, {**CHAT, "tools": [WEATHER_TOOL], "tool_choice": "required"})
    assert status == 400
    assert json.loads(raw)["error"]["message"] == (
        'tool_choice="required" requires --tool-call-parser to be set'
    )
    named = {"type": "function", "function": {"name": "get_weather"}}
    status, raw = _post(app, {**CHAT, "tools": [WEATHER_TOOL], "tool_choice": named})
    assert status == 400
    assert json.loads(raw)["error"]["message"] == (
        'tool_choice=function "get_weather" requires --tool-call-parser to be set'
    )
    status, raw = _post(app, {**CHAT, "tools": [WEATHER_TOOL], "tool_choice": "none"})
    assert status == 200


REASONING_TOOL_OUTPUTS = [
    "<think>The user wants weather.</think>\n\n" + HERMES_OUTPUTS[0],
    "<think>Two calls.</think>" + HERMES_OUTPUTS[1],
    "Implicit start</think>\n" + HERMES_OUTPUTS[2],
    "<think>No end, straight to a call " + HERMES_OUTPUTS[0],
    "<think>plan</think>Answer with <tool_ partial tag",
]


@_SETTINGS
@given(
    st.sampled_from(REASONING_TOOL_OUTPUTS),
    st.sampled_from(["qwen3", "deepseek_r1"]),
    st.booleans(),
    st.lists(st.integers(0, 60), max_size=12),
)
def test_reasoning_and_tool_streaming_match_vllm_for_any_cut(
    text: str, reasoning: str, include_reasoning: bool, cuts: list[int]
) -> None:
    req = vllm_request([WEATHER_TOOL, TIME_TOOL], include_reasoning=include_reasoning)
    assert ours_full("hermes", reasoning, text, req) == vllm_full("hermes", reasoning, text, req)
    deltas = deltas_of(text, cuts)
    assert ours_stream("hermes", reasoning, deltas, req) == vllm_stream(
        "hermes", reasoning, deltas, req
    )


@pytest.mark.parametrize("text", HERMES_OUTPUTS[:3])
def test_explicit_null_tool_choice_matches_vllm(text: str) -> None:
    req = vllm_request([WEATHER_TOOL], tool_choice=None)
    assert req.tool_choice is None
    _check("hermes", None, text, req, None)


def test_parallel_tool_calls_false_keeps_only_the_first_call_like_vllm() -> None:
    from tests.support.shared_tokenizer import shared_tokenizer

    text = LLAMA_OUTPUTS[2]  # two calls
    tok = shared_tokenizer(tiny_model_dir())
    ids = tok.encode(text, add_special_tokens=False)
    parsers = OutputParsers.for_tokenizer(
        tok.token_to_id, tool_call_parser="llama3_json", enable_auto_tool_choice=True
    )
    body = {**CHAT, "tools": [WEATHER_TOOL, TIME_TOOL], "parallel_tool_calls": False}
    expected = vllm_full("llama3_json", None, text, vllm_request([WEATHER_TOOL, TIME_TOOL]))
    assert len(expected.calls) == 2
    status, raw = _post(_chat_app(_ScriptedEngine(ids), parsers), body)
    message = json.loads(raw)["choices"][0]["message"]
    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]]
    assert calls == expected.calls[:1]

    assert status == 200

    def streamed_indexes(parallel: bool) -> set[int]:
        stream_body = {**body, "stream": True, "parallel_tool_calls": parallel}
        status, raw = _post(_chat_app(_ScriptedEngine(ids), parsers), stream_body)
        assert status == 200
        return {
            tc["index"]
            for line in raw.decode().split("\n\n")
            if line.startswith("data: {")
            for choice in json.loads(line.removeprefix("data: "))["choices"]
            for tc in choice["delta"].get("tool_calls", [])
        }

    assert streamed_indexes(True) == {0, 1}
    assert streamed_indexes(False) == {0}


def _nulls_written(
    tool: str, reasoning: str | None, deltas: list[tuple[str, list[int]]], req: Any
) -> tuple[list[tuple[bool, bool] | None], list[tuple[bool, bool] | None]]:
    # Per engine update: whether the chunk's delta writes the "content" and "reasoning" keys.
    # vLLM's stream dumps DeltaMessage with exclude_unset, so a field the parser set to None
    # is written as null; ours writes the key when the value is set or flagged as set.
    cls = vllm_parser_cls(tool, reasoning)
    theirs_parser = cls(tokenizer(), req.tools, chat_template_kwargs={})
    ours_parser = ours_parsers(tool, reasoning).for_request(options_of(req))
    theirs: list[tuple[bool, bool] | None] = []
    ours: list[tuple[bool, bool] | None] = []
    for k, (text, ids) in enumerate(deltas):
        last = k == len(deltas) - 1
        msg = theirs_parser.parse_delta(
            text, list(ids), req, prompt_token_ids=prompt_ids(), finished=last
        )
        theirs.append(
            None
            if msg is None
            else ("content" in msg.model_fields_set, "reasoning" in msg.model_fields_set)
        )
        ours.append(written_keys(ours_parser.feed(text, ids, prompt_ids(), finished=last)))
    return theirs, ours


@pytest.mark.parametrize("include_reasoning", [True, False])
@pytest.mark.parametrize(
    ("tool", "reasoning", "text"),
    [
        ("hermes", None, HERMES_OUTPUTS[0]),
        ("hermes", None, HERMES_OUTPUTS[1]),
        ("llama3_json", None, LLAMA_OUTPUTS[2]),
        ("hermes", "qwen3", REASONING_TOOL_OUTPUTS[0]),
    ],
)
def test_streamed_deltas_write_null_fields_like_vllm(
    tool: str, reasoning: str | None, text: str, include_reasoning: bool
) -> None:
    """Found by a differential probe of the chat route: vLLM's hermes parser sets ``content``
    on every delta it returns (``"content": null`` beside tool calls), and with
    ``include_reasoning: false`` every delta of a parsed output says ``"reasoning": null``."""
    req = vllm_request([WEATHER_TOOL, TIME_TOOL], include_reasoning=include_reasoning)
    ids = tokenizer().encode(text, add_special_tokens=False)
    theirs, ours = _nulls_written(tool, reasoning, deltas_of(text, list(range(len(ids)))), req)
    assert ours == theirs
