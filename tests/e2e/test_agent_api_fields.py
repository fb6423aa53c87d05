"""The Responses and Anthropic Messages APIs field by field: one table of request shapes (the
request fields vLLM 0.32's protocols accept), each sent whole and streamed through the official
``openai`` and ``anthropic`` SDKs to our server and to vLLM's own, each in front of a fresh CPU
engine of the same build (the shared tool-parser stack, with the Responses store).

Compared: the whole response JSON, and the whole event sequence of a stream (deltas of one kind
joined, as engine steps may coalesce differently), normalising only ids and timestamps. Bad
requests: the same status and error body.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.e2e.test_responses import assert_same, assert_same_stream
from tests.support.shared_stacks import ToolServers

pytestmark = pytest.mark.engine

TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "integer"}},
    "required": ["a"],
}

# Request fields over ``{"input": "Hello there", "max_output_tokens": 6, "temperature": 0}``.
RESPONSES: dict[str, dict[str, Any]] = {
    "instructions": {"instructions": "Be brief."},
    "tools-auto": {"tools": [TOOL], "tool_choice": "auto"},
    "tools-none": {"tools": [TOOL], "tool_choice": "none"},
    "tools-required": {"tools": [TOOL], "tool_choice": "required", "max_output_tokens": 60},
    "tools-named": {
        "tools": [TOOL],
        "tool_choice": {"type": "function", "name": "get_weather"},
        "max_output_tokens": 60,
    },
    "parallel-tool-calls-off": {"tools": [TOOL], "parallel_tool_calls": False},
    "max-tool-calls": {"tools": [TOOL], "max_tool_calls": 2},
    "reasoning-effort": {"reasoning": {"effort": "low"}},
    "reasoning-summary": {"reasoning": {"effort": "high", "summary": "auto"}},
    "sampling": {"temperature": 0.7, "top_p": 0.5, "seed": 3, "top_k": 5, "min_p": 0.1},
    "penalties": {"presence_penalty": 0.5, "frequency_penalty": 0.5, "repetition_penalty": 1.3},
    "stop": {"stop": ["the", "\n"]},
    "json-schema": {
        "text": {"format": {"type": "json_schema", "name": "x", "schema": SCHEMA, "strict": True}},
        "max_output_tokens": 20,
    },
    "json-object": {"text": {"format": {"type": "json_object"}}, "max_output_tokens": 10},
    "text-verbosity": {"text": {"format": {"type": "text"}, "verbosity": "low"}},
    "include-logprobs": {"include": ["message.output_text.logprobs"], "top_logprobs": 3},
    "include-encrypted-reasoning": {"include": ["reasoning.encrypted_content"]},
    "metadata": {"metadata": {"a": "b"}},
    "store-off": {"store": False},
    "truncation-auto": {"truncation": "auto"},
    "truncation-disabled": {"truncation": "disabled"},
    "user-and-cache-key": {"user": "u1", "prompt_cache_key": "k", "service_tier": "auto"},
    "skip-special-tokens-off": {"skip_special_tokens": False, "ignore_eos": True},
}
RESPONSES_REFUSED: dict[str, dict[str, Any]] = {
    "unknown-previous-response": {"previous_response_id": "resp_nope"},
    "background-without-store": {"background": True, "store": False},
    "prompt-template": {"prompt": {"id": "p"}},
    "wrong-temperature-type": {"temperature": "hot"},
    "wrong-max-output-tokens-type": {"max_output_tokens": "x"},
    "unknown-include": {"include": ["nope"]},
}
# Refused by vLLM's engine client: streamed, vLLM 0.32's server drops the connection after the
# head (no status or event to compare), so these are compared whole only.
RESPONSES_REFUSED_BY_THE_ENGINE: dict[str, dict[str, Any]] = {
    "too-many-top-logprobs": {"top_logprobs": 30, "include": ["message.output_text.logprobs"]},
    "logit-bias-out-of-vocabulary": {"logit_bias": {"999999": 1}},
}


@pytest.fixture(scope="module")
def model(tool_servers: ToolServers) -> str:
    """The served model name."""
    return tool_servers.served_model()


@pytest.fixture(scope="module")
def openai_sdk(tool_servers: ToolServers) -> Iterator[dict[str, openai.OpenAI]]:
    """``openai`` SDK clients of our server and vLLM's."""
    with tool_servers.openai_clients() as clients:
        yield clients


@pytest.fixture(scope="module")
def anthropic_sdk(tool_servers: ToolServers) -> Iterator[dict[str, anthropic.Anthropic]]:
    """``anthropic`` SDK clients of our server and vLLM's."""
    with tool_servers.anthropic_clients() as clients:
        yield clients


def _responses_body(model: str, fields: dict[str, Any]) -> dict[str, Any]:
    body = {"model": model, "input": "Hello there", "max_output_tokens": 6, "temperature": 0}
    body.update(fields)
    return {k: v for k, v in body.items() if v is not None}


def _create(client: openai.OpenAI, body: dict[str, Any], stream: bool) -> Any:
    # Every field as the request body (the SDK's own arguments included), so that fields this
    # SDK release does not know travel the same way.
    if stream:
        with client.responses.create(
            model=body["model"], input=body["input"], stream=True, extra_body=body
        ) as events:
            return [event.model_dump(mode="json") for event in events]
    raw = client.responses.with_raw_response.create(
        model=body["model"], input=body["input"], extra_body=body
    )
    raw.parse()
    return raw.http_response.json()


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("case", list(RESPONSES))
def test_responses_field(
    openai_sdk: dict[str, openai.OpenAI], model: str, case: str, stream: bool
) -> None:
    body = _responses_body(model, RESPONSES[case])
    ours = _create(openai_sdk["ours"], body, stream)
    ref = _create(openai_sdk["vllm"], body, stream)
    if stream:
        assert_same_stream(ours, ref)
    else:
        assert_same(ours, ref)


def _refusal(url: str, body: dict[str, Any], stream: bool) -> tuple[int, Any]:
    response = httpx.post(url + "/v1/responses", json={**body, "stream": stream}, timeout=300)
    return response.status_code, response.json()


@pytest.mark.parametrize(
    ("case", "stream"),
    [(case, stream) for case in RESPONSES_REFUSED for stream in (False, True)]
    + [(case, False) for case in RESPONSES_REFUSED_BY_THE_ENGINE],
)
def test_responses_refusal(tool_servers: ToolServers, model: str, case: str, stream: bool) -> None:
    fields = RESPONSES_REFUSED.get(case) or RESPONSES_REFUSED_BY_THE_ENGINE[case]
    body = _responses_body(model, fields)
    ours = _refusal(tool_servers.ours, body, stream)
    ref = _refusal(tool_servers.vllm, body, stream)
    assert ref[0] >= 400
    assert ours == ref


BAD_TOOLS: dict[str, dict[str, Any]] = {
    "parameters-not-an-object": {
        "tools": [{"type": "function", "name": "f", "parameters": "notadict"}]
    },
    "function-without-name": {"tools": [{"type": "function"}]},
    "unknown-tool-choice": {"tool_choice": "maybe"},
}


@pytest.mark.parametrize("case", list(BAD_TOOLS))
def test_responses_bad_tool_or_choice(tool_servers: ToolServers, model: str, case: str) -> None:
    # vLLM reports a bad tool (or tool_choice) against every member of the SDK's union (a dozen
    # or two errors): the status, error type, param and the first error agree.
    body = _responses_body(model, BAD_TOOLS[case])
    got = {}
    for name, url in tool_servers.items():
        status, answer = _refusal(url, body, False)
        error = answer["error"]
        first = error["message"].split("\n")[1]
        got[name] = (status, error["type"], error["param"], first)
    assert got["ours"] == got["vllm"]


WEATHER = {
    "name": "get_weather",
    "description": "Weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 10}},
        "required": ["city"],
        "additionalProperties": False,
    },
}
# Request fields over ``{"messages": [user: "Hello there"], "max_tokens": 8, "temperature": 0}``.
MESSAGES: dict[str, dict[str, Any]] = {
    "system-string": {"system": "Be terse."},
    "system-blocks": {"system": [{"type": "text", "text": "A. "}, {"type": "text", "text": "B."}]},
    "stop-sequences": {"stop_sequences": ["zzz", "the"]},
    "top-k-top-p": {"top_k": 3, "top_p": 0.5, "temperature": 0.5},
    "metadata": {"metadata": {"user_id": "x"}},
    "tool-choice-auto": {"tools": [WEATHER], "tool_choice": {"type": "auto"}},
    "tool-choice-auto-serial": {
        "tools": [WEATHER],
        "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
    },
    "tool-choice-none": {"tools": [WEATHER], "tool_choice": {"type": "none"}},
    "tool-choice-any": {"tools": [WEATHER], "tool_choice": {"type": "any"}, "max_tokens": 60},
    "tool-choice-tool": {
        "tools": [WEATHER],
        "tool_choice": {"type": "tool", "name": "get_weather"},
        "max_tokens": 60,
    },
    "thinking-disabled": {"thinking": {"type": "disabled"}},
    "thinking-adaptive": {"thinking": {"type": "adaptive"}},
    "service-tier": {"service_tier": "auto"},
    "output-format": {
        "output_config": {"format": {"type": "json_schema", "schema": SCHEMA}},
        "max_tokens": 20,
    },
    "effort": {"output_config": {"effort": "low"}},
    "text-blocks": {
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "there"}],
            }
        ]
    },
    "system-role-message": {"messages": [{"role": "system", "content": "Hi"}]},
    "assistant-prefill": {
        "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    },
}
MESSAGES_REFUSED: dict[str, dict[str, Any]] = {
    "wrong-temperature-type": {"temperature": "hot"},
    "no-model": {"model": None},
    "no-messages": {"messages": None},
    "tool-schema-not-an-object": {"tools": [{"name": "x", "input_schema": "nope"}]},
    "tool-without-name": {"tools": [{"input_schema": {"type": "object"}}]},
    "unknown-tool-choice": {"tool_choice": {"type": "maybe"}},
    "thinking-budget-too-small": {"thinking": {"type": "enabled", "budget_tokens": 10}},
    "thinking-budget-over-max-tokens": {"thinking": {"type": "enabled", "budget_tokens": 1024}},
}


def _messages_body(model: str, fields: dict[str, Any]) -> dict[str, Any]:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Hello there"}],
        "max_tokens": 8,
        "temperature": 0,
    }
    body.update(fields)
    return {k: v for k, v in body.items() if v is not None}


def _message(client: anthropic.Anthropic, body: dict[str, Any], stream: bool) -> Any:
    # Every field as the request body, so that fields this SDK release does not know travel
    # the same way as those it does.
    args = {"model": body["model"], "messages": body["messages"], "max_tokens": body["max_tokens"]}
    if stream:
        with client.messages.with_streaming_response.create(
            **args, stream=True, extra_body=body
        ) as response:
            return _sse_events(response.iter_lines())
    raw = client.messages.with_raw_response.create(**args, extra_body=body)
    raw.parse()
    return raw.http_response.json()


def _sse_events(lines: Iterator[str]) -> list[Any]:
    """The stream's ``event:`` names and ``data:`` objects in order, a content block's deltas
    of one kind joined."""
    import json

    out: list[Any] = []
    for line in lines:
        if line.startswith("event: "):
            out.append(("event", line[7:]))
        elif line.startswith("data: "):
            data = json.loads(line[6:])
            last = out[-2] if len(out) >= 2 else None
            if (
                data.get("type") == "content_block_delta"
                and isinstance(last, dict)
                and last.get("type") == "content_block_delta"
                and last["index"] == data["index"]
                and last["delta"]["type"] == data["delta"]["type"]
            ):
                out.pop()  # this delta's event line: joined into the previous one
                field = next(k for k in data["delta"] if k != "type")
                last["delta"][field] += data["delta"][field]
                continue
            out.append(data)
    return out


def _masked(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: "<id>" if k in ("id", "signature") and isinstance(v, str) else _masked(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_masked(v) for v in value]
    return value


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("case", list(MESSAGES))
def test_messages_field(
    anthropic_sdk: dict[str, anthropic.Anthropic], model: str, case: str, stream: bool
) -> None:
    body = _messages_body(model, MESSAGES[case])
    ours = _message(anthropic_sdk["ours"], body, stream)
    ref = _message(anthropic_sdk["vllm"], body, stream)
    assert _masked(ours) == _masked(ref)


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("case", list(MESSAGES_REFUSED))
def test_messages_refusal(
    tool_servers: ToolServers, model: str, case: str, stream: bool, path: str
) -> None:
    body = {**_messages_body(model, MESSAGES_REFUSED[case]), "stream": stream}
    headers = {"anthropic-version": "2023-06-01"}
    answers = [
        httpx.post(url + path, json=body, headers=headers, timeout=300)
        for url in (tool_servers.ours, tool_servers.vllm)
    ]
    ours, ref = ((r.status_code, r.json()) for r in answers)
    if path == "/v1/messages":
        assert ref[0] >= 400
    assert ours == ref
