"""gpt-oss end to end on the real CPU engine: our ``vllm-frontend serve`` and vLLM's own
``vllm serve``, both with ``--reasoning-parser openai_gptoss --tool-call-parser openai
--enable-auto-tool-choice``, each in front of an identical fresh engine running the tiny random
gpt-oss model (greedy), give the same responses.

vLLM's CPU engine runs gpt-oss (bf16 experts, attention sinks). The random network writes no
Harmony headers by itself, so its output reaches the client through Harmony's recovery (the
text of an unfinished message as content), and the responses agree only if the prompts (the
Harmony renderings) were the same token for token: the prompt ids are compared too. Both
servers pin the Harmony date (``VLLM_SYSTEM_START_DATE``); vLLM runs with
``VLLM_ENFORCE_STRICT_TOOL_CALLING=0`` (forced tool calls constrained with JSON; the engine
requests of the structural-tag mode are compared in tests/chat/test_harmony_serving.py).

The Responses API (``client.responses``) is compared on the same servers, both with the
response store on (``VLLM_ENABLE_RESPONSES_API_STORE=1``), ids and timestamps aside.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.e2e import test_responses as responses_e2e
from tests.e2e.test_differential import assert_same, assert_same_stream, both
from tests.support.engines import (
    engine_env,
    free_port,
    log_dir,
    start_headless_engines,
    start_vllm_server,
    stop_all,
    wait_frontend_healthy,
)
from tests.support.tiny_gptoss import tiny_gptoss_dir

pytestmark = pytest.mark.engine

JSON_TOOLS = {"VLLM_ENFORCE_STRICT_TOOL_CALLING": "0"}
"""Both frontends force tool calls with JSON, not structural tags."""

FLAGS = ("--reasoning-parser", "openai_gptoss", "--tool-call-parser", "openai",
         "--enable-auto-tool-choice")  # fmt: skip
ENGINE_ARGS = ("--max-model-len", "1024", "--gpu-memory-utilization", "0.1")
DATE = {"VLLM_SYSTEM_START_DATE": "2025-06-30", "VLLM_ENABLE_RESPONSES_API_STORE": "1"}
# Two gpt-oss engines starting on a busy shared 2-core machine took more than 10 minutes.
READY_TIMEOUT = 1800
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 12}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
MESSAGES = [
    {"role": "system", "content": "Answer briefly."},
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": "Let me check.", "reasoning": "Use the tool.",
     "tool_calls": [{"id": "c1", "type": "function",
                     "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
]  # fmt: skip


@pytest.fixture(scope="module")
def sdk() -> Iterator[dict[str, openai.OpenAI]]:
    """SDK clients for our CLI server and vLLM's server, each with its own engine."""
    model = tiny_gptoss_dir()
    handshake = free_port()
    engines = start_headless_engines(handshake, 1, model=model, extra_args=ENGINE_ARGS, nice=10)
    reference = start_vllm_server(
        model=model,
        extra_args=(*ENGINE_ARGS, *FLAGS),
        env=engine_env({**DATE, **JSON_TOOLS}),
    )
    port = free_port()
    exe = pathlib.Path(sys.executable).with_name("vllm-frontend")
    argv = [str(exe), "serve", str(model), "--host", "127.0.0.1", "--port", str(port),
            "--data-parallel-size-local", "0", "--data-parallel-address", "127.0.0.1",
            "--data-parallel-rpc-port", str(handshake), "--engine-ready-timeout-secs",
            str(READY_TIMEOUT), *FLAGS]  # fmt: skip
    log = (log_dir() / f"ours-gptoss-{port}.log").open("wb")
    ours = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env=engine_env({**DATE, **JSON_TOOLS}))  # fmt: skip
    clients: dict[str, openai.OpenAI] = {}
    try:
        wait_frontend_healthy(f"http://127.0.0.1:{port}", ours, engines, READY_TIMEOUT)
        reference.wait_ready(READY_TIMEOUT)
        for name, url in (("ours", f"http://127.0.0.1:{port}"), ("vllm", reference.base_url)):
            clients[name] = openai.OpenAI(
                base_url=url + "/v1", api_key="unused", max_retries=0, timeout=300
            )
        yield clients
    finally:
        for client in clients.values():
            client.close()
        stop_all([ours, reference, engines])
        log.close()


def _create(client: openai.OpenAI, **kw: Any) -> Any:
    args: dict[str, Any] = {"messages": MESSAGES, "tools": [WEATHER], "temperature": 0,
                            "max_tokens": 24}  # fmt: skip
    args.update(kw)
    args["extra_body"] = {"return_token_ids": True, **kw.get("extra_body", {})}
    return client.chat.completions.create(model=str(client.models.list().data[0].id), **args)


@pytest.mark.parametrize("effort", [None, "low", "high"])
def test_chat_matches_vllm(sdk: dict[str, openai.OpenAI], effort: str | None) -> None:
    kw: dict[str, Any] = {} if effort is None else {"reasoning_effort": effort}
    ours, ref = both(sdk, lambda c: _create(c, **kw))
    assert ours["prompt_token_ids"] == ref["prompt_token_ids"]
    assert ours["prompt_token_ids"][-2:] == [200006, 173781]  # <|start|>assistant
    assert_same(ours, ref)
    assert ref["choices"][0]["message"]["content"]  # the output, recovered as content


def test_streamed_chat_matches_vllm(sdk: dict[str, openai.OpenAI]) -> None:
    ours, ref = both(sdk, lambda c: _create(c, stream=True, stream_options={"include_usage": True}))
    assert_same_stream(ours, ref)


@pytest.mark.parametrize(
    "fields",
    [
        {"tool_choice": "required"},
        {"tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
        {"tool_choice": "none", "n": 2, "seed": 1, "temperature": 1.0},
        {"extra_body": {"include_reasoning": False}},
    ],
)
def test_request_options_match_vllm(sdk: dict[str, openai.OpenAI], fields: dict[str, Any]) -> None:
    ours, ref = both(sdk, lambda c: _create(c, **dict(fields)))
    assert_same(ours, ref)


RESPONSES_TOOL = {"type": "function", **WEATHER["function"]}
RESPONSES_SCHEMA = {"type": "object", "properties": {"a": {"type": "string", "maxLength": 6}},
                    "required": ["a"], "additionalProperties": False}  # fmt: skip
RESPONSES_CASES: list[dict[str, Any]] = [
    {"input": "What is the weather in Paris?", "instructions": "Answer briefly.",
     "tools": [RESPONSES_TOOL], "reasoning": {"effort": "low"}},
    {"input": [{"role": "user", "content": "Weather?"},
               {"type": "function_call", "call_id": "c1", "name": "get_weather",
                "arguments": '{"city": "Paris"}'},
               {"type": "function_call_output", "call_id": "c1", "output": "sunny"}],
     "tools": [RESPONSES_TOOL]},
    {"input": "Say a word.", "text": {"format": {"type": "json_schema", "name": "w",
                                                 "schema": RESPONSES_SCHEMA}}},
    {"input": "Weather in Oslo?", "tools": [RESPONSES_TOOL], "tool_choice": "required"},
]  # fmt: skip


def _responses_args(sdk: dict[str, openai.OpenAI], fields: dict[str, Any]) -> dict[str, Any]:
    return {"model": str(sdk["vllm"].models.list().data[0].id), "temperature": 0,
            "max_output_tokens": 24, **fields}  # fmt: skip


@pytest.mark.parametrize("fields", RESPONSES_CASES)
def test_responses_match_vllm(sdk: dict[str, openai.OpenAI], fields: dict[str, Any]) -> None:
    args = _responses_args(sdk, fields)
    ours = responses_e2e.create(sdk["ours"], **args)
    ref = responses_e2e.create(sdk["vllm"], **args)
    responses_e2e.assert_same(ours, ref)
    assert ref["output"] and ref["usage"]["input_tokens"] > 0


@pytest.mark.parametrize("fields", [RESPONSES_CASES[0], RESPONSES_CASES[2]])
def test_streamed_responses_match_vllm(
    sdk: dict[str, openai.OpenAI], fields: dict[str, Any]
) -> None:
    args = _responses_args(sdk, fields)
    model = args.pop("model")
    ours = responses_e2e.stream_events(sdk["ours"], model, **args)
    ref = responses_e2e.stream_events(sdk["vllm"], model, **args)
    responses_e2e.assert_same_stream(ours, ref)
    assert ref[-1]["type"] == "response.completed"


def test_previous_response_id_matches_vllm(sdk: dict[str, openai.OpenAI]) -> None:
    args = _responses_args(sdk, RESPONSES_CASES[0])
    bodies = {}
    for name in ("ours", "vllm"):
        first = responses_e2e.create(sdk[name], **args)
        second = responses_e2e.create(
            sdk[name], **{**args, "input": "And in Rome?", "previous_response_id": first["id"]}
        )
        bodies[name] = [first, second]
    responses_e2e.assert_same(bodies["ours"], bodies["vllm"])
    # the second prompt holds the first turn, its output included
    assert bodies["vllm"][1]["usage"]["input_tokens"] > bodies["vllm"][0]["usage"]["input_tokens"]
