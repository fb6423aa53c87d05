"""``--tool-call-parser hf --reasoning-parser hf`` end to end on the real CPU engine: our
``vllm-frontend serve`` and vLLM's own ``vllm serve``, both with ``--enable-auto-tool-choice``,
each in front of an identical fresh engine running the tiny model dressed with Qwen3's
``response_template`` and Qwen3.5's chat template (``tests/support/tiny_hf_template.py``).

The random network writes no markers by itself, so a ``structured_outputs`` regex forces an
output in the template's syntax: reasoning, content, then two XML tool calls. Both frontends
must read it alike (greedy): the whole response field for field (ids and timestamps aside), and
the streamed deltas assembled per choice (reasoning, content, each call's name, arguments and id
shape, the finish reason, the usage).
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from tests.e2e.test_differential import assert_same, both
from tests.server.test_messages_engine import compare
from tests.support.engines import (
    engine_env,
    free_port,
    log_dir,
    start_headless_engines,
    start_vllm_server,
    stop_all,
    wait_frontend_healthy,
)
from tests.support.sdk_clients import anthropic_clients, openai_clients
from tests.support.tiny_hf_template import hf_template_model

pytestmark = pytest.mark.engine

REASONING = ("--reasoning-parser", "hf")
FLAGS = ("--tool-call-parser", "hf", *REASONING, "--enable-auto-tool-choice")
# vLLM's engine applies a grammar only once its reasoning parser (the hf one, named by
# --reasoning-parser) has seen the reasoning end, unless told to constrain the reasoning too: the
# random network never closes its reasoning by itself, so the regex must cover it.
SO_CONFIG = ("--structured-outputs-config", '{"enable_in_reasoning": true}')
# 2048: Anthropic's smallest thinking budget is 1024 tokens, and max_tokens must exceed it.
ENGINE_ARGS = ("--max-model-len", "2048", "--gpu-memory-utilization", "0.1", *SO_CONFIG)
# A busy 2-core machine can take more than the default 600 s to start an engine.
READY_TIMEOUT = 1500
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {"type": "object", "properties": {"utc": {"type": "boolean"}}},
    },
}
MESSAGES = [
    {"role": "system", "content": "Answer briefly."},
    {"role": "user", "content": "Weather and time in Paris?"},
]
_WORDS = "[a-z]{2,8}( [a-z]{2,8}){1,3}"
_CALLS = (
    r"<tool_call>\n<function=get_weather>\n<parameter=city>\n[A-Z][a-z]{1,8}\n</parameter>\n"
    r"</function>\n</tool_call>\n"
    r"<tool_call>\n<function=get_time>\n<parameter=utc>\n(true|false)\n</parameter>\n"
    r"</function>\n</tool_call>"
)
# Reasoning, content, two calls; the chat template opens the reasoning region itself when
# thinking is on (the prompt ends with "<think>\n"), and closes an empty one when it is off.
OUTPUTS = {
    "thinking": ({"enable_thinking": True}, rf"{_WORDS}\n</think>\n\n{_WORDS}\.\n\n{_CALLS}"),
    "not-thinking": ({}, rf"<think>\n{_WORDS}\n</think>\n\n{_WORDS}\.\n\n{_CALLS}"),
}


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Base URLs of our CLI server and vLLM's server, each with its own engine."""
    model = hf_template_model(tmp_path_factory.mktemp("hf-model") / "tiny-qwen-template")
    handshake = free_port()
    engines = start_headless_engines(
        handshake, 1, model=model, extra_args=(*ENGINE_ARGS, *REASONING), nice=10
    )
    reference = start_vllm_server(
        model=model, extra_args=(*ENGINE_ARGS, *FLAGS), env=engine_env({})
    )
    port = free_port()
    exe = pathlib.Path(sys.executable).with_name("vllm-frontend")
    argv = [str(exe), "serve", str(model), "--host", "127.0.0.1", "--port", str(port),
            "--data-parallel-size-local", "0", "--data-parallel-address", "127.0.0.1",
            "--data-parallel-rpc-port", str(handshake), "--engine-ready-timeout-secs",
            str(READY_TIMEOUT), *FLAGS, *SO_CONFIG]  # fmt: skip
    log = (log_dir() / f"ours-hf-{port}.log").open("wb")
    ours = subprocess.Popen(
        argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=engine_env({})
    )
    try:
        wait_frontend_healthy(f"http://127.0.0.1:{port}", ours, engines, READY_TIMEOUT)
        reference.wait_ready(READY_TIMEOUT)
        yield {"ours": f"http://127.0.0.1:{port}", "vllm": reference.base_url}
    finally:
        stop_all([ours, reference, engines])
        log.close()


@pytest.fixture(scope="module")
def sdk(servers: dict[str, str]) -> Iterator[dict[str, openai.OpenAI]]:
    """``openai`` SDK clients of both servers."""
    with openai_clients(servers.items()) as clients:
        yield clients


@pytest.fixture(scope="module")
def anthropic_sdk(servers: dict[str, str]) -> Iterator[dict[str, anthropic.Anthropic]]:
    """``anthropic`` SDK clients of both servers."""
    with anthropic_clients(servers.items()) as clients:
        yield clients


def _create(client: openai.OpenAI, case: str, **kw: Any) -> Any:
    kwargs, regex = OUTPUTS[case]
    return client.chat.completions.create(
        model=str(client.models.list().data[0].id),
        messages=MESSAGES,  # type: ignore[arg-type]
        tools=[WEATHER, TIME],  # type: ignore[list-item]
        temperature=0,
        max_tokens=300,
        extra_body={
            "structured_outputs": {"regex": regex},
            "chat_template_kwargs": kwargs,
            "return_token_ids": True,
        },
        **kw,
    )


def _check_calls(calls: list[tuple[str, str]]) -> None:
    """The forced calls really were read as calls (so the comparison is not vacuous)."""
    assert [name for name, _ in calls] == ["get_weather", "get_time"]
    assert set(json.loads(calls[0][1])) == {"city"}
    assert isinstance(json.loads(calls[1][1])["utc"], bool)


@pytest.mark.parametrize("case", OUTPUTS)
def test_forced_reasoning_content_and_calls_match_vllm(
    sdk: dict[str, openai.OpenAI], case: str
) -> None:
    ours, ref = both(sdk, lambda c: _create(c, case))
    assert ours["prompt_token_ids"] == ref["prompt_token_ids"]
    assert_same(ours, ref)
    message = ref["choices"][0]["message"]
    assert message["reasoning"] and message["content"]
    calls = message["tool_calls"]
    for call in calls:
        assert call["id"].startswith("chatcmpl-tool-")
    _check_calls([(c["function"]["name"], c["function"]["arguments"]) for c in calls])
    assert ref["choices"][0]["finish_reason"] == "tool_calls"


def _assembled(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """What a stream says, however its deltas were coalesced into chunks.

    Both frontends merge the deltas of engine outputs that queue up while a client reads slowly,
    so which keys share a chunk depends on timing: only which keys appear at all is compared.
    """
    calls: dict[int, dict[str, Any]] = {}
    text = {"reasoning": "", "content": ""}
    finish = []
    delta_keys = set()
    piece_keys = set()
    usage = None
    for chunk in chunks:
        if chunk.get("usage") is not None:
            usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            delta_keys.update(delta)
            for key in text:
                text[key] += delta.get(key) or ""
            for piece in delta.get("tool_calls") or []:
                piece_keys.update(piece)
                piece_keys.update("function." + key for key in piece.get("function") or {})
                call = calls.setdefault(piece["index"], {"name": None, "arguments": "", "ids": 0})
                if "id" in piece:
                    assert piece["id"].startswith("chatcmpl-tool-")
                    call["ids"] += 1
                    call["name"] = piece["function"]["name"]
                call["arguments"] += (piece.get("function") or {}).get("arguments") or ""
            if choice.get("finish_reason") is not None:
                finish.append((choice["finish_reason"], choice.get("stop_reason")))
    return {
        **text,
        "calls": calls,
        "finish": finish,
        "delta_keys": sorted(delta_keys),
        "piece_keys": sorted(piece_keys),
        "usage": usage,
    }


@pytest.mark.parametrize("case", OUTPUTS)
def test_forced_stream_matches_vllm(sdk: dict[str, openai.OpenAI], case: str) -> None:
    ours, ref = both(
        sdk, lambda c: _create(c, case, stream=True, stream_options={"include_usage": True})
    )
    mine, theirs = _assembled(ours), _assembled(ref)
    assert_same(mine, theirs)
    assert theirs["reasoning"] and theirs["content"]
    assert [c["ids"] for c in theirs["calls"].values()] == [1, 1]
    _check_calls([(c["name"], c["arguments"]) for c in theirs["calls"].values()])
    assert [reason for reason, _ in theirs["finish"]] == ["tool_calls"]


THINKING = {
    "enabled": {"type": "enabled", "budget_tokens": 1024},
    "disabled": {"type": "disabled"},
    "adaptive": {"type": "adaptive"},
}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("thinking", list(THINKING))
def test_messages_thinking_matches_vllm(
    sdk: dict[str, openai.OpenAI],
    anthropic_sdk: dict[str, anthropic.Anthropic],
    thinking: str,
    stream: bool,
) -> None:
    """Anthropic ``thinking`` on a reasoning model: a token budget for the engine when enabled,
    the template's thinking switched off when disabled (vLLM probes which reasoning effort does
    that), thinking blocks read by the reasoning parser; greedy, so both answer alike."""
    model = str(anthropic_sdk["vllm"].models.list().data[0].id)
    kwargs: dict[str, Any] = {"max_tokens": 16}
    if thinking == "enabled":
        # The smallest budget is 1024 tokens and max_tokens must exceed it: a stop sequence
        # from the greedy thinking's start (the same with any max_tokens) ends it early.
        start = sdk["vllm"].chat.completions.create(
            model=model,
            messages=MESSAGES,  # type: ignore[arg-type]
            max_tokens=12,
            temperature=0,
            extra_body={"chat_template_kwargs": {"enable_thinking": True}},
        )
        reasoning = start.choices[0].message.reasoning  # type: ignore[attr-defined]
        stop = reasoning[len(reasoning) // 2 :][:4]
        assert stop.strip()
        kwargs = {
            "max_tokens": 1032,
            "stop_sequences": [stop],
            # This template thinks only when asked.
            "extra_body": {"chat_template_kwargs": {"enable_thinking": True}},
        }
    answer = compare(
        anthropic_sdk,
        model,
        stream=stream,
        messages=MESSAGES[1:],
        system=MESSAGES[0]["content"],
        thinking=THINKING[thinking],
        **kwargs,
    )
    if not stream:
        kinds = [block["type"] for block in answer["content"]]
        assert kinds == (["thinking"] if thinking == "enabled" else ["text"])
        if thinking == "enabled":
            assert answer["stop_reason"] == "stop_sequence"
