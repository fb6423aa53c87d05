"""Forced tool calls end to end: ``tool_choice: "required"`` and a named function through the
OpenAI SDK, to our ``vllm-frontend serve`` and to vLLM's own ``vllm serve``, both with
``--enable-auto-tool-choice --tool-call-parser llama3_json``, each in front of an identical fresh
CPU engine running the tiny model (greedy).

The engine really constrains the gibberish model to the tools' JSON schema, so the answers must
parse into tool calls with JSON arguments, and both frontends must give the same calls. Both run
with ``VLLM_ENFORCE_STRICT_TOOL_CALLING=0``: with it on (its default) vLLM 0.32 and this frontend
constrain llama3_json and hermes requests with structural tags instead of the JSON schema
(tests/chat/test_tool_structural_tags.py compares those engine requests).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.e2e.test_differential import assert_same
from tests.support.shared_stacks import ToolServers

pytestmark = pytest.mark.engine

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
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {
            "type": "object",
            "properties": {"utc": {"type": "boolean"}},
            "required": ["utc"],
            "additionalProperties": False,
        },
    },
}
MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def sdk(tool_servers: ToolServers) -> Iterator[dict[str, openai.OpenAI]]:
    """SDK clients for our CLI server and vLLM's server (the shared tool-parser stack)."""
    with tool_servers.openai_clients() as clients:
        yield clients


def _create(client: openai.OpenAI, **kw: Any) -> Any:
    return client.chat.completions.create(
        model=str(client.models.list().data[0].id),
        messages=MESSAGES,  # type: ignore[arg-type]
        tools=[WEATHER, TIME],  # type: ignore[list-item]
        temperature=0,
        max_tokens=kw.pop("max_tokens", 120),
        parallel_tool_calls=False,
        **kw,
    )


def _without_call_ids(response: dict[str, Any]) -> dict[str, Any]:
    for choice in response["choices"]:
        for call in choice["message"].get("tool_calls") or []:
            assert call["id"].startswith("chatcmpl-tool-")
            call["id"] = "<random>"
    return response


TOOL_CHOICES = [
    pytest.param("required", id="required"),
    pytest.param({"type": "function", "function": {"name": "get_weather"}}, id="named"),
]


@pytest.mark.parametrize("tool_choice", TOOL_CHOICES)
def test_forced_tool_choice_gives_vllms_tool_calls(
    sdk: dict[str, openai.OpenAI], tool_choice: Any
) -> None:
    answers = {
        name: _without_call_ids(_create(c, tool_choice=tool_choice).model_dump(exclude_unset=True))
        for name, c in sdk.items()
    }
    assert_same(answers["ours"], answers["vllm"])
    choice = answers["ours"]["choices"][0]
    calls = choice["message"]["tool_calls"]
    assert calls, choice
    for call in calls:
        assert call["function"]["name"] in ("get_weather", "get_time")
        assert isinstance(json.loads(call["function"]["arguments"]), dict)
    if tool_choice == "required":
        assert choice["finish_reason"] == "tool_calls"
    else:
        assert [c["function"]["name"] for c in calls] == ["get_weather"]
        assert choice["finish_reason"] == "stop"


def _streamed(client: openai.OpenAI, tool_choice: Any) -> dict[str, Any]:
    """What a stream says, however its deltas were coalesced into chunks."""
    calls: dict[int, dict[str, Any]] = {}
    content = ""
    finish = None
    piece_keys = set()
    delta_keys = set()
    for chunk in _create(client, tool_choice=tool_choice, stream=True):
        for choice in chunk.choices:
            delta = choice.delta.model_dump(exclude_unset=True)
            delta_keys.add(tuple(sorted(delta)))
            content += delta.get("content") or ""
            for piece in delta.get("tool_calls") or []:
                piece_keys.add((tuple(sorted(piece)), tuple(sorted(piece.get("function") or {}))))
                call = calls.setdefault(piece["index"], {"name": None, "arguments": ""})
                if "id" in piece:
                    assert call["name"] is None  # announced once
                    assert piece["id"].startswith("chatcmpl-tool-")
                    call["name"] = piece["function"]["name"]
                call["arguments"] += (piece.get("function") or {}).get("arguments") or ""
            if choice.finish_reason is not None:
                finish = choice.finish_reason
    return {
        "calls": calls,
        "content": content,
        "finish": finish,
        "piece_keys": sorted(piece_keys),
        "delta_keys": sorted(delta_keys),
    }


@pytest.mark.parametrize("tool_choice", TOOL_CHOICES)
def test_forced_tool_choice_streams_vllms_tool_calls(
    sdk: dict[str, openai.OpenAI], tool_choice: Any
) -> None:
    ours, ref = (_streamed(sdk[name], tool_choice) for name in ("ours", "vllm"))
    assert ours == ref
    assert ours["calls"]
    for call in ours["calls"].values():
        assert call["name"] in ("get_weather", "get_time")
        assert isinstance(json.loads(call["arguments"]), dict)
    assert ours["finish"] == ("tool_calls" if tool_choice == "required" else "stop")
