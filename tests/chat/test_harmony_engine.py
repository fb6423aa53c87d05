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
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.e2e.test_differential import assert_same, assert_same_stream, both
from tests.support.engines import (
    engine_env,
    free_port,
    log_dir,
    start_headless_engines,
    start_vllm_server,
    stop_group,
    wait_frontend_healthy,
)
from tests.support.tiny_gptoss import tiny_gptoss_dir

pytestmark = pytest.mark.engine

JSON_TOOLS = {"VLLM_ENFORCE_STRICT_TOOL_CALLING": "0"}
"""Both frontends force tool calls with JSON, not structural tags."""

FLAGS = ("--reasoning-parser", "openai_gptoss", "--tool-call-parser", "openai",
         "--enable-auto-tool-choice")  # fmt: skip
ENGINE_ARGS = ("--max-model-len", "1024", "--gpu-memory-utilization", "0.1")
DATE = {"VLLM_SYSTEM_START_DATE": "2025-06-30"}
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
        stop_group(ours)
        log.close()
        reference.stop()
        engines.stop()


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
