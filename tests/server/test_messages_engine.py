"""The Anthropic Messages API end to end: the official ``anthropic`` SDK against our
``vllm-frontend serve`` and vLLM's own ``vllm serve``, both with ``--enable-auto-tool-choice
--tool-call-parser llama3_json``, each in front of an identical fresh CPU engine running the
tiny model (greedy), give the same answers: plain and streamed, with system blocks, stop
sequences, tools and tool results, forced tool calls, token counts and errors.

Compared except what is random: message and tool-use ids. Streams are compared per content
block (its start, its deltas' concatenation, its stop) and by their message events, since how
many engine steps one delta carries depends on timing. Both frontends run with
``VLLM_ENFORCE_STRICT_TOOL_CALLING=0``, as in tests/chat/test_tool_choice_engine.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from tests.support.shared_stacks import ToolServers

pytestmark = pytest.mark.engine

WEATHER = {
    "name": "get_weather",
    "description": "Weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 12}},
        "required": ["city"],
        "additionalProperties": False,
    },
}
TIME = {
    "name": "get_time",
    "input_schema": {
        "properties": {"utc": {"type": "boolean"}},
        "required": ["utc"],
        "additionalProperties": False,
    },
}
PARIS = {"city": "Paris"}
USER = [{"role": "user", "content": "What is the weather in Paris?"}]
HISTORY = [
    *USER,
    {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Let me look."},
            {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "get_weather",
                "input": {"city": "Paris"},
            },
        ],
    },
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny, 21 C"},
            {"type": "text", "text": "And tomorrow?"},
        ],
    },
]


@pytest.fixture(scope="module")
def urls(tool_servers: ToolServers) -> dict[str, str]:
    """Base URLs of our CLI server and vLLM's server (the shared tool-parser stack)."""
    return dict(tool_servers.items())


@pytest.fixture(scope="module")
def sdk(tool_servers: ToolServers) -> Iterator[dict[str, anthropic.Anthropic]]:
    """Anthropic SDK clients for both servers."""
    with tool_servers.anthropic_clients() as clients:
        yield clients


@pytest.fixture(scope="module")
def model(tool_servers: ToolServers) -> str:
    """The served model name (the same on both servers)."""
    return tool_servers.served_model()


def _normalized(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: "<random>" if k in ("id", "signature") and isinstance(v, str) else _normalized(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_normalized(v) for v in value]
    return value


def _create(client: anthropic.Anthropic, model: str, **kw: Any) -> Any:
    kw.setdefault("messages", USER)
    kw.setdefault("max_tokens", 24)
    kw.setdefault("temperature", 0)
    # This SDK release has no sampling parameters of its own: they go as extra body fields.
    extra = kw.pop("extra_body", {}) | {
        k: kw.pop(k) for k in ("temperature", "top_p", "top_k") if k in kw
    }
    return client.messages.create(model=model, extra_body=extra, **kw)


def _stream_summary(events: list[dict[str, Any]]) -> dict[str, Any]:
    """What a stream says, whatever the deltas' sizes: each block's start, the concatenation
    of its deltas per kind, whether it was stopped; the message events whole."""
    blocks: dict[int, dict[str, Any]] = {}
    order: list[str] = []
    message: list[dict[str, Any]] = []
    for event in events:
        kind = event["type"]
        if not order or order[-1] != kind:
            order.append(kind)
        if kind == "content_block_start":
            blocks[event["index"]] = {"start": event["content_block"], "deltas": {}, "stops": 0}
        elif kind == "content_block_delta":
            delta = event["delta"]
            field = next(k for k in delta if k != "type")
            deltas = blocks[event["index"]]["deltas"]
            # A thinking block's signature is random, as in the whole response.
            piece = "<random>" if field == "signature" else delta[field]
            deltas[delta["type"]] = deltas.get(delta["type"], "") + piece
        elif kind == "content_block_stop":
            blocks[event["index"]]["stops"] += 1
        else:
            message.append(event)
    return {"blocks": blocks, "order": order, "message_events": message}


def compare(sdk: dict[str, anthropic.Anthropic], model: str, **kw: Any) -> Any:
    """Both servers' answers to one ``messages.create``; asserts they agree, returns vLLM's."""
    answers = {}
    for name in ("ours", "vllm"):
        result = _create(sdk[name], model, **kw)
        if kw.get("stream"):
            answers[name] = _stream_summary([e.model_dump(exclude_unset=True) for e in result])
        else:
            answers[name] = result.model_dump(exclude_unset=True)
    assert _normalized(answers["ours"]) == _normalized(answers["vllm"])
    return answers["vllm"]


@pytest.mark.parametrize("stream", [False, True])
def test_text(sdk: dict[str, anthropic.Anthropic], model: str, stream: bool) -> None:
    answer = compare(sdk, model, stream=stream)
    if not stream:
        assert answer["content"][0]["text"]
        assert answer["stop_reason"] == "max_tokens"


@pytest.mark.parametrize("stream", [False, True])
def test_system_blocks_metadata_and_sampling(
    sdk: dict[str, anthropic.Anthropic], model: str, stream: bool
) -> None:
    compare(
        sdk,
        model,
        stream=stream,
        system=[
            {"type": "text", "text": "x-anthropic-billing-header: cch=1"},
            {"type": "text", "text": "You are terse. "},
            {"type": "text", "text": "Answer in French."},
        ],
        metadata={"user_id": "u-1"},
        temperature=0.8,
        top_k=1,
        top_p=0.9,
    )


@pytest.mark.parametrize("stream", [False, True])
def test_stop_sequences(sdk: dict[str, anthropic.Anthropic], model: str, stream: bool) -> None:
    text = _create(sdk["vllm"], model).content[0].text
    stop = text[len(text) // 2 : len(text) // 2 + 3]
    assert stop.strip()
    answer = compare(sdk, model, stream=stream, stop_sequences=["@@never@@", stop])
    if not stream:
        assert (answer["stop_reason"], answer["stop_sequence"]) == ("stop_sequence", stop)


@pytest.mark.parametrize("stream", [False, True])
def test_tools_and_tool_results(
    sdk: dict[str, anthropic.Anthropic], model: str, stream: bool
) -> None:
    compare(sdk, model, stream=stream, tools=[WEATHER, TIME], messages=HISTORY)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "choice",
    [
        {"type": "tool", "name": "get_weather"},
        {"type": "any", "disable_parallel_tool_use": True},
    ],
)
def test_forced_tool_use(
    sdk: dict[str, anthropic.Anthropic], model: str, choice: dict[str, Any], stream: bool
) -> None:
    answer = compare(
        sdk, model, stream=stream, tools=[WEATHER, TIME], tool_choice=choice, max_tokens=120
    )
    if not stream:
        uses = [b for b in answer["content"] if b["type"] == "tool_use"]
        assert uses and answer["stop_reason"] == "tool_use", answer


def test_count_tokens(sdk: dict[str, anthropic.Anthropic], model: str) -> None:
    counts = [
        sdk[name]
        .messages.count_tokens(
            model=model,
            messages=HISTORY,
            system="Be brief.",
            tools=[WEATHER],  # type: ignore[arg-type]
        )
        .model_dump(exclude_unset=True)
        for name in ("ours", "vllm")
    ]
    assert counts[0] == counts[1]
    assert counts[0]["input_tokens"] > 50


def _post(url: str, path: str, body: Any, stream: bool = False) -> tuple[int, Any]:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"content-type": "application/json", "anthropic-version": "2023-06-01"}
    response = httpx.post(url + path, content=content, headers=headers, timeout=120)
    return response.status_code, response.json()


def _bad_bodies(model: str) -> list[Any]:
    ok = {"model": model, "messages": USER, "max_tokens": 8}
    return [
        {**ok, "model": "no-such-model"},
        {**ok, "model": "no-such-model", "stream": True},
        {"model": model, "messages": USER},
        {**ok, "messages": [{"role": "tool", "content": "x"}]},
        b'{"model": "m", "messages": [}',
        {**ok, "max_tokens": 5000},
        {**ok, "max_tokens": 0},
        {**ok, "thinking": {"type": "enabled", "budget_tokens": 2000}},
        {**ok, "tool_choice": {"type": "tool", "name": "get_time"}},
        {**ok, "tools": [WEATHER], "tool_choice": {"type": "tool", "name": "nope"}},
        {**ok, "messages": [{"role": "user", "content": "x " * 2000}]},
        {**ok, "cache_salt": ""},
        {**ok, "cache_salt": "a/b"},
    ]


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
def test_errors(urls: dict[str, str], model: str, path: str) -> None:
    for body in _bad_bodies(model):
        ours = _post(urls["ours"], path, body)
        theirs = _post(urls["vllm"], path, body)
        assert ours == theirs, body
        if path == "/v1/messages":
            assert theirs[0] >= 400, body
