"""The Messages routes against vLLM 0.32's own Anthropic code, in-process (no engine).

- Bad bodies: vLLM's real FastAPI app (as in test_errors_match_vllm) and ours give the same
  status and body.
- Request mapping: vLLM's ``to_chat_completion_request`` and our ``to_chat_fields`` give the same
  chat messages, tools, tool choice and options for the same Anthropic request.
- Response mapping: over a scripted engine, our chat route's answer to the chat request vLLM
  builds, run through vLLM's own converters (``messages_full_converter``,
  ``message_stream_converter``), equals our Messages route's answer, streamed or not, with
  reasoning and tool-call parsers. Our chat route is itself pinned to vLLM's elsewhere.
"""

from __future__ import annotations

import asyncio
import functools
import json
import pathlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from tests.server.messages_support import ScriptedClient, messages_app, post, sse_events
from tests.server.support import HTTP, RunningServer
from tests.server.test_errors_match_vllm import FakeTokenizer, vllm_client
from tests.support.tiny_model import tiny_model_dir
from vllm_frontend.chat.messages import normalize_tools
from vllm_frontend.server.app import ServerSettings
from vllm_frontend.server.messages import _rejects_inline_system
from vllm_frontend.server.messages_convert import to_chat_fields
from vllm_frontend.server.messages_protocol import (
    parse_count_tokens_request,
    parse_messages_request,
)
from vllm_frontend.server.routes import Services, build_app
from vllm_frontend.server.transport import Request, Response, json_response
from vllm_frontend.text.tokenizer import Tokenizer

pytestmark = pytest.mark.oracle

pytest.importorskip("vllm")

JSON = {"content-type": "application/json"}
M = [{"role": "user", "content": "hi"}]
WEATHER = {
    "name": "get_weather",
    "description": "Weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
TIME = {"name": "get_time", "input_schema": {"properties": {"utc": {"type": "boolean"}}}}


# -- bad bodies --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ours() -> Iterator[RunningServer]:
    async def messages(request: Request) -> Response:
        parse_messages_request(request.body)
        return json_response({"reached": True})

    async def count_tokens(request: Request) -> Response:
        parse_count_tokens_request(request.body)
        return json_response({"reached": True})

    app = build_app(
        ServerSettings(served_model_names=["m"]),
        Services(tokenizer=FakeTokenizer()),
        {("POST", "/v1/messages"): messages, ("POST", "/v1/messages/count_tokens"): count_tokens},
    )
    srv = RunningServer(app)
    yield srv
    srv.stop()


def _m(**kw: Any) -> dict[str, Any]:
    return {"model": "m", "messages": M, "max_tokens": 5, **kw}


BAD_BODIES = [
    b"{not json",
    b"",
    b"[1]",
    b'"text"',
    {"model": "m", "messages": M},
    {"messages": M, "max_tokens": 5},
    {},
    _m(model=""),
    _m(model=3),
    _m(max_tokens=0),
    _m(max_tokens=-2),
    _m(max_tokens="many"),
    _m(max_tokens=2.5),
    _m(messages=[{"role": "tool", "content": "x"}]),
    _m(messages=[{"role": "user"}]),
    _m(messages=[{"content": "x"}]),
    _m(messages=[{"role": "user", "content": 5}]),
    _m(messages=[{"role": "user", "content": [{"type": "video"}]}]),
    _m(messages=[{"role": "user", "content": [{"text": "x"}]}]),
    _m(messages=[{"role": "user", "content": [{"type": "text", "text": 3}]}]),
    _m(messages=[{"role": "user", "content": [{"type": "tool_use", "input": [1]}]}]),
    _m(messages=[{"role": "user", "content": [{"type": "tool_addition"}]}]),
    _m(
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "tool_addition", "tool": {"type": "tool_reference", "name": "x"}}
                ],
            }
        ]
    ),
    _m(
        messages=[
            {
                "role": "system",
                "content": [
                    {"type": "tool_removal", "tool": {"type": "tool_definition", "definition": {}}}
                ],
            }
        ]
    ),
    _m(messages=[{"role": "user", "content": [{"type": "image", "source": "http://x/y.png"}]}]),
    _m(messages=[{"role": "user", "content": [{"type": "image", "source": [1]}]}]),
    _m(messages=[{"role": "user", "content": [{"type": "images", "source": {}}]}]),
    _m(messages="hi"),
    _m(messages=[3]),
    _m(system=[{"type": "tool_removal", "tool": {"type": "tool_reference", "name": "x"}}]),
    _m(system=5),
    _m(thinking={"type": "enabled"}),
    _m(thinking={"type": "enabled", "budget_tokens": 10}),
    _m(thinking={"type": "enabled", "budget_tokens": 2000}),
    _m(thinking={"type": "enabled", "budget_tokens": 2000}, max_tokens=3000),
    _m(thinking={"type": "nope"}),
    _m(thinking={}),
    _m(thinking={"type": "adaptive", "display": "loud"}),
    _m(thinking=[]),
    _m(tool_choice={"type": "tool"}),
    _m(tool_choice={"type": "tool", "name": "f"}),
    _m(tool_choice={"type": "maybe"}),
    _m(tool_choice="auto"),
    _m(tools=[{"name": "x"}]),
    _m(tools=[{"input_schema": {}}]),
    _m(tools=[WEATHER, {"name": 1, "input_schema": []}]),
    _m(tools={}),
    _m(stop_sequences=["a", "b", "c", "d", "e"]),
    _m(stop_sequences="stop"),
    _m(temperature="hot"),
    _m(temperature="0.5"),
    _m(top_k=1.5),
    _m(top_p=None, top_k=None, temperature=None, stream=None, metadata=None),
    _m(stream="yes"),
    _m(metadata=[]),
    _m(output_config={"effort": "extreme"}),
    _m(output_config={"format": {"type": "json_object"}}),
    _m(output_config={"format": {"schema": {"type": "object"}}}),
    _m(cache_salt=""),
    _m(mm_payload="all"),
    _m(vllm_xargs={"a": {"b": 1}}),
    _m(chat_template_kwargs=[]),
    _m(max_tokens=0, model="", messages=[{"role": "bot", "content": "x"}]),
]


@pytest.mark.parametrize("body", BAD_BODIES)
@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
def test_bodies_get_vllms_answer(ours: RunningServer, path: str, body: Any) -> None:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    theirs = vllm_client().post(path, content=content, headers=JSON)
    mine = HTTP.post(ours.url + path, content=content, headers=JSON)
    if theirs.status_code == 500 and "object has no attribute" in theirs.text:
        assert mine.status_code == 200, mine.text  # both accepted the body
        return
    assert (mine.status_code, mine.json()) == (theirs.status_code, theirs.json())


def test_a_body_not_declared_json_gets_vllms_answer(ours: RunningServer) -> None:
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        theirs = vllm_client().post(path, content=b"{}", headers={"content-type": "text/plain"})
        mine = HTTP.post(ours.url + path, content=b"{}", headers={"content-type": "text/plain"})
        assert (mine.status_code, mine.json()) == (theirs.status_code, theirs.json())


# -- request mapping ---------------------------------------------------------------------------


def _tool_use(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": args}


HISTORY = [
    {"role": "user", "content": "What is the weather in Paris?"},
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "Use the tool.", "signature": "abc"},
            {"type": "redacted_thinking", "data": "xyz"},
            {"type": "text", "text": "Let me check."},
            _tool_use("toolu_1", "get_weather", {"city": "Paris", "note": "é ✓"}),
            _tool_use("toolu_2", "get_time", {}),
        ],
    },
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny, 21C"},
            {
                "type": "tool_result",
                "tool_use_id": "toolu_2",
                "content": [
                    {"type": "text", "text": "12:00"},
                    {"type": "text", "text": "UTC"},
                    {"type": "image", "source": {"type": "url", "url": "http://x/y.png"}},
                    {"type": "tool_reference", "tool_name": "get_weather"},
                ],
                "is_error": False,
            },
            {"type": "text", "text": "Thanks! And tomorrow?"},
        ],
    },
]


def _ref(name: str) -> dict[str, Any]:
    return {"type": "tool_reference", "name": name}


MAPPED = [
    _m(),
    _m(system="Be brief.", messages=HISTORY),
    _m(
        system=[
            {"type": "text", "text": "x-anthropic-billing-header: cc=1"},
            {"type": "text", "text": "You are "},
            {"type": "text", "text": ""},
            {"type": "text", "text": "helpful."},
        ],
        messages=[
            {"role": "user", "content": "a"},
            {"role": "system", "content": [{"type": "text", "text": "Reminder."}]},
            {"role": "system", "content": "x-anthropic-billing-header: 2"},
            {"role": "user", "content": [{"type": "text", "text": "b"}]},
        ],
    ),
    _m(messages=[{"role": "user", "content": []}, {"role": "assistant", "content": []}]),
    _m(
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Look:"},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"},
                    },
                    {"type": "image", "source": {"data": "BBBB"}},
                ],
            },
            {
                "role": "assistant",
                "content": [{"type": "tool_result", "content": [{"type": "text", "text": "r"}]}],
            },
        ]
    ),
    _m(
        messages=[
            {
                "role": "user",
                "content": [
                    {
                        "type": "image",
                        "source": {
                            "type": "base64",
                            "media_type": "image/webp",
                            "data": "UklGRg==",
                        },
                    },
                    {"type": "image", "source": {"type": "base64", "media_type": "image/gif"}},
                    {"type": "image", "source": {"type": "url"}},
                    {"type": "image", "source": {"type": "file", "file_id": "file_1"}},
                    {"type": "image"},
                    {"type": "image", "source": {}},
                    {"type": "text", "text": "Which?"},
                ],
            },
            {
                "role": "assistant",
                "content": [{"type": "image", "source": {"type": "url", "url": "http://x/a.jpg"}}],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": [
                            {"type": "image", "source": {"type": "url"}},
                            {"type": "image", "source": {"media_type": "image/png", "data": "Q"}},
                            {"type": "image"},
                        ],
                    }
                ],
            },
        ]
    ),
    _m(tools=[WEATHER, TIME]),
    _m(tools=[WEATHER], tool_choice={"type": "any", "disable_parallel_tool_use": True}),
    _m(tools=[WEATHER], tool_choice={"type": "tool", "name": "get_weather"}),
    _m(tools=[WEATHER], tool_choice={"type": "none", "disable_parallel_tool_use": False}),
    _m(tools=[], tool_choice={"type": "auto"}),
    _m(tools=[{**WEATHER, "strict": True, "defer_loading": True}]),
    _m(
        tools=[WEATHER, {**TIME, "defer_loading": True}],
        messages=[
            {
                "role": "system",
                "content": [
                    {
                        "type": "tool_addition",
                        "tool": {"type": "tool_reference", "name": "get_time"},
                    },
                    {
                        "type": "tool_removal",
                        "tool": {"type": "tool_reference", "name": "get_weather"},
                    },
                    {
                        "type": "tool_addition",
                        "tool": {
                            "type": "tool_definition",
                            "definition": {"name": "lookup", "input_schema": {}},
                        },
                    },
                ],
            },
            *M,
        ],
    ),
    _m(thinking={"type": "enabled", "budget_tokens": 1024}, max_tokens=2048),
    _m(thinking={"type": "disabled"}),
    _m(thinking={"type": "adaptive"}, output_config={"effort": "high"}),
    _m(thinking={"type": "disabled"}, output_config={"effort": "high"}),
    _m(output_config={"format": {"type": "json_schema", "schema": {"type": "object"}}}),
    _m(output_config={"format": {"schema": {}}}),
]


def _vllm_chat_request(body: dict[str, Any], merge: bool, effort: str = "none") -> Any:
    from vllm.entrypoints.anthropic.protocol import AnthropicMessagesRequest
    from vllm.entrypoints.anthropic.serving import AnthropicServingMessages

    return AnthropicServingMessages.to_chat_completion_request(
        AnthropicMessagesRequest.model_validate(body),
        merge_inline_system=merge,
        disabled_thinking_effort=effort,  # type: ignore[arg-type]
    )


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=lambda o: o.model_dump()))


@pytest.mark.parametrize("merge", [False, True])
@pytest.mark.parametrize("body", MAPPED)
def test_request_maps_onto_the_chat_request_vllm_builds(body: dict[str, Any], merge: bool) -> None:
    theirs = _vllm_chat_request(body, merge, "low")
    mine = to_chat_fields(
        parse_messages_request(json.dumps(body).encode()),
        merge_inline_system=merge,
        disabled_thinking_effort="low",
    )
    assert mine.messages == _plain(theirs.messages)
    theirs_tools = None if theirs.tools is None else [t.model_dump() for t in theirs.tools]
    assert normalize_tools(mine.tools) == theirs_tools
    assert _plain(mine.tool_choice) == _plain(theirs.tool_choice)
    assert mine.parallel_tool_calls == theirs.parallel_tool_calls
    assert mine.reasoning_effort == theirs.reasoning_effort
    assert mine.thinking_token_budget == theirs.thinking_token_budget
    rf = theirs.response_format
    assert mine.response_format == (
        None if rf is None else rf.model_dump(exclude_none=True, by_alias=True)
    )


@pytest.mark.parametrize(
    "template",
    [
        "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}",
        "{% for m in messages %}{% if m.role == 'system' and not loop.first %}"
        "{{ raise_exception('System message must be first') }}{% endif %}{{ m.content }}"
        "{% endfor %}",
        "{{ messages[0]['content'] | nosuchfilter }}",
        "{% for m in messages %}{% if m.role == 'system' and not loop.first %}{% break %}"
        "{% endif %}{% endfor %}",
        "",
    ],
)
def test_system_first_templates_are_detected_as_vllm_detects_them(template: str) -> None:
    from vllm.entrypoints.anthropic.serving import AnthropicServingMessages

    assert _rejects_inline_system(template) == AnthropicServingMessages._detect_merge_inline_system(
        template
    )


def test_the_tiny_models_template_takes_inline_system_messages_like_vllm() -> None:
    from vllm.entrypoints.anthropic.serving import AnthropicServingMessages

    config = json.loads((tiny_model_dir() / "tokenizer_config.json").read_text())
    template = config["chat_template"]
    assert _rejects_inline_system(template) == AnthropicServingMessages._detect_merge_inline_system(
        template
    )


# -- response mapping --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def think_model(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """The tiny model's tokenizer with ``<think>`` and ``<tool_call>`` tokens, saved."""
    from tests.chat.test_tool_parsers import tokenizer

    path = tmp_path_factory.mktemp("think-tokenizer")
    tokenizer().save_pretrained(path)
    return path


THOUGHT = "<think>\nThe user asks about the weather.\n</think>\n\nIt is sunny in Paris."
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
CALL2 = '<tool_call>\n{"name": "get_time", "arguments": {"utc": true}}\n</tool_call>'
CASES = [
    # (text, tool parser, reasoning parser, request fields)
    ("Hello there, how are you? Fine: ünïcödé ✓.", None, None, {}),
    ("Hello there, how are you? Fine: ünïcödé ✓.", None, None, {"max_tokens": 4}),
    ("Hello there, how are you? Fine.", None, None, {"stop_sequences": ["are", "zzz"]}),
    ("", None, None, {}),
    (THOUGHT, None, "qwen3", {}),
    (THOUGHT, None, "qwen3", {"max_tokens": 6}),
    ("<think>\nStill thinking about it", None, "qwen3", {}),
    (THOUGHT, "hermes", "qwen3", {"tools": [WEATHER]}),
    ("<think>\nCall it.\n</think>\n\n" + CALL, "hermes", "qwen3", {"tools": [WEATHER]}),
    ("Checking.\n" + CALL, "hermes", None, {"tools": [WEATHER]}),
    (CALL + "\n" + CALL2, "hermes", None, {"tools": [WEATHER, TIME]}),
    (
        CALL + "\n" + CALL2,
        "hermes",
        None,
        {
            "tools": [WEATHER, TIME],
            "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
        },
    ),
    (CALL, "hermes", None, {"tools": [WEATHER], "max_tokens": 9}),
    (CALL, "hermes", None, {"tools": [WEATHER], "stop_sequences": ["Paris"]}),
    (CALL, "hermes", None, {"tools": [WEATHER], "tool_choice": {"type": "none"}}),
    (
        '[{"name": "get_weather", "parameters": {"city": "Paris"}}]',
        "hermes",
        None,
        {"tools": [WEATHER], "tool_choice": {"type": "any"}},
    ),
    (
        '{"city": "Paris"}',
        "hermes",
        None,
        {"tools": [WEATHER], "tool_choice": {"type": "tool", "name": "get_weather"}},
    ),
]


def _normalized(value: Any) -> Any:
    """Ids and signatures are random: masked."""
    if isinstance(value, dict):
        return {
            k: "<id>" if k in ("id", "signature") and isinstance(v, str) else _normalized(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_normalized(v) for v in value]
    return value


def _chat_body(body: dict[str, Any]) -> dict[str, Any]:
    chat = _vllm_chat_request(body, merge=False).model_dump(mode="json", exclude_unset=True)
    chat.pop("request_id", None)
    return chat


async def _vllm_stream(chat_sse: bytes) -> list[tuple[str, dict[str, Any]]]:
    from vllm.entrypoints.anthropic.serving import AnthropicServingMessages

    async def chunks() -> AsyncIterator[str]:
        for block in chat_sse.decode().split("\n\n"):
            if block:
                yield block + "\n\n"

    converter = object.__new__(AnthropicServingMessages)
    out = [event async for event in converter.message_stream_converter(chunks())]
    return sse_events("".join(out).encode())


_APPS: dict[tuple[str | None, str | None], tuple[ScriptedClient, Any]] = {}


@functools.cache
def _think_tokenizer(path: pathlib.Path) -> Tokenizer:
    return Tokenizer.from_dir(path, start_fast_encoder=False)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("text,tool_parser,reasoning_parser,fields", CASES)
def test_responses_are_vllms_conversion_of_the_chat_response(
    think_model: pathlib.Path,
    text: str,
    tool_parser: str | None,
    reasoning_parser: str | None,
    fields: dict[str, Any],
    stream: bool,
) -> None:
    from vllm.entrypoints.anthropic.serving import AnthropicServingMessages
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionResponse

    body = {"model": "m", "messages": [{"role": "user", "content": "Weather?"}], **fields}
    body.setdefault("max_tokens", 64)
    if stream:
        body["stream"] = True

    key = (tool_parser, reasoning_parser)
    if key not in _APPS:
        tokenizer = _think_tokenizer(think_model)
        client = ScriptedClient(tokenizer, text)
        _APPS[key] = (
            client,
            messages_app(
                think_model,
                client,
                tool_call_parser=tool_parser,
                reasoning_parser=reasoning_parser,
                max_model_len=2048,
                tokenizer=tokenizer,
            ),
        )
    client, app = _APPS[key]
    client.script(text)

    async def run() -> tuple[Any, Any]:
        status, chat = await post(app, "/v1/chat/completions", _chat_body(body))
        assert status == 200, chat
        status, mine = await post(app, "/v1/messages", body)
        assert status == 200, mine
        if stream:
            return sse_events(mine), await _vllm_stream(chat)
        converter = object.__new__(AnthropicServingMessages)
        response = converter.messages_full_converter(
            ChatCompletionResponse.model_validate_json(chat)
        )
        return json.loads(mine), response.model_dump(exclude_none=True)

    mine, theirs = asyncio.run(run())
    assert _normalized(mine) == _normalized(theirs)
    if stream:  # same bytes, not only the same JSON values
        assert json.dumps(_normalized(mine)) == json.dumps(_normalized(theirs))


def test_an_engine_side_refusal_of_a_stream_is_its_error_event() -> None:
    # vLLM's input processor refuses a thinking budget without a reasoning config when the
    # chat stream reads its first output: the chat route answers 200 and an error chunk
    # (pinned to vLLM's elsewhere), which vLLM's Messages converter cannot convert, so its
    # only event is that error, with pydantic's complaint; ours the refusal (ours answered 400)
    from tests.support.shared_tokenizer import shared_tokenizer

    model = tiny_model_dir()
    client = ScriptedClient(shared_tokenizer(model), "Hello")
    app = messages_app(model, client, max_model_len=4096, thinking_budget=False)
    body = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2000,
            "stream": True, "thinking": {"type": "enabled", "budget_tokens": 1024}}  # fmt: skip

    async def run() -> tuple[int, bytes, int, bytes]:
        status, chat = await post(app, "/v1/chat/completions", _chat_body(body))
        return (status, chat, *await post(app, "/v1/messages", body))

    chat_status, chat, status, mine = asyncio.run(run())
    [(event, theirs)] = asyncio.run(_vllm_stream(chat))
    assert (chat_status, status) == (200, 200) and not client.requests
    assert event == "error" and theirs["error"]["message"].startswith("2 validation errors")
    refusal = json.loads(chat.split(b"\n\n")[0][6:])["error"]["message"]
    assert refusal.startswith("thinking_token_budget is set but reasoning_config")
    error = {"type": "internal_error", "message": refusal}
    assert sse_events(mine) == [("error", {"type": "error", "error": error})]
