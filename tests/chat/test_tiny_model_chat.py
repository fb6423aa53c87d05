"""The tiny Llama 3 test model's chat prompts are the ones its HF tokenizer renders."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from vllm_frontend.chat import ChatRenderer

pytestmark = pytest.mark.oracle  # imports vLLM or transformers as the reference

TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}

CONVERSATIONS: dict[str, tuple[list[dict[str, Any]], Any]] = {
    "user": ([{"role": "user", "content": "Hello, wörld 👋"}], None),
    "system_multi_turn": (
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello."},
            {"role": "user", "content": "Again"},
        ],
        None,
    ),
    "tools_and_tool_call": (
        [
            {"role": "user", "content": "Weather in Oslo?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "-3 C"},
        ],
        [TOOL],
    ),
}


def _hf_view(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same chat as transformers users write it (arguments as dicts, parts as lists)."""
    out = json.loads(json.dumps(messages))
    for message in out:
        for call in message.get("tool_calls", []):
            call["function"]["arguments"] = json.loads(call["function"]["arguments"])
        if message["role"] != "tool":
            message["content"] = [{"type": "text", "text": message["content"]}]
    return out


@pytest.mark.parametrize("name", sorted(CONVERSATIONS))
def test_tiny_model_prompt_matches_its_hf_tokenizer(
    name: str, tiny_model: pathlib.Path, frozen_clock: object
) -> None:
    from tests.support.hf_tokenizer import fresh_tokenizer

    messages, tools = CONVERSATIONS[name]
    ours = ChatRenderer.from_model_dir(tiny_model).render(messages, tools=tools).prompt
    tokenizer = fresh_tokenizer(tiny_model)  # AutoTokenizer.from_pretrained's, copied
    expected = tokenizer.apply_chat_template(
        _hf_view(messages),
        tools=None if tools is None else json.loads(json.dumps(tools)),
        add_generation_prompt=True,
        tokenize=False,
    )
    assert ours == expected
