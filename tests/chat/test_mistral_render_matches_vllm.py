"""``--tokenizer-mode mistral``: a chat request renders to the same prompt ids as vLLM 0.32's
own frontend (``ChatCompletionRequest`` → ``OnlineRenderer.render_chat`` →
``MistralRenderer``), or fails with the same 400 message, for tiny tekken tokenizers of each
version (v3 and v7: pre-v11 tool calls; v11; v13) and mistral_common's shipped SentencePiece
v7 file: system prompts, multi-turn, tools, tool calls and results (ids long, short, invalid),
``continue_final_message``, and what is refused (images on a text-only model, a request
template, bad roles, a tool message without its call)."""

from __future__ import annotations

import asyncio
import copy
import functools
import pathlib
import shutil
from typing import Any

import pytest

from tests.support.tiny_mistral import VERSIONS, tiny_mistral_dir
from vllm_frontend.chat import ChatError
from vllm_frontend.chat.mistral_renderer import MistralChatRenderer
from vllm_frontend.server.errors import sanitize_message
from vllm_frontend.text.tokenizer_mistral import MistralTokenizer

pytestmark = pytest.mark.oracle

pytest.importorskip("vllm")
pytest.importorskip("mistral_common")

KINDS = [*VERSIONS, "spm"]


@functools.cache
def _directory(kind: str) -> pathlib.Path:
    if kind != "spm":
        return tiny_mistral_dir(kind)
    import mistral_common

    target = tiny_mistral_dir("v7").parent / "tiny-mistral-spm-v7-test"
    if not (target / "config.json").is_file():
        target.mkdir(exist_ok=True)
        data = pathlib.Path(mistral_common.__file__).parent / "data"
        shutil.copy(
            data / "mistral_instruct_tokenizer_241114.model.v7", target / "tokenizer.model.v7"
        )
        shutil.copy(tiny_mistral_dir("v7") / "config.json", target / "config.json")
    return target


@functools.cache
def _vllm_renderer(kind: str) -> Any:
    from vllm.config import ModelConfig, VllmConfig
    from vllm.renderers import renderer_from_config

    directory = str(_directory(kind))
    config = ModelConfig(
        model=directory, tokenizer=directory, tokenizer_mode="mistral", max_model_len=4096
    )
    return config, renderer_from_config(VllmConfig(model_config=config))


@functools.cache
def _ours_renderer(kind: str) -> MistralChatRenderer:
    directory = _directory(kind)
    return MistralChatRenderer(MistralTokenizer.from_dir(directory), model_name=str(directory))


def _vllm(kind: str, body: dict[str, Any]) -> Any:
    import pydantic
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.entrypoints.serve.engine.protocol import ErrorResponse
    from vllm.entrypoints.serve.exception_handling.error_response import create_error_response
    from vllm.renderers.online_renderer import OnlineRenderer

    model_config, renderer = _vllm_renderer(kind)
    try:
        request = ChatCompletionRequest.model_validate({"model": "m", **copy.deepcopy(body)})
    except pydantic.ValidationError:
        return ("invalid request", None)
    online = OnlineRenderer(model_config, renderer, request_logger=None, chat_template=None,
                            chat_template_content_format="auto")  # fmt: skip
    try:
        result = asyncio.run(online.render_chat(request))
    except Exception as exc:
        error = create_error_response(exc)
        assert error.error.code == 400, error
        return ("error", error.error.message)
    if isinstance(result, ErrorResponse):
        assert result.error.code == 400
        return ("error", result.error.message)
    return ("ok", result[1][0]["prompt_token_ids"])


def _ours(kind: str, body: dict[str, Any]) -> Any:
    try:
        rendered = _ours_renderer(kind).render(
            copy.deepcopy(body["messages"]),
            tools=body.get("tools"),
            tool_choice=body.get("tool_choice"),
            add_generation_prompt=body.get("add_generation_prompt"),
            continue_final_message=body.get("continue_final_message", False),
            chat_template=body.get("chat_template"),
            chat_template_kwargs=body.get("chat_template_kwargs"),
            reasoning_effort=body.get("reasoning_effort"),
        )
    except ChatError as exc:
        # The server sanitizes error messages (file paths) as vLLM's error responses do.
        return ("error", sanitize_message(str(exc)))
    return ("ok", rendered.prompt)


TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
TOOL2 = {"type": "function", "function": {"name": "noop"}}


def _call(call_id: str, name: str = "get_weather", args: str = '{"city": "Zürich"}') -> Any:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


USER = {"role": "user", "content": "What's the weather in Zürich? 🌦"}
CASES: dict[str, dict[str, Any]] = {
    "plain": {"messages": [USER]},
    "system": {"messages": [{"role": "system", "content": "Be brief."}, USER]},
    "text_parts": {
        "messages": [
            {
                "role": "system",
                "content": [{"type": "text", "text": "Be"}, {"type": "text", "text": "brief"}],
            },
            {
                "role": "user",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            },
        ]
    },
    "multi_turn": {
        "messages": [
            {"role": "system", "content": "S"},
            {"role": "user", "content": "one"},
            {"role": "assistant", "content": "two"},
            {"role": "user", "content": "three"},
        ]
    },
    "tools": {"messages": [USER], "tools": [TOOL, TOOL2]},
    "tools_choice_none": {"messages": [USER], "tools": [TOOL], "tool_choice": "none"},
    "tool_round_trip": {
        "messages": [
            USER,
            {"role": "assistant", "content": None, "tool_calls": [_call("abcDEF123")]},
            {"role": "tool", "tool_call_id": "abcDEF123", "content": "sunny"},
        ],
        "tools": [TOOL],
    },
    "long_ids_truncated": {
        "messages": [
            USER,
            {
                "role": "assistant",
                "tool_calls": [_call("chatcmpl-tool-0123456789abcdef"), _call("call_xyzXYZ987654")],
            },
            {"role": "tool", "tool_call_id": "chatcmpl-tool-0123456789abcdef", "content": "1"},
            {"role": "tool", "tool_call_id": "call_xyzXYZ987654", "content": "2"},
            {"role": "user", "content": "and?"},
        ],
        "tools": [TOOL],
    },
    "short_id": {
        "messages": [
            USER,
            {"role": "assistant", "tool_calls": [_call("c1")]},
            {"role": "tool", "tool_call_id": "c1", "content": "x"},
        ],
        "tools": [TOOL],
    },
    "tool_without_call": {
        "messages": [USER, {"role": "tool", "tool_call_id": "abcDEF123", "content": "x"}],
    },
    "continue_final": {
        "messages": [USER, {"role": "assistant", "content": "It is"}],
        "continue_final_message": True,
        "add_generation_prompt": False,
    },
    "assistant_last_with_generation_prompt": {
        "messages": [USER, {"role": "assistant", "content": "It is"}],
    },
    "continue_without_assistant": {
        "messages": [USER],
        "continue_final_message": True,
        "add_generation_prompt": False,
    },
    "no_generation_prompt": {"messages": [USER], "add_generation_prompt": False},
    "request_template": {"messages": [USER], "chat_template": "{{ messages }}"},
    "request_template_kwargs": {"messages": [USER], "chat_template_kwargs": {"x": 1}},
    "reasoning_effort_bad": {"messages": [USER], "reasoning_effort": "extreme"},
    "reasoning_effort_high": {"messages": [USER], "reasoning_effort": "high"},
    "image_refused": {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is this"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                ],
            }
        ]
    },
    "two_users": {"messages": [USER, USER]},
    "assistant_first": {"messages": [{"role": "assistant", "content": "hi"}, USER]},
    "empty_user": {"messages": [{"role": "user", "content": ""}]},
    "developer_role": {"messages": [{"role": "developer", "content": "dev"}, USER]},
    "system_mid": {
        "messages": [
            USER,
            {"role": "assistant", "content": "a"},
            {"role": "system", "content": "s"},
            USER,
        ]
    },
    "bad_arguments_json": {
        "messages": [
            USER,
            {"role": "assistant", "tool_calls": [_call("abcDEF123", args="not json")]},
            {"role": "tool", "tool_call_id": "abcDEF123", "content": "x"},
        ],
        "tools": [TOOL],
    },
    "compact_and_non_object_arguments": {
        "messages": [
            USER,
            {
                "role": "assistant",
                "tool_calls": [
                    _call("abcDEF123", args='{"city":"Zürich","n":[1,2]}'),
                    _call("abcDEF124", args="[1, 2]"),
                    _call("abcDEF125", args=""),
                ],
            },
            {"role": "tool", "tool_call_id": "abcDEF123", "content": "x"},
            {"role": "tool", "tool_call_id": "abcDEF124", "content": "y"},
            {"role": "tool", "tool_call_id": "abcDEF125", "content": "z"},
        ],
        "tools": [TOOL],
    },
    "tool_with_name": {
        "messages": [
            USER,
            {"role": "assistant", "tool_calls": [_call("abcDEF123")]},
            {"role": "tool", "tool_call_id": "abcDEF123", "name": "get_weather", "content": "x"},
        ],
        "tools": [TOOL],
    },
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", list(CASES))
def test_render_matches_vllm(kind: str, case: str) -> None:
    body = CASES[case]
    theirs = _vllm(kind, body)
    if theirs[0] == "invalid request":
        pytest.skip("vLLM's request model refuses the body before rendering")
    assert _ours(kind, body) == theirs
