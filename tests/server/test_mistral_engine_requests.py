"""Engine-request differential for ``--tokenizer-mode mistral``: vLLM 0.32's server and ours,
each in front of a recording mock engine (no real engine), serve a tiny Mistral-format model
(consolidated weights beside a tekken v7 ``tekken.json``: ``auto`` picks mistral on both
sides) with ``--tool-call-parser mistral``; the same completions and chat requests must give
the same engine requests (prompt ids, sampling parameters: stop ids, ``skip_special_tokens``,
a forced tool choice's JSON schema), and bad ones the same status and error body."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import msgspec
import pytest

from tests.multimodal.recorded import Side, recorded_sides
from tests.support.tiny_mistral import tiny_mistral_dir

pytestmark = pytest.mark.engine

pytest.importorskip("mistral_common")

ARGS = ["--enable-auto-tool-choice", "--tool-call-parser", "mistral"]


@pytest.fixture(scope="module")
def sides(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Side]]:
    tmp = tmp_path_factory.mktemp("mistral-records")
    yield from recorded_sides(tiny_mistral_dir("v7", consolidated=True), tmp, ARGS)


TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
USER = {"role": "user", "content": "Quel temps fait-il à Zürich ? 🌦"}
CALL = {
    "id": "chatcmpl-tool-0123456789abcdef",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Zürich"}'},
}

REQUESTS: dict[str, tuple[str, dict[str, Any]]] = {
    "completion_text": ("/v1/completions", {"prompt": "Hello [INST] world", "max_tokens": 3}),
    "completion_ids": ("/v1/completions", {"prompt": [1, 300, 400], "max_tokens": 2}),
    "completion_truncated": (
        "/v1/completions",
        {"prompt": "one two three four five six", "max_tokens": 2, "truncate_prompt_tokens": 3},
    ),
    "completion_no_bos": (
        "/v1/completions",
        {"prompt": "Hello", "max_tokens": 2, "add_special_tokens": False},
    ),
    "chat_system": (
        "/v1/chat/completions",
        {"messages": [{"role": "system", "content": "Be brief."}, USER], "max_tokens": 3},
    ),
    "chat_tools": ("/v1/chat/completions", {"messages": [USER], "tools": [TOOL]}),
    "chat_required": (
        "/v1/chat/completions",
        {"messages": [USER], "tools": [TOOL], "tool_choice": "required", "max_tokens": 4},
    ),
    "chat_named": (
        "/v1/chat/completions",
        {
            "messages": [USER],
            "tools": [TOOL],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        },
    ),
    "chat_round_trip": (
        "/v1/chat/completions",
        {
            "messages": [
                USER,
                {"role": "assistant", "content": None, "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": CALL["id"], "content": "sunny"},
            ],
            "tools": [TOOL],
            "max_tokens": 2,
        },
    ),
    "chat_continue": (
        "/v1/chat/completions",
        {
            "messages": [USER, {"role": "assistant", "content": "Il fait"}],
            "add_generation_prompt": False,
            "continue_final_message": True,
            "max_tokens": 2,
        },
    ),
    "chat_template_refused": (
        "/v1/chat/completions",
        {"messages": [USER], "chat_template": "{{ messages }}"},
    ),
    "chat_bad_order": (
        "/v1/chat/completions",
        {"messages": [{"role": "assistant", "content": "a"}, USER, USER, USER]},
    ),
    "chat_image_refused": (
        "/v1/chat/completions",
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}
                    ],
                }
            ]
        },
    ),
    "tokenize_chat": ("/tokenize", {"messages": [USER], "tools": [TOOL]}),
    "detokenize": ("/detokenize", {"tokens": [1, 3, 300, 4, 9, 20, 2]}),
}


def _post(side: Side, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    model = httpx.get(f"{side.url}/v1/models", timeout=30).json()["data"][0]["id"]
    reply = httpx.post(f"{side.url}{path}", json={"model": model, **body}, timeout=60)
    return reply.status_code, reply.json()


def _engine_view(request: Any) -> dict[str, Any]:
    params = msgspec.to_builtins(request.sampling_params)
    return {"prompt_token_ids": request.prompt_token_ids, "sampling_params": params}


@pytest.mark.parametrize("name", list(REQUESTS))
def test_same_engine_requests_and_errors(sides: dict[str, Side], name: str) -> None:
    path, body = REQUESTS[name]
    answers = {}
    sent = {}
    for key, side in sides.items():
        status, reply = _post(side, path, body)
        answers[key] = (status, reply if status != 200 or path != "/v1/completions" else None)
        sent[key] = [_engine_view(r) for r in side.new_requests()]
    if path in ("/tokenize", "/detokenize") or answers["vllm"][0] != 200:
        assert answers["ours"] == answers["vllm"]
    else:
        assert answers["ours"][0] == 200
    assert sent["ours"] == sent["vllm"]
