"""``POST /v1/responses/render`` for gpt-oss (Harmony) answers what vLLM 0.32's ``vllm launch
render`` answers on the tiny gpt-oss model with its Harmony parsers: the ``GenerateRequest``
(the Harmony prompt's token ids, the sampling parameters with the parser's constraint, the
reasoning parser's kwargs, every field in order) and the errors.

The reference is vLLM's own render app built in this process as in
``test_render_matches_vllm.py``; ours is ``build_render_app`` behind the real HTTP server.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.tiny_gptoss import tiny_gptoss_dir

from .conftest import RENDER_MODEL_NAME, ours_render_app, vllm_render_app

pytestmark = pytest.mark.oracle

HEADERS = {"X-Request-Id": "fixed-id"}
PARSERS = ("--reasoning-parser", "openai_gptoss", "--tool-call-parser", "openai")
TOOL = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}


@pytest.fixture(scope="module")
def vllm_client() -> Iterator[Any]:
    yield from vllm_render_app(tiny_gptoss_dir(), *PARSERS, "--enable-auto-tool-choice")


@pytest.fixture(scope="module")
def ours() -> Iterator[httpx.Client]:
    yield from ours_render_app(
        tiny_gptoss_dir(),
        reasoning_parser="openai_gptoss",
        tool_call_parser="openai",
        enable_auto_tool_choice=True,
    )


CASES: dict[str, dict[str, Any]] = {
    "text": {"input": "Hi", "request_id": "resp-1"},
    "instructions and effort": {
        "input": "Hi",
        "instructions": "Be terse.",
        "reasoning": {"effort": "high"},
        "max_output_tokens": 7,
        "temperature": 0.5,
    },
    "image part (Harmony keeps text only)": {
        "input": [
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "Look"},
                    {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="},
                ],
            }
        ]
    },
    "messages": {
        "input": [
            {"role": "system", "content": "You are a cat."},
            {"role": "user", "content": "Hello"},
            {"type": "message", "role": "assistant", "content": "Meow."},
            {"role": "user", "content": [{"type": "input_text", "text": "Again"}]},
        ]
    },
    "function tools": {"input": "Weather in Paris?", "tools": [TOOL], "tool_choice": "auto"},
    "function call output": {
        "input": [
            {"role": "user", "content": "Weather?"},
            {
                "type": "function_call",
                "call_id": "call_1",
                "name": "get_weather",
                "arguments": '{"city": "Paris"}',
            },
            {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        ],
        "tools": [TOOL],
    },
    "json format": {
        "input": "hi",
        "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}},
    },
    "stream, salt, priority": {"input": "hi", "stream": True, "cache_salt": "s", "priority": 0},
}
BAD: dict[str, dict[str, Any]] = {
    "previous response": {"input": "hi", "previous_response_id": "resp_1"},
    "unknown model": {"input": "hi", "model": "nope"},
    "call output without its call": {
        "input": [{"type": "function_call_output", "call_id": "nope", "output": "x"}]
    },
}


@pytest.mark.parametrize("case", [*CASES, *BAD])
def test_harmony_responses_render_is_vllms(ours: httpx.Client, vllm_client: Any, case: str) -> None:
    body = {"model": RENDER_MODEL_NAME, **CASES.get(case, BAD.get(case, {}))}
    mine = ours.post("/v1/responses/render", json=body, headers=HEADERS)
    theirs = vllm_client.post("/v1/responses/render", json=body, headers=HEADERS)
    a, b = mine.json(), theirs.json()
    if mine.status_code == 200 and "request_id" not in body:
        # "resp_" and random hex digits on both sides
        assert a["request_id"][:5] == b["request_id"][:5] == "resp_"
        a["request_id"] = b["request_id"] = None
    assert (mine.status_code, a) == (theirs.status_code, b)
    assert list(a) == list(b)
    assert (theirs.status_code == 200) == (case in CASES), b


def test_a_chat_style_image_part_is_refused_as_vllm_refuses_it(
    ours: httpx.Client, vllm_client: Any
) -> None:
    """vLLM's request model refuses it (pydantic's errors for every branch of the item union;
    ours names the one rule broken): the same status, type and ``param``."""
    part = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    body = {"model": RENDER_MODEL_NAME, "input": [{"role": "user", "content": [part]}]}
    mine = ours.post("/v1/responses/render", json=body, headers=HEADERS)
    theirs = vllm_client.post("/v1/responses/render", json=body, headers=HEADERS)
    assert mine.status_code == theirs.status_code == 400
    a, b = mine.json()["error"], theirs.json()["error"]
    assert (a["type"], a["param"], a["code"]) == (b["type"], b["param"], b["code"])
