"""gpt-oss chat completions end to end through our HTTP app, against vLLM 0.32's chat serving on
the same engine outputs.

A scripted engine client answers our app with given Harmony completions, cut into engine steps;
vLLM's ``OpenAIServingChat`` stream and full generators get the same steps as ``RequestOutput``s.
The prompt our app sends to the engine must be the one vLLM's chat path renders, and the
response bodies (SSE chunks and JSON) must be the same, with ids, timestamps and tool-call ids
masked (tool-call ids by format: they are random).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import re
import types
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import pytest

from tests.support.responses import body as body_of
from tests.support.tiny_gptoss import tiny_gptoss_dir
from vllm_frontend.chat import ChatRenderer, ModelChatTemplates, special_tokens_map
from vllm_frontend.chat.harmony_renderer import HarmonyRenderer
from vllm_frontend.chat.output_parser import OutputParsers
from vllm_frontend.engine.protocol import EngineCoreOutput, EngineCoreRequest, FinishReason
from vllm_frontend.llm import LLM
from vllm_frontend.server.app import App, ServerSettings
from vllm_frontend.server.chat import ChatHandler
from vllm_frontend.server.generation import ServingContext
from vllm_frontend.server.protocol import parse_chat_request
from vllm_frontend.server.transport import PushedStreamingResponse, Request
from vllm_frontend.text.sampling import ModelSamplingInfo
from vllm_frontend.text.tokenizer import Tokenizer

pytestmark = pytest.mark.oracle  # imports vLLM as the reference

START_DATE = "2025-06-30"
TOOL_ID = re.compile(r"chatcmpl-tool-[0-9a-f]{16}")
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
]

OUTPUTS = {
    "answer": "<|channel|>analysis<|message|>Easy one.<|end|><|start|>assistant<|channel|>final"
    "<|message|>It is sunny in Paris, 25 °C.<|return|>",
    "call": "<|channel|>analysis<|message|>Use the tool.<|end|><|start|>assistant<|channel|>"
    'commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>',
    "preamble and call": "<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant "
    'to=functions.get_weather<|channel|>commentary json<|message|>{"city":"Paris"}<|call|>',
    "truncated": "<|channel|>analysis<|message|>Thinking about the weather in",
    "no header": "Plain words.",
}
SERVERS = {
    "both": ("openai_gptoss", "openai", True),
    "reasoning only": ("openai_gptoss", None, False),
    "tools without auto choice": ("openai_gptoss", "openai", False),
    "no parsers": (None, None, False),
}


@pytest.fixture(autouse=True)
def _pinned_date(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("VLLM_SYSTEM_START_DATE", START_DATE)
    # The response comparisons run without vLLM's harmony tool-call structural tag (the engine
    # requests with it on are compared by the tests at the end).
    monkeypatch.setenv("VLLM_ENFORCE_STRICT_TOOL_CALLING", "0")
    yield


@functools.cache
def tokenizer() -> Tokenizer:
    return Tokenizer.from_dir(tiny_gptoss_dir())


@functools.cache
def hf_tokenizer() -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_gptoss_dir())


def steps_of(text: str, size: int) -> list[list[int]]:
    ids = tokenizer().encode(text, add_special_tokens=False)
    return [ids[i : i + size] for i in range(0, len(ids), size)]


def _finish(text: str) -> str:
    return "length" if text in (OUTPUTS["truncated"], OUTPUTS["no header"]) else "stop"


class ScriptedEngine:
    """Answers every request with the given steps; keeps the requests it got."""

    def __init__(self, steps: list[list[int]], finish: str) -> None:
        self.steps = steps
        self.finish = FinishReason.STOP if finish == "stop" else FinishReason.LENGTH
        self.requests: list[EngineCoreRequest] = []

    def add_request(self, request: EngineCoreRequest) -> AsyncIterator[EngineCoreOutput]:
        self.requests.append(request)
        return self._run(request)

    async def _run(self, request: EngineCoreRequest) -> AsyncIterator[EngineCoreOutput]:
        for i, step in enumerate(self.steps):
            last = i == len(self.steps) - 1
            yield EngineCoreOutput(
                request.request_id, step, finish_reason=self.finish if last else None
            )
            await asyncio.sleep(0)

    def abort_requests(self, request_ids: Sequence[str]) -> int:
        return len(request_ids)


def our_app(engine: ScriptedEngine, server: str, strict_level: str = "auto") -> App:
    reasoning, tool, auto = SERVERS[server]
    model = tiny_gptoss_dir()
    tok = tokenizer()
    config = json.loads((model / "tokenizer_config.json").read_text())
    ctx = ServingContext(
        llm=LLM(engine, EngineCoreRequest, None),
        tokenizer=tok,
        served_model_names=["m"],
        max_model_len=4096,
        sampling=ModelSamplingInfo(max_model_len=4096, eos_token_id=tok.eos_token_id),
        chat_renderer=ChatRenderer(
            ModelChatTemplates.from_model_dir(model, config), special_tokens_map(config)
        ),
    )
    parsers = OutputParsers.for_tokenizer(
        tok.token_to_id,
        tool_call_parser=tool,
        reasoning_parser=reasoning,
        enable_auto_tool_choice=auto,
        tool_strict_level=strict_level,
        harmony=True,
        decode=functools.partial(tok.decode, skip_special_tokens=False),
    )
    app = App(ServerSettings(served_model_names=["m"], max_model_len=4096))
    handler = ChatHandler(
        ctx, parse_chat_request, parsers, harmony=HarmonyRenderer(start_date=START_DATE)
    )
    app.route("POST", "/v1/chat/completions", handler)
    return app


async def ours(body: dict[str, Any], steps: list[list[int]], finish: str, server: str) -> Any:
    engine = ScriptedEngine(steps, finish)
    headers = {b"content-type": b"application/json"}
    request = Request("POST", "/v1/chat/completions", b"", headers, json.dumps(body).encode())
    response = await our_app(engine, server)(request)
    raw = (await body_of(response)).decode()
    [sent] = engine.requests
    if isinstance(response, PushedStreamingResponse):
        events = [line[6:] for line in raw.split("\n") if line.startswith("data: ")]
        return sent, [e if e == "[DONE]" else json.loads(e) for e in events]
    assert response.status == 200, raw
    return sent, json.loads(raw)


def vllm_serving(server: str) -> Any:
    """vLLM's chat serving object, with what its generators read (no engine behind it)."""
    from vllm.entrypoints.openai.chat_completion.serving import OpenAIServingChat
    from vllm.parser import ParserManager

    reasoning, tool, auto = SERVERS[server]
    serving = object.__new__(OpenAIServingChat)
    serving.parser_cls = ParserManager.get_parser(
        tool_parser_name=tool,
        reasoning_parser_name=reasoning,
        enable_auto_tools=auto,
        is_harmony=True,
    )
    serving.enable_auto_tools = auto
    serving._include_reasoning_tokens_details = bool(reasoning)
    for name, value in {
        "enable_force_include_usage": False, "response_role": "assistant",
        "enable_log_outputs": False, "request_logger": None, "system_fingerprint": None,
        "enable_prompt_tokens_details": False, "enable_per_request_metrics": False,
        "model_config": None, "default_chat_template_kwargs": {}, "chat_template": None,
        "chat_template_content_format": "auto",
    }.items():  # fmt: skip
        setattr(serving, name, value)
    return serving


async def theirs(body: dict[str, Any], steps: list[list[int]], finish: str, server: str) -> Any:
    from vllm.entrypoints.generate.base.protocol import RequestResponseMetadata
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.outputs import CompletionOutput, RequestOutput
    from vllm.renderers.online_renderer import OnlineRenderer

    request = ChatCompletionRequest.model_validate(body)
    serving = vllm_serving(server)
    owner = types.SimpleNamespace(
        renderer=None, supports_browsing=False, supports_code_interpreter=False
    )
    conversation, [engine_input] = OnlineRenderer._make_request_with_harmony(
        owner, request, request.tools is not None
    )
    prompt = list(engine_input["prompt_token_ids"])
    hf = hf_tokenizer()
    texts, seen = [], ""
    so_far: list[int] = []
    for step in steps:
        so_far += step
        text = hf.decode(so_far, skip_special_tokens=True)
        texts.append(text[len(seen) :])
        seen = text

    def output(ids: list[int], text: str, last: bool) -> Any:
        done = CompletionOutput(0, text, ids, None, None, finish_reason=finish if last else None)
        return RequestOutput("r", None, prompt, None, [done], finished=last)

    async def stream() -> AsyncIterator[Any]:
        for i, step in enumerate(steps):
            yield output(step, texts[i], i == len(steps) - 1)

    async def whole() -> AsyncIterator[Any]:
        yield output(so_far, seen, True)

    meta = RequestResponseMetadata(request_id="r")
    if request.stream:
        chunks = [
            chunk[6:].strip()
            async for chunk in serving.chat_completion_stream_generator(
                request, stream(), "r", "m", conversation, hf, meta, chat_template_kwargs={}
            )
        ]
        return prompt, [c if c == "[DONE]" else json.loads(c) for c in chunks]
    parser = None
    if serving.parser_cls is not None:
        parser = serving._make_parser(request, hf, {})
    response = await serving.chat_completion_full_generator(
        request, whole(), "r", "m", conversation, hf, meta, parser=parser
    )
    return prompt, json.loads(response.model_dump_json())


def _masked(value: Any) -> Any:
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if key == "prompt_logprobs":
                continue  # (echo asks for them; neither scripted engine sends any)
            if (
                key in ("id", "created")
                and isinstance(item, str | int)
                and not (isinstance(item, str) and TOOL_ID.fullmatch(item))
            ):
                out[key] = "*"
            else:
                out[key] = _masked(item)
        return out
    if isinstance(value, list):
        return [_masked(v) for v in value]
    if isinstance(value, str) and TOOL_ID.fullmatch(value):
        return "chatcmpl-tool-#"
    return value


def compare(body: dict[str, Any], text: str, size: int, server: str) -> Any:
    body = {"model": "m", "messages": MESSAGES, **body}
    steps = steps_of(text, size)
    finish = _finish(text)
    sent, our_body = asyncio.run(ours(body, steps, finish, server))
    prompt, their_body = asyncio.run(theirs(body, steps, finish, server))
    assert list(sent.prompt_token_ids) == prompt
    assert _masked(our_body) == _masked(their_body)
    return our_body


@pytest.mark.parametrize("server", list(SERVERS))
@pytest.mark.parametrize("name", list(OUTPUTS))
@pytest.mark.parametrize("stream", [False, True])
def test_responses_match_vllm(name: str, server: str, stream: bool) -> None:
    body: dict[str, Any] = {"tools": [WEATHER], "reasoning_effort": "low", "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    compare(body, OUTPUTS[name], 3, server)


@pytest.mark.parametrize("size", [1, 2, 5, 1000])
def test_streams_in_any_step_size_match_vllm(size: int) -> None:
    body = {"tools": [WEATHER], "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}  # fmt: skip
    for text in OUTPUTS.values():
        compare(body, text, size, "both")


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "fields",
    [
        {"tool_choice": "none"},
        {"tool_choice": "required"},
        {"tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
        {"include_reasoning": False},
        {"parallel_tool_calls": False},
        {"n": 1, "echo": True},
    ],
)
def test_request_options_match_vllm(fields: dict[str, Any], stream: bool) -> None:
    body = {"tools": [WEATHER], "stream": stream, **fields}
    for text in OUTPUTS.values():
        compare(body, text, 2, "both")


def test_a_tool_call_is_served_as_vllm_serves_it() -> None:
    response = compare({"tools": [WEATHER]}, OUTPUTS["call"], 4, "both")
    [choice] = response["choices"]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["reasoning"] == "Use the tool."
    [call] = choice["message"]["tool_calls"]
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert response["usage"]["completion_tokens_details"]["reasoning_tokens"] > 0


STRICT_TIME = {"type": "function", "function": {"name": "get_time", "strict": True,
               "parameters": {"type": "object", "properties": {"utc": {"type": "boolean"}},
                              "required": ["utc"]}}}  # fmt: skip
NO_PARAMS = {"type": "function", "function": {"name": "ping", "strict": False}}
TAG_TOOLS = [[WEATHER], [WEATHER, STRICT_TIME], [NO_PARAMS, STRICT_TIME]]
TAG_CHOICES: list[Any] = [
    "auto", "required", "none",
    {"type": "function", "function": {"name": "get_weather"}},
    {"type": "function", "function": {"name": "get_time"}},
]  # fmt: skip


def _vllm_structured_outputs(body: dict[str, Any], level: str) -> dict[str, Any] | None:
    """The constraint vLLM's Harmony render path sends (``adjust_harmony_request``)."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.parser import ParserManager
    from vllm.tool_parsers.tool_strict_level import ToolStrictLevel

    reasoning, tool, auto = SERVERS["both"]
    request = ChatCompletionRequest.model_validate(json.loads(json.dumps(body)))
    cls = ParserManager.get_parser(
        tool_parser_name=tool, reasoning_parser_name=reasoning, enable_auto_tools=auto,
        is_harmony=True,
    )  # fmt: skip
    parser = cls(hf_tokenizer(), request.tools, model_config=None)
    parser.tool_strict_level = ToolStrictLevel.from_name(level)
    return _constraint(parser.adjust_request(request).structured_outputs)


def _constraint(so: Any) -> dict[str, Any] | None:
    if so is None:
        return None
    fields = ("json", "regex", "choice", "grammar", "json_object", "structural_tag")
    return {k: v for k in fields if (v := getattr(so, k)) is not None} or None


@pytest.mark.parametrize("level", ["auto", "function", "parameter"])
def test_engine_gets_vllms_harmony_tool_constraint(
    monkeypatch: pytest.MonkeyPatch, level: str
) -> None:
    # vLLM 0.32 (strict tool calling on, its default) constrains forced and strict tool calls
    # with its "harmony" structural tag: ours sends the engine the same constraint.
    monkeypatch.setenv("VLLM_ENFORCE_STRICT_TOOL_CALLING", "1")
    engine = ScriptedEngine(steps_of(OUTPUTS["call"], 8), "stop")
    app = our_app(engine, "both", level)
    headers = {b"content-type": b"application/json"}
    tags = 0
    for tools, choice, parallel in itertools.product(TAG_TOOLS, TAG_CHOICES, (None, False)):
        names = {t["function"]["name"] for t in tools}
        if isinstance(choice, dict) and choice["function"]["name"] not in names:
            continue
        body: dict[str, Any] = {"model": "m", "messages": MESSAGES, "tools": tools,
                                "tool_choice": choice}  # fmt: skip
        if parallel is not None:
            body["parallel_tool_calls"] = parallel
        request = Request("POST", "/v1/chat/completions", b"", headers, json.dumps(body).encode())

        async def run(request: Request = request) -> int:
            response = await app(request)
            await body_of(response)
            return response.status

        assert asyncio.run(run()) == 200, body
        expected = _vllm_structured_outputs(body, level)
        assert _constraint(engine.requests[-1].sampling_params.structured_outputs) == expected
        tags += expected is not None
    assert tags > 0


ANSWER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}
LEGACY_TAG = {"type": "structural_tag", "triggers": ["<w>"],
              "structures": [{"begin": "<w>", "schema": ANSWER_SCHEMA, "end": "</w>"}]}  # fmt: skip
USER_TAG = {
    "type": "structural_tag",
    "format": {
        "type": "sequence",
        "elements": [
            {"type": "const_string", "value": "City: "},
            {"type": "regex", "pattern": "[A-Z][a-z]+"},
        ],
    },
}
JSON_TAG = {"type": "structural_tag", "format": {"type": "json_schema",
                                                 "json_schema": ANSWER_SCHEMA}}  # fmt: skip
ANSWER_CONSTRAINTS: list[dict[str, Any]] = [
    {"response_format": {"type": "json_object"}},
    {"response_format": {"type": "json_schema",
                         "json_schema": {"name": "w", "schema": ANSWER_SCHEMA}}},
    {"response_format": USER_TAG},
    {"response_format": JSON_TAG},
    {"response_format": LEGACY_TAG},
    {"response_format": {"type": "text"}},
    {"structured_outputs": {"json": ANSWER_SCHEMA, "disable_any_whitespace": True}},
    {"structured_outputs": {"json": json.dumps(ANSWER_SCHEMA)}},
    {"structured_outputs": {"regex": "(sunny|rainy) [0-9]+"}},
    {"structured_outputs": {"choice": ["sunny", "rainy"], "whitespace_pattern": " "}},
    {"structured_outputs": {"grammar": 'root ::= "sun" | "rain"'}},
    {"structured_outputs": {"structural_tag": json.dumps(USER_TAG)}},
    {"structured_outputs": {"json_object": True, "disable_additional_properties": True}},
    {"structured_outputs": {"regex": "[a-z]+"}, "response_format": {"type": "text"}},
]  # fmt: skip
SO_FIELDS = ("json", "regex", "choice", "grammar", "json_object", "structural_tag",
             "disable_any_whitespace", "disable_additional_properties",
             "whitespace_pattern")  # fmt: skip


def _answer_cases() -> Iterator[tuple[str, dict[str, Any]]]:
    for server, constraint in itertools.product(("both", "reasoning only"), ANSWER_CONSTRAINTS):
        yield server, {"messages": MESSAGES, **constraint}
    for tools, choice, parallel, constraint in itertools.product(
        TAG_TOOLS, TAG_CHOICES, (None, False), ANSWER_CONSTRAINTS
    ):
        names = {t["function"]["name"] for t in tools}
        named = isinstance(choice, dict)
        if named and choice["function"]["name"] not in names:
            continue
        so = constraint.get("structured_outputs", {})
        if named and any(k in so for k in ("json", "regex", "choice")):
            continue  # vLLM refuses these at validation (400 on both sides, tested elsewhere)
        body = {"messages": MESSAGES, "tools": tools, "tool_choice": choice, **constraint}
        if parallel is not None:
            body["parallel_tool_calls"] = parallel
        yield "both", body


def _vllm_sampling_constraint(body: dict[str, Any], server: str, level: str) -> Any:
    """The constraint fields vLLM's Harmony render path leaves for the engine request."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.parser import ParserManager
    from vllm.tool_parsers.tool_strict_level import ToolStrictLevel

    reasoning, tool, auto = SERVERS[server]
    request = ChatCompletionRequest.model_validate(json.loads(json.dumps(body)))
    cls = ParserManager.get_parser(
        tool_parser_name=tool, reasoning_parser_name=reasoning, enable_auto_tools=auto,
        is_harmony=True,
    )  # fmt: skip
    parser = cls(hf_tokenizer(), request.tools, model_config=None)
    parser.tool_strict_level = ToolStrictLevel.from_name(level)
    so = parser.adjust_request(request).extract_structured_outputs()
    return None if so is None else {k: getattr(so, k) for k in SO_FIELDS}


@pytest.mark.parametrize("enforce", ["1", "0"])
@pytest.mark.parametrize("level", ["auto", "parameter"])
def test_engine_gets_vllms_harmony_answer_constraint(
    monkeypatch: pytest.MonkeyPatch, level: str, enforce: str
) -> None:
    # vLLM 0.32 puts a gpt-oss request's structured-output constraint (response_format or
    # structured_outputs, every kind) into the final channel of a Harmony structural tag, which
    # the tool-call tag then replaces ("required", named) or joins ("auto" with strict tools):
    # ours sends the engine the same constraint, with strict tool calling on and off.
    from vllm.tool_parsers.gptoss_tool_parser import GptOssToolParser

    monkeypatch.setenv("VLLM_ENFORCE_STRICT_TOOL_CALLING", enforce)
    # vLLM reads the variable for this class attribute once, at import (on by default then).
    monkeypatch.setattr(GptOssToolParser, "supports_required_and_named", enforce == "0")
    headers = {b"content-type": b"application/json"}
    apps: dict[str, tuple[App, ScriptedEngine]] = {}
    wrapped = 0
    for server, fields in _answer_cases():
        if server not in apps:
            engine = ScriptedEngine(steps_of(OUTPUTS["answer"], 8), "stop")
            apps[server] = (our_app(engine, server, level), engine)
        app, engine = apps[server]
        body = {"model": "m", **fields}
        request = Request("POST", "/v1/chat/completions", b"", headers, json.dumps(body).encode())

        async def run(app: App = app, request: Request = request) -> int:
            response = await app(request)
            await body_of(response)
            return response.status

        assert asyncio.run(run()) == 200, body
        expected = _vllm_sampling_constraint(body, server, level)
        so = engine.requests[-1].sampling_params.structured_outputs
        assert (None if so is None else {k: getattr(so, k) for k in SO_FIELDS}) == expected, body
        tag = (expected or {}).get("structural_tag") or ""
        wrapped += "<|channel|>final" in tag and "functions." not in tag
    assert wrapped >= len(ANSWER_CONSTRAINTS) - 1  # every kind (a plain "text" format: none)


LARK_GRAMMARS = [
    'start: "sun" | "rain"',
    'start: item ("," item)*\nitem: WORD | NUMBER\n%import common.WORD\n%import common.NUMBER',
    'start: /[a-z]+/ " " DAY\nDAY: "mon" | "tue"  // a comment',
    "start: (",
]
"""Lark grammars: vLLM converts them to EBNF with xgrammar before wrapping them (the last one
xgrammar cannot read: vLLM's 400)."""


@pytest.mark.parametrize("lark", LARK_GRAMMARS)
@pytest.mark.parametrize(
    ("server", "tools"), [("reasoning only", None), ("both", [STRICT_TIME]), ("both", None)]
)
def test_a_lark_grammar_goes_in_as_vllm_converts_it(
    lark: str, server: str, tools: list[dict[str, Any]] | None
) -> None:
    # Alone in the final channel's tag, or joined with a strict tool's calls ("auto").
    from vllm.entrypoints.serve.exception_handling.error_response import create_error_response

    body: dict[str, Any] = {"model": "m", "messages": MESSAGES,
                            "structured_outputs": {"grammar": lark}}  # fmt: skip
    if tools is not None:
        body["tools"] = tools
    engine = ScriptedEngine(steps_of(OUTPUTS["answer"], 8), "stop")
    headers = {b"content-type": b"application/json"}
    request = Request("POST", "/v1/chat/completions", b"", headers, json.dumps(body).encode())

    async def run() -> tuple[int, bytes]:
        response = await our_app(engine, server)(request)
        return response.status, await body_of(response)

    status, raw = asyncio.run(run())
    try:
        expected = _vllm_sampling_constraint(body, server, "auto")
    except Exception as exc:  # vLLM's exception handlers take any
        error = create_error_response(exc).model_dump()["error"]
        assert (status, json.loads(raw)["error"]) == (error["code"], error)
        assert not engine.requests
        return
    assert status == 200, raw
    so = engine.requests[-1].sampling_params.structured_outputs
    assert {k: getattr(so, k) for k in SO_FIELDS} == expected
