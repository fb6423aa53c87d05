"""gpt-oss chat prompts: our Harmony renderer gives the token ids vLLM 0.32's chat path sends
to the engine (``OnlineRenderer._make_request_with_harmony``), for system / developer
instructions, tools, reasoning effort, earlier reasoning, tool calls and their results, and
refuses what vLLM refuses with its message."""

from __future__ import annotations

import types
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vllm_frontend.chat.errors import ChatError
from vllm_frontend.chat.harmony_renderer import HarmonyRenderer
from vllm_frontend.text.errors import InvalidInput

pytestmark = pytest.mark.oracle  # imports vLLM as the reference

START_DATE = "2025-06-30"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["C", "F"]}},
            "required": ["city"],
        },
    },
}
BARE = {"type": "function", "function": {"name": "get_time"}}
CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}


@pytest.fixture(autouse=True)
def _pinned_date(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("VLLM_SYSTEM_START_DATE", START_DATE)
    yield


def vllm_ids(body: dict[str, Any], exclude_tools_when_none: bool = False) -> list[int]:
    """vLLM's prompt ids for a chat request body (its chat path's Harmony branch)."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.renderers.online_renderer import OnlineRenderer

    request = ChatCompletionRequest.model_validate({"model": "m", **body})
    include = request.tools is not None and not (
        request.tool_choice == "none" and exclude_tools_when_none
    )
    owner = types.SimpleNamespace(
        renderer=None, supports_browsing=False, supports_code_interpreter=False
    )
    _, [engine_input] = OnlineRenderer._make_request_with_harmony(owner, request, include)
    return list(engine_input["prompt_token_ids"])


def our_ids(body: dict[str, Any], **options: Any) -> list[int]:
    """Ours, with the request as the route decodes it (the default tool choice filled in)."""
    choice = body.get("tool_choice", "auto" if body.get("tools") else None)
    return (
        HarmonyRenderer(start_date=START_DATE, **options)
        .render(
            body["messages"],
            tools=body.get("tools"),
            tool_choice=choice,
            reasoning_effort=body.get("reasoning_effort"),
        )
        .prompt
    )


CASES: dict[str, dict[str, Any]] = {
    "user only": {"messages": [{"role": "user", "content": "Hi"}]},
    "system instructions": {
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    },
    "developer instructions as parts": {
        "messages": [
            {
                "role": "developer",
                "content": [
                    {"type": "text", "text": "Rhyme. "},
                    {"type": "text", "text": "Always."},
                ],
            },
            {"role": "user", "content": "Hi"},
        ]
    },
    "tools and effort": {
        "messages": [{"role": "user", "content": "Weather?"}],
        "tools": [WEATHER, BARE],
        "reasoning_effort": "high",
    },
    "low effort with instructions and tools": {
        "messages": [{"role": "system", "content": "Use tools."}, {"role": "user", "content": "x"}],
        "tools": [WEATHER],
        "reasoning_effort": "low",
    },
    "tools with tool_choice none": {
        "messages": [{"role": "user", "content": "Hi"}],
        "tools": [WEATHER],
        "tool_choice": "none",
    },
    "earlier reasoning is dropped before the last final answer": {
        "messages": [
            {"role": "user", "content": "1+1?"},
            {"role": "assistant", "content": "2", "reasoning": "one plus one"},
            {"role": "user", "content": "and 2+2?"},
            {"role": "assistant", "content": "4", "reasoning": "two plus two"},
            {"role": "user", "content": "thanks"},
        ]
    },
    "tool call round trip": {
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": "Let me check.",
                "reasoning": "call the tool",
                "tool_calls": [CALL],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 25 C"},
        ],
        "tools": [WEATHER],
    },
    "tool call without content, empty arguments, unknown id": {
        "messages": [
            {"role": "user", "content": "time?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "t",
                        "type": "function",
                        "function": {"name": "get_time", "arguments": ""},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "other", "content": [{"type": "text", "text": "9"}]},
            {"role": "assistant", "content": "It is 9."},
            {"role": "user", "content": "ok"},
        ],
        "tools": [BARE],
    },
    "later system and developer messages": {
        "messages": [
            {"role": "user", "content": "a"},
            {"role": "system", "content": "new rule"},
            {"role": "developer", "content": [{"type": "text", "text": "dev rule"}]},
            {"role": "user", "content": "b"},
        ]
    },
    "assistant reasoning without content, empty assistant": {
        "messages": [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": "", "reasoning": "hmm"},
            {"role": "assistant", "content": ""},
            {"role": "user", "content": ""},
        ]
    },
    "user content parts with an image": {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is "},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                    {"type": "text", "text": "this?"},
                ],
            }
        ]
    },
    "unicode and special-looking text": {
        "messages": [{"role": "user", "content": "héllo 日本 🎉 <|start|> not special"}]
    },
}


@pytest.mark.parametrize("name", list(CASES))
def test_prompt_ids_match_vllm(name: str) -> None:
    body = CASES[name]
    assert our_ids(body) == vllm_ids(body)


def test_excluded_tools_match_vllm() -> None:
    body = CASES["tools with tool_choice none"]
    ours = our_ids(body, exclude_tools_when_tool_choice_none=True)
    assert ours == vllm_ids(body, exclude_tools_when_none=True)
    assert ours != our_ids(body)


@pytest.mark.parametrize("name", ["system instructions", "later system and developer messages"])
def test_system_instructions_mode_matches_vllm(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_GPT_OSS_HARMONY_SYSTEM_INSTRUCTIONS", "1")
    body = CASES[name]
    assert HarmonyRenderer(start_date=START_DATE).system_instructions
    assert our_ids(body) == vllm_ids(body)


def test_the_date_defaults_to_today_like_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_SYSTEM_START_DATE")
    body = CASES["user only"]
    ours = HarmonyRenderer().render(body["messages"]).prompt
    assert ours == vllm_ids(body)


@pytest.mark.parametrize("effort", ["none", "minimal", "xhigh"])
def test_unsupported_reasoning_effort_is_refused_like_vllm(effort: str) -> None:
    from vllm.exceptions import VLLMValidationError

    body = {"messages": [{"role": "user", "content": "x"}], "reasoning_effort": effort}
    with pytest.raises(VLLMValidationError) as theirs:
        vllm_ids(body)
    with pytest.raises(InvalidInput) as ours:
        our_ids(body)
    assert str(ours.value) == str(theirs.value)
    assert ours.value.parameter == theirs.value.parameter == "reasoning_effort"


@pytest.mark.parametrize("role", ["assistant", "user", "tool", "developer"])
def test_null_tool_calls_are_read_like_vllm(role: str) -> None:
    """Found by a differential probe: vLLM makes an assistant message's null tool calls a list
    (maybe_serialize_tool_calls), and iterates any other message's: a TypeError, its text
    answered as a 400 (ours took them all)."""
    message = {"role": role, "content": "x", "tool_calls": None, "tool_call_id": "c"}
    body = {"messages": [{"role": "user", "content": "Hi"}, message]}
    if role == "assistant":
        assert our_ids(body) == vllm_ids(body)
        return
    with pytest.raises(TypeError) as theirs:
        vllm_ids(body)
    with pytest.raises(ChatError) as ours:
        our_ids(body)
    assert str(ours.value) == str(theirs.value)


_text = st.text(st.sampled_from('ab é😀\n{}"<|>'), max_size=12)
_part = st.fixed_dictionaries({"type": st.just("text"), "text": _text})
_content = st.one_of(_text, st.lists(_part, max_size=2))
_call = st.builds(
    lambda i, name, args: {"id": f"c{i}", "type": "function",
                           "function": {"name": name, "arguments": args}},
    st.integers(0, 3), st.sampled_from(["get_weather", "get_time"]), _text,
)  # fmt: skip
_message = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "developer"]),
                           "content": _content}),
    st.fixed_dictionaries({"role": st.just("assistant"), "content": _content},
                          optional={"reasoning": _text, "tool_calls": st.lists(_call, max_size=2)}),
    st.fixed_dictionaries({"role": st.just("tool"), "content": _content,
                           "tool_call_id": st.sampled_from(["c0", "c1", "c9"])}),
)  # fmt: skip


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    messages=st.lists(_message, min_size=1, max_size=6),
    tools=st.sampled_from([None, [WEATHER], [WEATHER, BARE]]),
    effort=st.sampled_from([None, "low", "medium", "high"]),
)
def test_any_conversation_matches_vllm(
    messages: list[dict[str, Any]], tools: list[Any] | None, effort: str | None
) -> None:
    body: dict[str, Any] = {"messages": messages}
    if tools is not None:
        body["tools"] = tools
    if effort is not None:
        body["reasoning_effort"] = effort
    assert our_ids(body) == vllm_ids(body)
