"""The Responses API for gpt-oss through our HTTP app, against vLLM 0.32's Responses serving on
the same engine outputs.

A scripted engine client answers our app with given Harmony completions cut into engine steps;
vLLM's ``OnlineRenderer`` renders the same request (the prompt our app sends to the engine must
be the same token ids), and vLLM's ``OpenAIServingResponses`` stream and full generators read
the same steps through its ``HarmonyContext``. The response bodies and the stream events must
agree field for field; ids are random on both sides, so they are compared by where each one
appears (the same id in the same places), and timestamps are masked.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import itertools
import json
import re
import types
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.chat.test_harmony_serving import (
    SERVERS,
    START_DATE,
    ScriptedEngine,
    _constraint,
    hf_tokenizer,
    tokenizer,
)
from tests.support.responses import body as body_of
from tests.support.tiny_gptoss import tiny_gptoss_dir
from vllm_frontend.chat import ChatRenderer, ModelChatTemplates, special_tokens_map
from vllm_frontend.chat.harmony_renderer import HarmonyRenderer
from vllm_frontend.chat.output_parser import OutputParsers
from vllm_frontend.engine.protocol import EngineCoreOutput, EngineCoreRequest, PrefillStats
from vllm_frontend.llm import LLM
from vllm_frontend.server.app import App, ServerSettings
from vllm_frontend.server.generation import ServingContext
from vllm_frontend.server.responses import ResponsesHandler
from vllm_frontend.server.responses_protocol import parse_responses_request
from vllm_frontend.server.responses_store import ResponseStore
from vllm_frontend.server.transport import PushedStreamingResponse, Request
from vllm_frontend.text.sampling import ModelSamplingInfo

pytestmark = pytest.mark.oracle  # imports vLLM as the reference

MAX_MODEL_LEN = 4096
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
LOOKUP = {"type": "function", "name": "lookup", "parameters": {"type": "object"}}

OUTPUTS = {
    "answer": "<|channel|>analysis<|message|>Easy one.<|end|><|start|>assistant<|channel|>final"
    "<|message|>It is sunny in Paris, 25 °C.<|return|>",
    "call": "<|channel|>analysis<|message|>Use the tool.<|end|><|start|>assistant<|channel|>"
    'commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>',
    "preamble and call": "<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant "
    'to=functions.get_weather<|channel|>commentary json<|message|>{"city":"Paris"}<|call|>',
    "two calls": "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
    '{"c":1}<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather '
    '<|constrain|>json<|message|>{"c":2}<|call|>',
    "bare function name": "<|channel|>commentary to=lookup <|constrain|>json<|message|>{}<|call|>",
    "mcp recipient": "<|channel|>commentary to=repo.list <|constrain|>json<|message|>{}<|call|>",
    "browser call": '<|channel|>analysis to=browser.search<|message|>{"query":"x"}<|call|>',
    "python call": "<|channel|>analysis to=python<|message|>print(1)<|call|>",
    "truncated reasoning": "<|channel|>analysis<|message|>Thinking about the weather in",
    "truncated answer": "<|channel|>final<|message|>The answer is",
    "no header": "Plain words.",
    "several answers": "<|channel|>final<|message|>one<|end|><|start|>assistant<|channel|>final"
    "<|message|>two<|end|><|start|>assistant<|channel|>analysis<|message|>r1<|return|>",
    "empty answer": "<|channel|>final<|message|><|return|>",
    "unicode": "<|channel|>analysis<|message|>思考中…🤔<|end|><|start|>assistant<|channel|>final"
    "<|message|>答え: ✓<|return|>",
}
TRUNCATED = ("truncated reasoning", "truncated answer", "no header")

INPUTS: dict[str, dict[str, Any]] = {
    "string": {"input": "Weather in Paris?"},
    "instructions and tools": {
        "input": "Weather in Paris?",
        "instructions": "Be brief.",
        "tools": [WEATHER, LOOKUP],
        "reasoning": {"effort": "high"},
    },
    "items": {
        "input": [
            {"role": "system", "content": "System words."},
            {"role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [],
             "content": [{"type": "reasoning_text", "text": "Call it."}]},
            {"type": "function_call", "call_id": "c1", "name": "get_weather",
             "arguments": '{"city": "Paris"}'},
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
            {"type": "message", "role": "assistant", "id": "m1", "status": "completed",
             "content": [{"type": "output_text", "text": "Sunny.", "annotations": []}]},
            {"role": "developer", "content": "Later rules."},
            {"role": "user", "content": "And tomorrow?"},
        ],
        "tools": [WEATHER],
        "reasoning": {"effort": "low"},
    },
    "instructions beat a leading system item": {
        "instructions": "From the field.",
        "input": [{"role": "system", "content": "Ignored? no: kept."},
                  {"role": "user", "content": "hi"}],
    },
    "built-in tools only": {
        "input": "Search it.",
        "tools": [{"type": "web_search_preview"}, {"type": "code_interpreter",
                                                   "container": {"type": "auto"}}],
    },
    "built-in tools beside a function": {
        "input": "Search it.",
        "tools": [{"type": "web_search_preview"}, WEATHER],
    },
    "previous input messages": {
        "input": "",
        "previous_input_messages": [
            {"role": "system", "content": "dropped"},
            {"role": "user", "content": "Earlier question"},
            {"role": "assistant", "tool_calls": [{"id": "c9", "type": "function",
             "function": {"name": "get_weather", "arguments": "{}"}}]},
            {"role": "tool", "name": "get_weather", "content": "rain"},
            {"author": {"role": "assistant"}, "channel": "final", "content": "It rains."},
        ],
    },
}  # fmt: skip


def _strict_tool_calling(monkeypatch: pytest.MonkeyPatch, strict: str) -> None:
    """Set ``VLLM_ENFORCE_STRICT_TOOL_CALLING`` for both sides. vLLM's tool parser classes read
    it once, when they are defined (``ToolParser.__init_subclass__``): classes some earlier
    test imported keep that test's value, so theirs are set as the variable would have made
    them (restored after the test). vLLM's app, built in process by other server tests,
    caches its environment variables: the cache is turned off so its runtime reads see it."""
    monkeypatch.setenv("VLLM_ENFORCE_STRICT_TOOL_CALLING", strict)
    import vllm.envs
    from vllm.tool_parsers.abstract_tool_parser import ToolParser

    vllm.envs.disable_envs_cache()

    on = strict.lower() in ("true", "1")
    pending = list(ToolParser.__subclasses__())
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if cls.structural_tag_model is None:
            continue
        inherited = getattr(cls.__mro__[1], "supports_required_and_named", True)
        monkeypatch.setattr(cls, "supports_required_and_named", False if on else inherited)


@pytest.fixture(autouse=True)
def _pinned_date(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("VLLM_SYSTEM_START_DATE", START_DATE)
    _strict_tool_calling(monkeypatch, "0")
    yield


CACHED = 64
"""The engine's prefix-cache hits for every prompt (on its first output, as the engine sends)."""
WRITTEN = 16
"""The prompt tokens the engine writes to its prefix cache, reported with :data:`CACHED`."""


class CachingEngine(ScriptedEngine):
    """A scripted engine whose first output reports :data:`CACHED` cached prompt tokens."""

    async def _run(self, request: EngineCoreRequest) -> AsyncIterator[EngineCoreOutput]:
        first = True
        async for output in super()._run(request):
            if first:
                output.prefill_stats = PrefillStats(
                    num_prompt_tokens=len(request.prompt_token_ids),
                    num_cached_tokens=CACHED,
                    num_cache_creation_tokens=WRITTEN,
                )
                first = False
            yield output


def steps_of(text: str, size: int) -> list[list[int]]:
    ids = tokenizer().encode(text, add_special_tokens=False)
    return [ids[i : i + size] for i in range(0, len(ids), size)] or [[]]


def chunked(text: str, cuts: list[int]) -> list[list[int]]:
    """The output's ids cut at the given points (random chunkings)."""
    ids = tokenizer().encode(text, add_special_tokens=False)
    points = sorted({c % (len(ids) + 1) for c in cuts} | {0, len(ids)})
    return [ids[a:b] for a, b in itertools.pairwise(points)]


# -- ours ------------------------------------------------------------------------------------


def our_app(engine: ScriptedEngine, server: str, store: ResponseStore | None = None) -> App:
    reasoning, tool, auto = SERVERS[server]
    model = tiny_gptoss_dir()
    tok = tokenizer()
    config = json.loads((model / "tokenizer_config.json").read_text())
    ctx = ServingContext(
        llm=LLM(engine, EngineCoreRequest, None),
        tokenizer=tok,
        served_model_names=["m"],
        max_model_len=MAX_MODEL_LEN,
        sampling=ModelSamplingInfo(max_model_len=MAX_MODEL_LEN, eos_token_id=tok.eos_token_id),
        chat_renderer=ChatRenderer(
            ModelChatTemplates.from_model_dir(model, config), special_tokens_map(config)
        ),
    )
    parsers = OutputParsers.for_tokenizer(
        tok.token_to_id,
        tool_call_parser=tool,
        reasoning_parser=reasoning,
        enable_auto_tool_choice=auto,
        harmony=True,
        decode=functools.partial(tok.decode, skip_special_tokens=False),
    )
    app = App(ServerSettings(served_model_names=["m"], max_model_len=MAX_MODEL_LEN))
    handler = ResponsesHandler(
        ctx, parse_responses_request, parsers, store=store,
        harmony=HarmonyRenderer(start_date=START_DATE),
    )  # fmt: skip
    for (method, path), route in handler.routes().items():
        app.route(method, path, route, json_body=path == "/v1/responses")
    return app


async def call(app: App, body: dict[str, Any]) -> tuple[int, Any]:
    request = Request(
        "POST", "/v1/responses", b"", {b"content-type": b"application/json"},
        json.dumps(body).encode(),
    )  # fmt: skip
    response = await app(request)
    raw = (await body_of(response)).decode()
    if isinstance(response, PushedStreamingResponse):
        events = []
        for block in raw.strip().split("\n\n"):
            name, data = block.split("\n")
            event = json.loads(data.removeprefix("data: "))
            assert name == f"event: {event['type']}"
            events.append(event)
        return response.status, events
    return response.status, json.loads(raw)


async def ours(
    body: dict[str, Any], steps: list[list[int]], finish: str, server: str
) -> tuple[EngineCoreRequest, Any]:
    engine = CachingEngine(steps, finish)
    status, out = await call(our_app(engine, server), body)
    assert status == 200, out
    [sent] = engine.requests
    return sent, out


# -- vLLM's ----------------------------------------------------------------------------------


def vllm_parser_cls(server: str) -> Any:
    from vllm.parser import ParserManager

    reasoning, tool, auto = SERVERS[server]
    return ParserManager.get_parser(
        tool_parser_name=tool, reasoning_parser_name=reasoning, enable_auto_tools=auto,
        is_harmony=True,
    )  # fmt: skip


def vllm_render(request: Any, server: str, previous: Any = None) -> Any:
    """vLLM's ``_render_responses_with_harmony`` on the request: messages and prompt ids (or
    its ``ErrorResponse``)."""
    from vllm.entrypoints.openai.parser.harmony_utils import render_for_completion
    from vllm.renderers.online_renderer import OnlineRenderer

    owner = types.SimpleNamespace(
        parser=vllm_parser_cls(server),
        renderer=types.SimpleNamespace(get_tokenizer=hf_tokenizer),
        model_config=types.SimpleNamespace(max_model_len=MAX_MODEL_LEN),
    )
    owner.adjust_harmony_request = functools.partial(OnlineRenderer.adjust_harmony_request, owner)
    owner.create_error_response = functools.partial(OnlineRenderer.create_error_response, owner)
    owner._get_harmony_builtin_tool_descriptions = functools.partial(
        OnlineRenderer._get_harmony_builtin_tool_descriptions, owner
    )
    owner.render_responses_harmony_messages = lambda messages, **_: render_for_completion(messages)
    prev_messages, prev_outputs = previous if previous is not None else (None, None)
    result = OnlineRenderer._render_responses_with_harmony(
        owner, request, previous_messages=prev_messages, previous_response_outputs=prev_outputs,
        tool_server=None,
    )  # fmt: skip
    if not hasattr(result, "engine_input"):
        return result  # type: ignore[no-any-return]  # an ErrorResponse
    return result.messages, list(result.engine_input)


def vllm_serving(server: str) -> Any:
    """vLLM's Responses serving object, with what its generators read (no engine behind it)."""
    from vllm.entrypoints.openai.responses.serving import OpenAIServingResponses

    serving = object.__new__(OpenAIServingResponses)
    serving.parser = vllm_parser_cls(server)
    for name, value in {
        "use_harmony": True, "tool_server": None, "enable_per_request_metrics": False,
        "enable_store": False, "response_store": {}, "response_store_lock": asyncio.Lock(),
        "msg_store": {}, "enable_log_outputs": False, "request_logger": None,
        "enable_auto_tools": SERVERS[server][2], "model_config": None,
        "background_tasks": {}, "event_store": {},
    }.items():  # fmt: skip
        setattr(serving, name, value)
    return serving


async def theirs(
    body: dict[str, Any],
    steps: list[list[int]],
    finish: str,
    server: str,
    previous: Any = None,
    sink: list[Any] | None = None,
) -> tuple[list[int], Any, Any]:
    """vLLM's prompt ids, engine constraint and response body (or stream events; each is also
    appended to ``sink`` as it comes, for a stream that fails)."""
    from vllm.entrypoints.generate.base.protocol import RequestResponseMetadata
    from vllm.entrypoints.openai.responses.context import HarmonyContext
    from vllm.entrypoints.openai.responses.protocol import ResponsesRequest
    from vllm.entrypoints.openai.responses.utils import extract_function_tool_names
    from vllm.outputs import CompletionOutput, RequestOutput

    request = ResponsesRequest.model_validate(body)
    messages, prompt = vllm_render(request, server, previous)
    serving = vllm_serving(server)
    hf = hf_tokenizer()
    params = request.to_sampling_params(MAX_MODEL_LEN - len(prompt), {})
    parser = serving.parser(hf, request.tools, chat_template_kwargs={}, model_config=None)
    context = HarmonyContext(
        messages, [], extract_function_tool_names(request.tools), response_parser=parser,
        request=request,
    )  # fmt: skip

    def output(ids: list[int], last: bool) -> Any:
        done = CompletionOutput(0, "", ids, None, None, finish_reason=finish if last else None)
        # vLLM's output processor stamps the prefill stats on every output of the request
        return RequestOutput(
            "r", None, prompt, None, [done], finished=last, num_cached_tokens=CACHED,
            num_cache_creation_tokens=WRITTEN,
        )  # fmt: skip

    all_ids = [t for step in steps for t in step]
    parts = steps if request.stream else [all_ids]

    async def generate() -> AsyncIterator[Any]:
        for i, part in enumerate(parts):
            context.append_output(output(part, i == len(parts) - 1))
            yield context

    meta = RequestResponseMetadata(request_id=request.request_id)
    constraint = _constraint(params.structured_outputs)
    if request.stream:
        raw = []
        async for e in serving.responses_stream_generator(
            request, params, generate(), context, "m", hf, meta, created_time=1
        ):
            raw.append(e)
            if sink is not None:
                sink.append(json.loads(e.model_dump_json(by_alias=True)))
        events = [json.loads(e.model_dump_json(by_alias=True)) for e in raw]
        LAST_TURN[:] = [messages, raw[-1].response]
        return prompt, constraint, events
    response = await serving.responses_full_generator(
        request, params, generate(), context, "m", hf, meta, created_time=1
    )
    LAST_TURN[:] = [messages, response]
    return prompt, constraint, json.loads(response.model_dump_json(by_alias=True))


LAST_TURN: list[Any] = []
"""vLLM's last conversation (its Harmony messages, output included) and response object."""


# -- comparison ------------------------------------------------------------------------------

ID = re.compile(r"(resp|msg|rs|fc|call|mcp|ws|tool)_[0-9a-f]{16}")


def masked(value: Any) -> Any:
    """Ids replaced by their order of first appearance (per prefix), timestamps masked."""
    seen: dict[str, str] = {}

    def walk(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: "*" if k == "created_at" else walk(x) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, str) and (m := ID.fullmatch(v)):
            prefix = m.group(1)
            count = sum(s.startswith(prefix) for s in seen.values())
            return seen.setdefault(v, f"{prefix}#{count}")
        return v

    return walk(value)


def finish_of(name: str) -> str:
    return "length" if name in TRUNCATED else "stop"


def compare(
    body: dict[str, Any], text: str, steps: list[list[int]], finish: str, server: str = "both"
) -> Any:
    body = {"model": "m", **body}
    sent, our_body = asyncio.run(ours(copy.deepcopy(body), steps, finish, server))
    prompt, constraint, their_body = asyncio.run(theirs(copy.deepcopy(body), steps, finish, server))
    assert list(sent.prompt_token_ids) == prompt
    assert _constraint(sent.sampling_params.structured_outputs) == constraint
    assert masked(our_body) == masked(their_body)
    return our_body


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("name", list(OUTPUTS))
def test_outputs_match_vllm(name: str, stream: bool) -> None:
    body = {"input": "Weather in Paris?", "tools": [WEATHER, LOOKUP], "stream": stream}
    text = OUTPUTS[name]
    compare(body, text, steps_of(text, 3), finish_of(name))


@pytest.mark.parametrize("server", list(SERVERS))
@pytest.mark.parametrize("stream", [False, True])
def test_every_parser_configuration_matches_vllm(server: str, stream: bool) -> None:
    if server == "no parsers":
        pytest.skip("vLLM's HarmonyContext needs a parser (it fails with an AssertionError)")
    for name in ("answer", "call", "truncated answer"):
        body = {"input": "Hi", "tools": [WEATHER], "stream": stream}
        text = OUTPUTS[name]
        compare(body, text, steps_of(text, 2), finish_of(name), server)


@pytest.mark.parametrize("name", list(INPUTS))
def test_prompts_match_vllm(name: str) -> None:
    body = {**INPUTS[name]}
    compare(body, OUTPUTS["answer"], steps_of(OUTPUTS["answer"], 4), "stop")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(sorted(OUTPUTS)),
    cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=12),
)
def test_streams_in_any_chunking_match_vllm(name: str, cuts: list[int]) -> None:
    text = OUTPUTS[name]
    body = {"input": "Hi", "tools": [WEATHER, LOOKUP], "stream": True}
    compare(body, text, chunked(text, cuts), finish_of(name))


SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}
CONSTRAINED: list[dict[str, Any]] = [
    {"text": {"format": {"type": "json_schema", "name": "w", "schema": SCHEMA}}},
    {"text": {"format": {"type": "json_object"}}},
    {"text": {"format": {"type": "text"}}},
    {"structured_outputs": {"regex": "(sunny|rainy)"}},
    {"tools": [WEATHER], "tool_choice": "required"},
    {"tools": [WEATHER], "tool_choice": {"type": "function", "name": "get_weather"}},
    {"tools": [WEATHER], "tool_choice": "none"},
    {"tools": [WEATHER, LOOKUP], "parallel_tool_calls": False},
    {"tools": [{"type": "web_search_preview"}, WEATHER], "tool_choice": "required"},
    {"tools": [{"type": "web_search_preview"}, WEATHER]},
    {"tools": [WEATHER], "text": {"format": {"type": "json_schema", "name": "w",
                                             "schema": SCHEMA}}},
]  # fmt: skip


@pytest.mark.parametrize("strict", ["0", "1"])
@pytest.mark.parametrize("server", ["both", "reasoning only"])
@pytest.mark.parametrize("fields", CONSTRAINED)
def test_constraints_match_vllm(
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
    fields: dict[str, Any],
    server: str,
    strict: str,
) -> None:
    builtin = any(t.get("type") == "web_search_preview" for t in fields.get("tools", ()))
    if builtin and strict == "1" and server == "both" and fields.get("tool_choice") == "required":
        # vLLM's harmony tag for a request with built-in tools (any recipient, any text) is
        # not built: ours constrains the function tools only (a known difference).
        request.applymarker(pytest.mark.xfail(strict=True, reason="built-in tools' tag"))
    _strict_tool_calling(monkeypatch, strict)
    body = {"input": "Weather?", **fields}
    compare(body, OUTPUTS["call"], steps_of(OUTPUTS["call"], 5), "stop", server)


@pytest.mark.parametrize("stream", [False, True])
def test_previous_response_id_matches_vllm(stream: bool) -> None:
    # The second turn continues the first's Harmony conversation (its output messages
    # included) with the call's output; the call's name is found in the first response.
    first = {"model": "m", "input": "Weather?", "instructions": "Be brief.",
             "tools": [WEATHER], "stream": stream}  # fmt: skip
    call_steps = steps_of(OUTPUTS["call"], 4)
    answer_steps = steps_of(OUTPUTS["answer"], 4)

    async def ours_two_turns() -> tuple[EngineCoreRequest, Any, Any]:
        store = ResponseStore()
        engine = CachingEngine(call_steps, "stop")
        status, out = await call(our_app(engine, "both", store), copy.deepcopy(first))
        assert status == 200, out
        response = out[-1]["response"] if stream else out
        second = _second_turn(response)
        engine2 = CachingEngine(answer_steps, "stop")
        status, out2 = await call(our_app(engine2, "both", store), second)
        assert status == 200, out2
        return engine2.requests[0], response, out2

    sent, our_first, our_second = asyncio.run(ours_two_turns())
    asyncio.run(theirs(copy.deepcopy(first), call_steps, "stop", "both"))
    messages, their_first = LAST_TURN
    their_first_json = json.loads(their_first.model_dump_json(by_alias=True))
    assert masked(our_first) == masked(their_first_json)
    previous = (list(messages), list(their_first.output))
    second = _second_turn(their_first_json)
    prompt, _, their_second = asyncio.run(theirs(second, answer_steps, "stop", "both", previous))
    assert list(sent.prompt_token_ids) == prompt
    assert masked(our_second) == masked(their_second)


def _second_turn(first: dict[str, Any]) -> dict[str, Any]:
    [call_item] = [i for i in first["output"] if i["type"] == "function_call"]
    return {
        "model": "m",
        "previous_response_id": first["id"],
        "instructions": "Not used with a previous response.",
        "input": [{"type": "function_call_output", "call_id": call_item["call_id"],
                   "output": "sunny"}],
        "tools": [WEATHER],
    }  # fmt: skip


def test_response_messages_match_vllm() -> None:
    body = {"input": "Hi", "enable_response_messages": True}
    out = compare(body, OUTPUTS["answer"], steps_of(OUTPUTS["answer"], 4), "stop")
    assert [m["channel"] for m in out["output_messages"]] == ["analysis", "final"]
    assert [m["role"] for m in out["input_messages"]] == ["system", "user"]


ERRORS: list[dict[str, Any]] = [
    {"input": [{"type": "function_call_output", "call_id": "nope", "output": "x"}]},
    {"input": [{"type": "web_search_call", "id": "ws_1", "status": "completed",
                "action": {"type": "search", "query": "q"}}]},
    {"input": "x", "reasoning": {"effort": "minimal"}},
    {"input": "x", "reasoning": {"effort": "none"}},
    {"input": "x", "tools": [WEATHER, {"type": "mcp", "server_label": "s"}]},
    # a list output is handed to Harmony's Message as one content: pydantic's report, the
    # parts as vLLM's request model holds them (keys in the SDK types' order, extras after)
    {"input": [{"type": "function_call", "call_id": "c1", "name": "get_weather",
                "arguments": "{}"},
               {"type": "function_call_output", "call_id": "c1",
                "output": [{"zz": 1, "type": "input_text", "text": "sunny"},
                           {"image_url": "http://x/i.png", "type": "input_image"}]}],
     "tools": [WEATHER]},
    {"input": [{"type": "function_call", "call_id": "c1", "name": "get_weather",
                "arguments": "{}"},
               {"type": "function_call_output", "call_id": "c1", "output": []}]},
    {"input": [{"type": "function_call_output", "call_id": "c2", "output": []}]},
]  # fmt: skip


@pytest.mark.parametrize("fields", ERRORS)
def test_bad_input_is_refused_as_vllm_refuses_it(fields: dict[str, Any]) -> None:
    from vllm.entrypoints.openai.responses.protocol import ResponsesRequest
    from vllm.exceptions import VLLMValidationError

    body = {"model": "m", **fields}
    try:
        rendered = vllm_render(ResponsesRequest.model_validate(copy.deepcopy(body)), "both")
    except VLLMValidationError as e:
        expected = {"message": str(e), "type": "BadRequestError", "param": e.parameter}
    else:
        error = rendered.error  # an ErrorResponse
        expected = {"message": error.message, "type": error.type, "param": error.param}
    engine = ScriptedEngine([[1]], "stop")
    status, out = asyncio.run(call(our_app(engine, "both"), body))
    assert status == 400
    assert {k: out["error"][k] for k in expected} == expected
    assert not engine.requests


UNKNOWN_CHANNELS = {
    "unknown": "<|channel|>weird<|message|>Hmm.<|end|><|start|>assistant<|channel|>final"
    "<|message|>ok<|return|>",
    "none": "<|message|>hi<|return|>",
}


@pytest.mark.parametrize("name", list(UNKNOWN_CHANNELS))
def test_an_unknown_output_channel_is_answered_as_vllm_answers_it(name: str) -> None:
    """Found by a differential probe: vLLM's output items refuse a message without a recipient
    on a channel other than analysis, commentary and final ("Unknown channel: X", a ValueError
    its server answers with a 400 BadRequestError); ours left the message out. A stream gets
    the same events up to the response's end, where vLLM's is cut off: ours completes it."""
    text = UNKNOWN_CHANNELS[name]
    steps = steps_of(text, 3)
    body = {"model": "m", "input": "Hi", "tools": [WEATHER]}
    with pytest.raises(ValueError, match=r"^Unknown channel") as refused:
        asyncio.run(theirs(copy.deepcopy(body), steps, "stop", "both"))
    engine = CachingEngine(steps, "stop")
    status, out = asyncio.run(call(our_app(engine, "both"), copy.deepcopy(body)))
    assert (status, out["error"]) == (
        400, {"message": str(refused.value), "type": "BadRequestError", "param": None,
              "code": 400},
    )  # fmt: skip

    streamed = {**body, "stream": True}
    their_events: list[Any] = []
    with pytest.raises(ValueError, match=r"^Unknown channel"):
        asyncio.run(theirs(copy.deepcopy(streamed), steps, "stop", "both", sink=their_events))
    status, events = asyncio.run(call(our_app(CachingEngine(steps, "stop"), "both"), streamed))
    assert status == 200
    assert masked(events[:-1]) == masked(their_events)
    assert events[-1]["type"] == "response.completed"


def test_logprobs_are_refused_as_vllm_refuses_them() -> None:
    engine = ScriptedEngine([[1]], "stop")
    body = {"model": "m", "input": "x", "include": ["message.output_text.logprobs"]}
    status, out = asyncio.run(call(our_app(engine, "both"), body))
    assert status == 400
    assert out["error"]["message"] == "logprobs are not supported with gpt-oss models"
    assert out["error"]["param"] == "logprobs"


def test_background_runs_through_harmony_and_is_stored() -> None:
    async def main() -> tuple[Any, Any, Any]:
        store = ResponseStore()
        app = our_app(ScriptedEngine(steps_of(OUTPUTS["call"], 3), "stop"), "both", store)
        body = {"model": "m", "input": "Hi", "tools": [WEATHER], "background": True}
        _, queued = await call(app, body)
        for _ in range(100):
            stored = store.get(queued["id"])
            if stored is not None and stored["status"] == "completed":
                break
            await asyncio.sleep(0.01)
        _, streamed = await call(app, {**body, "stream": True})
        return queued, store.get(queued["id"]), streamed

    queued, done, streamed = asyncio.run(main())
    assert queued["status"] == "queued" and queued["output"] == []
    assert done is not None and done["status"] == "completed"
    assert [i["type"] for i in done["output"]] == ["reasoning", "function_call"]
    assert streamed[-1]["type"] == "response.completed"
    assert [i["type"] for i in streamed[-1]["response"]["output"]] == ["reasoning", "function_call"]
